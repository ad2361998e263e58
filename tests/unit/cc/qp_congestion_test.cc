// QpCongestion: the hooks engine/cc attaches to a transport QP (ECT, pacing, CNPs, counters).
#include "cc/qp_congestion.h"

#include <gtest/gtest.h>

#include "wire/frame.h"

namespace xroce::cc {
namespace {

constexpr std::uint64_t kUs = 1000;
constexpr std::uint8_t kTc = 26 << 2;  // DSCP 26 -> priority 3

CcDevice device_25g() {
  CcDevice d;
  d.params = DcqcnParams::connectx();
  d.line_rate_mbps = 25'000;
  return d;
}

TEST(QpCongestionTos, DataCarriesEct0WithTheQpDscpAndCnpsCarryCnpDscp) {
  EXPECT_EQ(data_tos(kTc, true), (26 << 2) | 2);
  EXPECT_EQ(data_tos(kTc, false), kTc);
  EXPECT_EQ(data_tos(kTc | 3, true), (26 << 2) | 2);  // the QP's own ECN bits are replaced
  EXPECT_EQ(cnp_tos(DcqcnParams::connectx()), 48 << 2);
  EXPECT_EQ(priority_of(kTc), 3);
  EXPECT_EQ(priority_of(48 << 2), 6);
}

TEST(QpCongestion, MarksEctAndPacesAtTheLineRateUntilTheFirstCnp) {
  const CcDevice d = device_25g();
  QpCongestion qp(d, wire::Qpn(0x42), kTc);
  EXPECT_EQ(qp.earliest_send_ns(0), 0u);
  EXPECT_TRUE(qp.on_transmit(0, 4096));
  // (4096 + 58) bytes at 25 Gb/s = 1329.28 ns, rounded up.
  EXPECT_EQ(qp.earliest_send_ns(10), 1330u);
  EXPECT_FALSE(qp.next_deadline().has_value());  // unlimited: no timers
}

TEST(QpCongestion, CnpCutsTheRateAndStretchesThePendingSpacing) {
  const CcDevice d = device_25g();
  QpCongestion qp(d, wire::Qpn(0x42), kTc);
  qp.on_transmit(0, 4096);  // next at 1329.28 ns at 25 Gb/s
  qp.on_cnp(100);
  // ConnectX first CNP: alpha 1023/1024, cut by alpha/2.
  const double rate = 25'000 * (1 - 1023.0 / 2048);
  EXPECT_DOUBLE_EQ(qp.rate_mbps(), rate);
  EXPECT_EQ(qp.counters().rp_cnp_handled, 1u);
  EXPECT_EQ(qp.counters().rate_cuts, 1u);
  // The 1229.28 ns left at 25 Gb/s stretch to 1229.28 * 25000 / rate.
  const double expect = 100 + 1229.28 * 25'000 / rate;
  EXPECT_NEAR(static_cast<double>(qp.earliest_send_ns(100)), expect, 1.0);
  EXPECT_TRUE(qp.next_deadline().has_value());  // the rate-increase timer is armed
}

TEST(QpCongestion, NotificationPointSpacesCnpsByMinTimeBetweenCnps) {
  const CcDevice d = device_25g();  // min_time_between_cnps 4 µs
  QpCongestion qp(d, wire::Qpn(0x42), kTc);
  qp.on_ce_marked(0);
  auto cnp = qp.poll_cnp();
  ASSERT_TRUE(cnp.has_value());
  EXPECT_EQ(cnp->bth.opcode, wire::Opcode::kCnp);
  EXPECT_TRUE(cnp->bth.becn);
  EXPECT_EQ(cnp->bth.dest_qp, wire::Qpn(0x42));
  EXPECT_FALSE(qp.poll_cnp().has_value());
  qp.on_ce_marked(3 * kUs);  // inside 4 µs: counted, no CNP
  EXPECT_FALSE(qp.poll_cnp().has_value());
  qp.on_ce_marked(4 * kUs);
  EXPECT_TRUE(qp.poll_cnp().has_value());
  EXPECT_EQ(qp.counters().np_ecn_marked_roce_packets, 3u);
  EXPECT_EQ(qp.counters().np_cnp_sent, 2u);
}

TEST(QpCongestion, CnpGenerationSwitchedOffForTheDeviceStillCountsMarks) {
  CcDevice d = device_25g();
  d.cnp_generation = false;
  QpCongestion qp(d, wire::Qpn(0x42), kTc);
  qp.on_ce_marked(0);
  qp.on_ce_marked(10 * kUs);
  EXPECT_FALSE(qp.poll_cnp().has_value());
  EXPECT_EQ(qp.counters().np_ecn_marked_roce_packets, 2u);
  EXPECT_EQ(qp.counters().np_cnp_sent, 0u);
  d.cnp_generation = true;  // switched back on at run time
  qp.on_ce_marked(20 * kUs);
  EXPECT_TRUE(qp.poll_cnp().has_value());
}

TEST(QpCongestion, OffDeviceNeitherMarksNorPacesAndIgnoresCnps) {
  CcDevice d = device_25g();
  d.enabled = false;
  QpCongestion qp(d, wire::Qpn(0x42), kTc);
  EXPECT_FALSE(qp.on_transmit(0, 4096));
  EXPECT_EQ(qp.earliest_send_ns(5), 5u);
  qp.on_cnp(10);
  EXPECT_EQ(qp.counters().rp_cnp_ignored, 1u);
  EXPECT_EQ(qp.counters().rp_cnp_handled, 0u);
  EXPECT_DOUBLE_EQ(qp.rate_mbps(), 25'000);
}

TEST(QpCongestion, DisabledPriorityCountsCnpsAsIgnored) {
  CcDevice d = device_25g();
  d.params.rp_enable_mask = ~(1u << 3) & kAllPriorities;
  QpCongestion qp(d, wire::Qpn(0x42), kTc);
  qp.on_cnp(10);
  EXPECT_EQ(qp.counters().rp_cnp_ignored, 1u);
  EXPECT_DOUBLE_EQ(qp.rate_mbps(), 25'000);
}

}  // namespace
}  // namespace xroce::cc
