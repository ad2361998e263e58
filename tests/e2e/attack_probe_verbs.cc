// xroce_attack_probe's modes that use a device as an application does (attack_probe.h): the
// target of forged packets, a QP flood under a 1024-descriptor limit, and work left outstanding
// when the device dies.
#include <arpa/inet.h>
#include <dirent.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "attack_probe.h"

namespace xroce::attack {

namespace {

constexpr uint8_t kFill = 0xAA;

// The GID table index of the device's first IPv4 address (::ffff:a.b.c.d), or -1.
int ipv4_gid_index(ibv_context* ctx) {
  for (int i = 0; i < 16; ++i) {
    ibv_gid gid{};
    if (ibv_query_gid(ctx, 1, i, &gid) != 0) break;
    static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(gid.raw, kPrefix, sizeof kPrefix) == 0) return i;
  }
  return -1;
}

bool peer_gid(const char* peer, ibv_gid& gid) {
  uint8_t v4[4];
  if (inet_pton(AF_INET, peer, v4) != 1) return false;
  std::memset(gid.raw, 0, sizeof gid.raw);
  gid.raw[10] = gid.raw[11] = 0xff;
  std::memcpy(gid.raw + 12, v4, 4);
  return true;
}

ibv_qp* rc_qp(ibv_pd* pd, ibv_cq* cq, uint32_t wr) {
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = wr;
  init.cap.max_recv_wr = wr;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  return ibv_create_qp(pd, &init);
}

// IBV_ACCESS_FLUSH_GLOBAL of rdma-core v45 (v44's headers lack it; providers take the bit).
constexpr unsigned kAccessFlushGlobal = 1u << 8;

int to_rtr(ibv_qp* qp, const ibv_gid& peer, int sgid, uint32_t rq_psn, unsigned extra_access = 0) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | extra_access;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    return errno;
  }
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = 0x1234;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(sgid);
  a.ah_attr.grh.dgid = peer;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int to_rts(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 20;  // ~4 s per try: the sends stay outstanding for the test's whole length
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 1;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

// Prints every async event until the device is gone.
void print_events(ibv_context* ctx) {
  ibv_async_event event{};
  while (ibv_get_async_event(ctx, &event) == 0) {
    const bool fatal = event.event_type == IBV_EVENT_DEVICE_FATAL;
    const uint32_t qpn = fatal ? 0 : event.element.qp->qp_num;
    std::printf("event %s qpn %u at %llu\n", ibv_event_type_str(event.event_type), qpn,
                static_cast<unsigned long long>(monotonic_ns()));
    std::fflush(stdout);
    ibv_ack_async_event(&event);
    if (fatal) return;
  }
}

int open_fds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr)
      ++n;
    closedir(d);
  }
  return n - 3;  // ".", ".." and the directory's own descriptor
}

}  // namespace

