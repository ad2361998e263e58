// Requester and completer rules, one per test: post work or receive a response, expect exact
// packets and completions (docs/protocol.md §3.2-3.10).
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "protocol_harness.h"

namespace xroce::transport::testing {
namespace {

using wire::Aeth;
using wire::NakCode;
using wire::Opcode;

class RequesterTest : public ProtocolTest {};

TEST_F(RequesterTest, SendIsSegmentedAtPathMtuWithAckReqOnTheLastPacket) {
  fill(local, 600, 1);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 400), sge(local + 400, 200)})), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcSendFirst);
  EXPECT_EQ(out[1].opcode(), Opcode::kRcSendMiddle);
  EXPECT_EQ(out[2].opcode(), Opcode::kRcSendLast);
  std::vector<std::uint8_t> all;
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].psn(), kSqPsn + i);
    EXPECT_EQ(out[i].hdr().bth.dest_qp, kPeerQpn);
    EXPECT_EQ(out[i].hdr().bth.ack_req, i == 2);
    EXPECT_EQ(out[i].t.av_id, 9u);
    EXPECT_FALSE(out[i].t.retransmission);
    all.insert(all.end(), out[i].payload.begin(), out[i].payload.end());
  }
  EXPECT_EQ(out[0].payload.size(), kMtu);
  EXPECT_EQ(out[2].payload.size(), 600 - 2 * kMtu);
  const auto src = bytes(local, 600);
  EXPECT_TRUE(std::equal(all.begin(), all.end(), src.begin()));
  EXPECT_TRUE(completions().empty());  // nothing before the ACK
}

// A path MTU above the port's active MTU is accepted (as rxe and mlx5 accept it) but packets
// never exceed what the port carries: the message is segmented at the port's MTU.
TEST_F(RequesterTest, PathMtuAboveThePortMtuSegmentsAtThePortMtu) {
  QpOptions o;
  o.path_mtu = PathMtu::k4096;
  o.port_mtu = PathMtu::k1024;
  make_qp(o);
  EXPECT_EQ(qp->attr().path_mtu, PathMtu::k4096);
  fill(local, 2500, 1);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 2500)})), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcSendFirst);
  EXPECT_EQ(out[0].payload.size(), 1024u);
  EXPECT_EQ(out[1].payload.size(), 1024u);
  EXPECT_EQ(out[2].opcode(), Opcode::kRcSendLast);
  EXPECT_EQ(out[2].payload.size(), 2500u - 2048u);
}

TEST_F(RequesterTest, WriteCarriesRethOnlyInTheFirstPacketAndImmOnlyInTheLast) {
  auto w = wr(WrOpcode::kRdmaWriteWithImm, 1, {sge(local, 300)});
  w.imm_data = 0xCAFEF00D;
  w.send_flags |= send_flags::kSolicited;
  ASSERT_EQ(qp->post_send(w), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcWriteFirst);
  ASSERT_TRUE(out[0].hdr().reth);
  EXPECT_EQ(out[0].hdr().reth->va, 0x7000000u);
  EXPECT_EQ(out[0].hdr().reth->rkey, wire::Rkey(0x4242));
  EXPECT_EQ(out[0].hdr().reth->dma_length, 300u);
  EXPECT_FALSE(out[0].hdr().bth.solicited);
  EXPECT_EQ(out[1].opcode(), Opcode::kRcWriteLastImm);
  EXPECT_FALSE(out[1].hdr().reth);
  EXPECT_EQ(out[1].hdr().imm, 0xCAFEF00D);
  EXPECT_TRUE(out[1].hdr().bth.solicited);
}

TEST_F(RequesterTest, ZeroLengthSendIsOneOnlyPacket) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {})), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcSendOnly);
  EXPECT_TRUE(out[0].payload.empty());
  receive(ack(kSqPsn));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[0].byte_len, 0u);
}

TEST_F(RequesterTest, ReadConsumesOnePsnPerResponsePacket) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 600)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 2, {sge(local, 8)})), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(out[0].psn(), kSqPsn);
  EXPECT_TRUE(out[0].hdr().bth.ack_req);
  EXPECT_EQ(out[0].hdr().reth->dma_length, 600u);
  EXPECT_EQ(out[1].psn(), kSqPsn + 3);  // 3 response PSNs for 600 bytes at 256
}

