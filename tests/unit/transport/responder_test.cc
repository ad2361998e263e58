// Responder rules, one per test: receive a request, expect exact responses, memory effects and
// receive completions (docs/protocol.md §2.3, §3.4-3.6).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "protocol_harness.h"

namespace xroce::transport::testing {
namespace {

using wire::Aeth;
using wire::NakCode;
using wire::Opcode;

class ResponderTest : public ProtocolTest {
 protected:
  std::uint64_t target = local + 16384;  // the "remote" memory the peer reads and writes
  std::vector<std::uint8_t> data(std::size_t n, std::uint8_t seed = 1) {
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; ++i)
      v[i] = static_cast<std::uint8_t>(seed + i * 13);
    return v;
  }
  wire::TransportHeaders write(Opcode op, std::uint32_t psn, std::uint64_t va, std::uint32_t len,
                               bool ack_req = true) {
    auto h = packet(op, psn, ack_req);
    h.reth = wire::Reth{va, local_mr.rkey, len};
    return h;
  }
  wire::TransportHeaders read(std::uint32_t psn, std::uint64_t va, std::uint32_t len) {
    auto h = packet(Opcode::kRcReadRequest, psn, true);
    h.reth = wire::Reth{va, local_mr.rkey, len};
    return h;
  }
  wire::TransportHeaders atomic(Opcode op, std::uint32_t psn, std::uint64_t va, std::uint64_t swap,
                                std::uint64_t compare = 0) {
    auto h = packet(op, psn, true);
    h.atomic_eth = wire::AtomicEth{va, local_mr.rkey, swap, compare};
    return h;
  }
  void expect_ack(const Sent& s, std::uint32_t psn, Aeth aeth) {
    EXPECT_EQ(s.opcode(), Opcode::kRcAck);
    EXPECT_EQ(s.psn(), psn);
    EXPECT_EQ(s.hdr().aeth, aeth);
    EXPECT_EQ(s.hdr().bth.dest_qp, kPeerQpn);
  }
};

TEST_F(ResponderTest, SendOnlyFillsAReceiveWqeAndIsAcked) {
  ASSERT_EQ(qp->post_recv(recv(7, {sge(local, 16), sge(local + 100, 100)})), 0);
  const auto payload = data(40);
  receive(packet(Opcode::kRcSendOnly, kRqPsn, true), payload);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::ack(1));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 7u);
  EXPECT_EQ(c[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(c[0].byte_len, 40u);
  EXPECT_EQ(c[0].src_qp, kPeerQpn);
  EXPECT_EQ(c[0].wc_flags, 0u);
  EXPECT_TRUE(std::equal(payload.begin(), payload.begin() + 16, bytes(local, 16).begin()));
  EXPECT_TRUE(std::equal(payload.begin() + 16, payload.end(), bytes(local + 100, 24).begin()));
  EXPECT_EQ(qp->expected_psn(), wire::Psn(kRqPsn + 1));
}

TEST_F(ResponderTest, MultiPacketSendWithImmediateCompletesOnTheLastPacket) {
  ASSERT_EQ(qp->post_recv(recv(7, {sge(local, 1024)})), 0);
  const auto payload = data(300);
  receive(packet(Opcode::kRcSendFirst, kRqPsn), {payload.data(), 256});
  EXPECT_TRUE(drain().empty());  // no AckReq, no ACK
  auto last = packet(Opcode::kRcSendLastImm, kRqPsn + 1, true);
  last.imm = 0x11223344;
  last.bth.solicited = true;
  receive(last, {payload.data() + 256, 44});
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn + 1, Aeth::ack(1));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].byte_len, 300u);
  EXPECT_EQ(c[0].wc_flags, wc_flags::kWithImm);
  EXPECT_EQ(c[0].imm_data, 0x11223344u);
  EXPECT_TRUE(c[0].solicited);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), bytes(local, 300).begin()));
}