int target(const char* dev, const char* peer, int nqps, bool allow_flush) {
  ibv_context* ctx = open_device(dev);
  ibv_gid peer_address{};
  const int sgid = ctx != nullptr ? ipv4_gid_index(ctx) : -1;
  if (ctx == nullptr || sgid < 0 || !peer_gid(peer, peer_address)) {
    std::printf("setup failed\n");
    return 1;
  }
  ibv_pd* pd = ibv_alloc_pd(ctx);
  constexpr std::size_t kBytes = 65536;
  void* buffer = nullptr;
  if (posix_memalign(&buffer, 4096, kBytes) != 0) return 1;
  std::memset(buffer, kFill, kBytes);
  ibv_mr* mr =
      ibv_reg_mr(pd, buffer, kBytes,
                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  ibv_cq* cq = ibv_create_cq(ctx, 4 * nqps + 4, nullptr, nullptr, 0);
  if (mr == nullptr || cq == nullptr) {
    std::printf("setup failed\n");
    return 1;
  }
  std::printf("mr %llu 0x%x %zu\n",
              static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(buffer)), mr->rkey,
              kBytes);
  for (int i = 0; i < nqps; ++i) {
    ibv_qp* qp = rc_qp(pd, cq, 4);
    const uint32_t psn = 0x100 + 16 * static_cast<uint32_t>(i);
    if (qp == nullptr ||
        to_rtr(qp, peer_address, sgid, psn, allow_flush ? kAccessFlushGlobal : 0) != 0) {
      std::printf("setup failed\n");
      return 1;
    }
    std::printf("qp %u %u\n", qp->qp_num, psn);
  }
  std::printf("ready\n");
  std::fflush(stdout);
  std::thread events(print_events, ctx);
  events.detach();
  for (std::string line; std::getline(std::cin, line);) {
    if (line != "dump") break;
    const auto* bytes = static_cast<const uint8_t*>(buffer);
    std::size_t changed = kBytes;
    for (std::size_t i = 0; i < kBytes && changed == kBytes; ++i)
      changed = bytes[i] != kFill ? i : kBytes;
    std::printf("region %s", changed == kBytes ? "unchanged" : "changed");
    if (changed != kBytes) std::printf(" at %zu byte 0x%02x", changed, bytes[changed]);
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

// QPs until `count` (or until the device refuses, count < 0) over `contexts` contexts, in a
// process that may hold at most 1024 descriptors, as many programs are limited.
int qps(const char* dev, int count, int contexts) {
  const rlimit limit{1024, 1024};
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return 1;
  int created = 0;
  int last_error = 0;
  for (int c = 0; c < contexts; ++c) {
    ibv_context* ctx = open_device(dev);
    ibv_device_attr attr{};
    if (ctx == nullptr || ibv_query_device(ctx, &attr) != 0) {
      std::printf("setup failed\n");
      return 1;
    }
    std::printf("max_qp %d\n", attr.max_qp);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    if (pd == nullptr || cq == nullptr) {
      std::printf("setup failed\n");
      return 1;
    }
    const int share = count < 0 ? attr.max_qp + 1 : count / contexts + (c < count % contexts);
    for (int i = 0; i < share; ++i) {
      errno = 0;
      if (rc_qp(pd, cq, 1) == nullptr) {
        last_error = errno;
        break;
      }
      ++created;
    }
  }
  std::printf("created %d\n", created);
  std::printf("error %s\n", last_error == 0 ? "none" : strerrorname_np(last_error));
  std::printf("open_fds %d\n", open_fds());
  std::printf("ready\n");
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
  }
  return 0;
}

// Work the daemon will never complete (receives nobody fills, sends to a peer that does not
// answer), then the completions the device's death gives it.
int flush(const char* dev, const char* peer) {
  constexpr int kRecvs = 16;
  constexpr int kSends = 8;
  ibv_context* ctx = open_device(dev);
  ibv_gid peer_address{};
  const int sgid = ctx != nullptr ? ipv4_gid_index(ctx) : -1;
  if (ctx == nullptr || sgid < 0 || !peer_gid(peer, peer_address)) {
    std::printf("setup failed\n");
    return 1;
  }
  ibv_pd* pd = ibv_alloc_pd(ctx);
  static char buffer[4096];
  ibv_mr* mr = ibv_reg_mr(pd, buffer, sizeof buffer, IBV_ACCESS_LOCAL_WRITE);
  ibv_cq* cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  ibv_qp* qp = mr != nullptr && cq != nullptr ? rc_qp(pd, cq, 32) : nullptr;
  if (qp == nullptr || to_rtr(qp, peer_address, sgid, 1) != 0 || to_rts(qp) != 0) {
    std::printf("setup failed\n");
    return 1;
  }
  ibv_sge sge{reinterpret_cast<uintptr_t>(buffer), 64, mr->lkey};
  for (int i = 0; i < kRecvs; ++i) {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = 1000 + i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    if (ibv_post_recv(qp, &wr, &bad) != 0) return 1;
  }
  for (int i = 0; i < kSends; ++i) {
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.wr_id = 2000 + i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (ibv_post_send(qp, &wr, &bad) != 0) return 1;
  }
  std::thread events(print_events, ctx);
  std::printf("posted %d\n", kRecvs + kSends);
  std::fflush(stdout);
  int seen = 0;
  int flushed = 0;
  uint64_t last_ns = 0;
  const uint64_t deadline = monotonic_ns() + 20'000'000'000u;
  while (seen < kRecvs + kSends && monotonic_ns() < deadline) {
    ibv_wc wc[8];
    const int n = ibv_poll_cq(cq, 8, wc);
    for (int i = 0; i < n; ++i) {
      ++seen;
      flushed += wc[i].status == IBV_WC_WR_FLUSH_ERR ? 1 : 0;
      last_ns = monotonic_ns();
      std::printf("wc %llu %s\n", static_cast<unsigned long long>(wc[i].wr_id),
                  ibv_wc_status_str(wc[i].status));
    }
  }
  std::printf("completions %d flushed %d last_at %llu\n", seen, flushed,
              static_cast<unsigned long long>(last_ns));
  std::fflush(stdout);
  events.join();
  // After the device died, posting is flushed at once, and releasing objects succeeds.
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  wr.wr_id = 3000;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const int posted = ibv_post_recv(qp, &wr, &bad);
  ibv_wc wc{};
  int polled = 0;
  for (int i = 0; i < 1000 && polled == 0; ++i)
    polled = ibv_poll_cq(cq, 1, &wc);
  std::printf("after_death post %d wc %llu %s\n", posted,
              polled == 1 ? static_cast<unsigned long long>(wc.wr_id) : 0ull,
              polled == 1 ? ibv_wc_status_str(wc.status) : "none");
  std::printf("destroy %d %d %d %d\n", ibv_destroy_qp(qp), ibv_destroy_cq(cq), ibv_dereg_mr(mr),
              ibv_dealloc_pd(pd));
  std::fflush(stdout);
  return 0;
}

}  // namespace xroce::attack