TEST_F(RequesterTest, AckCompletesSignaledWorkInOrderAndCoalescedAcksCoverEarlierWork) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 2, {sge(local, 8)}, 0)), 0);  // unsignaled
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 3, {sge(local, 8)})), 0);
  ASSERT_EQ(drain().size(), 3u);
  receive(ack(kSqPsn + 2));  // one ACK for all three
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[0].opcode, WcOpcode::kSend);
  EXPECT_EQ(c[1].wr_id, 3u);
  EXPECT_EQ(qp->next_deadline(), std::nullopt);  // nothing outstanding: timer off
}

TEST_F(RequesterTest, GhostAndStaleAcksAreIgnored) {
  receive(ack(kSqPsn));  // nothing outstanding at all
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(drain().size(), 1u);
  receive(ack(kSqPsn + 50));  // a PSN never sent
  receive(ack(kSqPsn - 1));   // before anything outstanding
  EXPECT_TRUE(completions().empty());
  EXPECT_EQ(qp->counters().ghost_acks, 2u);
  receive(ack(kSqPsn));
  EXPECT_EQ(completions().size(), 1u);
}

TEST_F(RequesterTest, AckBeyondAReadIsAnImpliedNakAndTheReadIsRetried) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 300)})), 0);  // PSN 100-101
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 2, {sge(local, 8)})), 0);        // PSN 102
  ASSERT_EQ(drain().size(), 2u);
  receive(ack(kSqPsn + 2));  // the SEND's ACK: the READ's responses were lost
  EXPECT_TRUE(completions().empty());
  const auto out = drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(out[0].psn(), kSqPsn);
  EXPECT_TRUE(out[0].t.retransmission);
  EXPECT_EQ(out[1].psn(), kSqPsn + 2);
  receive(ack(kSqPsn + 2));  // the same implied NAK again: one retry at a time
  EXPECT_TRUE(drain().empty());
}

TEST_F(RequesterTest, AckTimeoutRetransmitsFromTheOldestUnackedPsn) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 600)})), 0);
  ASSERT_EQ(drain(1000).size(), 3u);
  receive(ack(kSqPsn), {}, 2000);  // first packet acknowledged: timer restarts from 2000
  ASSERT_EQ(qp->next_deadline(), 2000 + kTimeoutNs);
  qp->handle_timeout(2000 + kTimeoutNs - 1);
  EXPECT_TRUE(drain(2000 + kTimeoutNs - 1).empty());
  qp->handle_timeout(2000 + kTimeoutNs);
  const auto out = drain(2000 + kTimeoutNs);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcSendMiddle);  // go-back-N resumes mid-message
  EXPECT_EQ(out[0].psn(), kSqPsn + 1);
  EXPECT_EQ(out[1].opcode(), Opcode::kRcSendLast);
  EXPECT_EQ(qp->counters().timeouts, 1u);
  EXPECT_EQ(qp->counters().retransmitted_packets, 2u);
  receive(ack(kSqPsn + 2), {}, 2000 + kTimeoutNs + 10);
  ASSERT_EQ(completions().size(), 1u);
}