TEST_F(ResponderTest, SendWithoutAReceiveWqeGetsAnRnrNakAndIsAcceptedOnRetry) {
  receive(packet(Opcode::kRcSendOnly, kRqPsn, true), data(8));
  receive(packet(Opcode::kRcSendOnly, kRqPsn + 1, true), data(8));  // dropped silently
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::rnr_nak(0, kRnrTimerCode));
  EXPECT_EQ(qp->state(), QpState::kRts);
  ASSERT_EQ(qp->post_recv(recv(1, {sge(local, 64)})), 0);
  receive(packet(Opcode::kRcSendOnly, kRqPsn, true), data(8));
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::ack(1));
  EXPECT_EQ(qp->counters().rnr_naks_sent, 1u);
}

// The owner's rings as the responder sees them: WQEs posted there reach the QP (or its SRQ)
// only when pulled, as a worker pulls its rings once per turn.
class LateReceives final : public ReceiveSource {
 public:
  std::vector<RecvRequest> posted;
  Qp* qp = nullptr;
  Srq* srq = nullptr;
  int pulls = 0;
  void pull_receives() override {
    ++pulls;
    for (const RecvRequest& r : posted)
      EXPECT_EQ(srq != nullptr ? srq->post_recv(r) : qp->post_recv(r), 0);
    posted.clear();
  }
};

// A WQE posted after the owner's last pull but before the SEND arrived is used: an RNIC reads
// its receive queue when the SEND comes (IBA 9.7.5.2.8); only a queue still empty then is RNR.
TEST_F(ResponderTest, ASendFindsAReceivePostedSinceTheLastPullInsteadOfAnRnrNak) {
  LateReceives late;
  late.qp = qp.get();
  qp->set_receive_source(&late);
  ASSERT_EQ(qp->post_recv(recv(1, {sge(local, 64)})), 0);
  late.posted.push_back(recv(2, {sge(local + 64, 64)}));
  receive(packet(Opcode::kRcSendOnly, kRqPsn, false), data(8, 1));
  EXPECT_EQ(late.pulls, 0);  // the queue had one: no need to look
  receive(packet(Opcode::kRcSendOnly, kRqPsn + 1, true), data(8, 2));
  EXPECT_EQ(late.pulls, 1);
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn + 1, Aeth::ack(2));
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].wr_id, 2u);
  EXPECT_TRUE(std::ranges::equal(bytes(local + 64, 8), data(8, 2)));
  EXPECT_EQ(qp->counters().receives_pulled_late, 1u);
  EXPECT_EQ(qp->counters().rnr_naks_sent, 0u);
  // Nothing posted anywhere: RNR NAK, after one more look.
  receive(packet(Opcode::kRcSendOnly, kRqPsn + 2, true), data(8, 3));
  EXPECT_EQ(late.pulls, 2);
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn + 2, Aeth::rnr_nak(2, kRnrTimerCode));
  EXPECT_EQ(qp->counters().receives_pulled_late, 1u);
}

TEST_F(ResponderTest, ASendOnAnSrqFindsAReceivePostedSinceTheLastPull) {
  Srq srq(16);
  QpOptions o;
  o.srq = &srq;
  make_qp(o);
  LateReceives late;
  late.srq = &srq;
  qp->set_receive_source(&late);
  late.posted.push_back(recv(9, {sge(local, 64)}));
  receive(packet(Opcode::kRcSendOnly, kRqPsn, true), data(8));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::ack(1));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 9u);
  EXPECT_EQ(qp->counters().receives_pulled_late, 1u);
}

