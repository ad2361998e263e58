// The transmit-path hooks left for engine/cc: pacing holds request packets (not ACKs) until
// the hook's time, ECT marking comes from the hook, CNPs and CE marks reach it.
#include <gtest/gtest.h>

#include "protocol_harness.h"

namespace xroce::transport::testing {
namespace {

class FakeRateLimiter final : public CongestionHooks {
 public:
  std::uint64_t next_send_ns = 0;
  std::uint64_t transmitted_bytes = 0;
  int cnps = 0;
  int ce_marks = 0;
  std::uint64_t earliest_send_ns(std::uint64_t) override { return next_send_ns; }
  bool on_transmit(std::uint64_t now_ns, std::uint32_t bytes) override {
    transmitted_bytes += bytes;
    next_send_ns = now_ns + 1000;  // one packet per microsecond
    return true;
  }
  void on_cnp(std::uint64_t) override { ++cnps; }
  void on_ce_marked(std::uint64_t) override { ++ce_marks; }
};

class CongestionHooksTest : public ProtocolTest {
 protected:
  FakeRateLimiter cc;
  void SetUp() override {
    ProtocolTest::SetUp();
    qp->set_congestion_hooks(&cc);
  }
  // A zero-length RDMA WRITE ONLY with AckReq from the peer (needs no valid R_Key).
  wire::TransportHeaders write_only() {
    auto h = packet(wire::Opcode::kRcWriteOnly, kRqPsn, true);
    h.reth = wire::Reth{0, wire::Rkey(0), 0};
    return h;
  }
};

TEST_F(CongestionHooksTest, PacingHoldsRequestsUntilTheHooksTime) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 3 * kMtu)})), 0);
  auto out = drain(0);
  ASSERT_EQ(out.size(), 1u);  // the hook allows one packet per microsecond
  EXPECT_TRUE(out[0].t.ect);
  EXPECT_EQ(qp->requester_state(500), RequesterState::kWaitPacer);
  EXPECT_EQ(qp->next_deadline(), 1000u);  // the pacer's time is a deadline to wake for
  qp->handle_timeout(1000);
  out = drain(1000);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), kSqPsn + 1);
  EXPECT_EQ(cc.transmitted_bytes, 2 * kMtu);
}

TEST_F(CongestionHooksTest, AcksAreNotPaced) {
  cc.next_send_ns = 1'000'000;
  receive(write_only());
  const auto out = drain(0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), wire::Opcode::kRcAck);
}

TEST_F(CongestionHooksTest, CnpsAndCeMarksReachTheHook) {
  receive(packet(wire::Opcode::kCnp, 0));
  RxMeta ce;
  ce.ecn_ce = true;
  qp->handle_packet(0, write_only(), {}, ce);
  EXPECT_EQ(cc.cnps, 1);
  EXPECT_EQ(cc.ce_marks, 1);
  EXPECT_EQ(qp->counters().ecn_ce_received, 1u);
}

}  // namespace
}  // namespace xroce::transport::testing
