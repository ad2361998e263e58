// ATOMIC WRITE (0x1D) and FLUSH (0x1C), one rule per test, as the IBA 1.5 annex states them and
// rxe implements them (rxe_req.c, rxe_resp.c atomic_write_reply / process_flush / check_rkey,
// rxe_comp.c): headers and payload on the wire, the READ RESPONSE ONLY without payload that
// answers both, responder resources and replay, access and alignment NAKs.
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
namespace placement = wire::flush_placement;

class AtomicWriteFlushTest : public ProtocolTest {
 protected:
  std::uint64_t target = local + 16384;  // naturally aligned
  // A region the peer may flush (IBV_ACCESS_FLUSH_GLOBAL) as well as write.
  std::uint64_t flushable = mem.allocate(4096);
  MemoryRegion flush_mr = mrs.register_region(
      flushable, 4096, access::kLocalWrite | access::kRemoteWrite | access::kFlushGlobal);

  void SetUp() override { make_qp(all_access()); }
  static QpOptions all_access() {
    QpOptions o;
    o.access = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic |
               access::kFlushGlobal | access::kFlushPersistent;
    return o;
  }
  WorkRequest flush(std::uint64_t id, std::uint32_t len, std::uint8_t where,
                    wire::FlushSelectivity sel = wire::FlushSelectivity::kRange) {
    WorkRequest w = wr(WrOpcode::kFlush, id, {});
    w.flush = FlushRequest{len, where, static_cast<std::uint8_t>(sel)};
    return w;
  }
  static wire::TransportHeaders empty_read_response(std::uint32_t psn, std::uint32_t msn = 1) {
    auto h = packet(Opcode::kRcReadResponseOnly, psn);
    h.aeth = Aeth::ack(msn);
    return h;
  }
  wire::TransportHeaders aw_packet(std::uint32_t psn, std::uint64_t va, wire::Rkey rkey) {
    auto h = packet(Opcode::kRcAtomicWrite, psn, true);
    h.reth = wire::Reth{va, rkey, 8};
    return h;
  }
  wire::TransportHeaders flush_packet(std::uint32_t psn, std::uint64_t va, std::uint32_t len,
                                      wire::Rkey rkey, std::uint8_t where,
                                      wire::FlushSelectivity sel = wire::FlushSelectivity::kRange) {
    auto h = packet(Opcode::kRcFlush, psn, true);
    h.feth = wire::Feth{where, static_cast<std::uint8_t>(sel)};
    h.reth = wire::Reth{va, rkey, len};
    return h;
  }
  void expect_nak(NakCode code) {
    const auto out = drain();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].opcode(), Opcode::kRcAck);
    EXPECT_EQ(out[0].psn(), kRqPsn);
    EXPECT_EQ(out[0].hdr().aeth->nak_code(), code);
    EXPECT_TRUE(out[0].hdr().aeth->is_nak());
    EXPECT_EQ(qp->state(), QpState::kErr);
  }
  static constexpr std::array<std::uint8_t, 8> kWord{1, 2, 3, 4, 5, 6, 7, 8};
};

// rxe_req.c (ATOMIC WRITE): BTH|RETH with DMA length 8 and the 8 bytes as payload, AckReq set;
// the WQE completes IBV_WC_ATOMIC_WRITE on the empty READ RESPONSE ONLY at its PSN.
TEST_F(AtomicWriteFlushTest, RequesterSendsAtomicWriteAndCompletesOnTheEmptyReadResponse) {
  WorkRequest w = wr(WrOpcode::kAtomicWrite, 5, {});
  w.atomic_write = kWord;
  ASSERT_EQ(qp->post_send(w), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcAtomicWrite);
  EXPECT_TRUE(out[0].hdr().bth.ack_req);
  EXPECT_EQ(out[0].hdr().reth->dma_length, 8u);
  EXPECT_EQ(out[0].hdr().reth->va, 0x7000000u);
  EXPECT_TRUE(std::equal(kWord.begin(), kWord.end(), out[0].payload.begin()));
  EXPECT_EQ(out[0].payload.size(), 8u);
  receive(ack(kSqPsn));  // a plain ACK cannot answer it
  EXPECT_TRUE(completions().empty());
  receive(empty_read_response(kSqPsn));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 5u);
  EXPECT_EQ(c[0].opcode, WcOpcode::kAtomicWrite);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
}