TEST_F(ResponderTest, PsnGapIsNakedOnceWithTheExpectedPsn) {
  receive(write(Opcode::kRcWriteOnly, kRqPsn + 2, target, 8), data(8));
  receive(write(Opcode::kRcWriteOnly, kRqPsn + 3, target, 8), data(8));
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::nak(0, NakCode::kPsnSequenceError));
  // In sequence again: the NAK flag clears, a new gap is NAKed again.
  receive(write(Opcode::kRcWriteOnly, kRqPsn, target, 8), data(8));
  receive(write(Opcode::kRcWriteOnly, kRqPsn + 5, target, 8), data(8));
  out = drain();
  ASSERT_EQ(out.size(), 2u);
  expect_ack(out[0], kRqPsn, Aeth::ack(1));
  expect_ack(out[1], kRqPsn + 1, Aeth::nak(1, NakCode::kPsnSequenceError));
  EXPECT_EQ(qp->state(), QpState::kRts);
}

TEST_F(ResponderTest, WriteLandsInMemoryAcrossPackets) {
  const auto payload = data(600);
  receive(write(Opcode::kRcWriteFirst, kRqPsn, target, 600, false), {payload.data(), 256});
  receive(packet(Opcode::kRcWriteMiddle, kRqPsn + 1), {payload.data() + 256, 256});
  receive(packet(Opcode::kRcWriteLast, kRqPsn + 2, true), {payload.data() + 512, 88});
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn + 2, Aeth::ack(1));
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), bytes(target, 600).begin()));
  EXPECT_TRUE(completions().empty());  // plain WRITE: nothing at the responder
}

TEST_F(ResponderTest, WriteWithImmediateConsumesAReceiveWqe) {
  ASSERT_EQ(qp->post_recv(recv(5, {})), 0);
  auto h = write(Opcode::kRcWriteOnlyImm, kRqPsn, target, 8);
  h.imm = 77;
  receive(h, data(8));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(c[0].byte_len, 8u);
  EXPECT_EQ(c[0].imm_data, 77u);
}

TEST_F(ResponderTest, AckCoalescingFoldsQueuedAcksIntoTheNewest) {
  for (std::uint32_t i = 0; i < 4; ++i)
    receive(write(Opcode::kRcWriteOnly, kRqPsn + i, target, 8), data(8));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn + 3, Aeth::ack(4));
}

TEST_F(ResponderTest, DuplicateWriteIsNotReexecutedAndReAcksTheLastGoodPsn) {
  receive(write(Opcode::kRcWriteOnly, kRqPsn, target, 8), data(8, 1));
  receive(write(Opcode::kRcWriteOnly, kRqPsn + 1, target + 8, 8), data(8, 2));
  drain();
  receive(write(Opcode::kRcWriteOnly, kRqPsn, target, 8, false), data(8, 99));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn + 1, Aeth::ack(2));
  const auto first = data(8, 1);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), bytes(target, 8).begin()));
  EXPECT_EQ(qp->counters().duplicate_requests, 1u);
}

TEST_F(ResponderTest, ReadIsAnsweredWithSegmentedResponsesCarryingTheMsn) {
  fill(target, 600, 4);
  receive(read(kRqPsn, target, 600));
  const auto out = drain();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadResponseFirst);
  EXPECT_EQ(out[1].opcode(), Opcode::kRcReadResponseMiddle);
  EXPECT_EQ(out[2].opcode(), Opcode::kRcReadResponseLast);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::ack(1));
  EXPECT_FALSE(out[1].hdr().aeth);
  EXPECT_EQ(out[2].hdr().aeth, Aeth::ack(1));
  std::vector<std::uint8_t> all;
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].psn(), kRqPsn + i);
    all.insert(all.end(), out[i].payload.begin(), out[i].payload.end());
  }
  EXPECT_TRUE(std::equal(all.begin(), all.end(), bytes(target, 600).begin()));
  EXPECT_EQ(qp->expected_psn(), wire::Psn(kRqPsn + 3));
}

TEST_F(ResponderTest, ZeroLengthReadIsOneResponseOnly) {
  receive(read(kRqPsn, 0, 0));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadResponseOnly);
  EXPECT_TRUE(out[0].payload.empty());
}

