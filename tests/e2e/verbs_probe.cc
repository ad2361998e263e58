// A small verbs program linked against the system's libibverbs, for the e2e tests. It opens the
// device named on its command line and prints what it found, one "key value" per line:
//
//   verbs_probe DEV pdmr     alloc a PD, register two MRs, check keys and bad registrations
//   verbs_probe DEV unsup    verbs the device does not do fail cleanly (no false success)
//   verbs_probe DEV objects  CQs, QPs (RC, UD, extended), SRQs, AHs: creation, the errnos a
//                            real device gives, a QP walked RESET->INIT->RTR->RTS, posting
//   verbs_probe DEV channel  a completion channel works (run with libxroce-preload.so)
//   verbs_probe DEV nochannel  without the preload, creating one fails cleanly
//   verbs_probe DEV pdloop N time N alloc_pd/dealloc_pd pairs (control-path latency)
//   verbs_probe DEV events   print async events as they come, until DEVICE_FATAL or EOF
//   verbs_probe DEV hold     alloc a PD and an MR, print "ready", wait for an async event, then
//                            try another verb (the daemon is stopped meanwhile)
//   verbs_probe DEV dma_regions|dma_hold|dma_loopback N  registered memory through both DMA
//                            paths (verbs_probe_dma.cc)
//   verbs_probe DEV transport  memory windows, ATOMIC_WRITE, UC, rereg_mr, iova, ODP, XRC and
//                            completion timestamps, checked on the data
//                            (verbs_probe_transport.cc)
//   verbs_probe DEV refusals|recv_depth|loopback_semantics|channel_cq_ex  what rdma-core's pyverbs
//                            suite checks of a provider (verbs_probe_semantics.cc)
//   verbs_probe DEV recv_doorbell  receives posted while the worker sleeps: used by a SEND, or
//                            flushed at once in the error state (verbs_probe_semantics.cc)
//   verbs_probe DEV poll_slice  the scheduler slice of a thread polling an empty CQ, before and
//                            after, for a SCHED_OTHER and a SCHED_BATCH thread
//   verbs_probe DEV poll_sleep  whether a thread polling an empty CQ sleeps, with 2 MiB of sends
//                            queued and with 64 bytes (verbs_probe_semantics.cc)
//
// Exit status 0 when every check it makes itself passed.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "open_device.h"
#include "verbs_probe.h"
#include "xroce/sched_attr.h"