// oA19-2: FLUSH carries no payload; BTH|FETH|RETH with the placement type and selectivity of
// ibv_wr_flush; IBV_WC_FLUSH on its empty READ RESPONSE ONLY.
TEST_F(AtomicWriteFlushTest, RequesterSendsFlushWithFethAndRethOnly) {
  ASSERT_EQ(qp->post_send(flush(6, 4096, placement::kGlobal)), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcFlush);
  EXPECT_TRUE(out[0].payload.empty());
  EXPECT_EQ(out[0].hdr().feth, (wire::Feth{placement::kGlobal, 0}));
  EXPECT_EQ(out[0].hdr().reth->dma_length, 4096u);
  receive(empty_read_response(kSqPsn));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].opcode, WcOpcode::kFlush);
  EXPECT_EQ(c[0].byte_len, 0u);
}

// Both take a responder resource, so max_rd_atomic bounds them with READs and atomics; a
// coalesced ACK beyond one means its response was lost (implied NAK: go back).
TEST_F(AtomicWriteFlushTest, CountAgainstMaxRdAtomicAndAreRetriedOnAnImpliedNak) {
  QpOptions o = all_access();
  o.max_rd_atomic = 1;
  make_qp(o);
  ASSERT_EQ(qp->post_send(flush(1, 8, placement::kGlobal)), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kAtomicWrite, 2, {})), 0);
  ASSERT_EQ(drain().size(), 1u);
  EXPECT_EQ(qp->requester_state(0), RequesterState::kWaitRdAtomic);
  make_qp(all_access());
  ASSERT_EQ(qp->post_send(flush(3, 8, placement::kGlobal)), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 4, {sge(local, 8)})), 0);
  ASSERT_EQ(drain().size(), 2u);
  receive(ack(kSqPsn + 1));  // acknowledges the SEND beyond the FLUSH: its answer was lost
  const auto again = drain();
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].opcode(), Opcode::kRcFlush);
  EXPECT_TRUE(again[0].t.retransmission);
  EXPECT_TRUE(completions().empty());
}

// rxe atomic_write_reply: the word is stored, MSN counts it, and the answer is a READ RESPONSE
// ONLY of no payload whose AETH is an ACK.
TEST_F(AtomicWriteFlushTest, ResponderStoresTheWordAndAnswersWithAnEmptyReadResponse) {
  receive(aw_packet(kRqPsn, target, local_mr.rkey), kWord);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadResponseOnly);
  EXPECT_EQ(out[0].psn(), kRqPsn);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::ack(1));
  EXPECT_TRUE(out[0].payload.empty());
  EXPECT_TRUE(std::equal(kWord.begin(), kWord.end(), bytes(target, 8).begin()));
  EXPECT_EQ(qp->expected_psn(), wire::Psn(kRqPsn + 1));
}

// oA19-14/15 for a duplicate: answered from the responder resource, never stored twice.
TEST_F(AtomicWriteFlushTest, DuplicateAtomicWriteIsAnsweredWithoutStoringAgain) {
  receive(aw_packet(kRqPsn, target, local_mr.rkey), kWord);
  drain();
  fill(target, 8, 0x77);  // the application changed the word since
  receive(aw_packet(kRqPsn, target, local_mr.rkey), kWord);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadResponseOnly);
  EXPECT_EQ(out[0].psn(), kRqPsn);
  EXPECT_EQ(bytes(target, 1)[0], 0x77);
}

// oA19-28 / rxe RESPST_ERR_MISALIGNED_ATOMIC: the word must be naturally aligned.
TEST_F(AtomicWriteFlushTest, MisalignedAtomicWriteIsAnInvalidRequest) {
  receive(aw_packet(kRqPsn, target + 4, local_mr.rkey), kWord);
  expect_nak(NakCode::kInvalidRequest);
}

// rxe check_rkey (pktlen != resid): a DMA length or payload other than 8 bytes is invalid.
TEST_F(AtomicWriteFlushTest, AtomicWriteOfTheWrongLengthIsAnInvalidRequest) {
  auto h = aw_packet(kRqPsn, target, local_mr.rkey);
  h.reth->dma_length = 16;
  receive(h, kWord);
  expect_nak(NakCode::kInvalidRequest);
}

// rxe check_qp_attr_access: ATOMIC WRITE needs the QP's REMOTE_WRITE.
TEST_F(AtomicWriteFlushTest, AtomicWriteTheQpDoesNotAllowIsAnInvalidRequest) {
  QpOptions o;
  o.access = access::kRemoteAtomic;
  make_qp(o);
  receive(aw_packet(kRqPsn, target, local_mr.rkey), kWord);
  expect_nak(NakCode::kInvalidRequest);
}