TEST_F(RequesterTest, AckTimeoutWithRetriesExhaustedFailsTheQp) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 2, {sge(local, 8)}, 0)), 0);
  std::uint64_t now = 0;
  ASSERT_EQ(drain(now).size(), 2u);
  for (int retry = 0; retry < 3; ++retry) {  // retry_cnt = 3: three retransmissions
    now = *qp->next_deadline();
    qp->handle_timeout(now);
    EXPECT_EQ(drain(now).size(), 2u);
    EXPECT_TRUE(completions().empty());
  }
  now = *qp->next_deadline();
  qp->handle_timeout(now);
  EXPECT_TRUE(drain(now).empty());
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(c[1].wr_id, 2u);  // unsignaled, but flushed work always completes
  EXPECT_EQ(c[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(qp->state(), QpState::kErr);
  EXPECT_EQ(qp->counters().timeouts, 4u);
}

TEST_F(RequesterTest, RnrNakWaitsTheTimerThenRetransmits) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(drain().size(), 1u);
  receive(ack(kSqPsn, Aeth::rnr_nak(0, 1)), {}, 5000);  // code 1 = 10 us
  EXPECT_EQ(qp->next_deadline(), 5000 + 10'000u);
  EXPECT_TRUE(drain(5000).empty());
  qp->handle_timeout(15'000);
  const auto out = drain(15'000);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), kSqPsn);
  EXPECT_TRUE(out[0].t.retransmission);
  receive(ack(kSqPsn), {}, 16'000);
  ASSERT_EQ(completions().size(), 1u);
  EXPECT_EQ(qp->counters().rnr_naks_received, 1u);
}

// Seen against rxe (tests/interop): rxe RNR-NAKs the first SEND and answers the one behind it
// with a NAK-PSN for the same PSN. A NAK that arrives after the RNR timer restarted is stale.
TEST_F(RequesterTest, NakPsnForTheRnrRestartPointDoesNotRestartAgain) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 2, {sge(local, 8)})), 0);
  ASSERT_EQ(drain().size(), 2u);
  receive(ack(kSqPsn, Aeth::rnr_nak(0, 1)), {}, 5000);  // code 1 = 10 us
  qp->handle_timeout(15'000);
  ASSERT_EQ(drain(15'000).size(), 2u);
  receive(ack(kSqPsn, Aeth::nak(0, NakCode::kPsnSequenceError)), {}, 15'500);
  EXPECT_TRUE(drain(15'500).empty());
  receive(ack(kSqPsn + 1), {}, 16'000);
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[1].status, WcStatus::kSuccess);
  EXPECT_EQ(qp->counters().rnr_naks_received, 1u);
  // Both NAKs count; the device's rcvd_seq_err is naks_received - rnr_naks_received.
  EXPECT_EQ(qp->counters().naks_received, 2u);
}

TEST_F(RequesterTest, RnrRetriesExhaustedFailWithRnrRetryExcErr) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  std::uint64_t now = 0;
  ASSERT_EQ(drain(now).size(), 1u);
  for (int i = 0; i < 2; ++i) {  // rnr_retry = 2
    receive(ack(kSqPsn, Aeth::rnr_nak(0, 1)), {}, now);
    now = *qp->next_deadline();
    qp->handle_timeout(now);
    ASSERT_EQ(drain(now).size(), 1u);
  }
  receive(ack(kSqPsn, Aeth::rnr_nak(0, 1)), {}, now);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kRnrRetryExcErr);
  EXPECT_EQ(qp->state(), QpState::kErr);
}

TEST_F(RequesterTest, RnrRetrySevenIsInfinite) {
  QpOptions o;
  o.rnr_retry = 7;
  make_qp(o);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  std::uint64_t now = 0;
  ASSERT_EQ(drain(now).size(), 1u);
  for (int i = 0; i < 20; ++i) {
    receive(ack(kSqPsn, Aeth::rnr_nak(0, 1)), {}, now);
    now = *qp->next_deadline();
    qp->handle_timeout(now);
    ASSERT_EQ(drain(now).size(), 1u);
  }
  EXPECT_EQ(qp->state(), QpState::kRts);
}

TEST_F(RequesterTest, PsnSequenceNakGoesBackToTheNakedPsnMidMessage) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 700)})), 0);
  ASSERT_EQ(drain().size(), 3u);
  receive(ack(kSqPsn + 1, Aeth::nak(0, NakCode::kPsnSequenceError)));
  const auto out = drain_resend();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcWriteMiddle);
  EXPECT_EQ(out[0].psn(), kSqPsn + 1);
  EXPECT_FALSE(out[0].hdr().reth);
  EXPECT_EQ(out[1].opcode(), Opcode::kRcWriteLast);
  EXPECT_EQ(out[1].payload.size(), 700 - 2 * kMtu);
  receive(ack(kSqPsn + 1, Aeth::nak(0, NakCode::kPsnSequenceError)));  // duplicate NAK
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(qp->counters().naks_received, 2u);
}

