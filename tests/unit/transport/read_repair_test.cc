// Selective READ repair (transport/read_repair.h): the record alone, then the requester that
// places responses after a gap and asks only for what is missing, then the responder that answers
// a duplicate READ naming a sub-range with exactly that range.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "protocol_harness.h"
#include "transport/read_repair.h"

namespace xroce::transport::testing {
namespace {

using wire::Opcode;
using wire::Psn;
using Range = ReadRepair::Range;

std::vector<Range> respond(ReadRepair& rr, std::uint32_t comp, std::uint32_t psn) {
  std::vector<Range> lost;
  rr.on_response(Psn(comp), Psn(psn), lost);
  for (const Range& r : lost)
    rr.asked(r);
  return lost;
}

TEST(ReadRepairRecord, AResponseAheadShowsTheRunsBetweenLostOnce) {
  ReadRepair rr;
  EXPECT_TRUE(respond(rr, 10, 10).empty());  // in order
  // comp_psn is still 10 (10 is being taken); 13 arrives: 11 and 12 are lost.
  EXPECT_EQ(respond(rr, 11, 13), (std::vector<Range>{{Psn(11), Psn(12)}}));
  EXPECT_TRUE(rr.received(Psn(13)));
  EXPECT_TRUE(respond(rr, 11, 14).empty());  // the stream goes on
  // 15 lost, 16 arrives: only 15 is new.
  EXPECT_EQ(respond(rr, 11, 16), (std::vector<Range>{{Psn(15), Psn(15)}}));
  EXPECT_TRUE(rr.asked_range_ends_at(Psn(12)));
  EXPECT_TRUE(rr.asked_range_ends_at(Psn(15)));
  EXPECT_FALSE(rr.asked_range_ends_at(Psn(14)));
}

TEST(ReadRepairRecord, AReplayThatSkipsPartOfItsRangeAsksForThatPartAgain) {
  ReadRepair rr;
  EXPECT_EQ(respond(rr, 20, 24), (std::vector<Range>{{Psn(20), Psn(23)}}));
  // The replay of 20..23 arrives without 20 and 21: 22 shows them lost again.
  EXPECT_EQ(respond(rr, 20, 22), (std::vector<Range>{{Psn(20), Psn(21)}}));
  EXPECT_TRUE(respond(rr, 20, 23).empty());  // the range's end: it is done
  EXPECT_FALSE(rr.asked_range_ends_at(Psn(23)));
  EXPECT_TRUE(rr.asked_range_ends_at(Psn(21)));
  // A duplicate of what arrived shows nothing.
  EXPECT_TRUE(respond(rr, 20, 23).empty());
}

TEST(ReadRepairRecord, ProgressForgetsWhatItPassedAndATimerAsksForWhatIsStillMissing) {
  ReadRepair rr;
  EXPECT_EQ(respond(rr, 0, 5), (std::vector<Range>{{Psn(0), Psn(4)}}));
  EXPECT_TRUE(respond(rr, 0, 0).empty());  // the replay's first, in order
  rr.on_advance(Psn(0), Psn(1));
  EXPECT_TRUE(rr.repairing());
  // Nothing more of the replay comes: the timer asks for 1..4, which are still missing.
  std::vector<Range> again;
  rr.expired(Psn(1), again);
  EXPECT_EQ(again, (std::vector<Range>{{Psn(1), Psn(4)}}));
  for (std::uint32_t p = 1; p < 5; ++p)
    EXPECT_TRUE(respond(rr, 1, p).empty()) << p;
  rr.on_advance(Psn(1), Psn(5));
  EXPECT_TRUE(rr.received(Psn(5)));  // placed ahead: comp_psn moves over it next
  rr.on_advance(Psn(5), Psn(6));
  EXPECT_FALSE(rr.repairing());
  EXPECT_FALSE(rr.received(Psn(5)));
}

TEST(ReadRepairRecord, TheRecordHoldsAcrossThePsnWrap) {
  ReadRepair rr;
  const std::uint32_t top = Psn::kMask;  // 2^24 - 1
  EXPECT_EQ(respond(rr, top - 1, 2), (std::vector<Range>{{Psn(top - 1), Psn(1)}}));
  EXPECT_TRUE(ReadRepair::covers(Psn(top - 1), Psn(2)));
  EXPECT_FALSE(ReadRepair::covers(Psn(top - 1), Psn(top - 1)));
  EXPECT_FALSE(ReadRepair::covers(Psn(0), Psn(ReadRepair::kSpan)));
  EXPECT_TRUE(rr.received(Psn(2)));
  rr.on_advance(Psn(top - 1), Psn(2));
  EXPECT_TRUE(rr.received(Psn(2)));
  rr.on_advance(Psn(2), Psn(3));
  EXPECT_FALSE(rr.received(Psn(2)));
  EXPECT_FALSE(rr.repairing());
}

class SelectiveReadTest : public ProtocolTest {
 protected:
  void SetUp() override {
    QpOptions o;
    o.selective_read_repair = true;
    o.resend_probe_floor_ns = 100'000;
    make_qp(o);
  }
  std::uint64_t remote = local + 16384;
  // Response i of a READ of `packets` PSNs that began at `first` (the remote bytes at `at`).
  void response(std::uint32_t first, std::uint32_t packets, std::uint32_t i, std::uint64_t at,
                std::uint64_t now, Opcode op = Opcode::kRcReadResponseMiddle) {
    if (op == Opcode::kRcReadResponseMiddle) {
      op = packets == 1       ? Opcode::kRcReadResponseOnly
           : i == 0           ? Opcode::kRcReadResponseFirst
           : i == packets - 1 ? Opcode::kRcReadResponseLast
                              : Opcode::kRcReadResponseMiddle;
    }
    receive(read_response(op, first + i), bytes(at + i * kMtu, kMtu), now);
  }
};

// One response lost in the middle of a READ: the rest is placed as it comes, one duplicate READ
// asks for that PSN alone (its RETH the one packet's bytes), and its replay, which ends there with
// LAST as rxe's does, completes the READ with every byte.
TEST_F(SelectiveReadTest, ALostResponseIsAskedForAloneAndTheRestIsKept) {
  fill(remote, 5 * kMtu, 3);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 5 * kMtu)})), 0);
  ASSERT_EQ(drain(0).size(), 1u);
  response(kSqPsn, 5, 0, remote, 10);
  for (std::uint32_t i = 2; i < 5; ++i)
    response(kSqPsn, 5, i, remote, 10 + i);
  const auto out = drain(20);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(out[0].psn(), kSqPsn + 1);
  EXPECT_EQ(out[0].hdr().reth->va, 0x7000000u + kMtu);
  EXPECT_EQ(out[0].hdr().reth->dma_length, kMtu);
  EXPECT_TRUE(out[0].t.retransmission);
  EXPECT_TRUE(completions().empty());
  response(kSqPsn, 5, 1, remote, 30, Opcode::kRcReadResponseLast);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[0].byte_len, 5 * kMtu);
  const auto dst = bytes(local, 5 * kMtu);
  EXPECT_TRUE(std::equal(dst.begin(), dst.end(), bytes(remote, 5 * kMtu).begin()));
  EXPECT_EQ(qp->counters().read_responses_ahead, 3u);
  EXPECT_EQ(qp->counters().read_ranges_asked, 1u);
  EXPECT_TRUE(drain(40).empty());  // nothing resent, no later request asked again
}

