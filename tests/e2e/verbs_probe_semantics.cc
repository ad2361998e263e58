// verbs_probe's checks of what rdma-core's pyverbs suite expects of a provider, one mode each:
//
//   verbs_probe DEV refusals   what the device lacks fails at the first call with EOPNOTSUPP
//                              (zero-based regions, raw-packet QPs, QP creation flags,
//                              ibv_import_device); create flags 0 are accepted;
//                              phys_port_cnt_ex agrees with phys_port_cnt
//   verbs_probe DEV recv_depth  ibv_post_recv / ibv_post_srq_recv take exactly max_recv_wr /
//                              max_wr outstanding WQEs, then ENOMEM, also after the daemon has
//                              read them; a reset QP takes a full queue again
//   verbs_probe DEV loopback_semantics  two RC QPs of this device connected to each other: every
//                              receive the responder accepted serves a SEND (rnr_retry 0: one RNR
//                              NAK fails the test); ibv_query_qp reports the PSNs the QPs are at;
//                              UD to our own IPv4 and IPv6 GIDs reports the network header type
//                              in wc.sl as mlx5 does (loopback: needs the device to reach its GID)
//   verbs_probe DEV recv_doorbell  receives posted while the worker sleeps (include/xroce/
//                              queues.h "Doorbells"): on an RC loopback pair (rnr_retry 0) each
//                              SEND, sent after the device has idled, finds the one receive
//                              posted during the idle time, to its RQ or to its SRQ; with a QP in
//                              the error state (moved there by ibv_modify_qp, or by its transport
//                              after a WRITE with a foreign key, on both ends) each receive posted
//                              after an idle time is flushed (IBV_WC_WR_FLUSH_ERR) at once, not
//                              when the worker's sleep ends
//   verbs_probe DEV channel_cq_ex  a completion channel given to ibv_create_cq_ex or
//                              ibv_create_cq is free again once the CQ is gone, and destroying it
//                              closes its fd (run with libxroce-preload.so)
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "verbs_probe.h"