// rxe process_flush: a FLUSH of a region with IBV_ACCESS_FLUSH_GLOBAL is answered once all
// before it executed; the WRITE before it is already in memory.
TEST_F(AtomicWriteFlushTest, ResponderAnswersAFlushAfterTheWritesBeforeIt) {
  auto wrt = packet(Opcode::kRcWriteOnly, kRqPsn);
  wrt.reth = wire::Reth{flushable, flush_mr.rkey, 8};
  receive(wrt, kWord);
  receive(flush_packet(kRqPsn + 1, flushable, 8, flush_mr.rkey, placement::kGlobal));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadResponseOnly);
  EXPECT_EQ(out[0].psn(), kRqPsn + 1);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::ack(2));
  EXPECT_TRUE(std::equal(kWord.begin(), kWord.end(), bytes(flushable, 8).begin()));
}

// rxe check_rkey (FLUSH): a region without the flush access of the placement type answers a
// remote access error; the QP goes to ERR and the violation is counted.
TEST_F(AtomicWriteFlushTest, FlushOfARegionWithoutTheAccessFlagIsARemoteAccessError) {
  receive(flush_packet(kRqPsn, target, 8, local_mr.rkey, placement::kGlobal));
  expect_nak(NakCode::kRemoteAccessError);
  EXPECT_EQ(qp->counters().rkey_violations, 1u);
}

// The same rule for persistence: FLUSH_GLOBAL on the region does not grant a persistent flush.
TEST_F(AtomicWriteFlushTest, PersistentFlushNeedsThePersistentFlag) {
  receive(flush_packet(kRqPsn, flushable, 8, flush_mr.rkey, placement::kPersistent));
  expect_nak(NakCode::kRemoteAccessError);
}

// rxe check_qp_attr_access: the QP's own access flags must allow the placement type.
TEST_F(AtomicWriteFlushTest, FlushTheQpDoesNotAllowIsAnInvalidRequest) {
  QpOptions o;
  o.access = access::kRemoteWrite;
  make_qp(o);
  receive(flush_packet(kRqPsn, flushable, 8, flush_mr.rkey, placement::kGlobal));
  expect_nak(NakCode::kInvalidRequest);
}

// Reserved placement bits or selectivity values make the request invalid.
TEST_F(AtomicWriteFlushTest, ReservedFethValuesAreInvalidRequests) {
  receive(flush_packet(kRqPsn, flushable, 8, flush_mr.rkey, 0x4));
  expect_nak(NakCode::kInvalidRequest);
}

// Selectivity "memory region" flushes the whole region: the RETH range is not checked.
TEST_F(AtomicWriteFlushTest, FlushOfAWholeRegionIgnoresTheRange) {
  receive(flush_packet(kRqPsn, 0xDEAD0000, 0xFFFFFF, flush_mr.rkey, placement::kGlobal,
                       wire::FlushSelectivity::kMemoryRegion));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadResponseOnly);
}

// A range outside the region is a remote access error.
TEST_F(AtomicWriteFlushTest, FlushOfARangeOutsideTheRegionIsARemoteAccessError) {
  receive(flush_packet(kRqPsn, flushable + 4090, 8, flush_mr.rkey, placement::kGlobal));
  expect_nak(NakCode::kRemoteAccessError);
}

// oA19-14/15: a duplicate FLUSH is answered again from its responder resource.
TEST_F(AtomicWriteFlushTest, DuplicateFlushIsAnsweredAgain) {
  receive(flush_packet(kRqPsn, flushable, 8, flush_mr.rkey, placement::kGlobal));
  drain();
  receive(flush_packet(kRqPsn, flushable, 8, flush_mr.rkey, placement::kGlobal));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcReadResponseOnly);
  EXPECT_EQ(out[0].psn(), kRqPsn);
  EXPECT_EQ(qp->counters().duplicate_requests, 1u);
}

// rxe check_resource: with no responder resources both are invalid requests.
TEST_F(AtomicWriteFlushTest, WithoutResponderResourcesBothAreInvalid) {
  QpOptions o = all_access();
  o.max_dest_rd_atomic = 0;
  make_qp(o);
  receive(aw_packet(kRqPsn, target, local_mr.rkey), kWord);
  expect_nak(NakCode::kInvalidRequest);
}

}  // namespace
}  // namespace xroce::transport::testing
