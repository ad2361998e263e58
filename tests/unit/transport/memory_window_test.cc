// Memory windows, iova and re-registration on the wire, one rule per test: binds and LOCAL_INV
// executed in send-queue order and completed in order (o10-36.2.x, o10-37.2.x, C10-72..C10-75;
// rxe_mw.c, rxe_req.c rxe_do_local_ops), remote access through windows and its NAKs (C9-xx R_Key
// checks; rxe_resp.c check_rkey, rxe_recheck_mr), zero-based windows, ibv_reg_mr_iova.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>

#include "protocol_harness.h"

namespace xroce::transport::testing {
namespace {

using wire::Aeth;
using wire::NakCode;
using wire::Opcode;

class WindowTest : public ProtocolTest {
 protected:
  // The window's memory: a region the application registered with MW_BIND.
  std::uint64_t region = mem.allocate(4096);
  MemoryRegion bindable = mrs.register_region(
      region, 4096, access::kLocalWrite | access::kRemoteWrite | access::kMwBind);

  static wire::Rkey next_key(wire::Rkey k) {
    return wire::Rkey((k.value() & ~0xFFu) | ((k.value() + 1) & 0xFF));  // ibv_inc_rkey
  }
  WorkRequest bind_wr(std::uint64_t id, wire::Rkey window, std::uint64_t va, std::uint64_t len,
                      std::uint32_t acc) {
    WorkRequest w = wr(WrOpcode::kBindMw, id, {});
    w.bind = WindowBind{window, next_key(window), bindable.lkey, va, len, acc};
    return w;
  }
  WorkRequest local_inv(std::uint64_t id, wire::Rkey rkey) {
    WorkRequest w = wr(WrOpcode::kLocalInv, id, {});
    w.invalidate_rkey = rkey;
    return w;
  }
  // A window bound to this QP, as the peer will name it.
  wire::Rkey bound_window(std::uint64_t va, std::uint64_t len, std::uint32_t acc) {
    const wire::Rkey w = *mrs.allocate_window(MwType::kType2);
    EXPECT_TRUE(mrs.bind_window({w, next_key(w), bindable.lkey, va, len, acc}, kLocalQpn));
    return next_key(w);
  }
  wire::TransportHeaders write(std::uint32_t psn, wire::Rkey rkey, std::uint64_t va,
                               std::uint32_t len) {
    auto h = packet(Opcode::kRcWriteOnly, psn, true);
    h.reth = wire::Reth{va, rkey, len};
    return h;
  }
  static std::vector<std::uint8_t> data(std::size_t n) {
    std::vector<std::uint8_t> v(n);
    for (std::size_t i = 0; i < n; ++i)
      v[i] = static_cast<std::uint8_t>(0x40 + i);
    return v;
  }
};

// IBV_WR_BIND_MW takes effect at its place in the send queue, sends nothing, and completes in
// order: after the SEND posted before it is acknowledged.
TEST_F(WindowTest, BindExecutesInOrderAndCompletesAfterEarlierWork) {
  const wire::Rkey w = *mrs.allocate_window(MwType::kType2);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(qp->post_send(bind_wr(2, w, region, 256, access::kRemoteWrite)), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);  // the SEND; the bind is local
  EXPECT_TRUE(mrs.check_remote(next_key(w), region, 256, access::kRemoteWrite, kLocalQpn));
  EXPECT_TRUE(completions().empty());  // the SEND before it is not acknowledged yet
  receive(ack(kSqPsn));
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[1].wr_id, 2u);
  EXPECT_EQ(c[1].opcode, WcOpcode::kBindMw);
  EXPECT_EQ(c[1].status, WcStatus::kSuccess);
}

// C10-75: a bind reaching beyond its region fails with IBV_WC_MW_BIND_ERR; the QP goes to ERR
// (rxe_do_local_ops), the WQEs behind it are flushed and nothing more is sent.
TEST_F(WindowTest, BindBeyondTheRegionIsAnMwBindErrorAndTheQpGoesToErr) {
  const wire::Rkey w = *mrs.allocate_window(MwType::kType2);
  ASSERT_EQ(qp->post_send(bind_wr(1, w, region + 4000, 200, access::kRemoteWrite)), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 2, {sge(local, 8)})), 0);
  EXPECT_TRUE(drain().empty());
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].status, WcStatus::kMwBindErr);
  EXPECT_EQ(c[0].opcode, WcOpcode::kBindMw);
  EXPECT_EQ(c[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(qp->state(), QpState::kErr);
  EXPECT_EQ(qp->counters().mw_bind_errors, 1u);
  EXPECT_FALSE(mrs.check_remote(next_key(w), region + 4000, 8, 0, kLocalQpn));
}

// LOCAL_INV of a type 2 window (o10-37.2.x): Valid -> Free; later WQEs already see it free.
TEST_F(WindowTest, LocalInvalidateFreesATypeTwoWindow) {
  const wire::Rkey rkey = bound_window(region, 64, access::kRemoteWrite);
  ASSERT_EQ(qp->post_send(local_inv(1, rkey)), 0);
  EXPECT_TRUE(drain().empty());
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].opcode, WcOpcode::kLocalInv);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_FALSE(mrs.check_remote(rkey, region, 8, access::kRemoteWrite, kLocalQpn));
  EXPECT_EQ(qp->state(), QpState::kRts);
}