struct FatalNakCase {
  NakCode code;
  WcStatus status;
};
class FatalNakTest : public ProtocolTest, public ::testing::WithParamInterface<FatalNakCase> {};

TEST_P(FatalNakTest, CompletesInErrorAndFlushesTheRest) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 2, {sge(local, 8)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 3, {sge(local, 8)})), 0);
  ASSERT_EQ(drain().size(), 3u);
  receive(ack(kSqPsn + 1, Aeth::nak(0, GetParam().code)));
  const auto c = completions();
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);  // implicitly acknowledged by the NAK
  EXPECT_EQ(c[1].status, GetParam().status);
  EXPECT_EQ(c[2].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(qp->state(), QpState::kErr);
  EXPECT_TRUE(drain().empty());
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 4, {sge(local, 8)})), 0);  // posts in ERR flush
  const auto c2 = completions();
  ASSERT_EQ(c2.size(), 1u);
  EXPECT_EQ(c2[0].status, WcStatus::kWrFlushErr);
}

INSTANTIATE_TEST_SUITE_P(
    Naks, FatalNakTest,
    ::testing::Values(FatalNakCase{NakCode::kInvalidRequest, WcStatus::kRemInvReqErr},
                      FatalNakCase{NakCode::kRemoteAccessError, WcStatus::kRemAccessErr},
                      FatalNakCase{NakCode::kRemoteOperationalError, WcStatus::kRemOpErr}));

TEST_F(RequesterTest, PartialReadRetryAsksOnlyForTheMissingTail) {
  const std::uint64_t remote = local + 8192;
  fill(remote, 600, 3);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 600)})), 0);
  ASSERT_EQ(drain(0).size(), 1u);
  auto src = bytes(remote, 600);
  receive(read_response(Opcode::kRcReadResponseFirst, kSqPsn), src.subspan(0, 256), 10);
  receive(read_response(Opcode::kRcReadResponseMiddle, kSqPsn + 1), src.subspan(256, 256), 20);
  // The LAST response is lost; the timer fires.
  const std::uint64_t now = *qp->next_deadline();
  qp->handle_timeout(now);
  const auto out = drain(now);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(out[0].psn(), kSqPsn + 2);
  EXPECT_EQ(out[0].hdr().reth->va, 0x7000000u + 512);
  EXPECT_EQ(out[0].hdr().reth->dma_length, 600u - 512);
  // The replay continues with LAST (rxe form).
  receive(read_response(Opcode::kRcReadResponseLast, kSqPsn + 2), src.subspan(512, 88), now + 1);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[0].opcode, WcOpcode::kRdmaRead);
  EXPECT_EQ(c[0].byte_len, 600u);
  const auto dst = bytes(local, 600);
  EXPECT_TRUE(std::equal(dst.begin(), dst.end(), src.begin()));
}

TEST_F(RequesterTest, GapInReadResponsesAsksForTheRestAtOnce) {
  const std::uint64_t remote = local + 8192;
  fill(remote, 600, 5);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 600)})), 0);
  ASSERT_EQ(drain(0).size(), 1u);
  auto src = bytes(remote, 600);
  receive(read_response(Opcode::kRcReadResponseFirst, kSqPsn), src.subspan(0, 256), 10);
  // MIDDLE is lost; LAST arrives: the READ is asked again from the MIDDLE's PSN, no timer.
  receive(read_response(Opcode::kRcReadResponseLast, kSqPsn + 2), src.subspan(512, 88), 20);
  const auto out = drain(20);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(out[0].psn(), kSqPsn + 1);
  EXPECT_EQ(out[0].hdr().reth->va, 0x7000000u + 256);
  EXPECT_EQ(out[0].hdr().reth->dma_length, 600u - 256);
  // A second gapped response before the replay starts asks nothing more.
  receive(read_response(Opcode::kRcReadResponseLast, kSqPsn + 2), src.subspan(512, 88), 30);
  EXPECT_TRUE(drain(30).empty());
  receive(read_response(Opcode::kRcReadResponseMiddle, kSqPsn + 1), src.subspan(256, 256), 40);
  receive(read_response(Opcode::kRcReadResponseLast, kSqPsn + 2), src.subspan(512, 88), 50);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  const auto dst = bytes(local, 600);
  EXPECT_TRUE(std::equal(dst.begin(), dst.end(), src.begin()));
}