namespace xroce::probe {

namespace {

constexpr uint32_t kQkey = 0x11111111;
constexpr uint32_t kMessageBytes = 64;
constexpr uint32_t kGrhBytes = 40;
constexpr uint32_t kStartPsn = 100;
// wc.sl of a RoCE v2 UD receive, as mlx5 reports it: the UDP bit (8) and the L3 type.
constexpr uint8_t kSlUdpIpv4 = 0x8 | 2;
constexpr uint8_t kSlUdpIpv6 = 0x8 | 1;

ibv_qp* create_qp(ibv_pd* pd, ibv_cq* cq, ibv_qp_type type, uint32_t recv_wr,
                  ibv_srq* srq = nullptr) {
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.srq = srq;
  init.qp_type = type;
  init.cap.max_send_wr = 64;
  init.cap.max_recv_wr = srq != nullptr ? 0 : recv_wr;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  return ibv_create_qp(pd, &init);
}

int ud_to_rts(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = kQkey;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
    return -1;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) return -1;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = kStartPsn;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

int to_init(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = kQkey;
  const int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                   (qp->qp_type == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
  return ibv_modify_qp(qp, &a, mask);
}

// ibv_query_qp runs on the worker that owns the QP, between two of its turns, and every turn
// reads the receive rings: after two queries the worker has read whatever was posted before.
void let_the_worker_read(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  for (int i = 0; i < 2; ++i)
    ibv_query_qp(qp, &attr, IBV_QP_STATE, &init);
}

struct Buffer {
  explicit Buffer(ibv_pd* pd, std::size_t bytes) : data(bytes) {
    mr = ibv_reg_mr(pd, data.data(), bytes, IBV_ACCESS_LOCAL_WRITE);
  }
  ~Buffer() {
    if (mr != nullptr) ibv_dereg_mr(mr);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ibv_sge sge(std::size_t offset, uint32_t length) {
    return {reinterpret_cast<uint64_t>(data.data() + offset), length, mr->lkey};
  }
  std::vector<uint8_t> data;
  ibv_mr* mr = nullptr;
};

int post_one_recv(ibv_qp* qp, ibv_srq* srq, Buffer& buf, uint64_t id, uint32_t bytes) {
  ibv_sge sge = buf.sge(id * bytes, bytes);
  ibv_recv_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return srq != nullptr ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad);
}

// Posts one signaled SEND (or `opcode`, an RDMA WRITE to remote_addr with rkey) of `bytes` from
// offset id * bytes of `buf` (RC, UC), wr_id `id`.
int post_one_send(ibv_qp* qp, Buffer& buf, uint64_t id, uint32_t bytes,
                  ibv_wr_opcode opcode = IBV_WR_SEND, uint64_t remote_addr = 0, uint32_t rkey = 0) {
  ibv_sge sge = buf.sge(id * bytes, bytes);
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}

// Posts receives one by one until one fails, letting the worker read the ring after the first
// `expected`; returns how many were taken and the errno of the one refused.
struct Filled {
  uint32_t taken = 0;
  int refused_with = 0;
};
Filled fill_receive_queue(ibv_qp* qp, ibv_srq* srq, Buffer& buf, uint32_t expected) {
  Filled f;
  const uint32_t limit = 2 * expected + 2;  // the old behaviour took 2x; stop past it
  for (uint32_t i = 0; i < limit; ++i) {
    if (i == expected) let_the_worker_read(qp);
    const int err = post_one_recv(qp, srq, buf, i % (2 * expected + 2), kMessageBytes);
    if (err != 0) {
      f.refused_with = err;
      break;
    }
    ++f.taken;
  }
  return f;
}

bool wait_completions(ibv_cq* cq, uint32_t count, std::vector<ibv_wc>& out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (out.size() < count && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq, 16, wc);
    if (n < 0) return false;
    out.insert(out.end(), wc, wc + n);
  }
  return out.size() >= count;
}

bool is_v4_mapped(const ibv_gid& g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g.raw, prefix, sizeof(prefix)) == 0;
}
bool is_global_v6(const ibv_gid& g) {
  const bool link_local = g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80;
  bool zero = true;
  for (uint8_t b : g.raw)
    zero = zero && b == 0;
  return !zero && !link_local && !is_v4_mapped(g);
}

// The first GID of this port that `want` accepts; -1 when none.
int find_gid(ibv_context* ctx, bool (*want)(const ibv_gid&), ibv_gid& out) {
  ibv_port_attr port{};
  if (ibv_query_port(ctx, 1, &port) != 0) return -1;
  for (int i = 0; i < port.gid_tbl_len; ++i) {
    if (ibv_query_gid(ctx, 1, i, &out) == 0 && want(out)) return i;
  }
  return -1;
}

void check_qp_types_refused(ibv_context* ctx, ibv_pd* pd, ibv_cq* cq) {
  errno = 0;
  ibv_qp* raw = create_qp(pd, cq, IBV_QPT_RAW_PACKET, 4);
  const bool refused = raw == nullptr && errno == EOPNOTSUPP;
  if (raw != nullptr) ibv_destroy_qp(raw);
  check(refused, "create_raw_qp_eopnotsupp");
  ibv_qp_init_attr_ex ex{};
  ex.send_cq = cq;
  ex.recv_cq = cq;
  ex.pd = pd;
  ex.cap = {8, 8, 1, 1, 0};
  ex.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  ex.qp_type = IBV_QPT_UC;
  ibv_qp* uc = ibv_create_qp_ex(ctx, &ex);
  check(uc != nullptr, "create_qp_ex_uc");
  if (uc != nullptr) ibv_destroy_qp(uc);
  // Creation flags: the bit with no flag set asks for nothing and must work (pyverbs sets it
  // at random); a flag the device lacks is EOPNOTSUPP.
  ex.qp_type = IBV_QPT_RC;
  ex.create_flags = 0;
  ibv_qp* plain = ibv_create_qp_ex(ctx, &ex);
  check(plain != nullptr, "create_qp_ex_create_flags_zero");
  if (plain != nullptr) ibv_destroy_qp(plain);
  ex.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
  errno = 0;
  ibv_qp* flagged = ibv_create_qp_ex(ctx, &ex);
  check(flagged == nullptr && errno == EOPNOTSUPP, "create_qp_ex_create_flag_eopnotsupp");
  if (flagged != nullptr) ibv_destroy_qp(flagged);
}

// Zero-based regions (a zero-based window is another matter) are not offered: EOPNOTSUPP, as
// ib_check_mr_access answers for a feature the device lacks.
void check_access_flags_refused(ibv_pd* pd) {
  std::vector<char> buf(8192);
  errno = 0;
  ibv_mr* mr =
      ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED);
  const bool refused = mr == nullptr && errno == EOPNOTSUPP;
  if (mr != nullptr) ibv_dereg_mr(mr);
  check(refused, "reg_mr_zero_based_eopnotsupp");
}