// The head READ's first response is lost while a later READ arrives whole: only the head's PSN
// is asked for, the later READ is not asked again, and the two complete in order once it comes.
TEST_F(SelectiveReadTest, ALaterReadThatArrivedWholeIsNotAskedAgainAndCompletesInOrder) {
  fill(remote, 4 * kMtu, 9);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 2 * kMtu)})), 0);
  auto w2 = wr(WrOpcode::kRdmaRead, 2, {sge(local + 2 * kMtu, 2 * kMtu)});
  w2.remote_addr += 2 * kMtu;
  ASSERT_EQ(qp->post_send(w2), 0);
  ASSERT_EQ(drain(0).size(), 2u);
  response(kSqPsn, 2, 1, remote, 10);
  response(kSqPsn + 2, 2, 0, remote + 2 * kMtu, 11);
  response(kSqPsn + 2, 2, 1, remote + 2 * kMtu, 12);
  auto out = drain(12);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), kSqPsn);
  EXPECT_EQ(out[0].hdr().reth->va, 0x7000000u);
  EXPECT_EQ(out[0].hdr().reth->dma_length, kMtu);
  EXPECT_TRUE(completions().empty());  // the later READ waits for the head's
  // The replay of a one-packet range at the READ's first PSN is READ RESPONSE ONLY.
  response(kSqPsn, 2, 0, remote, 20, Opcode::kRcReadResponseOnly);
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[1].wr_id, 2u);
  const auto dst = bytes(local, 4 * kMtu);
  EXPECT_TRUE(std::equal(dst.begin(), dst.end(), bytes(remote, 4 * kMtu).begin()));
  EXPECT_TRUE(drain(30).empty());
  EXPECT_EQ(qp->counters().retransmitted_packets, 1u);
}