namespace xroce::probe {

namespace {
int failures = 0;
}

void check(bool ok, const char* what) {
  std::printf("check %s %s\n", what, ok ? "ok" : "FAILED");
  if (!ok) ++failures;
}

bool connect_qp(ibv_qp* qp, uint32_t peer_qpn, const ibv_gid& gid, uint8_t sgid_index,
                uint8_t rnr_retry, uint32_t psn) {
  // What each QP type's transitions take, as ib_modify_qp_is_ok's table: UC has no retry, RNR
  // or RDMA READ/atomic attributes, an XRC INI QP no responder ones at RTR, and an XRC TGT QP
  // stops at RTR (it only receives).
  const bool reliable = qp->qp_type != IBV_QPT_UC;
  const bool ini = qp->qp_type == IBV_QPT_XRC_SEND;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                      IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
  if (int err = ibv_modify_qp(
          qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    std::printf("modify_qp INIT (type %d): %s\n", qp->qp_type, std::strerror(err));
    return false;
  }
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer_qpn;
  a.rq_psn = psn;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.grh.sgid_index = sgid_index;
  a.ah_attr.grh.dgid = gid;
  int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (reliable && !ini) rtr_mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  if (int err = ibv_modify_qp(qp, &a, rtr_mask)) {
    std::printf("modify_qp RTR (type %d): %s\n", qp->qp_type, std::strerror(err));
    return false;
  }
  if (qp->qp_type == IBV_QPT_XRC_RECV) return true;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = rnr_retry;
  a.sq_psn = psn;
  a.max_rd_atomic = 16;
  int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (reliable)
    rts_mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  if (int err = ibv_modify_qp(qp, &a, rts_mask)) {
    std::printf("modify_qp RTS (type %d): %s\n", qp->qp_type, std::strerror(err));
    return false;
  }
  return true;
}

namespace {

int pdmr(ibv_context* ctx) {
  ibv_pd* pd = ibv_alloc_pd(ctx);
  check(pd != nullptr, "alloc_pd");
  if (pd == nullptr) return 1;
  std::vector<char> buf(1 << 20);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  ibv_mr* a = ibv_reg_mr(pd, buf.data(), buf.size(), rw);
  ibv_mr* b = ibv_reg_mr(pd, buf.data() + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
  check(a != nullptr && b != nullptr, "reg_mr");
  if (a == nullptr || b == nullptr) return 1;
  std::printf("mr_a lkey 0x%x rkey 0x%x\n", a->lkey, a->rkey);
  std::printf("mr_b lkey 0x%x rkey 0x%x\n", b->lkey, b->rkey);
  check(a->lkey != 0 && a->rkey != 0 && a->lkey != b->lkey && a->rkey != b->rkey, "keys");
  check(a->addr == buf.data() && a->length == buf.size() && a->pd == pd, "mr_fields");

  // A real device pins pages: registering memory that is not mapped fails with EFAULT.
  void* hole = mmap(nullptr, 1 << 16, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(hole, 1 << 16);
  errno = 0;
  ibv_mr* bad = ibv_reg_mr(pd, hole, 1 << 16, IBV_ACCESS_LOCAL_WRITE);
  check(bad == nullptr && errno == EFAULT, "reg_mr_unmapped_efault");
  // Remote write without local write is invalid (IBA 10.6.3.1).
  errno = 0;
  bad = ibv_reg_mr(pd, buf.data(), 4096, IBV_ACCESS_REMOTE_WRITE);
  check(bad == nullptr && errno == EINVAL, "reg_mr_remote_write_needs_local_write");
  ibv_mr* same = ibv_reg_mr_iova(pd, buf.data(), 4096, reinterpret_cast<uint64_t>(buf.data()),
                                 IBV_ACCESS_LOCAL_WRITE);
  check(same != nullptr && ibv_dereg_mr(same) == 0, "reg_mr_iova_equal_to_addr");

  check(ibv_dealloc_pd(pd) == EBUSY, "dealloc_pd_busy_while_mrs");
  check(ibv_dereg_mr(b) == 0 && ibv_dereg_mr(a) == 0, "dereg_mr");
  check(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
  return 0;
}

int unsupported(ibv_context* ctx) {
  // An XRC domain with attributes this device does not know: refused, never half-made.
  ibv_xrcd_init_attr xrcd_attr{};
  xrcd_attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS | (1u << 30);
  xrcd_attr.fd = -1;
  xrcd_attr.oflags = O_CREAT;
  errno = 0;
  check(ibv_open_xrcd(ctx, &xrcd_attr) == nullptr && errno == EOPNOTSUPP,
        "open_xrcd_unknown_attr_eopnotsupp");
  // GIDs come through libibverbs' sysfs fallback.
  ibv_gid gid{};
  check(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
  uint16_t pkey = 0;
  check(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == 0xffff, "query_pkey");
  return 0;
}

// Completion channels (decision 3): with libxroce-preload.so a real channel (a socket the
// daemon holds the other end of); without it, a clean failure, never an uninitialised fd.
int channel(ibv_context* ctx, bool expect_preload) {
  errno = 0;
  ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
  if (!expect_preload) {
    check(ch == nullptr, "create_comp_channel_fails_cleanly_without_preload");
    return 0;
  }
  check(ch != nullptr, "create_comp_channel");
  if (ch == nullptr) return 1;
  int type = 0;
  socklen_t len = sizeof(type);
  check(ch->context == ctx && ch->fd >= 0 &&
            getsockopt(ch->fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_SEQPACKET,
        "channel_fd_is_a_live_socket");
  pollfd p{ch->fd, POLLIN, 0};
  check(poll(&p, 1, 0) == 0, "no_event_without_completions");
  check(ibv_destroy_comp_channel(ch) == 0, "destroy_comp_channel");
  return 0;
}

// Times a control-path verb pair (ibv_alloc_pd + ibv_dealloc_pd: two daemon round trips).
int pd_loop(ibv_context* ctx, int iterations) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    ibv_pd* pd = ibv_alloc_pd(ctx);
    if (pd == nullptr || ibv_dealloc_pd(pd) != 0) {
      check(false, "pd_loop");
      return 1;
    }
  }
  const auto ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("alloc_pd+dealloc_pd %.0f ns per pair over %d\n", ns / iterations, iterations);
  return 0;
}

// Prints every async event as it comes, until the device is gone.
int events(ibv_context* ctx) {
  std::printf("ready\n");
  std::fflush(stdout);
  ibv_async_event event{};
  while (ibv_get_async_event(ctx, &event) == 0) {
    std::printf("async_event %s\n", ibv_event_type_str(event.event_type));
    std::fflush(stdout);
    const bool fatal = event.event_type == IBV_EVENT_DEVICE_FATAL;
    ibv_ack_async_event(&event);
    if (fatal) break;
  }
  return 0;
}

int hold(ibv_context* ctx) {
  ibv_pd* pd = ibv_alloc_pd(ctx);
  static char buf[8192];
  ibv_mr* mr = pd != nullptr ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : nullptr;
  check(mr != nullptr, "setup");
  std::printf("ready\n");
  std::fflush(stdout);
  ibv_async_event event{};
  if (ibv_get_async_event(ctx, &event) == 0) {
    std::printf("async_event %s\n", ibv_event_type_str(event.event_type));
    ibv_ack_async_event(&event);
  } else {
    std::printf("async_event none\n");
  }
  std::fflush(stdout);
  errno = 0;
  ibv_pd* after = ibv_alloc_pd(ctx);
  std::printf("alloc_pd_after %s\n", after == nullptr ? std::strerror(errno) : "succeeded");
  return after == nullptr ? 0 : 1;
}

// The polling thread's EEVDF slice (provider/cq.cc shorten_slice_once): sched_getattr's
// sched_runtime before and after a thread polls an empty CQ past the yield point, for this
// thread (SCHED_OTHER) and for a SCHED_BATCH thread, which must be left as it was. Prints the
// figures; the test compares them with XROCE_POLL_SLICE_US. errno survives the polls.
uint64_t slice_ns() {
  SchedAttr a;
  return get_sched_attr(a) ? a.sched_runtime : 0;
}

void poll_empty(ibv_cq* cq) {
  ibv_wc wc{};
  for (int i = 0; i < 256; ++i)
    (void)ibv_poll_cq(cq, 1, &wc);
}

int poll_slice(ibv_context* ctx) {
  ibv_cq* cq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
  check(cq != nullptr, "create_cq");
  if (cq == nullptr) return 1;
  // The SCHED_BATCH thread first: a thread starts with its creator's slice.
  uint64_t batch_before = 0;
  uint64_t batch_after = 0;
  bool batched = false;
  std::thread batch([&] {
    sched_param none{};
    batched = sched_setscheduler(0, SCHED_BATCH, &none) == 0;  // needs no privilege
    if (!batched) return;
    batch_before = slice_ns();
    poll_empty(cq);
    batch_after = slice_ns();
  });
  batch.join();
  check(batched, "sched_batch_thread");
  const uint64_t before = slice_ns();
  errno = 4321;
  poll_empty(cq);
  check(errno == 4321, "errno_kept");
  const uint64_t after = slice_ns();
  std::printf("poll_slice other %llu %llu batch %llu %llu\n",
              static_cast<unsigned long long>(before), static_cast<unsigned long long>(after),
              static_cast<unsigned long long>(batch_before),
              static_cast<unsigned long long>(batch_after));
  ibv_destroy_cq(cq);
  return 0;
}

}  // namespace

int main_probe(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: verbs_probe DEV pdmr|unsup|objects|channel|nochannel|events|hold|pdloop N|"
                 "dma_regions|dma_hold|dma_loopback N|refusals|recv_depth|loopback_semantics|"
                 "channel_cq_ex|recv_doorbell|transport|many_qps ARGS|poll_slice|poll_sleep\n");
    return 2;
  }
  ibv_context* ctx = e2e::open_device_named(argv[1]);
  if (ctx == nullptr) {
    std::printf("open failed: %s\n", std::strerror(errno));
    return 1;
  }
  const std::string mode = argv[2];
  int rc = 2;
  if (mode == "pdmr") rc = pdmr(ctx);
  if (mode == "unsup") rc = unsupported(ctx);
  if (mode == "objects") rc = objects(ctx);
  if (mode == "hold") rc = hold(ctx);
  if (mode == "events") rc = events(ctx);
  if (mode == "pdloop") rc = pd_loop(ctx, argc > 3 ? std::atoi(argv[3]) : 10000);
  if (mode == "channel") rc = channel(ctx, true);
  if (mode == "nochannel") rc = channel(ctx, false);
  if (mode == "dma_regions") rc = dma_regions(ctx, false);
  if (mode == "dma_hold") rc = dma_regions(ctx, true);
  if (mode == "transport") rc = transport(ctx);
  if (mode == "dma_loopback") rc = dma_loopback(ctx, argc > 3 ? std::atoi(argv[3]) : 1000);
  if (mode == "refusals") rc = refusals(ctx);
  if (mode == "recv_depth") rc = recv_depth(ctx);
  if (mode == "loopback_semantics") rc = loopback_semantics(ctx);
  if (mode == "channel_cq_ex") rc = channel_cq_ex(ctx);
  if (mode == "recv_doorbell") rc = recv_doorbell(ctx);
  if (mode == "many_qps") rc = many_qps(ctx, argc - 3, argv + 3);
  if (mode == "poll_slice") rc = poll_slice(ctx);
  if (mode == "poll_sleep") rc = poll_sleep(ctx);
  ibv_close_device(ctx);
  std::fflush(stdout);
  return rc != 0 || failures != 0 ? 1 : 0;
}

}  // namespace xroce::probe

int main(int argc, char** argv) {
  // Line by line into the harness's pipe: a probe the harness kills at its deadline (SIGKILL)
  // must not take what it had printed with it, as a full stdio buffer would.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return xroce::probe::main_probe(argc, argv);
}