TEST_F(ResponderTest, DuplicateReadIsReexecutedFromTheDuplicatesPsn) {
  fill(target, 600, 4);
  receive(read(kRqPsn, target, 600));
  drain();
  fill(target, 600, 8);  // reads are idempotent: the replay reads memory again
  receive(read(kRqPsn + 1, target + 256, 344));
  const auto out = drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadResponseMiddle);  // rxe's replay form
  EXPECT_EQ(out[0].psn(), kRqPsn + 1);
  EXPECT_EQ(out[1].opcode(), Opcode::kRcReadResponseLast);
  EXPECT_TRUE(
      std::equal(out[1].payload.begin(), out[1].payload.end(), bytes(target + 512, 88).begin()));
  // Whole replay from the first PSN starts with FIRST.
  receive(read(kRqPsn, target, 600));
  EXPECT_EQ(drain()[0].opcode(), Opcode::kRcReadResponseFirst);
  // A duplicate that is not a sub-range of the original is dropped.
  receive(read(kRqPsn + 1, target + 200, 344));
  EXPECT_TRUE(drain().empty());
}

// A go-back-N from the middle of a READ whose reply already left, while the responder is partway
// through the next one: the replay goes first, the READ under way starts over after it, and the
// resent requests that follow find their replies queued; every PSN leaves once, in order.
// Behind the queued replies, the requester would drop all of them as past its gap.
TEST_F(ResponderTest, ADuplicateReadIsRepliedAheadOfRepliesQueuedForLaterReads) {
  fill(target, 1536, 4);
  receive(read(kRqPsn, target, 512));             // A: PSNs +0, +1
  receive(read(kRqPsn + 2, target + 512, 512));   // B: +2, +3
  receive(read(kRqPsn + 4, target + 1024, 512));  // C: +4, +5
  const auto before = drain(0, 3);                // A's two replies and B's first
  ASSERT_EQ(before.size(), 3u);
  EXPECT_EQ(before[2].psn(), kRqPsn + 2);
  // The requester lost +1 and goes back there, resending B and C behind it.
  receive(read(kRqPsn + 1, target + 256, 256));
  receive(read(kRqPsn + 2, target + 512, 512));
  receive(read(kRqPsn + 4, target + 1024, 512));
  const auto out = drain();
  ASSERT_EQ(out.size(), 5u);
  std::vector<std::uint8_t> all;
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].psn(), kRqPsn + 1 + i) << i;
    all.insert(all.end(), out[i].payload.begin(), out[i].payload.end());
  }
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadResponseLast);
  EXPECT_EQ(out[1].opcode(), Opcode::kRcReadResponseFirst);
  EXPECT_EQ(out[4].opcode(), Opcode::kRcReadResponseLast);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::ack(1));  // each reply keeps its READ's MSN
  EXPECT_EQ(out[2].hdr().aeth, Aeth::ack(2));
  EXPECT_EQ(out[4].hdr().aeth, Aeth::ack(3));
  EXPECT_TRUE(std::equal(all.begin(), all.end(), bytes(target + 256, 1280).begin()));
  EXPECT_EQ(qp->counters().duplicate_requests, 3u);
  EXPECT_EQ(qp->counters().replays_reordered, 1u);
}

// Replays of ATOMICs go in PSN order too, and a duplicate READ whose reply is the one under way
// restarts it where it stands in the queue.
TEST_F(ResponderTest, AnAtomicReplayGoesAheadOfALaterReadAndAReplayUnderWayRestartsInPlace) {
  fill(target + 64, 512, 4);
  std::uint64_t v = 10;
  std::memcpy(bytes(target, 8).data(), &v, 8);
  receive(atomic(Opcode::kRcFetchAdd, kRqPsn, target, 5));  // +0
  receive(read(kRqPsn + 1, target + 64, 512));              // +1, +2
  ASSERT_EQ(drain(0, 2).size(), 2u);                        // the ATOMIC ACK and READ's first
  receive(atomic(Opcode::kRcFetchAdd, kRqPsn, target, 5));
  receive(read(kRqPsn + 1, target + 64, 512));
  const auto out = drain();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcAtomicAck);
  EXPECT_EQ(out[0].hdr().atomic_ack_orig, 10u);
  EXPECT_EQ(out[1].psn(), kRqPsn + 1);
  EXPECT_EQ(out[1].opcode(), Opcode::kRcReadResponseFirst);
  EXPECT_EQ(out[2].psn(), kRqPsn + 2);
  std::memcpy(&v, bytes(target, 8).data(), 8);
  EXPECT_EQ(v, 15u);  // executed once
}