// The duplicate request, or its whole replay, is lost: the resend probe's timer asks for the
// range again, not for the READ from the gap on.
TEST_F(SelectiveReadTest, AnUnansweredRangeIsAskedForAgainWhenTheTimerExpires) {
  fill(remote, 4 * kMtu, 5);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 4 * kMtu)})), 0);
  ASSERT_EQ(drain(0).size(), 1u);
  response(kSqPsn, 4, 0, remote, 10);  // an RTT sample: the probe's timer is its floor
  response(kSqPsn, 4, 2, remote, 11);
  response(kSqPsn, 4, 3, remote, 12);
  ASSERT_EQ(drain(12).size(), 1u);
  const std::uint64_t deadline = *qp->next_deadline();
  EXPECT_LE(deadline, 12 + 100'000 + 1'000u);  // the resend probe's floor, not the RTO
  qp->handle_timeout(deadline);
  const auto out = drain(deadline);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(out[0].psn(), kSqPsn + 1);
  EXPECT_EQ(out[0].hdr().reth->dma_length, kMtu);
  EXPECT_EQ(qp->counters().read_ranges_asked, 2u);
  response(kSqPsn, 4, 1, remote, deadline + 10, Opcode::kRcReadResponseLast);
  ASSERT_EQ(completions().size(), 1u);
  const auto dst = bytes(local, 4 * kMtu);
  EXPECT_TRUE(std::equal(dst.begin(), dst.end(), bytes(remote, 4 * kMtu).begin()));
}

// With a floor of its own for ranges asked for again (QpConfig::read_repair_floor_ns), the timer
// that watches them runs for that floor, not the resend probe's: a range asked for again costs a
// packet, not a window. A go-back-N (here over an ATOMIC) keeps the resend probe's floor.
TEST_F(SelectiveReadTest, RangesAskedForAgainHaveTheirOwnTimerAndAGoBackNKeepsTheProbes) {
  constexpr std::uint64_t kRepairFloorNs = 20'000;
  QpOptions o;
  o.selective_read_repair = true;
  o.resend_probe_floor_ns = 100'000;
  o.read_repair_floor_ns = kRepairFloorNs;
  make_qp(o);
  fill(remote, 4 * kMtu, 9);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 4 * kMtu)})), 0);
  ASSERT_EQ(drain(0).size(), 1u);
  response(kSqPsn, 4, 0, remote, 10);  // an RTT sample of 10 ns: the floors rule
  response(kSqPsn, 4, 2, remote, 11);
  response(kSqPsn, 4, 3, remote, 12);
  ASSERT_EQ(drain(12).size(), 1u);  // the range asked for
  std::uint64_t deadline = *qp->next_deadline();
  EXPECT_EQ(deadline, 12 + kRepairFloorNs);
  qp->handle_timeout(deadline);
  auto out = drain(deadline);
  ASSERT_EQ(out.size(), 1u);  // the same range, asked for again
  EXPECT_EQ(out[0].psn(), kSqPsn + 1);
  EXPECT_EQ(out[0].hdr().reth->dma_length, kMtu);
  response(kSqPsn, 4, 1, remote, deadline + 10, Opcode::kRcReadResponseLast);
  ASSERT_EQ(completions().size(), 1u);
  const auto dst = bytes(local, 4 * kMtu);
  EXPECT_TRUE(std::equal(dst.begin(), dst.end(), bytes(remote, 4 * kMtu).begin()));

  // A READ response past an ATOMIC: a go-back-N, watched by the resend probe's floor.
  const std::uint64_t t = deadline + 1'000;
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kAtomicCmpAndSwp, 2, {sge(local, 8)})), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 3, {sge(local + 64, 2 * kMtu)})), 0);
  ASSERT_EQ(drain(t).size(), 2u);
  response(kSqPsn + 5, 2, 0, remote, t + 10);
  out = drain(t + 10);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcCompareSwap);
  deadline = *qp->next_deadline();
  EXPECT_EQ(deadline, t + 10 + 100'000);
  EXPECT_EQ(qp->counters().read_ranges_asked, 2u);  // the range, twice
}

