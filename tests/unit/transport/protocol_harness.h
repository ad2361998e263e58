// A QP under test alone: the test plays the peer by crafting packets ("receive X") and checks
// exactly what comes out ("expect Y": packets, payload bytes, completions).
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <vector>

#include "transport/memory.h"
#include "transport/qp.h"

namespace xroce::transport::testing {

inline constexpr wire::Qpn kLocalQpn{0x11};
inline constexpr wire::Qpn kPeerQpn{0x22};
inline constexpr std::uint32_t kSqPsn = 100;
inline constexpr std::uint32_t kRqPsn = 500;
inline constexpr std::uint32_t kMtu = 256;
inline constexpr std::uint8_t kTimeoutExp = 14;  // 4.096 us << 14 = 67.1 ms
inline constexpr std::uint64_t kTimeoutNs = std::uint64_t{4096} << kTimeoutExp;
inline constexpr std::uint8_t kRnrTimerCode = 5;  // 60 us in the peer's RNR NAKs

struct Sent {
  Transmit t;
  std::vector<std::uint8_t> payload;
  const wire::TransportHeaders& hdr() const { return t.hdr; }
  wire::Opcode opcode() const { return t.hdr.bth.opcode; }
  std::uint32_t psn() const { return t.hdr.bth.psn.value(); }
};

struct QpOptions {
  QpType type = QpType::kRc;
  std::uint8_t retry_cnt = 3;
  std::uint8_t rnr_retry = 2;
  std::uint8_t max_rd_atomic = 4;
  std::uint8_t max_dest_rd_atomic = 4;
  std::uint32_t access = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
  Srq* srq = nullptr;
  XrcDomain* xrc = nullptr;
  std::uint32_t sq_psn = kSqPsn;
  std::uint32_t rq_psn = kRqPsn;
  PathMtu path_mtu = PathMtu::k256;
  PathMtu port_mtu = PathMtu::k4096;                // the port's active MTU (QpConfig::port_mtu)
  std::shared_ptr<InflightBudget> inflight_budget;  // QpConfig::inflight_budget
  std::uint64_t adaptive_rto_floor_ns = kAdaptiveRtoFloorNs;
  std::uint64_t resend_probe_floor_ns = 0;           // QpConfig::resend_probe_floor_ns
  std::uint64_t tail_probe_floor_ns = 0;             // QpConfig::tail_probe_floor_ns
  std::uint64_t lossy_tail_probe_floor_ns = 0;       // QpConfig::lossy_tail_probe_floor_ns
  std::uint64_t lossy_read_tail_probe_floor_ns = 0;  // QpConfig::lossy_read_tail_probe_floor_ns
  std::uint8_t timeout = kTimeoutExp;
  std::uint32_t max_unacked_psns = QpConfig{}.max_unacked_psns;
  std::uint32_t loss_window_min_psns = 0;  // QpConfig::loss_window_min_psns
  bool selective_read_repair = false;      // QpConfig::selective_read_repair
  std::uint64_t read_repair_floor_ns = 0;  // QpConfig::read_repair_floor_ns
};

class ProtocolTest : public ::testing::Test {
 public:
  // Packets from the peer.
  static wire::TransportHeaders packet(wire::Opcode op, std::uint32_t psn, bool ack_req = false) {
    wire::TransportHeaders h;
    h.bth.opcode = op;
    h.bth.dest_qp = kLocalQpn;
    h.bth.psn = wire::Psn(psn);
    h.bth.ack_req = ack_req;
    return h;
  }
  // A READ response from the peer; FIRST, LAST and ONLY carry an ACK AETH with MSN 1.
  static wire::TransportHeaders read_response(wire::Opcode op, std::uint32_t psn) {
    wire::TransportHeaders h = packet(op, psn);
    if (wire::opcode_info(op).headers.has(wire::Header::kAeth)) h.aeth = wire::Aeth::ack(1);
    return h;
  }

 protected:
  static constexpr std::size_t kBufBytes = 1 << 16;
  LocalMemory mem;
  MemoryRegionTable mrs{mem};
  std::unique_ptr<Qp> qp;

  void SetUp() override { make_qp(QpOptions{}); }

  void make_qp(const QpOptions& o) {
    QpConfig cfg;
    cfg.type = o.type;
    cfg.qpn = kLocalQpn;
    cfg.xrc = o.xrc;
    cfg.port_mtu = o.port_mtu;
    cfg.inflight_budget = o.inflight_budget;
    cfg.adaptive_rto_floor_ns = o.adaptive_rto_floor_ns;
    cfg.resend_probe_floor_ns = o.resend_probe_floor_ns;
    cfg.tail_probe_floor_ns = o.tail_probe_floor_ns;
    cfg.lossy_tail_probe_floor_ns = o.lossy_tail_probe_floor_ns;
    cfg.lossy_read_tail_probe_floor_ns = o.lossy_read_tail_probe_floor_ns;
    cfg.max_unacked_psns = o.max_unacked_psns;
    cfg.loss_window_min_psns = o.loss_window_min_psns;
    cfg.selective_read_repair = o.selective_read_repair;
    cfg.read_repair_floor_ns = o.read_repair_floor_ns;
    qp = std::make_unique<Qp>(cfg, mrs, o.srq);
    bring_up(o);
  }