// One QP's receive queue (or its SRQ): exactly the depth the device reported, then ENOMEM.
void check_depth(ibv_qp* qp, ibv_srq* srq, Buffer& buf, uint32_t depth, const char* name) {
  const Filled f = fill_receive_queue(qp, srq, buf, depth);
  std::printf("%s depth %u took %u then %s\n", name, depth, f.taken, std::strerror(f.refused_with));
  check(f.taken == depth && f.refused_with == ENOMEM, name);
}

}  // namespace

int refusals(ibv_context* ctx) {
  ibv_device_attr_ex ex{};
  check(ibv_query_device_ex(ctx, nullptr, &ex) == 0 && ex.orig_attr.phys_port_cnt == 1 &&
            ex.phys_port_cnt_ex == ex.orig_attr.phys_port_cnt,
        "phys_port_cnt_ex");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  check(pd != nullptr && cq != nullptr, "setup");
  if (pd == nullptr || cq == nullptr) return 1;
  check_access_flags_refused(pd);
  check_qp_types_refused(ctx, pd, cq);
  // libibverbs' ibv_import_device finds the device by the command fd's number and asks the
  // provider's import_context, which xroce does not have.
  errno = 0;
  ibv_context* imported = ibv_import_device(ctx->cmd_fd);
  check(imported == nullptr && errno == EOPNOTSUPP, "import_device_eopnotsupp");
  if (imported != nullptr) ibv_close_device(imported);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  return 0;
}

int recv_depth(ibv_context* ctx) {
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
  check(pd != nullptr && cq != nullptr, "setup");
  if (pd == nullptr || cq == nullptr) return 1;
  Buffer buf(pd, 64 * kMessageBytes);
  for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UD}) {
    ibv_qp* qp = create_qp(pd, cq, type, 16);
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    const bool made = qp != nullptr && to_init(qp) == 0 &&
                      ibv_query_qp(qp, &attr, IBV_QP_CAP, &init) == 0 && buf.mr != nullptr;
    check(made, "qp_setup");
    if (!made) return 1;
    const uint32_t depth = attr.cap.max_recv_wr;
    check_depth(qp, nullptr, buf, depth, type == IBV_QPT_RC ? "rc_rq_depth" : "ud_rq_depth");
    // A reset drops the WQEs without completions: the whole queue is free again.
    ibv_qp_attr reset{};
    reset.qp_state = IBV_QPS_RESET;
    check(ibv_modify_qp(qp, &reset, IBV_QP_STATE) == 0 && to_init(qp) == 0, "reset_to_init");
    check_depth(qp, nullptr, buf, depth,
                type == IBV_QPT_RC ? "rc_rq_depth_after_reset" : "ud_rq_depth_after_reset");
    check(ibv_destroy_qp(qp) == 0, "destroy_qp");
  }
  ibv_srq_init_attr srq_init{};
  srq_init.attr.max_wr = 16;
  srq_init.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &srq_init);
  // A QP on the SRQ: its worker is the one that reads the SRQ's ring.
  ibv_qp* user = srq != nullptr ? create_qp(pd, cq, IBV_QPT_RC, 0, srq) : nullptr;
  check(srq != nullptr && user != nullptr && to_init(user) == 0, "srq_setup");
  if (user == nullptr) return 1;
  check_depth(user, srq, buf, srq_init.attr.max_wr, "srq_depth");
  ibv_destroy_qp(user);
  ibv_destroy_srq(srq);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  return 0;
}