// The replay a READ retry asked for comes without the missing PSN (lost again): the responses
// going back (a replayed PSN before the newest gapped one) show it, and the READ is asked again
// at once, not after a timer; the rest of that replay asks nothing more.
TEST_F(RequesterTest, AReplayThatLostTheMissingPsnAgainIsAskedForAtOnce) {
  const std::uint64_t remote = local + 8192;
  fill(remote, 5 * kMtu, 7);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 5 * kMtu)})), 0);
  ASSERT_EQ(drain(0).size(), 1u);
  auto src = bytes(remote, 5 * kMtu);
  const auto response = [&](std::uint32_t i, std::uint64_t now) {
    const Opcode op = i == 0   ? Opcode::kRcReadResponseFirst
                      : i == 4 ? Opcode::kRcReadResponseLast
                               : Opcode::kRcReadResponseMiddle;
    receive(read_response(op, kSqPsn + i), src.subspan(i * kMtu, kMtu), now);
  };
  // The first response is lost; the rest arrive: one retry, from the first.
  for (std::uint32_t i = 1; i < 5; ++i)
    response(i, 10 + i);
  auto out = drain(20);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), kSqPsn);
  // The replay's first response is lost too; its second goes back before the newest gap.
  response(1, 30);
  out = drain(30);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(out[0].psn(), kSqPsn);
  EXPECT_EQ(qp->counters().replay_gap_retries, 1u);
  // The rest of that replay goes forward again: nothing more is asked.
  for (std::uint32_t i = 2; i < 5; ++i)
    response(i, 30 + i);
  EXPECT_TRUE(drain(40).empty());
  // The second replay arrives whole.
  for (std::uint32_t i = 0; i < 5; ++i)
    response(i, 50 + i);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(qp->counters().replay_gap_retries, 1u);
  auto dst = bytes(local, 5 * kMtu);
  EXPECT_TRUE(std::equal(dst.begin(), dst.end(), src.begin()));
}

// The retry resends the head READ's request and then the later READ's: when the later READ's
// replay comes back (its responses go back before the newest gapped one) with nothing of the
// head's before it, the head's request was lost on the way, and it is asked again at once.
TEST_F(RequesterTest, ALaterReadsReplayAheadOfTheHeadsAsksForTheHeadAgainAtOnce) {
  const std::uint64_t remote = local + 8192;
  fill(remote, 4 * kMtu, 9);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 2 * kMtu)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 2, {sge(local + 2 * kMtu, 2 * kMtu)})), 0);
  ASSERT_EQ(drain(0).size(), 2u);
  auto src = bytes(remote, 4 * kMtu);
  const auto response = [&](std::uint32_t i, std::uint64_t now) {
    const Opcode op = i % 2 == 0 ? Opcode::kRcReadResponseFirst : Opcode::kRcReadResponseLast;
    receive(read_response(op, kSqPsn + i), src.subspan(i * kMtu, kMtu), now);
  };
  // The head's first response is lost: its second asks for both READs again from there.
  response(1, 10);
  auto out = drain(10);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(out[0].psn(), kSqPsn);
  // The later READ's first responses go on: nothing more is asked.
  response(2, 20);
  response(3, 21);
  EXPECT_TRUE(drain(21).empty());
  // Its replay begins, and nothing of the head's came before it.
  response(2, 30);
  out = drain(30);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(out[0].psn(), kSqPsn);
  EXPECT_EQ(qp->counters().replay_gap_retries, 1u);
  // The rest of that replay goes forward: nothing more.
  response(3, 31);
  EXPECT_TRUE(drain(31).empty());
  // The second retry's replay arrives whole: both READs complete with their data.
  for (std::uint32_t i = 0; i < 4; ++i)
    response(i, 40 + i);
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[1].status, WcStatus::kSuccess);
  EXPECT_EQ(qp->counters().replay_gap_retries, 1u);
  auto dst = bytes(local, 4 * kMtu);
  EXPECT_TRUE(std::equal(dst.begin(), dst.end(), src.begin()));
}

