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
  ASSERT_EQ(drain(1000).size(), 2u);  // both again, as retransmissions
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