namespace {

// Sender (rnr_retry 0) and receiver on this device; the receiver's queue filled to the depth
// the device accepts, then as many SENDs: each must find its receive.
void check_rc_loopback(ibv_context* ctx, ibv_pd* pd, const ibv_gid& gid) {
  ibv_cq* send_cq = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
  ibv_cq* recv_cq = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
  ibv_qp* sender = create_qp(pd, send_cq, IBV_QPT_RC, 1);
  ibv_qp* receiver = create_qp(pd, recv_cq, IBV_QPT_RC, 16);
  Buffer out(pd, 64 * kMessageBytes);
  Buffer in(pd, 64 * kMessageBytes);
  const bool made = sender != nullptr && receiver != nullptr && out.mr != nullptr &&
                    in.mr != nullptr &&
                    connect_qp(sender, receiver->qp_num, gid, 0, 0, kStartPsn) &&
                    connect_qp(receiver, sender->qp_num, gid, 0, 7, kStartPsn);
  check(made, "rc_loopback_setup");
  if (!made) return;
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ibv_query_qp(receiver, &attr, IBV_QP_CAP, &init);
  const Filled f = fill_receive_queue(receiver, nullptr, in, attr.cap.max_recv_wr);
  std::printf("receiver took %u receives\n", f.taken);
  for (uint32_t i = 0; i < f.taken; ++i) {
    std::memset(out.data.data() + i * kMessageBytes, static_cast<int>(i + 1), kMessageBytes);
    if (post_one_send(sender, out, i, kMessageBytes) != 0) break;
  }
  std::vector<ibv_wc> sent, received;
  const bool all_sent = wait_completions(send_cq, f.taken, sent);
  const bool all_received = wait_completions(recv_cq, f.taken, received);
  bool sends_ok = all_sent, receives_ok = all_received;
  for (const ibv_wc& wc : sent) {
    if (wc.status != IBV_WC_SUCCESS)
      std::printf("send %lu: %s\n", static_cast<unsigned long>(wc.wr_id),
                  ibv_wc_status_str(wc.status));
    sends_ok = sends_ok && wc.status == IBV_WC_SUCCESS;
  }
  for (const ibv_wc& wc : received) {
    const uint8_t* data = in.data.data() + wc.wr_id * kMessageBytes;
    receives_ok = receives_ok && wc.status == IBV_WC_SUCCESS && wc.byte_len == kMessageBytes &&
                  data[0] == data[kMessageBytes - 1] && data[0] != 0;
  }
  check(sends_ok, "every_accepted_receive_serves_a_send_no_rnr");
  check(receives_ok, "receives_complete_with_data");
  // rxe_qp_to_attr: rq_psn and sq_psn are where the QPs are, not where they started.
  ibv_qp_attr s{}, r{};
  ibv_query_qp(sender, &s, IBV_QP_SQ_PSN, &init);
  ibv_query_qp(receiver, &r, IBV_QP_RQ_PSN, &init);
  std::printf("sender sq_psn %u receiver rq_psn %u after %u sends from psn %u\n", s.sq_psn,
              r.rq_psn, f.taken, kStartPsn);
  check(s.sq_psn == kStartPsn + f.taken, "query_qp_current_sq_psn");
  check(r.rq_psn == kStartPsn + f.taken, "query_qp_current_rq_psn");
  ibv_destroy_qp(sender);
  ibv_destroy_qp(receiver);
  ibv_destroy_cq(send_cq);
  ibv_destroy_cq(recv_cq);
}

// One datagram from a UD QP to itself through GID index `gid_index`.
// An address handle to `gid` from port 1's GID `gid_index`.
ibv_ah* create_global_ah(ibv_pd* pd, int gid_index, const ibv_gid& gid) {
  ibv_ah_attr ah_attr{};
  ah_attr.is_global = 1;
  ah_attr.port_num = 1;
  ah_attr.grh.dgid = gid;
  ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
  ah_attr.grh.hop_limit = 64;
  return ibv_create_ah(pd, &ah_attr);
}

void check_ud_sl(ibv_context* ctx, ibv_pd* pd, int gid_index, const ibv_gid& gid, uint8_t want_sl,
                 const char* name) {
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_qp* qp = create_qp(pd, cq, IBV_QPT_UD, 4);
  Buffer buf(pd, 2 * (kGrhBytes + kMessageBytes));
  ibv_ah* ah = create_global_ah(pd, gid_index, gid);
  const bool made = qp != nullptr && ah != nullptr && buf.mr != nullptr && ud_to_rts(qp) == 0 &&
                    post_one_recv(qp, nullptr, buf, 0, kGrhBytes + kMessageBytes) == 0;
  check(made, "ud_setup");
  if (!made) return;
  ibv_sge sge = buf.sge(kGrhBytes + kMessageBytes, kMessageBytes);
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = qp->qp_num;
  wr.wr.ud.remote_qkey = kQkey;
  ibv_send_wr* bad = nullptr;
  std::vector<ibv_wc> wcs;
  const bool done = ibv_post_send(qp, &wr, &bad) == 0 && wait_completions(cq, 2, wcs);
  const ibv_wc* recv = nullptr;
  for (const ibv_wc& wc : wcs)
    if (wc.opcode == IBV_WC_RECV) recv = &wc;
  std::printf("%s: %s sl 0x%x\n", name, recv == nullptr ? "no receive" : "received",
              recv == nullptr ? 0 : recv->sl);
  // The GRH area agrees: the IPv6 header at its start, or the IPv4 header in its last 20 bytes.
  const uint8_t* grh = buf.data.data();
  const bool header_ok = want_sl == kSlUdpIpv4 ? (grh[20] >> 4) == 4 : (grh[0] >> 4) == 6;
  check(done && recv != nullptr && recv->status == IBV_WC_SUCCESS &&
            (recv->wc_flags & IBV_WC_GRH) != 0 && recv->sl == want_sl && header_ok,
        name);
  ibv_destroy_ah(ah);
  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
}

// ibv_resize_cq below the completions of work already posted fails with EINVAL, as with rxe,
// which writes a UD send's CQE inside ibv_post_send: the daemon takes in the posted sends first
// (pyverbs test_cq test_resize_cq posts cqe-1 UD sends and shrinks to 1 at once).
void check_resize_below_posted(ibv_context* ctx, ibv_pd* pd, int gid_index, const ibv_gid& gid) {
  constexpr int kSends = 6;
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_qp* qp = create_qp(pd, cq, IBV_QPT_UD, kSends);
  Buffer buf(pd, kMessageBytes);
  ibv_ah* ah = create_global_ah(pd, gid_index, gid);
  const bool made = qp != nullptr && ah != nullptr && buf.mr != nullptr && ud_to_rts(qp) == 0;
  check(made, "resize_setup");
  if (!made) return;
  ibv_sge sge = buf.sge(0, kMessageBytes);
  bool posted = true;
  for (int i = 0; i < kSends; ++i) {
    ibv_send_wr wr{};
    wr.wr_id = static_cast<uint64_t>(i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = qp->qp_num;  // no receive posted: the datagram is dropped
    wr.wr.ud.remote_qkey = kQkey;
    ibv_send_wr* bad = nullptr;
    posted = posted && ibv_post_send(qp, &wr, &bad) == 0;
  }
  const int shrink = ibv_resize_cq(cq, 1);
  std::printf("resize_cq to 1 right after %d UD sends: %d\n", kSends, shrink);
  std::vector<ibv_wc> wcs;
  check(posted && shrink == EINVAL && wait_completions(cq, kSends, wcs),
        "resize_below_posted_sends_is_einval");
  ibv_destroy_ah(ah);
  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
}

// Lets the device go idle: long enough for an idle worker to stop spinning and sleep (20 us of
// spinning at most, worker_sleep.h). Not a wait for a condition: the idleness is what is tested,
// and the harness checks that the workers did sleep (worker_sleeps).
void idle_the_device() {
  const timespec pause{0, 3'000'000};
  nanosleep(&pause, nullptr);
}

// Polls `cq` for one completion for up to two seconds.
bool one_completion(ibv_cq* cq, ibv_wc& wc) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < deadline) {
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) return false;
    if (n == 1) return true;
  }
  return false;
}

}  // namespace

