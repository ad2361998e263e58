// UC rules, one per test (IBA 9.7.5.1 responder classes D1/E for UC, 9.8 requester; rxe_req.c
// and rxe_resp.c for UC): no acknowledgements, a lost packet loses its message, the next
// FIRST/ONLY resynchronises, errors drop the message and never move the QP to ERR.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>

#include "protocol_harness.h"

namespace xroce::transport::testing {
namespace {

using wire::Opcode;

class UcTest : public ProtocolTest {
 protected:
  void SetUp() override {
    QpOptions o;
    o.type = QpType::kUc;
    make_qp(o);
  }
  std::vector<std::uint8_t> data(std::size_t n, std::uint8_t seed = 1) {
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; ++i)
      v[i] = static_cast<std::uint8_t>(seed + i * 13);
    return v;
  }
  std::uint64_t target = local + 16384;
  wire::TransportHeaders write(Opcode op, std::uint32_t psn, std::uint64_t va, std::uint32_t len) {
    auto h = packet(op, psn);
    h.reth = wire::Reth{va, local_mr.rkey, len};
    return h;
  }
};

// IBA 9.8: a UC requester segments like RC, in UC opcodes (0x20-0x2B), asks for no
// acknowledgement (rxe: AckReq 0 on UC), and completes a WQE once its last packet left.
TEST_F(UcTest, RequesterSendsUcOpcodesAndCompletesWithoutAnAck) {
  fill(local, 600, 3);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 600)})), 0);
  auto w = wr(WrOpcode::kRdmaWriteWithImm, 2, {sge(local, 100)});
  w.imm_data = 0x55;
  ASSERT_EQ(qp->post_send(w), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].opcode(), Opcode::kUcSendFirst);
  EXPECT_EQ(out[1].opcode(), Opcode::kUcSendMiddle);
  EXPECT_EQ(out[2].opcode(), Opcode::kUcSendLast);
  EXPECT_EQ(out[3].opcode(), Opcode::kUcWriteOnlyImm);
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_FALSE(out[i].hdr().bth.ack_req);
    EXPECT_EQ(out[i].psn(), kSqPsn + i);
  }
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[1].wr_id, 2u);
  EXPECT_EQ(c[1].opcode, WcOpcode::kRdmaWrite);
  EXPECT_EQ(qp->next_deadline(), std::nullopt);  // no retransmit timer on UC
  EXPECT_EQ(qp->oldest_unacked_psn(), wire::Psn(kSqPsn + 4));
}

// rxe_wr_opcode_info / IBA 9.2: UC has no READ, atomics, SEND_WITH_INV, ATOMIC WRITE or FLUSH.
TEST_F(UcTest, RequesterRefusesWhatUcCannotCarry) {
  for (WrOpcode op : {WrOpcode::kRdmaRead, WrOpcode::kAtomicCmpAndSwp, WrOpcode::kAtomicFetchAndAdd,
                      WrOpcode::kSendWithInv, WrOpcode::kAtomicWrite, WrOpcode::kFlush}) {
    EXPECT_EQ(qp->post_send(wr(op, 1, {sge(local, 8)})), EINVAL) << static_cast<int>(op);
  }
}

TEST_F(UcTest, ResponderDeliversAMultiPacketSendAndAnswersNothing) {
  ASSERT_EQ(qp->post_recv(recv(7, {sge(local, 1024)})), 0);
  const auto payload = data(300);
  receive(packet(Opcode::kUcSendFirst, kRqPsn), {payload.data(), 256});
  auto last = packet(Opcode::kUcSendLastImm, kRqPsn + 1);
  last.imm = 0x01020304;
  receive(last, {payload.data() + 256, 44});
  EXPECT_TRUE(drain().empty());
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 7u);
  EXPECT_EQ(c[0].byte_len, 300u);
  EXPECT_EQ(c[0].imm_data, 0x01020304u);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), bytes(local, 300).begin()));
}