// o10-37.2.26: a type 1 window is never invalidated by LOCAL_INV; the WR fails with
// IBV_WC_LOC_QP_OP_ERR (rxe_do_local_ops) and the window keeps working.
TEST_F(WindowTest, LocalInvalidateOfATypeOneWindowFails) {
  const wire::Rkey w = *mrs.allocate_window(MwType::kType1);
  ASSERT_TRUE(mrs.bind_window({w, next_key(w), bindable.lkey, region, 64, access::kRemoteWrite},
                              kLocalQpn));
  ASSERT_EQ(qp->post_send(local_inv(1, next_key(w))), 0);
  drain();
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kLocQpOpErr);
  EXPECT_EQ(qp->state(), QpState::kErr);
  EXPECT_TRUE(mrs.check_remote(next_key(w), region, 8, access::kRemoteWrite, kPeerQpn));
}

// A go-back-N restart re-sends the WRITE after a bind, never the bind itself.
TEST_F(WindowTest, RetryDoesNotExecuteABindTwice) {
  const wire::Rkey w = *mrs.allocate_window(MwType::kType2);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  ASSERT_EQ(qp->post_send(bind_wr(2, w, region, 64, access::kRemoteWrite)), 0);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 3, {sge(local, 8)})), 0);
  ASSERT_EQ(drain().size(), 2u);
  receive(ack(kSqPsn, Aeth::nak(0, NakCode::kPsnSequenceError)));  // NAK-seq for the first SEND
  const auto again = drain_resend();
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].psn(), kSqPsn);
  EXPECT_EQ(again[1].psn(), kSqPsn + 1);
  receive(ack(kSqPsn + 1));
  const auto c = completions();
  ASSERT_EQ(c.size(), 3u);
  for (const auto& x : c)
    EXPECT_EQ(x.status, WcStatus::kSuccess);
  EXPECT_EQ(qp->counters().mw_bind_errors, 0u);  // a second bind of a Valid window would fail
}

// The responder reaches memory through a bound window, inside the window only.
TEST_F(WindowTest, WriteThroughABoundWindowLandsInTheRegion) {
  const wire::Rkey rkey = bound_window(region + 512, 256, access::kRemoteWrite);
  const auto payload = data(32);
  receive(write(kRqPsn, rkey, region + 512 + 16, 32), payload);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::ack(1));
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), bytes(region + 528, 32).begin()));
}

// C9-xx (R_Key check) / rxe check_rkey -> RESPST_ERR_RKEY_VIOLATION: a WRITE through an
// invalidated window is NAKed remote access error, the responder QP goes to ERR, memory is
// untouched and the violation is counted.
TEST_F(WindowTest, WriteThroughAnInvalidatedWindowIsARemoteAccessError) {
  const wire::Rkey rkey = bound_window(region, 256, access::kRemoteWrite);
  ASSERT_TRUE(mrs.invalidate(rkey));
  receive(write(kRqPsn, rkey, region, 32), data(32));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kRcAck);
  EXPECT_EQ(out[0].psn(), kRqPsn);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::nak(0, NakCode::kRemoteAccessError));
  EXPECT_EQ(qp->state(), QpState::kErr);
  EXPECT_EQ(qp->counters().rkey_violations, 1u);
  EXPECT_EQ(bytes(region, 1)[0], 0);
}

// The same for a window allocated but never bound (type 2 Free).
TEST_F(WindowTest, WriteThroughAnUnboundWindowIsARemoteAccessError) {
  const wire::Rkey w = *mrs.allocate_window(MwType::kType2);
  receive(write(kRqPsn, w, region, 8), data(8));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::nak(0, NakCode::kRemoteAccessError));
  EXPECT_EQ(qp->state(), QpState::kErr);
}

// C10-72 (type 2B): a window answers only the QP that bound it.
TEST_F(WindowTest, TypeTwoWindowOfAnotherQpIsARemoteAccessError) {
  const wire::Rkey w = *mrs.allocate_window(MwType::kType2);
  ASSERT_TRUE(mrs.bind_window({w, next_key(w), bindable.lkey, region, 64, access::kRemoteWrite},
                              wire::Qpn(0x99)));
  receive(write(kRqPsn, next_key(w), region, 8), data(8));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::nak(0, NakCode::kRemoteAccessError));
}