int recv_doorbell(ibv_context* ctx) {
  constexpr int kRounds = 8;
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_gid gid{};
  const bool have_gid = find_gid(ctx, is_v4_mapped, gid) == 0;
  ibv_cq* send_cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  ibv_cq* recv_cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
  ibv_qp* sender = create_qp(pd, send_cq, IBV_QPT_RC, 1);
  ibv_qp* receiver = create_qp(pd, recv_cq, IBV_QPT_RC, 16);
  Buffer out(pd, kRounds * kMessageBytes);
  Buffer in(pd, 2 * kRounds * kMessageBytes);
  const bool made = pd != nullptr && have_gid && sender != nullptr && receiver != nullptr &&
                    out.mr != nullptr && in.mr != nullptr &&
                    connect_qp(sender, receiver->qp_num, gid, 0, 0, kStartPsn) &&
                    connect_qp(receiver, sender->qp_num, gid, 0, 0, kStartPsn);
  check(made, "recv_doorbell_setup");
  if (!made) return 1;
  // A healthy QP: the SEND that follows the receive posted while the worker slept finds it
  // (rnr_retry 0: one RNR NAK would fail the SEND). No doorbell woke the worker for the receive
  // (queues.h "Receive doorbells"): the responder pulls it when the SEND needs it.
  const auto sends_find_receives = [&](ibv_qp* to, ibv_qp* from, ibv_srq* srq, uint64_t first,
                                       int pattern) {
    bool found = true;
    for (int i = 0; i < kRounds && found; ++i) {
      idle_the_device();
      const uint64_t id = first + static_cast<uint64_t>(i);
      std::memset(out.data.data() + i * kMessageBytes, pattern + i, kMessageBytes);
      ibv_wc sent{}, got{};
      found = post_one_recv(to, srq, in, id, kMessageBytes) == 0 &&
              post_one_send(from, out, static_cast<uint64_t>(i), kMessageBytes) == 0 &&
              one_completion(send_cq, sent) && sent.status == IBV_WC_SUCCESS &&
              one_completion(recv_cq, got) && got.status == IBV_WC_SUCCESS && got.wr_id == id &&
              std::memcmp(in.data.data() + id * kMessageBytes, out.data.data() + i * kMessageBytes,
                          kMessageBytes) == 0;
      if (!found)
        std::printf("round %d: send %s, receive %s\n", i, ibv_wc_status_str(sent.status),
                    ibv_wc_status_str(got.status));
    }
    return found;
  };
  check(sends_find_receives(receiver, sender, nullptr, 0, 1),
        "a_send_finds_the_receive_posted_while_the_worker_slept");
  // The same through an SRQ, whose posts ring no doorbell either.
  ibv_srq_init_attr srq_init{};
  srq_init.attr.max_wr = 16;
  srq_init.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &srq_init);
  ibv_qp* srq_sender = create_qp(pd, send_cq, IBV_QPT_RC, 1);
  ibv_qp* srq_receiver = srq != nullptr ? create_qp(pd, recv_cq, IBV_QPT_RC, 0, srq) : nullptr;
  const bool srq_pair = srq_sender != nullptr && srq_receiver != nullptr &&
                        connect_qp(srq_sender, srq_receiver->qp_num, gid, 0, 0, kStartPsn) &&
                        connect_qp(srq_receiver, srq_sender->qp_num, gid, 0, 0, kStartPsn);
  check(srq_pair, "recv_doorbell_srq_pair");
  if (!srq_pair) return 1;
  check(sends_find_receives(srq_receiver, srq_sender, srq, kRounds, 101),
        "a_send_finds_the_srq_receive_posted_while_the_worker_slept");
  ibv_destroy_qp(srq_sender);
  ibv_destroy_qp(srq_receiver);
  ibv_destroy_srq(srq);
  // In the error state a receive is the worker's at once: posted while it sleeps, its doorbell
  // wakes the worker, which flushes it with no other traffic to wake it. Without the doorbell
  // the worker would find it only when its own sleep ends (100 ms with nothing armed,
  // SleepPolicy::kMaxSleepNs; measured: 97 ms each): the median of the flushes' times tells the
  // two apart, and a wake-up or two delayed on a loaded host do not move it. A healthy QP's
  // receives ring no doorbell (queues.h "Receive doorbells"), so this holds only if the daemon
  // says so for every way into the error state: ibv_modify_qp, and the transport's own.
  uint64_t next_id = kRounds;
  const auto flushed_at_once = [&](ibv_qp* qp, ibv_cq* cq, const char* name) {
    bool flushed = true;
    std::vector<double> flush_ms;
    for (int i = 0; i < kRounds && flushed; ++i) {
      idle_the_device();
      const uint64_t id = next_id++ % (2 * kRounds);
      ibv_wc wc{};
      const auto posted = std::chrono::steady_clock::now();
      flushed = post_one_recv(qp, nullptr, in, id, kMessageBytes) == 0 && one_completion(cq, wc) &&
                wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == id;
      flush_ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - posted)
              .count());
      if (!flushed) std::printf("%s round %d: %s\n", name, i, ibv_wc_status_str(wc.status));
    }
    std::sort(flush_ms.begin(), flush_ms.end());
    std::printf("%s: flushed after (ms):", name);
    for (const double ms : flush_ms)
      std::printf(" %.2f", ms);
    std::printf("\n");
    return flushed && flush_ms[flush_ms.size() / 2] < 40.0;
  };
  // The transport's way: a WRITE with a key the receiver never gave fails at its responder,
  // which NAKs it and goes to the error state (IBA 9.9.2 class C), and the NAK puts the sender
  // in the error state too.
  ibv_qp* bad_writer = create_qp(pd, send_cq, IBV_QPT_RC, 1);
  ibv_qp* victim = create_qp(pd, recv_cq, IBV_QPT_RC, 16);
  const bool pair = bad_writer != nullptr && victim != nullptr &&
                    connect_qp(bad_writer, victim->qp_num, gid, 0, 0, kStartPsn) &&
                    connect_qp(victim, bad_writer->qp_num, gid, 0, 0, kStartPsn);
  check(pair, "recv_doorbell_second_pair");
  if (!pair) return 1;
  ibv_wc failed{};
  const bool refused =
      post_one_send(bad_writer, out, 0, kMessageBytes, IBV_WR_RDMA_WRITE,
                    reinterpret_cast<uint64_t>(in.data.data()), in.mr->lkey ^ 0x5a5a5a00u) == 0 &&
      one_completion(send_cq, failed) && failed.wr_id == 0 && failed.status != IBV_WC_SUCCESS;
  std::printf("a WRITE with a foreign key: %s\n", ibv_wc_status_str(failed.status));
  check(refused, "a_write_with_a_foreign_key_fails");
  check(refused && flushed_at_once(victim, recv_cq, "responder_in_error_by_the_transport"),
        "a_receive_posted_after_the_responders_own_error_is_flushed_at_once");
  check(refused && flushed_at_once(bad_writer, send_cq, "requester_in_error_by_a_nak"),
        "a_receive_posted_after_the_requesters_own_error_is_flushed_at_once");
  ibv_destroy_qp(bad_writer);
  ibv_destroy_qp(victim);
  // The application's way.
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  check(ibv_modify_qp(receiver, &attr, IBV_QP_STATE) == 0, "receiver_to_error");
  check(flushed_at_once(receiver, recv_cq, "moved_to_error"),
        "a_receive_posted_in_error_while_the_worker_slept_is_flushed");
  ibv_destroy_qp(sender);
  ibv_destroy_qp(receiver);
  ibv_destroy_cq(send_cq);
  ibv_destroy_cq(recv_cq);
  ibv_dealloc_pd(pd);
  return 0;
}