// Class D1 (rxe check_psn for UC): a missing MIDDLE loses the message; the LAST that follows is
// dropped, the receive WQE is kept, and the next FIRST (at a later PSN) resynchronises and
// fills that same WQE.
TEST_F(UcTest, LostPacketDropsTheMessageAndTheNextFirstResynchronises) {
  ASSERT_EQ(qp->post_recv(recv(7, {sge(local, 1024)})), 0);
  const auto lost = data(600, 1);
  receive(packet(Opcode::kUcSendFirst, kRqPsn), {lost.data(), 256});
  // kRqPsn + 1 (MIDDLE) never arrives.
  receive(packet(Opcode::kUcSendLast, kRqPsn + 2), {lost.data() + 512, 88});
  EXPECT_TRUE(completions().empty());
  EXPECT_EQ(qp->counters().uc_dropped_messages, 1u);
  const auto next = data(40, 9);
  receive(packet(Opcode::kUcSendOnly, kRqPsn + 10), next);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 7u);
  EXPECT_EQ(c[0].byte_len, 40u);
  EXPECT_TRUE(std::equal(next.begin(), next.end(), bytes(local, 40).begin()));
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(qp->state(), QpState::kRts);
  EXPECT_EQ(qp->expected_psn(), wire::Psn(kRqPsn + 11));
}

// A receive WQE kept from a dropped SEND is not completed by a plain WRITE that follows.
TEST_F(UcTest, KeptWqeIsNotCompletedByAPlainWrite) {
  ASSERT_EQ(qp->post_recv(recv(7, {sge(local, 1024)})), 0);
  receive(packet(Opcode::kUcSendFirst, kRqPsn), data(256));
  receive(write(Opcode::kUcWriteOnly, kRqPsn + 2, target, 8), data(8));  // SEND's rest lost
  EXPECT_TRUE(completions().empty());
  receive(packet(Opcode::kUcSendOnly, kRqPsn + 3), data(8));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 7u);
  EXPECT_EQ(c[0].opcode, WcOpcode::kRecv);
}

// A PSN behind the expected one is a duplicate or a straggler: dropped, never delivered twice.
TEST_F(UcTest, DuplicateOrStragglerIsNeverDeliveredTwice) {
  ASSERT_EQ(qp->post_recv(recv(1, {sge(local, 64)})), 0);
  ASSERT_EQ(qp->post_recv(recv(2, {sge(local + 64, 64)})), 0);
  receive(packet(Opcode::kUcSendOnly, kRqPsn), data(8, 1));
  receive(packet(Opcode::kUcSendOnly, kRqPsn), data(8, 1));  // the network duplicated it
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(qp->counters().duplicate_requests, 1u);
}

// Class D1: a FIRST while a message is in progress starts a new message; the old one is lost.
TEST_F(UcTest, NewFirstInsideAMessageReplacesIt) {
  ASSERT_EQ(qp->post_recv(recv(7, {sge(local, 1024)})), 0);
  receive(packet(Opcode::kUcSendFirst, kRqPsn), data(256, 1));
  const auto fresh = data(300, 5);
  receive(packet(Opcode::kUcSendFirst, kRqPsn + 1), {fresh.data(), 256});
  receive(packet(Opcode::kUcSendLast, kRqPsn + 2), {fresh.data() + 256, 44});
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].byte_len, 300u);
  EXPECT_TRUE(std::equal(fresh.begin(), fresh.end(), bytes(local, 300).begin()));
  EXPECT_EQ(qp->counters().uc_dropped_messages, 1u);
}

// rxe check_op_seq (UC): a MIDDLE or LAST with no message in progress is dropped silently.
TEST_F(UcTest, ContinuationWithoutAFirstIsDroppedSilently) {
  ASSERT_EQ(qp->post_recv(recv(7, {sge(local, 1024)})), 0);
  receive(packet(Opcode::kUcSendLast, kRqPsn), data(8));
  receive(write(Opcode::kUcWriteMiddle, kRqPsn + 1, target, 0), data(256));
  EXPECT_TRUE(completions().empty());
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(qp->state(), QpState::kRts);
  receive(packet(Opcode::kUcSendOnly, kRqPsn + 2), data(8));
  EXPECT_EQ(completions().size(), 1u);
}