// A WRITE past the window's end is refused even though the region would allow it.
TEST_F(WindowTest, WritePastTheWindowIsARemoteAccessError) {
  const wire::Rkey rkey = bound_window(region, 64, access::kRemoteWrite);
  receive(write(kRqPsn, rkey, region + 60, 8), data(8));
  EXPECT_EQ(drain().at(0).hdr().aeth, Aeth::nak(0, NakCode::kRemoteAccessError));
}

// IBV_ACCESS_ZERO_BASED: the RETH VA is an offset into the window.
TEST_F(WindowTest, ZeroBasedWindowTakesOffsetsFromTheWire) {
  const wire::Rkey rkey =
      bound_window(region + 1024, 128, access::kRemoteWrite | access::kZeroBased);
  const auto payload = data(16);
  receive(write(kRqPsn, rkey, 8, 16), payload);
  ASSERT_EQ(drain().at(0).hdr().aeth, Aeth::ack(1));
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), bytes(region + 1032, 16).begin()));
}

// rxe_recheck_mr: a READ whose window is invalidated between its response packets ends with a
// remote access error NAK instead of more data.
TEST_F(WindowTest, WindowInvalidatedUnderAReadEndsItWithARemoteAccessError) {
  const wire::Rkey w = *mrs.allocate_window(MwType::kType2);
  ASSERT_TRUE(mrs.bind_window(
      {w, next_key(w), bindable.lkey, region, 1024, access::kRemoteRead | access::kRemoteWrite},
      kLocalQpn));
  auto read = packet(Opcode::kRcReadRequest, kRqPsn, true);
  read.reth = wire::Reth{region, next_key(w), 3 * kMtu};
  receive(read);
  std::array<std::uint8_t, 4096> buf{};
  auto first = qp->poll_transmit(0, buf);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->hdr.bth.opcode, Opcode::kRcReadResponseFirst);
  ASSERT_TRUE(mrs.invalidate(next_key(w)));
  auto next = qp->poll_transmit(0, buf);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->hdr.bth.opcode, Opcode::kRcAck);
  EXPECT_EQ(next->hdr.bth.psn, wire::Psn(kRqPsn + 1));
  EXPECT_EQ(next->hdr.aeth->nak_code(), NakCode::kRemoteAccessError);
  EXPECT_EQ(qp->state(), QpState::kErr);
}

// ibv_reg_mr_iova: the peer names iova addresses; the bytes land at the buffer's own address.
TEST_F(WindowTest, WriteToAnIovaRegionLandsAtTheBuffer) {
  const std::uint64_t buf = mem.allocate(256);
  const MemoryRegion mr = mrs.register_region(buf, 256, access::kLocalWrite | access::kRemoteWrite,
                                              std::uint64_t{0x5000});
  const auto payload = data(24);
  receive(write(kRqPsn, mr.rkey, 0x5000 + 100, 24), payload);
  ASSERT_EQ(drain().at(0).hdr().aeth, Aeth::ack(1));
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), bytes(buf + 100, 24).begin()));
}

// ... and the requester's SGEs name iova addresses too.
TEST_F(WindowTest, SendGathersFromAnIovaRegion) {
  const std::uint64_t buf = mem.allocate(64);
  const MemoryRegion mr = mrs.register_region(buf, 64, access::kLocalWrite, std::uint64_t{0x9000});
  fill(buf, 64, 5);
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {Sge{0x9000 + 8, 16, mr.lkey}})), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(std::equal(out[0].payload.begin(), out[0].payload.end(), bytes(buf + 8, 16).begin()));
}

// ibv_rereg_mr(IBV_REREG_MR_CHANGE_ACCESS) without remote write: the next WRITE is a remote
// access error (pyverbs test_mr_rereg_access_bad_flow).
TEST_F(WindowTest, ReregisteredWithoutRemoteWriteRefusesWrites) {
  const std::uint64_t buf = mem.allocate(64);
  const MemoryRegion mr = mrs.register_region(buf, 64, access::kLocalWrite | access::kRemoteWrite);
  auto changed = mrs.reregister(mr.lkey, {{}, {}, {}, access::kLocalWrite});
  ASSERT_TRUE(changed);
  receive(write(kRqPsn, changed->rkey, buf, 8), data(8));
  EXPECT_EQ(drain().at(0).hdr().aeth, Aeth::nak(0, NakCode::kRemoteAccessError));
}

}  // namespace
}  // namespace xroce::transport::testing