int loopback_semantics(ibv_context* ctx) {
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_gid v4{}, v6{};
  const int v4_index = find_gid(ctx, is_v4_mapped, v4);
  const int v6_index = find_gid(ctx, is_global_v6, v6);
  check(pd != nullptr && v4_index >= 0 && v6_index >= 0, "setup_ipv4_and_ipv6_gids");
  if (pd == nullptr || v4_index < 0 || v6_index < 0) return 1;
  // connect_qp goes through GID index 0: make sure that is the IPv4 one.
  check(v4_index == 0, "gid0_is_ipv4");
  check_rc_loopback(ctx, pd, v4);
  check_ud_sl(ctx, pd, v4_index, v4, kSlUdpIpv4, "ud_ipv4_sl");
  check_ud_sl(ctx, pd, v6_index, v6, kSlUdpIpv6, "ud_ipv6_sl");
  check_resize_below_posted(ctx, pd, v4_index, v4);
  ibv_dealloc_pd(pd);
  return 0;
}

int channel_cq_ex(ibv_context* ctx) {
  for (bool extended : {true, false}) {
    ibv_comp_channel* ch = ibv_create_comp_channel(ctx);
    check(ch != nullptr, "create_comp_channel");
    if (ch == nullptr) return 1;
    ibv_cq* cq = nullptr;
    if (extended) {
      ibv_cq_init_attr_ex attr{};
      attr.cqe = 16;
      attr.channel = ch;
      attr.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
      ibv_cq_ex* cq_ex = ibv_create_cq_ex(ctx, &attr);
      cq = cq_ex == nullptr ? nullptr : ibv_cq_ex_to_cq(cq_ex);
    } else {
      cq = ibv_create_cq(ctx, 16, nullptr, ch, 0);
    }
    std::printf("%s: channel refcnt %d with the cq\n",
                extended ? "ibv_create_cq_ex" : "ibv_create_cq", ch->refcnt);
    check(cq != nullptr && ch->refcnt == 1,
          extended ? "cq_ex_takes_one_channel_reference" : "cq_takes_one_channel_reference");
    if (cq != nullptr) check(ibv_destroy_cq(cq) == 0, "destroy_cq");
    const int fd = ch->fd;
    check(ibv_destroy_comp_channel(ch) == 0,
          extended ? "destroy_channel_after_cq_ex" : "destroy_channel_after_cq");
    errno = 0;
    check(fcntl(fd, F_GETFD) == -1 && errno == EBADF, "channel_fd_closed");
  }
  return 0;
}

}  // namespace xroce::probe