TEST_F(RequesterTest, ReadResponseWithTheWrongLengthIsABadResponse) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 100)})), 0);
  ASSERT_EQ(drain().size(), 1u);
  std::array<std::uint8_t, 99> short_payload{};
  receive(read_response(Opcode::kRcReadResponseOnly, kSqPsn), short_payload);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kBadRespErr);
}

TEST_F(RequesterTest, AtomicAckWritesTheOriginalValueLocally) {
  auto w = wr(WrOpcode::kAtomicCmpAndSwp, 1, {sge(local, 8)});
  w.compare_add = 5;
  w.swap = 6;
  ASSERT_EQ(qp->post_send(w), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcCompareSwap);
  EXPECT_EQ(out[0].hdr().atomic_eth->compare, 5u);
  EXPECT_EQ(out[0].hdr().atomic_eth->swap_add, 6u);
  wire::TransportHeaders h = packet(Opcode::kRcAtomicAck, kSqPsn);
  h.aeth = Aeth::ack(1);
  h.atomic_ack_orig = 0x0102030405060708;
  receive(h);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].opcode, WcOpcode::kCompSwap);
  std::uint64_t v = 0;
  std::memcpy(&v, bytes(local, 8).data(), 8);
  EXPECT_EQ(v, 0x0102030405060708u);
}

TEST_F(RequesterTest, FenceWaitsForOutstandingReads) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 2, {sge(local, 8)},
                             send_flags::kSignaled | send_flags::kFence)),
            0);
  ASSERT_EQ(drain().size(), 1u);
  EXPECT_EQ(qp->requester_state(0), RequesterState::kWaitFence);
  std::array<std::uint8_t, 8> data{};
  receive(read_response(Opcode::kRcReadResponseOnly, kSqPsn), data);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcSendOnly);
}

TEST_F(RequesterTest, MaxRdAtomicLimitsOutstandingReads) {
  QpOptions o;
  o.max_rd_atomic = 1;
  make_qp(o);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kAtomicFetchAndAdd, 2, {sge(local + 64, 8)})), 0);
  ASSERT_EQ(drain().size(), 1u);
  EXPECT_EQ(qp->requester_state(0), RequesterState::kWaitRdAtomic);
  std::array<std::uint8_t, 8> data{};
  receive(read_response(Opcode::kRcReadResponseOnly, kSqPsn), data);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcFetchAdd);
}

TEST_F(RequesterTest, InlineDataIsCopiedAtPostTime) {
  fill(local, 16, 9);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {Sge{local, 16, wire::Lkey(0)}},
                             send_flags::kSignaled | send_flags::kInline)),
            0);
  const std::vector<std::uint8_t> expected(bytes(local, 16).begin(), bytes(local, 16).end());
  fill(local, 16, 77);  // the caller reuses its buffer
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].payload, expected);
}

TEST_F(RequesterTest, InlineDataHandedOverByTheProviderIsSentAsIs) {
  const std::vector<std::uint8_t> data{9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2};
  auto w = wr(WrOpcode::kSendWithImm, 1, {}, send_flags::kSignaled | send_flags::kInline);
  w.imm_data = 3;
  ASSERT_EQ(qp->post_send_inline(w, data), 0);
  EXPECT_EQ(qp->post_send_inline(wr(WrOpcode::kSend, 2, {}), data), EINVAL);   // not kInline
  EXPECT_EQ(qp->post_send_inline(w, std::vector<std::uint8_t>(257)), EINVAL);  // > max inline
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcSendOnlyImm);
  EXPECT_EQ(out[0].payload, data);
  receive(ack(kSqPsn));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].byte_len, data.size());
}