TEST_F(ResponderTest, DuplicateAtomicIsAnsweredFromTheReplayCache) {
  std::uint64_t v = 10;
  std::memcpy(bytes(target, 8).data(), &v, 8);
  receive(atomic(Opcode::kRcFetchAdd, kRqPsn, target, 5));
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcAtomicAck);
  EXPECT_EQ(out[0].hdr().atomic_ack_orig, 10u);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::ack(1));
  receive(atomic(Opcode::kRcFetchAdd, kRqPsn, target, 5));
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr().atomic_ack_orig, 10u);
  std::memcpy(&v, bytes(target, 8).data(), 8);
  EXPECT_EQ(v, 15u);  // executed once
}

TEST_F(ResponderTest, CompareSwapSwapsOnlyOnEquality) {
  std::uint64_t v = 3;
  std::memcpy(bytes(target, 8).data(), &v, 8);
  receive(atomic(Opcode::kRcCompareSwap, kRqPsn, target, 9, 4));
  receive(atomic(Opcode::kRcCompareSwap, kRqPsn + 1, target, 9, 3));
  const auto out = drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].hdr().atomic_ack_orig, 3u);
  EXPECT_EQ(out[1].hdr().atomic_ack_orig, 3u);
  std::memcpy(&v, bytes(target, 8).data(), 8);
  EXPECT_EQ(v, 9u);
}

TEST_F(ResponderTest, RkeyViolationIsARemoteAccessError) {
  auto h = write(Opcode::kRcWriteOnly, kRqPsn, target, 8);
  h.reth->rkey = wire::Rkey(0xBAD00);
  receive(h, data(8));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::nak(0, NakCode::kRemoteAccessError));
  EXPECT_EQ(qp->state(), QpState::kErr);
  // The responder's consumer hears of it (IBA 11.6.3: a local access violation work queue
  // error, IBV_EVENT_QP_ACCESS_ERR), and the responder counts it.
  const auto e = qp->poll_event();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, AsyncEventType::kQpAccessErr);
  EXPECT_EQ(e->qpn, qp->qpn());
  EXPECT_FALSE(qp->poll_event());
  EXPECT_EQ(qp->counters().rkey_violations, 1u);
}

TEST_F(ResponderTest, OutOfBoundsAndMissingMrAccessAreRemoteAccessErrors) {
  receive(read(kRqPsn, local + kBufBytes - 4, 8));
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::nak(0, NakCode::kRemoteAccessError));

  make_qp(QpOptions{});
  const std::uint64_t ro = mem.allocate(64);
  const MemoryRegion mr = mrs.register_region(ro, 64, access::kRemoteRead);
  auto h = packet(Opcode::kRcWriteOnly, kRqPsn, true);
  h.reth = wire::Reth{ro, mr.rkey, 8};
  receive(h, data(8));
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::nak(0, NakCode::kRemoteAccessError));
}

