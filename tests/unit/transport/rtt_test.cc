// The per-QP round-trip estimate (transport/rtt.h): what is timed, what voids a timing, and the
// RFC 6298 smoothing; first on the estimator alone, then through a QP's requester and completer.
#include <gtest/gtest.h>

#include "protocol_harness.h"
#include "transport/rtt.h"

namespace xroce::transport::testing {
namespace {

using wire::Aeth;
using wire::NakCode;
using wire::Psn;

TEST(RttEstimator, TimesOnePacketAskingForAnAckUntilTheAckPassesIt) {
  RttEstimator rtt;
  rtt.on_request_sent(1000, Psn(10), false, false);  // no AckReq: not timed
  rtt.on_acknowledged(2000, Psn(11));
  EXPECT_EQ(rtt.samples(), 0u);
  rtt.on_request_sent(3000, Psn(11), true, false);
  rtt.on_request_sent(3500, Psn(12), true, false);  // one timing at a time
  rtt.on_acknowledged(4000, Psn(11));               // not past PSN 11 yet
  EXPECT_EQ(rtt.samples(), 0u);
  rtt.on_acknowledged(53'000, Psn(12));
  EXPECT_EQ(rtt.samples(), 1u);
  EXPECT_EQ(rtt.latest_ns(), 50'000u);
  EXPECT_EQ(rtt.smoothed_ns(), 50'000u);
  EXPECT_EQ(rtt.min_ns(), 50'000u);
}

TEST(RttEstimator, SmoothsWithGainOneEighthAndKeepsTheMinimum) {
  RttEstimator rtt;
  rtt.on_request_sent(0, Psn(1), true, false);
  rtt.on_acknowledged(80'000, Psn(2));
  rtt.on_request_sent(100'000, Psn(2), true, false);
  rtt.on_acknowledged(100'000 + 160'000, Psn(3));
  EXPECT_EQ(rtt.latest_ns(), 160'000u);
  EXPECT_EQ(rtt.smoothed_ns(), 80'000u - 10'000u + 20'000u);  // 7/8 * 80 us + 1/8 * 160 us
  EXPECT_EQ(rtt.min_ns(), 80'000u);
  EXPECT_EQ(rtt.samples(), 2u);
}

TEST(RttEstimator, RetransmissionsAreNotTimedAndARetryVoidsTheTiming) {
  RttEstimator rtt;
  rtt.on_request_sent(0, Psn(5), true, true);
  rtt.on_acknowledged(10, Psn(6));
  EXPECT_EQ(rtt.samples(), 0u);
  rtt.on_request_sent(0, Psn(5), true, false);
  rtt.on_retry();
  rtt.on_acknowledged(10, Psn(6));
  EXPECT_EQ(rtt.samples(), 0u);
}

TEST(RttEstimator, WorksAcrossThePsnWrap) {
  RttEstimator rtt;
  rtt.on_request_sent(0, Psn(0xFFFFFF), true, false);
  rtt.on_acknowledged(7, Psn(0));
  EXPECT_EQ(rtt.samples(), 1u);
  EXPECT_EQ(rtt.latest_ns(), 7u);
}

// RFC 6298 2.2/2.3 in integers: after R, SRTT = R and RTTVAR = R/2; then RTTVAR takes a quarter
// of |SRTT - R'| and SRTT an eighth of R'.
TEST(RttEstimator, RtoIsSmoothedPlusFourVariancesWithinFloorAndCap) {
  constexpr std::uint64_t kCapNs = 10'000'000;
  RttEstimator rtt;
  EXPECT_EQ(rtt.rto_ns(1000, kCapNs), kCapNs);  // nothing measured: nothing to adapt from
  rtt.on_request_sent(0, Psn(1), true, false);
  rtt.on_acknowledged(40'000, Psn(2));
  EXPECT_EQ(rtt.rttvar_ns(), 20'000u);
  EXPECT_EQ(rtt.rto_ns(1000, kCapNs), 40'000u + 4 * 20'000u);
  EXPECT_EQ(rtt.rto_ns(500'000, kCapNs), 500'000u);  // the floor
  EXPECT_EQ(rtt.rto_ns(1000, 100'000), 100'000u);    // the cap (the Local ACK Timeout)
  rtt.on_request_sent(100'000, Psn(2), true, false);
  rtt.on_acknowledged(100'000 + 80'000, Psn(3));
  // RTTVAR = 3/4 * 20 + 1/4 * |40 - 80| = 25 us; SRTT = 7/8 * 40 + 1/8 * 80 = 45 us.
  EXPECT_EQ(rtt.rttvar_ns(), 25'000u);
  EXPECT_EQ(rtt.smoothed_ns(), 45'000u);
  // ... and at least twice the longest recent round trip (80 us).
  EXPECT_EQ(rtt.rto_ns(1000, kCapNs), 2 * 80'000u);
}

// A round trip far above the smoothed one (a descheduled peer) keeps the RTO at twice it for the
// peak window and the next, although SRTT + 4 * RTTVAR forgets it within a few samples; after
// two windows of steady samples the RTO follows those again.
TEST(RttEstimator, RtoStaysAboveTwiceTheLongestRecentRoundTrip) {
  constexpr std::uint64_t kCapNs = 100'000'000;
  constexpr std::uint64_t kWindowNs = RttEstimator::kPeakWindowNs;
  RttEstimator rtt;
  std::uint32_t psn = 0;
  auto sample = [&](std::uint64_t at_ns, std::uint64_t rtt_ns) {
    rtt.on_request_sent(at_ns, Psn(psn), true, false);
    rtt.on_acknowledged(at_ns + rtt_ns, Psn(psn + 1));
    ++psn;
  };
  sample(0, 50'000);
  EXPECT_EQ(rtt.peak_ns(), 50'000u);
  sample(1'000'000, 4'000'000);  // a 4 ms stall
  EXPECT_EQ(rtt.peak_ns(), 4'000'000u);
  for (std::uint64_t t = 10'000'000; t < kWindowNs; t += 1'000'000)
    sample(t, 50'000);
  EXPECT_LT(rtt.smoothed_ns() + 4 * rtt.rttvar_ns(), 1'000'000u);  // the spike is forgotten...
  EXPECT_EQ(rtt.rto_ns(200'000, kCapNs), 8'000'000u);              // ... not by the RTO
  // The next window still remembers the one before it.
  sample(kWindowNs + 10'000'000, 60'000);
  EXPECT_EQ(rtt.rto_ns(200'000, kCapNs), 8'000'000u);
  // Two windows on, only steady round trips are remembered.
  sample(2 * kWindowNs + 20'000'000, 60'000);
  EXPECT_EQ(rtt.peak_ns(), 60'000u);
  EXPECT_EQ(rtt.rto_ns(200'000, kCapNs), 200'000u);
  // A QP that measured nothing for more than two windows remembers nothing older.
  sample(5 * kWindowNs, 70'000);
  EXPECT_EQ(rtt.peak_ns(), 70'000u);
}

TEST(RttEstimator, EachExpiryDoublesTheRtoUntilTheNextSampleAndTheCapStillHolds) {
  RttEstimator rtt;
  rtt.on_request_sent(0, Psn(1), true, false);
  rtt.on_acknowledged(10'000, Psn(2));  // RTO 10 + 4 * 5 = 30 us
  rtt.on_rto_expired();
  EXPECT_EQ(rtt.rto_ns(1000, 1'000'000), 60'000u);
  rtt.on_rto_expired();
  EXPECT_EQ(rtt.rto_ns(1000, 1'000'000), 120'000u);
  for (int i = 0; i < 40; ++i)  // the shift stops; the cap decides
    rtt.on_rto_expired();
  EXPECT_EQ(rtt.rto_ns(1000, 1'000'000), 1'000'000u);
  EXPECT_EQ(rtt.rto_ns(1000, std::uint64_t{4096} << 31), 30'000u << 16);
  rtt.on_request_sent(20'000, Psn(2), true, false);
  rtt.on_acknowledged(30'000, Psn(3));
  EXPECT_EQ(rtt.backoff_shift(), 0u);
  EXPECT_EQ(rtt.rto_ns(1000, 1'000'000), rtt.smoothed_ns() + 4 * rtt.rttvar_ns());
}

class QpRttTest : public ProtocolTest {};

TEST_F(QpRttTest, AnAckedSendGivesOneSampleAndCountsPayloadBytes) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 600)})), 0);
  ASSERT_EQ(drain(1000).size(), 3u);  // 256 + 256 + 88 bytes; AckReq on the last
  receive(ack(kSqPsn), {}, 2000);     // the first packet alone: not the timed one
  EXPECT_EQ(qp->rtt().samples(), 0u);
  receive(ack(kSqPsn + 2), {}, 41'000);
  EXPECT_EQ(qp->rtt().samples(), 1u);
  EXPECT_EQ(qp->rtt().latest_ns(), 40'000u);
  EXPECT_EQ(qp->counters().payload_bytes_sent, 600u);
}

TEST_F(QpRttTest, AReadIsTimedToItsFirstResponse) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 300)})), 0);
  ASSERT_EQ(drain(500).size(), 1u);
  std::vector<std::uint8_t> data(256, 0xab);
  auto first = packet(wire::Opcode::kRcReadResponseFirst, kSqPsn);
  first.aeth = Aeth::ack(0);
  receive(first, data, 9'500);
  EXPECT_EQ(qp->rtt().latest_ns(), 9'000u);
  EXPECT_EQ(qp->counters().payload_bytes_received, 256u);
}

TEST_F(QpRttTest, AGoBackNRetryIsNotTimed) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 2, {sge(local, 8)})), 0);
  ASSERT_EQ(drain(0).size(), 2u);
  receive(ack(kSqPsn, Aeth::nak(0, NakCode::kPsnSequenceError)), {}, 1000);
  ASSERT_EQ(drain_resend(1000).size(), 2u);  // both again, as retransmissions
  receive(ack(kSqPsn + 1), {}, 3000);
  EXPECT_EQ(qp->rtt().samples(), 0u);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 3, {sge(local, 8)})), 0);
  ASSERT_EQ(drain(4000).size(), 1u);  // a new packet is timed again
  receive(ack(kSqPsn + 2), {}, 4700);
  EXPECT_EQ(qp->rtt().samples(), 1u);
  EXPECT_EQ(qp->rtt().latest_ns(), 700u);
}

}  // namespace
}  // namespace xroce::transport::testing
