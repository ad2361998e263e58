// QpCongestion as xroced uses it (engine/daemon/worker.h): no pacing of an unlimited QP, the
// per-priority rp_enable switching ECT, pacing and CNP handling at run time, the target rate.
#include <gtest/gtest.h>

#include "cc/qp_congestion.h"

namespace xroce::cc {
namespace {

constexpr std::uint64_t kUs = 1000;
constexpr std::uint8_t kTc = 26 << 2;  // DSCP 26 -> priority 3

CcDevice daemon_like() {
  CcDevice d;
  d.line_rate_mbps = 10'000;
  d.pace_unlimited = false;
  d.params.rate_to_set_on_first_cnp = 1000;  // Mb/s
  d.params.rpg_time_reset = 1'000'000;       // no increase within the test
  d.params.rpg_byte_reset = 0;
  return d;
}

TEST(QpCongestionDaemon, UnlimitedQpIsNotPacedButStillEct) {
  const CcDevice d = daemon_like();
  QpCongestion qp(d, wire::Qpn(0x42), kTc);
  EXPECT_TRUE(qp.active());
  EXPECT_TRUE(qp.on_transmit(0, 4096));
  EXPECT_EQ(qp.earliest_send_ns(1), 1u);  // at 10 Gb/s the spacing would be 3.3 µs
  EXPECT_EQ(qp.rate_mbps(), 10'000);
  EXPECT_EQ(qp.target_rate_mbps(), 10'000);
}

// Back-to-back packets of an unpaced QP are the port's to serialise: they are not charged to
// the pacer, so after a cut the QP is paced from the cut, not behind ~330 µs of them.
TEST(QpCongestionDaemon, AnUnlimitedQpsBurstIsNotChargedToThePacer) {
  const CcDevice d = daemon_like();
  QpCongestion qp(d, wire::Qpn(0x42), kTc);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(qp.earliest_send_ns(0), 0u);
    EXPECT_TRUE(qp.on_transmit(0, 4096));
  }
  qp.on_cnp(10 * kUs);
  const double rate = 1000 * (1 - (1023.0 / 1024) / 2);
  ASSERT_DOUBLE_EQ(qp.rate_mbps(), rate);
  ASSERT_LE(qp.earliest_send_ns(20 * kUs), 20 * kUs);  // may send at once
  EXPECT_TRUE(qp.on_transmit(20 * kUs, 1000));
  const auto spacing_ns =
      static_cast<std::uint64_t>((1000 + kRoceV4DataOverheadBytes) * 8e3 / rate);
  EXPECT_NEAR(static_cast<double>(qp.earliest_send_ns(20 * kUs)),
              static_cast<double>(20 * kUs + spacing_ns), 2.0);
}

TEST(QpCongestionDaemon, MaxRateBelowTheLineIsPacedBeforeAnyCnp) {
  CcDevice d = daemon_like();
  d.params.rpg_max_rate = 500;  // Mb/s
  QpCongestion qp(d, wire::Qpn(0x42), kTc);
  EXPECT_EQ(qp.rate_mbps(), 500);
  EXPECT_TRUE(qp.on_transmit(0, 1000));
  // (1000 + 58) bytes at 500 Mb/s = 16.928 µs.
  EXPECT_EQ(qp.earliest_send_ns(1), 16'928u);
}

TEST(QpCongestionDaemon, AfterACnpTheQpIsPacedAtItsRate) {
  const CcDevice d = daemon_like();
  QpCongestion qp(d, wire::Qpn(0x42), kTc);
  qp.on_cnp(10 * kUs);
  const double rate = 1000 * (1 - (1023.0 / 1024) / 2);  // Rc = 1000, cut by alpha / 2
  EXPECT_DOUBLE_EQ(qp.rate_mbps(), rate);
  EXPECT_DOUBLE_EQ(qp.target_rate_mbps(), 1000);
  EXPECT_TRUE(qp.on_transmit(20 * kUs, 1000));
  const auto spacing_ns =
      static_cast<std::uint64_t>((1000 + kRoceV4DataOverheadBytes) * 8e3 / rate);
  EXPECT_NEAR(static_cast<double>(qp.earliest_send_ns(20 * kUs)),
              static_cast<double>(20 * kUs + spacing_ns), 2.0);
}

TEST(QpCongestionDaemon, RpEnableOffForThePriorityStopsEctPacingAndCnpHandling) {
  CcDevice d = daemon_like();
  QpCongestion qp(d, wire::Qpn(0x42), kTc);
  qp.on_cnp(10 * kUs);
  ASSERT_LT(qp.rate_mbps(), 1000);
  d.params.rp_enable_mask = kAllPriorities & ~(1u << 3);  // at run time, as `cc set` does
  EXPECT_FALSE(qp.active());
  EXPECT_FALSE(qp.on_transmit(20 * kUs, 1000));  // Not-ECT
  EXPECT_EQ(qp.earliest_send_ns(21 * kUs), 21 * kUs);
  EXPECT_EQ(qp.rate_mbps(), d.line_rate_mbps);
  EXPECT_FALSE(qp.next_deadline().has_value());
  qp.on_cnp(30 * kUs);
  EXPECT_EQ(qp.counters().rp_cnp_ignored, 1u);
  EXPECT_EQ(qp.counters().rp_cnp_handled, 1u);

  d.params.rp_enable_mask = kAllPriorities;  // back on: the state it had
  EXPECT_TRUE(qp.active());
  EXPECT_LT(qp.rate_mbps(), 1000);
  EXPECT_TRUE(qp.on_transmit(40 * kUs, 1000));
  EXPECT_GT(qp.earliest_send_ns(40 * kUs), 40 * kUs);
}

TEST(QpCongestionDaemon, OtherPrioritiesDoNotAffectTheQp) {
  CcDevice d = daemon_like();
  d.params.rp_enable_mask = 1u << 3;  // only priority 3
  QpCongestion on(d, wire::Qpn(1), kTc);
  QpCongestion off(d, wire::Qpn(2), 0);  // DSCP 0 -> priority 0
  EXPECT_TRUE(on.on_transmit(0, 100));
  EXPECT_FALSE(off.on_transmit(0, 100));
  EXPECT_EQ(off.priority(), 0);
  EXPECT_EQ(on.priority(), 3);
}

TEST(QpCongestionDaemon, PeerFollowsAReconnectAndTheCnpGoesThere) {
  CcDevice d = daemon_like();
  d.params.np_enable_mask = kAllPriorities;
  QpCongestion qp(d, wire::Qpn(0x42), kTc);
  qp.set_peer(wire::Qpn(0x99));
  EXPECT_EQ(qp.peer(), wire::Qpn(0x99));
  qp.on_ce_marked(0);
  const auto cnp = qp.poll_cnp();
  ASSERT_TRUE(cnp.has_value());
  EXPECT_EQ(cnp->bth.dest_qp, wire::Qpn(0x99));
  EXPECT_TRUE(cnp->bth.becn);
}

}  // namespace
}  // namespace xroce::cc