// No RNR on UC (rxe: "UD/UC - class D"): a SEND with no receive WQE is lost, nothing is sent.
TEST_F(UcTest, SendWithoutAReceiveWqeIsLostWithoutAnRnrNak) {
  receive(packet(Opcode::kUcSendOnly, kRqPsn), data(8));
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(qp->counters().rnr_naks_sent, 0u);
  EXPECT_EQ(qp->counters().uc_dropped_messages, 1u);
  ASSERT_EQ(qp->post_recv(recv(1, {sge(local, 64)})), 0);
  receive(packet(Opcode::kUcSendOnly, kRqPsn + 1), data(8));
  EXPECT_EQ(completions().size(), 1u);
}

// rxe_responder RESPST_ERR_RKEY_VIOLATION for UC without an SRQ (class D): the WRITE is
// dropped, memory untouched, no NAK, the QP stays RTS.
TEST_F(UcTest, WriteWithABadRkeyIsDroppedAndTheQpStaysRts) {
  const auto payload = data(64);
  auto h = write(Opcode::kUcWriteOnly, kRqPsn, target, 64);
  h.reth->rkey = wire::Rkey(0xBAD00);
  receive(h, payload);
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(qp->state(), QpState::kRts);
  EXPECT_EQ(qp->counters().rkey_violations, 1u);
  EXPECT_TRUE(std::all_of(bytes(target, 64).begin(), bytes(target, 64).end(),
                          [](std::uint8_t b) { return b == 0; }));
  receive(write(Opcode::kUcWriteOnly, kRqPsn + 1, target, 64), payload);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), bytes(target, 64).begin()));
}

// rxe check_op_valid (UC): a WRITE the QP's access flags forbid is dropped, not NAKed.
TEST_F(UcTest, WriteTheQpDoesNotAllowIsDropped) {
  QpOptions o;
  o.type = QpType::kUc;
  o.access = 0;
  make_qp(o);
  receive(write(Opcode::kUcWriteOnly, kRqPsn, target, 8), data(8));
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(qp->state(), QpState::kRts);
  EXPECT_EQ(bytes(target, 1)[0], 0);
}

// Class E (rxe: UC with an SRQ): a WQE already taken from the SRQ cannot go back, so it
// completes in error; the QP stays RTS.
TEST_F(UcTest, LengthErrorOnAnSrqCompletesTheTakenWqeInError) {
  Srq srq(4);
  QpOptions o;
  o.type = QpType::kUc;
  o.srq = &srq;
  make_qp(o);
  ASSERT_EQ(srq.post_recv(recv(3, {sge(local, 16)})), 0);
  receive(packet(Opcode::kUcSendOnly, kRqPsn), data(64));  // 64 bytes into a 16-byte WQE
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 3u);
  EXPECT_EQ(c[0].status, WcStatus::kLocLenErr);
  EXPECT_EQ(qp->state(), QpState::kRts);
  EXPECT_TRUE(drain().empty());
}

// ib_modify_qp_is_ok: UC's INIT->RTR needs no responder resources or RNR timer, RTR->RTS only
// the SQ PSN; RC's requester attributes are refused.
TEST_F(UcTest, ModifyQpFollowsTheUcColumnOfTheTransitionTable) {
  QpConfig cfg;
  cfg.type = QpType::kUc;
  cfg.qpn = wire::Qpn(0x33);
  Qp fresh(cfg, mrs);
  namespace m = qp_attr;
  QpAttr a;
  a.qp_state = QpState::kInit;
  ASSERT_EQ(fresh.modify(a, m::kState | m::kPkeyIndex | m::kPort | m::kAccessFlags), 0);
  a.qp_state = QpState::kRtr;
  a.dest_qp_num = kPeerQpn;
  EXPECT_EQ(fresh.modify(a, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn |
                                m::kMaxDestRdAtomic),
            EINVAL);
  ASSERT_EQ(fresh.modify(a, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn), 0);
  a.qp_state = QpState::kRts;
  EXPECT_EQ(fresh.modify(a, m::kState | m::kSqPsn | m::kTimeout), EINVAL);
  EXPECT_EQ(fresh.modify(a, m::kState | m::kSqPsn), 0);
}

}  // namespace
}  // namespace xroce::transport::testing