namespace xroce::probe {
namespace {

long voluntary_switches() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}

// Posts `count` SENDs of `bytes` each from sender to receiver (receives posted first), polls the
// send CQ until all completed, and returns the polling thread's voluntary context switches
// (sleeps) during that poll; -1 when a completion or the data is wrong.
long sends_and_sleeps(ibv_qp* sender, ibv_cq* send_cq, ibv_qp* receiver, ibv_cq* recv_cq,
                      Buffer& out, Buffer& in, uint32_t count, uint32_t bytes, uint8_t seed) {
  for (uint32_t i = 0; i < count; ++i) {
    if (post_one_recv(receiver, nullptr, in, i, bytes) != 0) return -1;
    std::memset(out.data.data() + std::size_t{i} * bytes, static_cast<int>(seed + i), bytes);
  }
  for (uint32_t i = 0; i < count; ++i)
    if (post_one_send(sender, out, i, bytes) != 0) return -1;
  const long before = voluntary_switches();
  std::vector<ibv_wc> sent, received;
  const bool all_sent = wait_completions(send_cq, count, sent);
  const long sleeps = voluntary_switches() - before;
  const bool all_received = wait_completions(recv_cq, count, received);
  bool ok = all_sent && all_received;
  for (const ibv_wc& wc : sent)
    ok = ok && wc.status == IBV_WC_SUCCESS;
  for (const ibv_wc& wc : received)
    ok = ok && wc.status == IBV_WC_SUCCESS && wc.byte_len == bytes &&
         std::memcmp(in.data.data() + wc.wr_id * bytes, out.data.data() + wc.wr_id * bytes,
                     bytes) == 0;
  return ok ? sleeps : -1;
}

}  // namespace