TEST_F(ResponderTest, UnexpectedOpcodeIsAnInvalidRequest) {
  receive(packet(Opcode::kRcSendMiddle, kRqPsn), data(256));  // no message in progress
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::nak(0, NakCode::kInvalidRequest));
  EXPECT_EQ(qp->state(), QpState::kErr);
  // An invalid request local work queue error (IBV_EVENT_QP_REQ_ERR); not an access error.
  const auto e = qp->poll_event();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, AsyncEventType::kQpReqErr);
  EXPECT_EQ(qp->counters().rkey_violations, 0u);

  make_qp(QpOptions{});
  ASSERT_EQ(qp->post_recv(recv(1, {sge(local, 1024)})), 0);
  receive(packet(Opcode::kRcSendFirst, kRqPsn), data(256));
  receive(write(Opcode::kRcWriteOnly, kRqPsn + 1, target, 8), data(8));  // inside a SEND
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn + 1, Aeth::nak(0, NakCode::kInvalidRequest));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);  // the receive WQE in progress completes in error
  EXPECT_NE(c[0].status, WcStatus::kSuccess);
}

TEST_F(ResponderTest, QpAccessFlagsGateRemoteOperations) {
  QpOptions o;
  o.access = access::kRemoteWrite;
  make_qp(o);
  receive(read(kRqPsn, target, 8));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::nak(0, NakCode::kInvalidRequest));
}

TEST_F(ResponderTest, MisalignedAtomicIsAnInvalidRequest) {
  receive(atomic(Opcode::kRcFetchAdd, kRqPsn, target + 4, 1));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::nak(0, NakCode::kInvalidRequest));
}

TEST_F(ResponderTest, ReadWithoutResponderResourcesIsAnInvalidRequest) {
  QpOptions o;
  o.max_dest_rd_atomic = 0;
  make_qp(o);
  receive(read(kRqPsn, target, 8));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::nak(0, NakCode::kInvalidRequest));
}

TEST_F(ResponderTest, MalformedReceiveWqeIsARemoteOperationalError) {
  ASSERT_EQ(qp->post_recv(recv(3, {Sge{local, 64, wire::Lkey(0xBAD00)}})), 0);
  receive(packet(Opcode::kRcSendOnly, kRqPsn, true), data(8));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::nak(0, NakCode::kRemoteOperationalError));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 3u);
  EXPECT_EQ(c[0].status, WcStatus::kLocProtErr);
  EXPECT_EQ(qp->state(), QpState::kErr);
}

TEST_F(ResponderTest, SendLongerThanTheReceiveBufferIsALengthError) {
  ASSERT_EQ(qp->post_recv(recv(3, {sge(local, 16)})), 0);
  ASSERT_EQ(qp->post_recv(recv(4, {sge(local, 16)})), 0);
  receive(packet(Opcode::kRcSendOnly, kRqPsn, true), data(17));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::nak(0, NakCode::kInvalidRequest));
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].status, WcStatus::kLocLenErr);
  EXPECT_EQ(c[1].status, WcStatus::kWrFlushErr);
}

TEST_F(ResponderTest, WrongPacketLengthsAreInvalidRequests) {
  receive(write(Opcode::kRcWriteFirst, kRqPsn, target, 600), data(255));  // FIRST != PMTU
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::nak(0, NakCode::kInvalidRequest));
}

// The responder judges packet lengths by the same MTU the requester segments at: the path MTU,
// bounded by the port's.
TEST_F(ResponderTest, PathMtuAboveThePortMtuJudgesLengthsByThePortMtu) {
  QpOptions o;
  o.path_mtu = PathMtu::k4096;
  o.port_mtu = PathMtu::k1024;
  make_qp(o);
  receive(write(Opcode::kRcWriteFirst, kRqPsn, target, 3000), data(1024));
  receive(packet(Opcode::kRcWriteMiddle, kRqPsn + 1), data(1024));
  receive(packet(Opcode::kRcWriteLast, kRqPsn + 2, true), data(952));
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn + 2, Aeth::ack(1));
  receive(write(Opcode::kRcWriteOnly, kRqPsn + 3, target, 2048, true), data(2048));
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn + 3, Aeth::nak(1, NakCode::kInvalidRequest));
}