TEST_F(RequesterTest, BadLkeyIsALocalProtectionErrorAfterEarlierWorkCompletes) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 2, {Sge{local, 8, wire::Lkey(0xBAD00)}})), 0);
  ASSERT_EQ(drain().size(), 1u);
  EXPECT_TRUE(completions().empty());
  receive(ack(kSqPsn));
  drain();
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[1].status, WcStatus::kLocProtErr);
  EXPECT_EQ(qp->state(), QpState::kErr);
}

TEST_F(RequesterTest, ReadIntoMemoryWithoutLocalWriteIsALocalProtectionError) {
  const std::uint64_t ro = mem.allocate(64);
  const MemoryRegion mr = mrs.register_region(ro, 64, access::kRemoteRead);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {Sge{ro, 8, mr.lkey}})), 0);
  EXPECT_TRUE(drain().empty());
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kLocProtErr);
}

TEST_F(RequesterTest, WrongShapedWorkRequestsAreRefusedAtPost) {
  auto w = wr(static_cast<WrOpcode>(10), 1, {});  // IBV_WR_TSO: not offered
  EXPECT_EQ(qp->post_send(w), EINVAL);
  w = wr(WrOpcode::kSend, 1, std::vector<Sge>(9, sge(local, 1)));
  EXPECT_EQ(qp->post_send(w), EINVAL);  // max_send_sge = 8
  w = wr(WrOpcode::kRdmaRead, 1, {sge(local, 8)}, send_flags::kInline);
  EXPECT_EQ(qp->post_send(w), EINVAL);
}

TEST_F(RequesterTest, SendQueueFullIsEnomem) {
  for (int i = 0; i < 256; ++i)
    ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, i, {})), 0);
  EXPECT_EQ(qp->post_send(wr(WrOpcode::kSend, 999, {})), ENOMEM);
}

TEST_F(RequesterTest, WindowStopsAt128UnackedPsns) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 200 * kMtu)})), 0);
  EXPECT_EQ(drain().size(), 128u);
  EXPECT_EQ(qp->requester_state(0), RequesterState::kWaitWindow);
  receive(ack(kSqPsn + 63));
  EXPECT_EQ(drain().size(), 64u);
}

TEST_F(RequesterTest, AckReqIsSetPeriodicallyInsideLongMessages) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaWrite, 1, {sge(local, 100 * kMtu)})), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 100u);
  std::vector<std::size_t> with_ack_req;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].hdr().bth.ack_req) with_ack_req.push_back(i);
  EXPECT_EQ(with_ack_req, (std::vector<std::size_t>{64, 99}));
}

TEST_F(RequesterTest, QpIsReusableAfterErrorAndReset) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(drain().size(), 1u);
  receive(ack(kSqPsn, Aeth::nak(0, NakCode::kRemoteAccessError)));
  ASSERT_EQ(qp->state(), QpState::kErr);
  QpAttr a;
  a.qp_state = QpState::kReset;
  ASSERT_EQ(qp->modify(a, qp_attr::kState), 0);
  EXPECT_FALSE(qp->poll_completion());  // RESET discards what was not polled
  bring_up(QpOptions{});
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 2, {sge(local, 8)})), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), kSqPsn);
  EXPECT_FALSE(out[0].t.retransmission);
  receive(ack(kSqPsn));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 2u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
}

TEST_F(RequesterTest, SqdDrainsThenReportsTheEvent) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(drain().size(), 1u);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 2, {sge(local, 8)})), 0);
  QpAttr a;
  a.qp_state = QpState::kSqd;
  a.en_sqd_async_notify = 1;
  ASSERT_EQ(qp->modify(a, qp_attr::kState | qp_attr::kEnSqdAsyncNotify), 0);
  EXPECT_TRUE(drain().empty());  // WQE 2 may not start
  EXPECT_FALSE(qp->poll_event());
  receive(ack(kSqPsn));
  const auto e = qp->poll_event();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, AsyncEventType::kSqDrained);
  a.qp_state = QpState::kRts;
  ASSERT_EQ(qp->modify(a, qp_attr::kState), 0);
  EXPECT_EQ(drain().size(), 1u);
}

}  // namespace
}  // namespace xroce::transport::testing