  // RESET -> INIT -> RTR -> RTS with the harness's attributes.
  void bring_up(const QpOptions& o) {
    QpAttr a;
    a.qp_access_flags = o.access;
    a.qkey = wire::Qkey(0x1234);
    a.path_mtu = o.path_mtu;
    a.dest_qp_num = kPeerQpn;
    a.rq_psn = wire::Psn(o.rq_psn);
    a.sq_psn = wire::Psn(o.sq_psn);
    a.max_dest_rd_atomic = o.max_dest_rd_atomic;
    a.max_rd_atomic = o.max_rd_atomic;
    a.min_rnr_timer = kRnrTimerCode;
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.av_id = 9;
    namespace m = qp_attr;
    const QpType t = o.type;
    const bool ud = t == QpType::kUd;
    a.qp_state = QpState::kInit;
    ASSERT_EQ(
        qp->modify(a, m::kState | m::kPkeyIndex | m::kPort | (ud ? m::kQkey : m::kAccessFlags)), 0);
    // The masks of ib_modify_qp_is_ok's table for each type.
    const std::uint32_t path = m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn;
    const bool responder = t == QpType::kRc || t == QpType::kXrcRecv;
    a.qp_state = QpState::kRtr;
    ASSERT_EQ(qp->modify(
                  a, m::kState |
                         (ud ? 0 : path | (responder ? m::kMaxDestRdAtomic | m::kMinRnrTimer : 0))),
              0);
    a.qp_state = QpState::kRts;
    const std::uint32_t requester =
        m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kSqPsn | m::kMaxQpRdAtomic;
    const std::uint32_t rts = ud || t == QpType::kUc  ? m::kSqPsn
                              : t == QpType::kXrcRecv ? m::kTimeout | m::kSqPsn
                                                      : requester;
    ASSERT_EQ(qp->modify(a, m::kState | rts), 0);
  }

  // Drains every packet the QP wants to send now, or the first `limit` of them.
  std::vector<Sent> drain(std::uint64_t now = 0, std::size_t limit = SIZE_MAX) {
    std::vector<Sent> out;
    std::array<std::uint8_t, 4096> buf{};
    while (out.size() < limit) {
      auto t = qp->poll_transmit(now, buf);
      if (!t) break;
      out.push_back(Sent{*t, {buf.begin(), buf.begin() + t->payload_len}});
    }
    return out;
  }
  // Drains a go-back-N resend the responses or the adaptive timer started, whose first packet
  // goes twice (Requester::retry): checks that copy and returns the resend without it.
  std::vector<Sent> drain_resend(std::uint64_t now = 0) {
    std::vector<Sent> out = drain(now);
    EXPECT_GE(out.size(), 2u) << "a resend and the copy of its first packet";
    if (out.size() < 2) return out;
    EXPECT_EQ(out[0].psn(), out[1].psn()) << "the first resent packet goes twice";
    EXPECT_EQ(out[0].opcode(), out[1].opcode());
    EXPECT_EQ(out[0].payload, out[1].payload);
    EXPECT_TRUE(out[0].t.retransmission && out[1].t.retransmission);
    out.erase(out.begin());
    return out;
  }
  std::vector<Completion> completions() {
    std::vector<Completion> out;
    while (auto c = qp->poll_completion())
      out.push_back(*c);
    return out;
  }

  // Local buffers: `local` is registered with every access right.
  std::uint64_t local = mem.allocate(kBufBytes);
  MemoryRegion local_mr = mrs.register_region(
      local, kBufBytes,
      access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic);
  std::span<std::uint8_t> bytes(std::uint64_t addr, std::size_t n) { return mem.view(addr, n); }
  void fill(std::uint64_t addr, std::size_t n, std::uint8_t seed) {
    auto v = bytes(addr, n);
    for (std::size_t i = 0; i < n; ++i)
      v[i] = static_cast<std::uint8_t>(seed + i * 7);
  }
  Sge sge(std::uint64_t addr, std::uint32_t len) { return Sge{addr, len, local_mr.lkey}; }

  WorkRequest wr(WrOpcode op, std::uint64_t id, std::vector<Sge> sges,
                 std::uint32_t flags = send_flags::kSignaled) {
    WorkRequest w;
    w.wr_id = id;
    w.opcode = op;
    w.send_flags = flags;
    w.sg_list = std::move(sges);
    w.remote_addr = 0x7000000;
    w.rkey = wire::Rkey(0x4242);
    return w;
  }
  RecvRequest recv(std::uint64_t id, std::vector<Sge> sges) { return RecvRequest{id, sges}; }

  static wire::TransportHeaders ack(std::uint32_t psn, wire::Aeth aeth = wire::Aeth::ack(0)) {
    wire::TransportHeaders h = packet(wire::Opcode::kRcAck, psn);
    h.aeth = aeth;
    return h;
  }
  void receive(const wire::TransportHeaders& h, wire::Bytes payload = {}, std::uint64_t now = 0) {
    qp->handle_packet(now, h, payload);
  }
};

}  // namespace xroce::transport::testing
