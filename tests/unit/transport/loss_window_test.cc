// The requester's loss window (transport/loss_window.h): halved once per loss event (a NAK or a
// timer), opened again by one PSN per window acknowledged, never outside [min, max]; and a QP
// keeps within it: a go-back-N after a NAK resends no more than the halved window, and a timer's
// resend halves it too.
#include <gtest/gtest.h>

#include "protocol_harness.h"

namespace xroce::transport::testing {
namespace {

using wire::Aeth;
using wire::NakCode;
using wire::Psn;

TEST(LossWindow, AFixedWindowWhenTheFloorIsZero) {
  LossWindow w(128, 0);
  EXPECT_FALSE(w.enabled());
  w.on_loss(Psn(10));
  EXPECT_EQ(w.psns(), 128u);
  EXPECT_EQ(w.reductions(), 0u);
}

TEST(LossWindow, ALossHalvesItOncePerLossEvent) {
  LossWindow w(128, 16);
  EXPECT_EQ(w.psns(), 128u);
  w.on_loss(Psn(1000));  // PSNs up to 999 were in flight
  EXPECT_EQ(w.psns(), 64u);
  // A second loss among PSNs sent before the decrease is the same event.
  w.on_loss(Psn(1010));
  EXPECT_EQ(w.psns(), 64u);
  // Acknowledgements short of what was in flight at the loss do not open it either.
  w.on_acknowledged(50, Psn(990));
  EXPECT_EQ(w.psns(), 64u);
  // Once that is acknowledged, a new loss halves it again, down to the floor and no further.
  w.on_acknowledged(20, Psn(1010));
  w.on_loss(Psn(1100));
  EXPECT_EQ(w.psns(), 32u);
  w.on_acknowledged(100, Psn(1100));
  w.on_loss(Psn(1200));
  w.on_acknowledged(100, Psn(1200));
  w.on_loss(Psn(1300));
  EXPECT_EQ(w.psns(), 16u);
  EXPECT_EQ(w.reductions(), 4u);
}

TEST(LossWindow, AcknowledgementsOpenItByOnePsnPerWindowUpToTheMaximum) {
  LossWindow w(128, 8);
  w.on_loss(Psn(500));
  ASSERT_EQ(w.psns(), 64u);
  w.on_acknowledged(10, Psn(510));  // past the event
  EXPECT_EQ(w.psns(), 64u);
  w.on_acknowledged(53, Psn(563));
  EXPECT_EQ(w.psns(), 64u);
  w.on_acknowledged(1, Psn(564));  // 64 acknowledged since the event ended
  EXPECT_EQ(w.psns(), 65u);
  w.on_acknowledged(65, Psn(629));
  EXPECT_EQ(w.psns(), 66u);
  for (std::uint32_t i = 0; i < 200; ++i)
    w.on_acknowledged(128, Psn(1000 + 128 * i));
  EXPECT_EQ(w.psns(), 128u);
}

TEST(LossWindow, AFloorAboveTheMaximumIsTheMaximum) {
  LossWindow w(16, 64);
  w.on_loss(Psn(1));
  EXPECT_EQ(w.psns(), 16u);
}

// The window on a QP: 16 PSNs at most, floor 4, MTU 256.
class LossWindowQpTest : public ProtocolTest {
 protected:
  void SetUp() override {
    QpOptions o;
    o.max_unacked_psns = 16;
    o.loss_window_min_psns = 4;
    make_qp(o);
  }
};

TEST_F(LossWindowQpTest, AGoBackNAfterANakResendsOnlyTheHalvedWindow) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 32 * kMtu)})), 0);
  ASSERT_EQ(drain(1000).size(), 16u);  // the whole window
  EXPECT_EQ(qp->loss_window().psns(), 16u);
  // The peer missed kSqPsn + 3: it NAKs it; the QP goes back and keeps 8 PSNs in flight.
  receive(ack(kSqPsn + 3, Aeth::nak(0, NakCode::kPsnSequenceError)), {}, 2000);
  EXPECT_EQ(qp->loss_window().psns(), 8u);
  EXPECT_EQ(qp->loss_window().reductions(), 1u);
  auto out = drain_resend(2000);
  ASSERT_EQ(out.size(), 8u);
  EXPECT_EQ(out.front().psn(), kSqPsn + 3);
  EXPECT_EQ(out.back().psn(), kSqPsn + 10);
  EXPECT_TRUE(out.back().hdr().bth.ack_req);  // the window is full: it asks for the ACK
  // The resend is acknowledged up to what was in flight at the loss (kSqPsn + 15 was sent):
  // still the same event, no growth yet.
  receive(ack(kSqPsn + 10), {}, 3000);
  EXPECT_EQ(qp->loss_window().psns(), 8u);
  out = drain(3000);
  ASSERT_EQ(out.size(), 8u);
  EXPECT_EQ(out.front().psn(), kSqPsn + 11);
  // Past it, acknowledgements open the window again (one per window: 8 acked -> 9).
  receive(ack(kSqPsn + 18), {}, 4000);
  EXPECT_EQ(qp->loss_window().psns(), 9u);
  out = drain(4000);
  ASSERT_EQ(out.size(), 9u);
  EXPECT_EQ(out.back().psn(), kSqPsn + 27);
  // 9 more acknowledged: 10; the last 4 PSNs of the message go.
  receive(ack(kSqPsn + 27), {}, 5000);
  EXPECT_EQ(qp->loss_window().psns(), 10u);
  out = drain(5000);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out.back().psn(), kSqPsn + 31);
  receive(ack(kSqPsn + 31), {}, 6000);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(qp->counters().timeouts, 0u);
}

TEST_F(LossWindowQpTest, ATimersResendHalvesItToo) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 32 * kMtu)})), 0);
  ASSERT_EQ(drain(1000).size(), 16u);
  // Nothing comes back: the timer resends from the oldest PSN, half a window of it.
  const auto deadline = qp->next_deadline();
  ASSERT_TRUE(deadline.has_value());
  qp->handle_timeout(*deadline);
  const auto out = drain(*deadline);
  ASSERT_EQ(out.size(), 8u);
  EXPECT_EQ(out.front().psn(), kSqPsn);
  EXPECT_TRUE(out.front().t.retransmission);
  EXPECT_EQ(qp->loss_window().psns(), 8u);
  EXPECT_EQ(qp->counters().timeouts + qp->counters().adaptive_retransmits, 1u);
}

}  // namespace
}  // namespace xroce::transport::testing