// o10-37.2.x: SEND_WITH_INV invalidates the type 2 window its IETH names; the receive
// completion reports the R_Key with IBV_WC_WITH_INV.
TEST_F(ResponderTest, SendWithInvalidateInvalidatesATypeTwoWindow) {
  const std::uint64_t buf = mem.allocate(64);
  const MemoryRegion mr =
      mrs.register_region(buf, 64, access::kLocalWrite | access::kRemoteRead | access::kMwBind);
  const wire::Rkey w = *mrs.allocate_window(MwType::kType2);
  const wire::Rkey bound((w.value() & ~0xFFu) | 0x07);
  ASSERT_TRUE(mrs.bind_window({w, bound, mr.lkey, buf, 64, access::kRemoteRead}, kLocalQpn));
  ASSERT_EQ(qp->post_recv(recv(1, {sge(local, 64)})), 0);
  auto h = packet(Opcode::kRcSendOnlyInv, kRqPsn, true);
  h.ieth = bound;
  receive(h, data(8));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wc_flags, wc_flags::kWithInv);
  EXPECT_EQ(c[0].invalidated_rkey, bound);
  EXPECT_FALSE(mrs.check_remote(bound, buf, 8, access::kRemoteRead, kLocalQpn));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::ack(1));
}

// A region registered with ibv_reg_mr cannot be invalidated (o10-37.2.26 lets only type 2
// windows; rxe_invalidate_mr refuses user regions): NAK invalid request, the receive WQE
// completes in error and the QP goes to ERR.
TEST_F(ResponderTest, SendWithInvalidateOfARegionIsAnInvalidRequest) {
  ASSERT_EQ(qp->post_recv(recv(1, {sge(local, 64)})), 0);
  auto h = packet(Opcode::kRcSendOnlyInv, kRqPsn, true);
  h.ieth = local_mr.rkey;
  receive(h, data(8));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  expect_ack(out[0], kRqPsn, Aeth::nak(0, NakCode::kInvalidRequest));
  const auto c = completions();
  ASSERT_GE(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(qp->state(), QpState::kErr);
  EXPECT_EQ(qp->counters().invalid_requests, 1u);
  EXPECT_TRUE(mrs.check_remote(local_mr.rkey, local, 8, access::kRemoteRead));
}

TEST_F(ResponderTest, SrqSuppliesReceiveWqesAndRaisesTheLimitEvent) {
  Srq srq(16);
  QpOptions o;
  o.srq = &srq;
  make_qp(o);
  EXPECT_EQ(qp->post_recv(recv(1, {})), EINVAL);  // a QP on an SRQ has no receive queue
  for (std::uint64_t i = 0; i < 3; ++i)
    ASSERT_EQ(srq.post_recv(recv(10 + i, {sge(local + 64 * i, 64)})), 0);
  ASSERT_EQ(srq.set_limit(2), 0);
  receive(packet(Opcode::kRcSendOnly, kRqPsn, true), data(8));
  EXPECT_FALSE(srq.poll_limit_event());  // 2 left: not below the limit
  receive(packet(Opcode::kRcSendOnly, kRqPsn + 1, true), data(8));
  EXPECT_TRUE(srq.poll_limit_event());
  EXPECT_FALSE(srq.poll_limit_event());  // fires once, then disarmed
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].wr_id, 10u);
  EXPECT_EQ(c[1].wr_id, 11u);
}

TEST_F(ResponderTest, ResponsesAndCnpsFromTheWrongFamilyAreDroppedAtTheDoor) {
  auto h = packet(Opcode::kUdSendOnly, kRqPsn);
  h.deth = wire::Deth{wire::Qkey(0x1234), kPeerQpn};
  receive(h, data(8));
  EXPECT_EQ(qp->counters().dropped, 1u);
  receive(packet(Opcode::kCnp, 0));
  EXPECT_EQ(qp->counters().cnps_received, 1u);
  EXPECT_TRUE(drain().empty());
}

}  // namespace
}  // namespace xroce::transport::testing