// Two losses in one READ: rxe's responder moves the READ's resource to the start of each
// duplicate it answers and drops a later one that starts before it (rxe_resp.c
// duplicate_request), so the second ask starts at the READ's first PSN still missing, not at the
// second loss, and takes the first's place; so does the timer's ask when neither replay comes.
TEST_F(SelectiveReadTest, AsksForOneReadStartAtItsFirstMissingPsnAsRxeRequires) {
  fill(remote, 10 * kMtu, 11);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 10 * kMtu)})), 0);
  ASSERT_EQ(drain(0).size(), 1u);
  for (const std::uint32_t i : {0u, 1u, 3u})
    response(kSqPsn, 10, i, remote, 10 + i);
  auto out = drain(20);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), kSqPsn + 2);
  EXPECT_EQ(out[0].hdr().reth->dma_length, kMtu);
  for (const std::uint32_t i : {4u, 5u, 7u})
    response(kSqPsn, 10, i, remote, 20 + i);
  out = drain(30);
  ASSERT_EQ(out.size(), 1u);  // PSN 6 lost too: asked for from PSN 2, still missing
  EXPECT_EQ(out[0].psn(), kSqPsn + 2);
  EXPECT_EQ(out[0].hdr().reth->va, 0x7000000u + 2 * kMtu);
  EXPECT_EQ(out[0].hdr().reth->dma_length, 5 * kMtu);
  const std::uint64_t deadline = *qp->next_deadline();
  qp->handle_timeout(deadline);
  out = drain(deadline);
  ASSERT_EQ(out.size(), 1u);  // one ask again, from PSN 2 to 6
  EXPECT_EQ(out[0].psn(), kSqPsn + 2);
  EXPECT_EQ(out[0].hdr().reth->dma_length, 5 * kMtu);
  for (std::uint32_t i = 2; i <= 6; ++i) {
    response(kSqPsn, 10, i, remote, deadline + i,
             i == 6 ? Opcode::kRcReadResponseLast : Opcode::kRcReadResponseMiddle);
  }
  EXPECT_TRUE(completions().empty());
  for (const std::uint32_t i : {8u, 9u})
    response(kSqPsn, 10, i, remote, deadline + 10 + i);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  const auto dst = bytes(local, 10 * kMtu);
  EXPECT_TRUE(std::equal(dst.begin(), dst.end(), bytes(remote, 10 * kMtu).begin()));
  EXPECT_TRUE(drain(deadline + 30).empty());
}

// The replay of a range loses its own first packet: its second shows it, and that PSN is asked
// for again at once.
TEST_F(SelectiveReadTest, AReplayThatLosesItsFirstPacketAsksForItAgainAtOnce) {
  fill(remote, 5 * kMtu, 7);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 5 * kMtu)})), 0);
  ASSERT_EQ(drain(0).size(), 1u);
  response(kSqPsn, 5, 0, remote, 10);
  response(kSqPsn, 5, 3, remote, 11);  // 1 and 2 lost
  response(kSqPsn, 5, 4, remote, 12);
  auto out = drain(12);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), kSqPsn + 1);
  EXPECT_EQ(out[0].hdr().reth->dma_length, 2 * kMtu);
  response(kSqPsn, 5, 2, remote, 20, Opcode::kRcReadResponseLast);  // its replay without 1
  out = drain(20);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), kSqPsn + 1);
  EXPECT_EQ(out[0].hdr().reth->dma_length, kMtu);
  response(kSqPsn, 5, 1, remote, 30, Opcode::kRcReadResponseLast);
  ASSERT_EQ(completions().size(), 1u);
  const auto dst = bytes(local, 5 * kMtu);
  EXPECT_TRUE(std::equal(dst.begin(), dst.end(), bytes(remote, 5 * kMtu).begin()));
}

// A response after a gap that does not fit its READ (an END where the READ goes on and no range
// ends, or a short payload) is not placed: its PSN counts as missing.
TEST_F(SelectiveReadTest, AResponseThatDoesNotFitItsReadIsNotPlaced) {
  fill(remote, 4 * kMtu, 2);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 1, {sge(local, 4 * kMtu)})), 0);
  ASSERT_EQ(drain(0).size(), 1u);
  response(kSqPsn, 4, 0, remote, 10);
  response(kSqPsn, 4, 2, remote, 11, Opcode::kRcReadResponseLast);  // +2 is no READ's end
  EXPECT_TRUE(drain(11).empty());
  receive(read_response(Opcode::kRcReadResponseLast, kSqPsn + 3), bytes(remote, kMtu - 1), 12);
  EXPECT_TRUE(drain(12).empty());
  EXPECT_EQ(qp->counters().read_responses_ahead, 0u);
  // A good +3 shows +1 and +2 lost.
  response(kSqPsn, 4, 3, remote, 13);
  const auto out = drain(13);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn(), kSqPsn + 1);
  EXPECT_EQ(out[0].hdr().reth->dma_length, 2 * kMtu);
}