// A thread polling an empty CQ sleeps at its yield points only while at least 1 MiB of sends
// is queued on the QPs completing into that CQ (provider/cq.cc, note_poll): 32 SENDs of 64 KiB
// on a loopback pair (again, up to 5 times, until the poller slept), then 64 rounds of one
// 64-byte SEND. Prints the polling thread's sleeps
// (voluntary context switches) in each case; the data must arrive either way.
int poll_sleep(ibv_context* ctx) {
  constexpr uint32_t kDeepCount = 32;
  constexpr uint32_t kDeepBytes = 64 * 1024;
  constexpr uint32_t kShallowRounds = 64;
  constexpr uint32_t kDeepRounds = 5;
  ibv_pd* pd = ibv_alloc_pd(ctx);
  check(pd != nullptr, "alloc_pd");
  if (pd == nullptr) return 1;
  ibv_gid gid{};
  const bool have_gid = find_gid(ctx, is_v4_mapped, gid) == 0;
  ibv_cq* send_cq = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
  ibv_cq* recv_cq = ibv_create_cq(ctx, 256, nullptr, nullptr, 0);
  ibv_qp* sender = create_qp(pd, send_cq, IBV_QPT_RC, 1);
  ibv_qp* receiver = create_qp(pd, recv_cq, IBV_QPT_RC, kDeepCount);
  {
    Buffer out(pd, std::size_t{kDeepCount} * kDeepBytes);
    Buffer in(pd, std::size_t{kDeepCount} * kDeepBytes);
    const bool made = have_gid && sender != nullptr && receiver != nullptr && out.mr != nullptr &&
                      in.mr != nullptr &&
                      connect_qp(sender, receiver->qp_num, gid, 0, 7, kStartPsn) &&
                      connect_qp(receiver, sender->qp_num, gid, 0, 7, kStartPsn);
    check(made, "poll_sleep_setup");
    if (made) {
      // Up to kDeepRounds rounds, until one sleeps: a poller the host leaves unscheduled
      // until every completion is in never reaches a yield point.
      long deep = 0;
      for (uint32_t round = 0; round < kDeepRounds && deep == 0; ++round)
        deep = sends_and_sleeps(sender, send_cq, receiver, recv_cq, out, in, kDeepCount, kDeepBytes,
                                static_cast<uint8_t>(round + 1));
      long shallow = 0;
      for (uint32_t round = 0; round < kShallowRounds && shallow >= 0; ++round) {
        const long s = sends_and_sleeps(sender, send_cq, receiver, recv_cq, out, in, 1, 64,
                                        static_cast<uint8_t>(round));
        shallow = s < 0 ? -1 : shallow + s;
      }
      check(deep >= 0, "deep_queue_data_arrives");
      check(shallow >= 0, "shallow_queue_data_arrives");
      std::printf("poll_sleep deep %ld shallow %ld\n", deep, shallow);
    }
  }
  if (sender != nullptr) ibv_destroy_qp(sender);
  if (receiver != nullptr) ibv_destroy_qp(receiver);
  if (send_cq != nullptr) ibv_destroy_cq(send_cq);
  if (recv_cq != nullptr) ibv_destroy_cq(recv_cq);
  ibv_dealloc_pd(pd);
  return 0;
}

}  // namespace xroce::probe
