// The adaptive retransmission timer (QpConfig::adaptive_rto_floor_ns, transport/rtt.h): a QP
// that heard nothing for its RTO resends from the oldest unacknowledged PSN long before the
// Local ACK Timeout, uses no retry_cnt doing so, never fires on a link that answers in time, and
// resumes a READ from its first missing response; the resend probe after a NAK and the tail
// probe after silence shorten its wait. Time is a parameter throughout.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <utility>

#include "protocol_harness.h"

namespace xroce::transport::testing {
namespace {

using wire::Aeth;
using wire::NakCode;
using wire::Opcode;

constexpr std::uint64_t kFloorNs = 50'000;
constexpr std::uint64_t kRttNs = 40'000;  // one sample: SRTT 40 us, RTTVAR 20 us
constexpr std::uint64_t kRtoNs = kRttNs + 4 * (kRttNs / 2);

class AdaptiveRetransmitTest : public ProtocolTest {
 protected:
  void SetUp() override {
    QpOptions o;
    o.adaptive_rto_floor_ns = kFloorNs;
    make_qp(o);
  }

  // One SEND acknowledged kRttNs after it left: the QP's first RTT sample. Returns the next PSN.
  std::uint32_t measure_once(std::uint64_t sent_ns = 0) {
    EXPECT_EQ(qp->post_send(wr(WrOpcode::kSend, 100, {sge(local, 8)})), 0);
    EXPECT_EQ(drain(sent_ns).size(), 1u);
    receive(ack(kSqPsn), {}, sent_ns + kRttNs);
    EXPECT_EQ(qp->rtt().samples(), 1u);
    EXPECT_EQ(completions().size(), 1u);
    return kSqPsn + 1;
  }
};

TEST_F(AdaptiveRetransmitTest, ALostTailIsResentAfterTheRtoNotTheLocalAckTimeout) {
  const std::uint32_t psn = measure_once();
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(drain(100'000).size(), 1u);  // lost
  ASSERT_EQ(qp->next_deadline(), 100'000 + kRtoNs);
  qp->handle_timeout(100'000 + kRtoNs - 1);
  EXPECT_TRUE(drain(100'000 + kRtoNs - 1).empty());
  qp->handle_timeout(100'000 + kRtoNs);
  const auto out = drain_resend(100'000 + kRtoNs);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), psn);
  EXPECT_TRUE(out[0].t.retransmission);
  EXPECT_EQ(qp->counters().adaptive_retransmits, 1u);
  EXPECT_EQ(qp->counters().timeouts, 0u);
  EXPECT_EQ(qp->counters().resend_timeouts, 0u);  // a lost tail: nothing had been resent
  // The next RTO is twice as long (no sample from what was resent).
  EXPECT_EQ(qp->next_deadline(), 100'000 + kRtoNs + 2 * kRtoNs);
  receive(ack(psn), {}, 100'000 + kRtoNs + 5'000);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_FALSE(qp->next_deadline().has_value());  // nothing outstanding: no timer
}

// The timer's length is worked out when its deadline is read, not at each restart
// (QpContext::restart_adaptive_timer): a deadline read before a later packet left must not
// fire at its old time, and the one read next runs from the newest packet.
TEST_F(AdaptiveRetransmitTest, RunsFromTheNewestPacketSentThoughAnOlderDeadlineWasRead) {
  const std::uint32_t psn = measure_once();
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(drain(100'000).size(), 1u);
  ASSERT_EQ(qp->next_deadline(), 100'000 + kRtoNs);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 2, {sge(local, 8)})), 0);
  ASSERT_EQ(drain(130'000).size(), 1u);  // both lost
  qp->handle_timeout(100'000 + kRtoNs);
  EXPECT_TRUE(drain(100'000 + kRtoNs).empty());
  EXPECT_EQ(qp->counters().adaptive_retransmits, 0u);
  ASSERT_EQ(qp->next_deadline(), 130'000 + kRtoNs);
  qp->handle_timeout(130'000 + kRtoNs);
  const auto out = drain_resend(130'000 + kRtoNs);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].psn(), psn);
  EXPECT_EQ(qp->counters().adaptive_retransmits, 1u);
}

TEST_F(AdaptiveRetransmitTest, UsesNoRetryCountTheLocalAckTimeoutAloneEndsTheQp) {
  measure_once();
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  const std::uint64_t sent_ns = 100'000;
  ASSERT_EQ(drain(sent_ns).size(), 1u);
  std::uint64_t now = sent_ns;
  while (qp->state() == QpState::kRts) {  // every packet is lost from here on
    const auto deadline = qp->next_deadline();
    ASSERT_TRUE(deadline.has_value());
    now = *deadline;
    qp->handle_timeout(now);
    drain(now);
  }
  // retry_cnt = 3: the fourth Local ACK Timeout without progress ends the QP, as without
  // adaptive retransmission; the early resends in between used none of the budget.
  EXPECT_EQ(qp->counters().timeouts, 4u);
  EXPECT_GT(qp->counters().adaptive_retransmits, 4u);
  // Every expiry but the first came after a resend that went unanswered.
  EXPECT_EQ(qp->counters().resend_timeouts,
            qp->counters().timeouts + qp->counters().adaptive_retransmits - 1);
  EXPECT_GE(now, sent_ns + 4 * kTimeoutNs);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kRetryExcErr);
}

TEST_F(AdaptiveRetransmitTest, AFirstResendLostAfterANakIsResentBeforeTheLocalAckTimeout) {
  const std::uint32_t psn = measure_once();
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 600)})), 0);  // 3 packets
  ASSERT_EQ(drain(100'000).size(), 3u);
  // The peer missed the second packet: PSN-sequence NAK, go-back-N resends two packets...
  receive(ack(psn + 1, Aeth::nak(0, NakCode::kPsnSequenceError)), {}, 110'000);
  ASSERT_EQ(drain_resend(110'000).size(), 2u);
  EXPECT_EQ(qp->counters().timeouts, 0u);
  // ... which are lost again, the copy of the first too; the peer NAKs a gap once, so only a
  // timer can help.
  const auto deadline = qp->next_deadline();
  ASSERT_TRUE(deadline.has_value());
  EXPECT_LT(*deadline, 110'000 + kTimeoutNs / 100);
  qp->handle_timeout(*deadline);
  const auto out = drain_resend(*deadline);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].psn(), psn + 1);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcSendMiddle);
  EXPECT_EQ(qp->counters().adaptive_retransmits, 1u);
  EXPECT_EQ(qp->counters().resend_timeouts, 1u);  // the NAK's go-back-N went unanswered
  receive(ack(psn + 2), {}, *deadline + 10'000);
  ASSERT_EQ(completions().size(), 1u);
  EXPECT_EQ(qp->counters().timeouts, 0u);
}

// The resend probe (QpConfig::resend_probe_floor_ns): with an RTO far above the path's base
// round trip (a queue on the way), a NAK's go-back-N that goes unanswered is resent after
// max(floor, 4 x the least round trip), not after the RTO; once something of it is
// acknowledged, the RTO rules again. Without the probe the same loss waits the whole RTO.
class ResendProbeTest : public ProtocolTest {
 protected:
  static constexpr std::uint64_t kRtoFloorNs = 1'000'000;  // the RTO: 1 ms
  static constexpr std::uint64_t kProbeFloorNs = 20'000;
  static constexpr std::uint64_t kProbeNs = 4 * kRttNs;  // 160 us, above the probe's floor

  void make(std::uint64_t probe_floor_ns) {
    QpOptions o;
    o.adaptive_rto_floor_ns = kRtoFloorNs;
    o.resend_probe_floor_ns = probe_floor_ns;
    make_qp(o);
  }
  // One SEND sent at 0 and acknowledged 40 us later: the QP's one round-trip sample.
  void sample_once() {
    EXPECT_EQ(qp->post_send(wr(WrOpcode::kSend, 100, {sge(local, 8)})), 0);
    EXPECT_EQ(drain(0).size(), 1u);
    receive(ack(kSqPsn), {}, kRttNs);
    EXPECT_EQ(completions().size(), 1u);
  }
  // A 3-packet SEND after one 40 us sample; the peer NAKs the second packet at 110 us and the
  // two resent packets are lost. Returns when the QP will resend them.
  std::uint64_t lose_the_naks_resend() {
    sample_once();
    EXPECT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 600)})), 0);
    EXPECT_EQ(drain(100'000).size(), 3u);
    EXPECT_EQ(qp->next_deadline(), 100'000 + kRtoFloorNs);  // no NAK yet: the RTO
    receive(ack(kSqPsn + 2, Aeth::nak(0, NakCode::kPsnSequenceError)), {}, 110'000);
    EXPECT_EQ(drain_resend(110'000).size(), 2u);
    const auto deadline = qp->next_deadline();
    return deadline.value_or(0);
  }
};

TEST_F(ResendProbeTest, AnUnansweredGoBackNIsProbedAfterFourBaseRoundTrips) {
  make(kProbeFloorNs);
  const std::uint64_t probe = lose_the_naks_resend();
  EXPECT_EQ(probe, 110'000 + kProbeNs);
  qp->handle_timeout(probe);
  const auto out = drain_resend(probe);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].psn(), kSqPsn + 2);
  EXPECT_EQ(qp->counters().adaptive_retransmits, 1u);
  // One probe per NAK: the next expiry is the RTO's, doubled, not another probe.
  EXPECT_GE(qp->next_deadline().value_or(0), probe + kRtoFloorNs);
  receive(ack(kSqPsn + 3), {}, probe + kRttNs);
  ASSERT_EQ(completions().size(), 1u);
  EXPECT_EQ(qp->counters().timeouts, 0u);
}

TEST_F(ResendProbeTest, ThePathsBaseRoundTripBoundsTheProbeFromBelow) {
  make(300'000);  // a floor above 4 x 40 us
  EXPECT_EQ(lose_the_naks_resend(), 110'000 + 300'000u);
}

TEST_F(ResendProbeTest, WithoutTheProbeTheSameLossWaitsTheRto) {
  make(0);
  EXPECT_EQ(lose_the_naks_resend(), 110'000 + kRtoFloorNs);
}

// The tail probe (QpConfig::tail_probe_floor_ns): silence with no NAK sends one packet, the
// oldest unacknowledged, asking for an ACK, after max(floor, 4 x the least round trip) instead
// of a go-back-N after the RTO. Its answer tells lost ACKs (everything acknowledged: nothing
// more is resent) from lost requests (what stays unacknowledged is resent after the resend
// probe's timer).
class TailProbeTest : public ResendProbeTest {
 protected:
  // The RTO, the resend probe and the tail probe, the probes at kProbeFloorNs.
  static QpOptions probing_options(std::uint32_t loss_window_min_psns = 0) {
    QpOptions o;
    o.adaptive_rto_floor_ns = kRtoFloorNs;
    o.resend_probe_floor_ns = kProbeFloorNs;
    o.tail_probe_floor_ns = kProbeFloorNs;
    o.loss_window_min_psns = loss_window_min_psns;
    return o;
  }
  void make_probing(std::uint32_t loss_window_min_psns = 0,
                    std::shared_ptr<InflightBudget> budget = nullptr) {
    QpOptions o = probing_options(loss_window_min_psns);
    o.inflight_budget = std::move(budget);
    make_qp(o);
  }
  // A loss: a 4-packet WRITE posted at `at` whose first PSN is kSqPsn + `first`; the peer NAKs
  // its second packet 10 us later, the three resent packets are acknowledged 40 us after that,
  // and the loss window is reduced.
  void lose_one_of_a_write(std::uint64_t wr_id, std::uint32_t first, std::uint64_t at) {
    ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, wr_id, {sge(local, 4 * kMtu)})), 0);
    ASSERT_EQ(drain(at).size(), 4u);
    receive(ack(kSqPsn + first + 1, Aeth::nak(0, NakCode::kPsnSequenceError)), {}, at + 10'000);
    ASSERT_EQ(drain_resend(at + 10'000).size(), 3u);
    receive(ack(kSqPsn + first + 3), {}, at + 50'000);
    ASSERT_EQ(completions().size(), 1u);
    ASSERT_TRUE(qp->loss_window().reduced());
  }
  // One 40 us sample, then a 4-packet WRITE at 100 us that nothing answers. Returns when the
  // QP will probe.
  std::uint64_t send_into_silence() {
    sample_once();
    EXPECT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 4 * kMtu)})), 0);
    EXPECT_EQ(drain(100'000).size(), 4u);
    return qp->next_deadline().value_or(0);
  }
};

TEST_F(TailProbeTest, LostAcksCostOneProbePacket) {
  make_probing();
  const std::uint64_t probe = send_into_silence();
  EXPECT_EQ(probe, 100'000 + kProbeNs);
  qp->handle_timeout(probe);
  const auto out = drain(probe);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), kSqPsn + 1);
  EXPECT_TRUE(out[0].t.retransmission);
  EXPECT_TRUE(out[0].hdr().bth.ack_req);
  EXPECT_EQ(qp->counters().tail_probes, 1u);
  EXPECT_EQ(qp->counters().adaptive_retransmits, 0u);
  // No second probe: the next expiry is the RTO's.
  EXPECT_EQ(qp->next_deadline(), probe + kRtoFloorNs);
  // The responder had it all: its answer to the duplicate acknowledges the whole WRITE.
  receive(ack(kSqPsn + 4), {}, probe + kRttNs);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(drain(probe + kRttNs).empty());
  EXPECT_EQ(qp->counters().retransmitted_packets, 1u);
}

// On a clean path (the loss window at its top) an ACK of exactly the probe's PSN that leaves the
// rest unacknowledged may be the responder's ordinary ACK, sent before the probe reached it and
// held on the path past the probe's timer (a descheduled relay): the rest is resent only after
// the resend probe's timer, and the held ACKs that follow within it resend nothing.
TEST_F(TailProbeTest, OnACleanPathAnAckOfExactlyTheProbesPsnWaitsForTheResendProbe) {
  make_probing(2);
  const std::uint64_t probe = send_into_silence();
  qp->handle_timeout(probe);
  ASSERT_EQ(drain(probe).size(), 1u);
  ASSERT_FALSE(qp->loss_window().reduced());
  const std::uint64_t answered = probe + kRttNs / 4;
  receive(ack(kSqPsn + 1), {}, answered);
  EXPECT_TRUE(drain(answered).empty());
  EXPECT_EQ(qp->counters().probe_gaps, 0u);
  EXPECT_EQ(qp->next_deadline(), answered + kProbeNs);
  // The rest of what the path held: everything was received.
  receive(ack(kSqPsn + 4), {}, answered + 1'000);
  ASSERT_EQ(completions().size(), 1u);
  EXPECT_TRUE(drain(answered + 1'000).empty());
  EXPECT_EQ(qp->counters().retransmitted_packets, 1u);  // the probe
  EXPECT_EQ(qp->counters().adaptive_retransmits, 0u);
  EXPECT_FALSE(qp->loss_window().reduced());
}

// The same answer when nothing else comes: the resend probe's timer goes back N.
TEST_F(TailProbeTest, OnACleanPathTheProbesOwnShortAnswerGoesBackAfterTheResendProbe) {
  make_probing(2);
  const std::uint64_t probe = send_into_silence();
  qp->handle_timeout(probe);
  ASSERT_EQ(drain(probe).size(), 1u);
  const std::uint64_t answered = probe + kRttNs;
  receive(ack(kSqPsn + 1), {}, answered);
  EXPECT_TRUE(drain(answered).empty());
  ASSERT_EQ(qp->next_deadline(), answered + kProbeNs);
  qp->handle_timeout(answered + kProbeNs);
  const auto out = drain_resend(answered + kProbeNs);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].psn(), kSqPsn + 2);
  EXPECT_EQ(out[2].psn(), kSqPsn + 4);
  EXPECT_EQ(qp->counters().probe_gaps, 0u);
  EXPECT_EQ(qp->counters().adaptive_retransmits, 1u);
  EXPECT_EQ(qp->loss_window().reductions(), 1u);
  receive(ack(kSqPsn + 4), {}, answered + kProbeNs + kRttNs);
  ASSERT_EQ(completions().size(), 1u);
  EXPECT_EQ(qp->counters().timeouts, 0u);
}

TEST_F(TailProbeTest, AShortAckThatIsNotTheProbesOwnWaitsForTheResendProbe) {
  make_probing(2);
  const std::uint64_t probe = send_into_silence();
  qp->handle_timeout(probe);
  ASSERT_EQ(drain(probe).size(), 1u);
  // An ACK past the probe's PSN and short of the end: an ACK of what was sent before the probe
  // may be among those still coming, so the resend waits for the resend probe's timer.
  const std::uint64_t answered = probe + kRttNs;
  receive(ack(kSqPsn + 2), {}, answered);
  EXPECT_TRUE(drain(answered).empty());
  EXPECT_EQ(qp->counters().probe_gaps, 0u);
  EXPECT_EQ(qp->next_deadline(), answered + kProbeNs);
  qp->handle_timeout(answered + kProbeNs);
  const auto out = drain_resend(answered + kProbeNs);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].psn(), kSqPsn + 3);
  EXPECT_EQ(qp->counters().adaptive_retransmits, 1u);
  EXPECT_EQ(qp->loss_window().reductions(), 1u);
  receive(ack(kSqPsn + 4), {}, answered + kProbeNs + kRttNs);
  ASSERT_EQ(completions().size(), 1u);
  EXPECT_EQ(qp->counters().timeouts, 0u);
}

// The daemon's resend probe floor is shorter than its tail probe's (kDaemonResendProbeFloorNs is
// the lossy floor). After a tail probe's short answer on a clean path (the loss window at its
// top) the resend probe waits at least the tail probe's floor: that silence was more likely a
// stall whose ACKs are still draining, and they arrive within it, so nothing more is resent. On
// a path that has lost packets the same answer waits only the resend probe's timer.
class ShortAnswerTest : public TailProbeTest {
 protected:
  static constexpr std::uint64_t kTailFloorNs = 400'000;  // above kProbeNs and kProbeFloorNs
  void make_with_short_resend_probe() {
    QpOptions o = probing_options(2);
    o.tail_probe_floor_ns = kTailFloorNs;
    o.lossy_tail_probe_floor_ns = kProbeFloorNs;
    make_qp(o);
  }
  // A lossy path (one WRITE lost a packet and was repaired), then a 4-packet WRITE (PSNs
  // kSqPsn + 5..8) that nothing answers: the lossy tail probe fires and its one packet, kSqPsn +
  // 5, is sent. Returns when it was sent.
  std::uint64_t probe_on_a_lossy_path() {
    make_with_short_resend_probe();
    sample_once();
    EXPECT_NO_FATAL_FAILURE(lose_one_of_a_write(1, 1, 100'000));
    EXPECT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 2, {sge(local, 4 * kMtu)})), 0);
    EXPECT_EQ(drain(1'000'000).size(), 4u);
    const std::uint64_t probe = qp->next_deadline().value_or(0);
    EXPECT_LT(probe, 1'000'000 + kTailFloorNs);
    qp->handle_timeout(probe);
    const auto out = drain(probe);
    EXPECT_EQ(out.size(), 1u);
    EXPECT_TRUE(!out.empty() && out[0].psn() == kSqPsn + 5);
    EXPECT_EQ(qp->counters().tail_probes, 1u);
    return probe;
  }
  // On a lossy path a tail probe's short answer, an ACK of kSqPsn + `acked` (the probe's PSN,
  // kSqPsn + 5, or past it) that leaves the rest of the WRITE (through kSqPsn + 8)
  // unacknowledged, goes back N at once (probe_gaps): what follows `acked` is resent now, and
  // the WRITE then completes.
  void expect_short_answer_goes_back_at_once(std::uint32_t acked) {
    const std::uint64_t probe = probe_on_a_lossy_path();
    ASSERT_FALSE(HasFailure());
    const std::uint64_t answered = probe + kRttNs;
    receive(ack(kSqPsn + acked), {}, answered);
    const auto resent = drain_resend(answered);
    ASSERT_EQ(resent.size(), 8u - acked);
    EXPECT_EQ(resent.front().psn(), kSqPsn + acked + 1);
    EXPECT_EQ(resent.back().psn(), kSqPsn + 8);
    EXPECT_EQ(qp->counters().probe_gaps, 1u);
    EXPECT_EQ(qp->counters().adaptive_retransmits, 0u);
    receive(ack(kSqPsn + 8), {}, answered + kRttNs);
    const auto c = completions();
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::kSuccess);
    EXPECT_EQ(qp->counters().timeouts, 0u);
  }
};

TEST_F(ShortAnswerTest, OnACleanPathItWaitsTheTailProbesFloor) {
  make_with_short_resend_probe();
  const std::uint64_t probe = send_into_silence();
  EXPECT_EQ(probe, 100'000 + kTailFloorNs);
  qp->handle_timeout(probe);
  ASSERT_EQ(drain(probe).size(), 1u);
  ASSERT_FALSE(qp->loss_window().reduced());
  const std::uint64_t answered = probe + kRttNs;
  receive(ack(kSqPsn + 2), {}, answered);
  EXPECT_TRUE(drain(answered).empty());
  EXPECT_EQ(qp->next_deadline(), answered + kTailFloorNs);
  // The rest of the stalled ACKs, later than the resend probe's timer would have waited.
  receive(ack(kSqPsn + 4), {}, answered + 2 * kProbeNs);
  ASSERT_EQ(completions().size(), 1u);
  EXPECT_EQ(qp->counters().adaptive_retransmits, 0u);
  EXPECT_EQ(qp->counters().retransmitted_packets, 1u);  // the probe
}

// An answer past the probe's PSN that leaves the rest unacknowledged is the responder's re-ACK
// of a duplicate behind a lost NAK; a clean path waits (OnACleanPathItWaitsTheTailProbesFloor).
TEST_F(ShortAnswerTest, OnALossyPathAShortAnswerPastTheProbeGoesBackAtOnce) {
  expect_short_answer_goes_back_at_once(6);
}

// An ACK of exactly the probe's PSN is the probe's own answer: the responder took the probe in
// sequence behind a NAK that was lost, or had nothing past it; a clean path waits
// (TailProbeTest.OnACleanPathAnAckOfExactlyTheProbesPsnWaitsForTheResendProbe).
TEST_F(ShortAnswerTest, OnALossyPathTheProbesOwnShortAnswerGoesBackAtOnce) {
  expect_short_answer_goes_back_at_once(5);
}

// On a lossy path a tail probe that nothing answers (the probe or its answer lost) waits the
// resend probe's timer, not the RTO, and then goes back N.
TEST_F(ShortAnswerTest, OnALossyPathAnUnansweredProbeWaitsTheResendProbesTimer) {
  const std::uint64_t probe = probe_on_a_lossy_path();
  ASSERT_FALSE(HasFailure());
  const std::uint64_t resend = std::max(kProbeFloorNs, 4 * qp->rtt().min_ns());
  ASSERT_LT(resend, kRtoFloorNs);
  EXPECT_EQ(qp->next_deadline(), probe + resend);
  qp->handle_timeout(probe + resend);
  const auto resent = drain_resend(probe + resend);
  ASSERT_EQ(resent.size(), 4u);
  EXPECT_EQ(resent[0].psn(), kSqPsn + 5);
  EXPECT_EQ(qp->counters().adaptive_retransmits, 1u);
  // That go-back-N draws no answer either (a stalled peer, not a loss): the next probe's silence
  // waits for the RTO again, so a peer that stays silent is not sent a window per timer.
  const std::uint64_t probe2 = qp->next_deadline().value_or(0);
  ASSERT_GT(probe2, probe + resend);
  qp->handle_timeout(probe2);
  ASSERT_EQ(drain(probe2).size(), 1u);
  EXPECT_EQ(qp->counters().tail_probes, 2u);
  EXPECT_GE(qp->next_deadline().value_or(0), probe2 + kRtoFloorNs);
  // A clean path keeps the RTO after its probe (LostAcksCostOneProbePacket).
}

// On a path that lost packets (the loss window below its top), the tail probe's timer leaves out
// the recent peak round trip (QpConfig::lossy_tail_probe_floor_ns): max(floor, 4 x the least,
// 2 x the smoothed round trip).
TEST_F(TailProbeTest, OnALossyPathTheProbesTimerLeavesOutThePeak) {
  QpOptions o = probing_options(2);
  o.lossy_tail_probe_floor_ns = kProbeFloorNs;
  make_qp(o);
  // Two round trips, 40 us and 600 us: the peak is 600.
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(drain(0).size(), 1u);
  receive(ack(kSqPsn), {}, kRttNs);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 2, {sge(local, 8)})), 0);
  ASSERT_EQ(drain(100'000).size(), 1u);
  receive(ack(kSqPsn + 1), {}, 700'000);
  const auto silence_after_a_write = [&](std::uint64_t wr_id, std::uint64_t at) {
    EXPECT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, wr_id, {sge(local, 4 * kMtu)})), 0);
    EXPECT_EQ(drain(at).size(), 4u);
    return qp->next_deadline().value_or(0) - at;
  };
  // A clean path: the peak bounds the probe's timer from below.
  const RttEstimator& rtt = qp->rtt();
  ASSERT_GE(rtt.peak_ns(), 500'000u);
  EXPECT_GE(silence_after_a_write(3, 1'000'000), rtt.peak_ns());
  receive(ack(kSqPsn + 5), {}, 1'050'000);
  ASSERT_EQ(completions().size(), 3u);
  EXPECT_FALSE(qp->loss_window().reduced());
  ASSERT_NO_FATAL_FAILURE(lose_one_of_a_write(4, 6, 2'000'000));
  // The same silence now: the lossy timer, well short of the peak.
  const std::uint64_t lossy = std::max({kProbeFloorNs, 4 * rtt.min_ns(), 2 * rtt.smoothed_ns()});
  ASSERT_LT(lossy, rtt.peak_ns());
  EXPECT_EQ(silence_after_a_write(5, 3'000'000), lossy);
  qp->handle_timeout(3'000'000 + lossy);
  const auto out = drain(3'000'000 + lossy);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), kSqPsn + 10);
  EXPECT_EQ(qp->counters().tail_probes, 1u);
}

// On a lossy path a probe of one packet (a WRITE's) waits for the lossy floor, and a probe that
// would replay a READ, whose answer is every response still due, for the READ's floor
// (QpConfig::lossy_read_tail_probe_floor_ns).
TEST_F(TailProbeTest, OnALossyPathAProbeThatReplaysAReadWaitsForTheReadsFloor) {
  constexpr std::uint64_t kReadFloorNs = 300'000;  // above 4 x the least round trip (160 us)
  QpOptions o = probing_options(2);
  o.lossy_tail_probe_floor_ns = kProbeFloorNs;
  o.lossy_read_tail_probe_floor_ns = kReadFloorNs;
  make_qp(o);
  sample_once();
  ASSERT_NO_FATAL_FAILURE(lose_one_of_a_write(1, 1, 100'000));
  const RttEstimator& rtt = qp->rtt();
  const std::uint64_t one_packet =
      std::max({kProbeFloorNs, 4 * rtt.min_ns(), 2 * rtt.smoothed_ns()});
  ASSERT_LT(one_packet, kReadFloorNs);
  // A WRITE (PSNs kSqPsn + 5..8) that nothing answers: the one-packet floor.
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 2, {sge(local, 4 * kMtu)})), 0);
  ASSERT_EQ(drain(1'000'000).size(), 4u);
  EXPECT_EQ(qp->next_deadline(), 1'000'000 + one_packet);
  receive(ack(kSqPsn + 8), {}, 1'000'000 + kRttNs);
  ASSERT_EQ(completions().size(), 1u);
  ASSERT_TRUE(qp->loss_window().reduced());
  // A READ of four responses (PSNs kSqPsn + 9..12) that nothing answers: the READ's floor.
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 3, {sge(local + 4096, 4 * kMtu)})), 0);
  ASSERT_EQ(drain(2'000'000).size(), 1u);
  const std::uint64_t read_floor = std::max(kReadFloorNs, 2 * rtt.smoothed_ns());
  EXPECT_EQ(qp->next_deadline(), 2'000'000 + read_floor);
  qp->handle_timeout(2'000'000 + one_packet);
  EXPECT_TRUE(drain(2'000'000 + one_packet).empty());
  qp->handle_timeout(2'000'000 + read_floor);
  const auto out = drain(2'000'000 + read_floor);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(out[0].psn(), kSqPsn + 9);
  EXPECT_EQ(qp->counters().tail_probes, 1u);
}

TEST_F(TailProbeTest, NoEarlyProbeWhileOtherQpsWaitForTheDevicesBudget) {
  const auto budget = std::make_shared<InflightBudget>(256);
  make_probing(0, budget);
  // Another QP of the device waits for the budget: silence is the device's queue.
  budget->update(BudgetHolding{}, BudgetHolding{0, true});
  const std::uint64_t fire = send_into_silence();
  EXPECT_EQ(fire, 100'000 + kRtoFloorNs);
  // The RTO's expiry still asks with one packet before going back N.
  qp->handle_timeout(fire);
  EXPECT_EQ(drain(fire).size(), 1u);
  EXPECT_EQ(qp->counters().tail_probes, 1u);
  budget->update(BudgetHolding{0, true}, BudgetHolding{});
}

// A pacer holding the rest of a message after a packet that did not ask for an ACK: the
// responder has no reason to answer, so the silence is timed by the RTO, not the probe.
TEST_F(TailProbeTest, NoProbeAfterAPacketThatAskedForNoAck) {
  make_probing();
  sample_once();
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 4 * kMtu)})), 0);
  std::array<std::uint8_t, 4096> buf{};
  const auto first = qp->poll_transmit(100'000, buf);  // the rest is held back
  ASSERT_TRUE(first.has_value());
  ASSERT_FALSE(first->hdr.bth.ack_req);
  EXPECT_EQ(qp->next_deadline(), 100'000 + kRtoFloorNs);
  EXPECT_EQ(drain(150'000).size(), 3u);  // the rest leaves; the last asks
  EXPECT_EQ(qp->next_deadline(), 150'000 + kProbeNs);
}

TEST_F(TailProbeTest, WithoutTheProbeSilenceWaitsTheRtoAndGoesBackN) {
  make(kProbeFloorNs);  // the resend probe alone
  const std::uint64_t fire = send_into_silence();
  EXPECT_EQ(fire, 100'000 + kRtoFloorNs);
  qp->handle_timeout(fire);
  EXPECT_EQ(drain_resend(fire).size(), 4u);
  EXPECT_EQ(qp->counters().tail_probes, 0u);
}

// A probe of a READ is its request again, which the responder answers with every response from
// there on (rxe_resp.c duplicate_request): with more than a window (max_unacked_psns, 128) still
// due, responses a busy host delayed would all come twice. Such a READ waits the RTO; once fewer
// are due it is probed as anything else.
TEST_F(TailProbeTest, AReadWithMoreThanAWindowStillDueWaitsTheRtoNotAProbe) {
  make_probing();
  sample_once();
  constexpr std::uint32_t kResponses = 131;
  const std::uint32_t psn = kSqPsn + 1;
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local + 4096, kResponses * kMtu)})), 0);
  ASSERT_EQ(drain(100'000).size(), 1u);
  EXPECT_EQ(qp->next_deadline(), 100'000 + kRtoFloorNs);
  std::vector<std::uint8_t> data(kMtu, 0x5a);
  auto first = packet(Opcode::kRcReadResponseFirst, psn);
  first.aeth = Aeth::ack(0);
  receive(first, data, 140'000);
  EXPECT_EQ(qp->next_deadline(), 140'000 + kRtoFloorNs);
  receive(packet(Opcode::kRcReadResponseMiddle, psn + 1), data, 141'000);
  const std::uint64_t fire = *qp->next_deadline();
  EXPECT_EQ(fire, 141'000 + kRtoFloorNs);
  qp->handle_timeout(fire);
  const auto out = drain(fire);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(out[0].psn(), psn + 2);
  EXPECT_EQ(qp->counters().tail_probes, 0u);
  EXPECT_EQ(qp->counters().adaptive_retransmits, 1u);
  // Two more responses of the resumed READ: 127 are left, and their silence is probed.
  std::uint64_t now = fire + kRttNs;
  receive(packet(Opcode::kRcReadResponseMiddle, psn + 2), data, now);
  receive(packet(Opcode::kRcReadResponseMiddle, psn + 3), data, now);
  const std::uint64_t probe = *qp->next_deadline();
  EXPECT_LT(probe, now + kRtoFloorNs);
  qp->handle_timeout(probe);
  const auto again = drain(probe);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].psn(), psn + 4);
  ASSERT_TRUE(again[0].hdr().reth.has_value());
  EXPECT_EQ(again[0].hdr().reth->dma_length, (kResponses - 4) * kMtu);
  EXPECT_EQ(qp->counters().tail_probes, 1u);
  now = probe + kRttNs;
  for (std::uint32_t i = 4; i + 1 < kResponses; ++i)
    receive(packet(Opcode::kRcReadResponseMiddle, psn + i), data, now);
  auto last = packet(Opcode::kRcReadResponseLast, psn + kResponses - 1);
  last.aeth = Aeth::ack(0);
  receive(last, data, now);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  for (std::uint8_t b : bytes(local + 4096, kResponses * kMtu))
    ASSERT_EQ(b, 0x5a);
}

// The READ that just completed is still at the head while its last response restarts the
// timers: what follows it is probed as usual.
TEST_F(TailProbeTest, AWriteBehindACompletedReadIsProbed) {
  make_probing();
  sample_once();
  const std::uint32_t psn = kSqPsn + 1;
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local + 4096, kMtu)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 2, {sge(local, 8)})), 0);
  ASSERT_EQ(drain(100'000).size(), 2u);  // the WRITE is lost
  auto only = packet(Opcode::kRcReadResponseOnly, psn);
  only.aeth = Aeth::ack(0);
  receive(only, std::vector<std::uint8_t>(kMtu, 0x5a), 140'000);
  ASSERT_EQ(completions().size(), 1u);
  const std::uint64_t probe = *qp->next_deadline();
  EXPECT_LT(probe, 140'000 + kRtoFloorNs);
  qp->handle_timeout(probe);
  const auto out = drain(probe);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), psn + 1);
  EXPECT_EQ(qp->counters().tail_probes, 1u);
}

TEST_F(AdaptiveRetransmitTest, ALateNakForTheResentPsnStartsNoSecondGoBackN) {
  const std::uint32_t psn = measure_once();
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 600)})), 0);
  ASSERT_EQ(drain(100'000).size(), 3u);
  const std::uint64_t fire_ns = *qp->next_deadline();
  qp->handle_timeout(fire_ns);
  ASSERT_EQ(drain_resend(fire_ns).size(), 3u);
  // The NAK the first loss caused arrives after the adaptive resend: already repaired.
  receive(ack(psn, Aeth::nak(0, NakCode::kPsnSequenceError)), {}, fire_ns + 1000);
  EXPECT_TRUE(drain(fire_ns + 1000).empty());
}

// A clean link whose round trip varies from 20 to 80 us: no retransmission of any kind, ever.
TEST_F(AdaptiveRetransmitTest, NeverFiresWhileAcknowledgementsComeInTime) {
  std::uint64_t now = 0;
  for (std::uint32_t i = 0; i < 200; ++i) {
    ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, i, {sge(local, 600)})), 0);
    ASSERT_EQ(drain(now).size(), 3u);
    const std::uint64_t rtt_ns = 20'000 + (i * 37 % 61) * 1000;
    const auto deadline = qp->next_deadline();
    ASSERT_TRUE(deadline.has_value());
    ASSERT_GT(*deadline, now + rtt_ns) << "message " << i;
    now += rtt_ns;
    receive(ack(kSqPsn + 3 * i + 2), {}, now);
    ASSERT_EQ(completions().size(), 1u);
    now += 5'000;
  }
  EXPECT_EQ(qp->counters().retransmitted_packets, 0u);
  EXPECT_EQ(qp->counters().adaptive_retransmits, 0u);
  EXPECT_EQ(qp->counters().timeouts, 0u);
}

TEST_F(AdaptiveRetransmitTest, AReadResumesFromItsFirstMissingResponse) {
  const std::uint32_t psn = measure_once();
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local + 4096, 1000)})), 0);
  ASSERT_EQ(drain(100'000).size(), 1u);  // 4 responses of 256, 256, 256, 232 bytes
  std::vector<std::uint8_t> data(256, 0x5a);
  auto first = packet(Opcode::kRcReadResponseFirst, psn);
  first.aeth = Aeth::ack(0);
  receive(first, data, 140'000);
  receive(packet(Opcode::kRcReadResponseMiddle, psn + 1), data, 141'000);
  // The third and fourth responses are lost: no later response shows the gap.
  const std::uint64_t fire_ns = *qp->next_deadline();
  EXPECT_LT(fire_ns, 141'000 + kTimeoutNs / 100);
  qp->handle_timeout(fire_ns);
  const auto out = drain(fire_ns);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(out[0].psn(), psn + 2);
  ASSERT_TRUE(out[0].hdr().reth.has_value());
  EXPECT_EQ(out[0].hdr().reth->va, 0x7000000u + 512);
  EXPECT_EQ(out[0].hdr().reth->dma_length, 1000u - 512);
  EXPECT_EQ(qp->counters().adaptive_retransmits, 1u);
  receive(packet(Opcode::kRcReadResponseMiddle, psn + 2), data, fire_ns + 20'000);
  auto last = packet(Opcode::kRcReadResponseLast, psn + 3);
  last.aeth = Aeth::ack(0);
  receive(last, std::vector<std::uint8_t>(232, 0x5a), fire_ns + 21'000);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  for (std::uint8_t b : bytes(local + 4096, 1000))
    ASSERT_EQ(b, 0x5a);
}

TEST_F(AdaptiveRetransmitTest, ATimeoutOfZeroWaitsForeverAndAFloorOfZeroTurnsItOff) {
  QpOptions o;
  o.timeout = 0;  // the IBA timer is off: nothing is resent by time
  make_qp(o);
  measure_once();
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(drain(100'000).size(), 1u);
  EXPECT_FALSE(qp->next_deadline().has_value());

  o = QpOptions{};
  o.adaptive_rto_floor_ns = 0;
  make_qp(o);
  measure_once();
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(drain(100'000).size(), 1u);
  EXPECT_EQ(qp->next_deadline(), 100'000 + kTimeoutNs);
}

// The packet that fills the QP's window asks for the ACK that opens it again; without it a
// window ending between two AckReq packets would wait for a timer.
TEST_F(AdaptiveRetransmitTest, ThePacketThatFillsTheWindowAsksForAnAck) {
  QpOptions o;
  o.max_unacked_psns = 4;
  make_qp(o);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 2560)})), 0);  // 10 packets
  auto out = drain(0);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_FALSE(out[2].hdr().bth.ack_req);
  EXPECT_TRUE(out[3].hdr().bth.ack_req);
  receive(ack(kSqPsn + 3), {}, 10'000);
  out = drain(10'000);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(out[3].hdr().bth.ack_req);
  EXPECT_EQ(qp->counters().retransmitted_packets, 0u);
}

}  // namespace
}  // namespace xroce::transport::testing