// An ATOMIC at the head with a READ response past it: the ATOMIC's result cannot be asked for as
// a range, so it is the rxe retry from comp_psn (go-back-N), as without selective repair.
TEST_F(SelectiveReadTest, AGapOverAnAtomicIsAGoBackN) {
  fill(remote, 2 * kMtu, 1);
  auto cas = wr(WrOpcode::kAtomicCmpAndSwp, 1, {sge(local, 8)});
  ASSERT_EQ(qp->post_send(cas), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kRdmaRead, 2, {sge(local + 64, 2 * kMtu)})), 0);
  ASSERT_EQ(drain(0).size(), 2u);
  response(kSqPsn + 1, 2, 0, remote, 10);
  const auto out = drain(10);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcCompareSwap);
  EXPECT_EQ(out[0].psn(), kSqPsn);
  EXPECT_EQ(out[1].opcode(), Opcode::kRcReadRequest);
  EXPECT_EQ(qp->counters().read_ranges_asked, 0u);
}

class SubRangeReadTest : public ProtocolTest {
 protected:
  std::uint64_t target = local + 16384;
  wire::TransportHeaders read(std::uint32_t psn, std::uint64_t va, std::uint32_t len) {
    auto h = packet(Opcode::kRcReadRequest, psn, true);
    h.reth = wire::Reth{va, local_mr.rkey, len};
    return h;
  }
};

// A duplicate READ naming a sub-range that ends before the original does is answered with that
// range alone, ending in LAST (ONLY for one packet at the READ's first PSN), as rxe's read_reply.
TEST_F(SubRangeReadTest, ADuplicateNamingASubRangeIsAnsweredWithThatRangeAlone) {
  fill(target, 5 * kMtu, 4);
  receive(read(kRqPsn, target, 5 * kMtu));
  ASSERT_EQ(drain().size(), 5u);
  receive(read(kRqPsn + 1, target + kMtu, 2 * kMtu));
  auto out = drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadResponseMiddle);
  EXPECT_EQ(out[0].psn(), kRqPsn + 1);
  EXPECT_EQ(out[1].opcode(), Opcode::kRcReadResponseLast);
  EXPECT_EQ(out[1].psn(), kRqPsn + 2);
  EXPECT_EQ(out[1].hdr().aeth, wire::Aeth::ack(1));
  EXPECT_TRUE(std::equal(out[1].payload.begin(), out[1].payload.end(),
                         bytes(target + 2 * kMtu, kMtu).begin()));
  receive(read(kRqPsn, target, kMtu));
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadResponseOnly);
  EXPECT_EQ(out[0].payload.size(), kMtu);
  // Past the original's end, or under another key, it is dropped as before.
  receive(read(kRqPsn + 4, target + 4 * kMtu, 2 * kMtu));
  EXPECT_TRUE(drain().empty());
}

// A sub-range asked for while the original reply is still leaving goes ahead of the rest of it,
// and the original goes on where it stood: nothing it sent is sent again.
TEST_F(SubRangeReadTest, ASubRangeGoesAheadOfTheReplyUnderWayWhichGoesOn) {
  fill(target, 6 * kMtu, 6);
  receive(read(kRqPsn, target, 6 * kMtu));
  ASSERT_EQ(drain(0, 4).size(), 4u);  // +0..+3 left; the requester saw +2 without +1
  receive(read(kRqPsn + 1, target + kMtu, kMtu));
  const auto out = drain();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].psn(), kRqPsn + 1);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadResponseLast);
  EXPECT_EQ(out[1].psn(), kRqPsn + 4);
  EXPECT_EQ(out[1].opcode(), Opcode::kRcReadResponseMiddle);
  EXPECT_EQ(out[2].psn(), kRqPsn + 5);
  EXPECT_EQ(out[2].opcode(), Opcode::kRcReadResponseLast);
  EXPECT_TRUE(
      std::equal(out[0].payload.begin(), out[0].payload.end(), bytes(target + kMtu, kMtu).begin()));
}

}  // namespace
}  // namespace xroce::transport::testing
