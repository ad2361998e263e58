// XRC, one rule per test (IBA 9.2 XRC opcodes and XRCETH; 9.9 XRC responder; the kernel's
// qp_state_table columns for XRC_INI / XRC_TGT): an initiator names the target's XRC SRQ in
// every request, a target takes receive WQEs (and the PD for R_Key checks) from that SRQ, and
// only from SRQs of its own XRC domain.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "protocol_harness.h"

namespace xroce::transport::testing {
namespace {

using wire::Aeth;
using wire::NakCode;
using wire::Opcode;

constexpr std::uint32_t kSrqn = 0x000321;
constexpr std::uint32_t kForeignSrqn = 0x000999;

// The XRC SRQs of one domain, each with its own PD.
class TestDomain final : public XrcDomain {
 public:
  std::optional<XrcSrqTarget> find_srq(std::uint32_t srqn) override {
    auto it = srqs.find(srqn);
    if (it == srqs.end()) return std::nullopt;
    return it->second;
  }
  std::map<std::uint32_t, XrcSrqTarget> srqs;
};

class XrcTest : public ProtocolTest {
 protected:
  // The SRQ's PD: its own table over the same memory.
  MemoryRegionTable srq_pd{mem};
  std::uint64_t srq_buf = mem.allocate(4096);
  MemoryRegion srq_mr = srq_pd.register_region(
      srq_buf, 4096, access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead);
  Srq srq{16};
  TestDomain domain;

  void make_target() {
    domain.srqs[kSrqn] = XrcSrqTarget{&srq, &srq_pd};
    QpOptions o;
    o.type = QpType::kXrcRecv;
    o.xrc = &domain;
    make_qp(o);
  }
  wire::TransportHeaders xrc_packet(Opcode op, std::uint32_t psn, std::uint32_t srqn = kSrqn) {
    auto h = packet(op, psn, true);
    h.xrc_srqn = srqn;
    return h;
  }
};

// IBA 9.2: an XRC_SEND QP sends XRC opcodes (0xA0 + RC's), each request with the XRCETH of its
// WR's remote SRQ; an XRC ACKNOWLEDGE (0xB1) completes it.
TEST_F(XrcTest, InitiatorNamesTheRemoteSrqInEveryRequest) {
  QpOptions o;
  o.type = QpType::kXrcSend;
  make_qp(o);
  auto w = wr(WrOpcode::kSend, 1, {sge(local, 300)});
  w.xrc_remote_srqn = kSrqn;
  ASSERT_EQ(qp->post_send(w), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].opcode(), Opcode::kXrcSendFirst);
  EXPECT_EQ(out[1].opcode(), Opcode::kXrcSendLast);
  EXPECT_EQ(out[0].hdr().xrc_srqn, kSrqn);
  EXPECT_EQ(out[1].hdr().xrc_srqn, kSrqn);
  EXPECT_TRUE(out[1].hdr().bth.ack_req);
  auto a = packet(Opcode::kXrcAck, kSqPsn + 1);
  a.aeth = Aeth::ack(1);
  receive(a);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(qp->post_recv(recv(1, {sge(local, 8)})), EINVAL);  // no receive queue
}

// IBA 9.9: the target takes the receive WQE from the SRQ the XRCETH names, answers with XRC
// opcodes, and the completion says which SRQ (the device sends it to that SRQ's CQ).
TEST_F(XrcTest, TargetReceivesIntoTheNamedSrqAndAnswersInXrc) {
  make_target();
  ASSERT_EQ(srq.post_recv(recv(42, {Sge{srq_buf, 64, srq_mr.lkey}})), 0);
  const std::vector<std::uint8_t> payload{1, 2, 3, 4, 5, 6, 7, 8, 9};
  receive(xrc_packet(Opcode::kXrcSendOnly, kRqPsn), payload);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kXrcAck);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::ack(1));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 42u);
  EXPECT_EQ(c[0].xrc_srqn, kSrqn);
  EXPECT_EQ(c[0].byte_len, payload.size());
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), bytes(srq_buf, payload.size()).begin()));
}

// R_Keys of a request to an XRC target are checked against the PD of the SRQ it names: a key of
// that PD works, a key of the target QP's own table does not.
TEST_F(XrcTest, TargetChecksKeysAgainstTheSrqsPd) {
  make_target();
  auto h = xrc_packet(Opcode::kXrcWriteOnly, kRqPsn);
  h.reth = wire::Reth{srq_buf + 128, srq_mr.rkey, 4};
  const std::vector<std::uint8_t> four{9, 8, 7, 6};
  receive(h, four);
  EXPECT_EQ(drain().at(0).hdr().aeth, Aeth::ack(1));
  EXPECT_TRUE(std::equal(four.begin(), four.end(), bytes(srq_buf + 128, 4).begin()));
  auto other = xrc_packet(Opcode::kXrcWriteOnly, kRqPsn + 1);
  other.reth = wire::Reth{local, local_mr.rkey, 4};  // a key of another PD
  receive(other, four);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kXrcAck);
  EXPECT_EQ(out[0].hdr().aeth->nak_code(), NakCode::kRemoteAccessError);
}

// An XRCETH naming an SRQ outside the target's XRC domain: NAK invalid request, the target QP
// goes to ERR, the violation is counted, no SRQ is touched.
TEST_F(XrcTest, PacketForAForeignXrcDomainIsAnInvalidRequest) {
  make_target();
  Srq foreign(4);
  ASSERT_EQ(foreign.post_recv(recv(1, {Sge{srq_buf, 64, srq_mr.lkey}})), 0);
  receive(xrc_packet(Opcode::kXrcSendOnly, kRqPsn, kForeignSrqn), std::vector<std::uint8_t>(8));
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kXrcAck);
  EXPECT_EQ(out[0].psn(), kRqPsn);
  EXPECT_EQ(out[0].hdr().aeth, Aeth::nak(0, NakCode::kInvalidRequest));
  EXPECT_EQ(qp->state(), QpState::kErr);
  EXPECT_EQ(qp->counters().xrc_domain_violations, 1u);
  EXPECT_EQ(foreign.size(), 1u);
}

// An initiator takes only responses and a target only requests (IBA 9.9); RC opcodes are
// another transport altogether.
TEST_F(XrcTest, EachRoleDropsWhatIsNotItsOwn) {
  make_target();
  auto a = packet(Opcode::kXrcAck, kSqPsn);
  a.aeth = Aeth::ack(0);
  receive(a);
  receive(packet(Opcode::kRcSendOnly, kRqPsn, true), std::vector<std::uint8_t>(4));
  EXPECT_EQ(qp->counters().dropped, 2u);
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(qp->state(), QpState::kRts);
}

// ib_modify_qp_is_ok, XRC_TGT column: RTR->RTS needs only the timeout and SQ PSN; the
// requester's retry counts are refused.
TEST_F(XrcTest, TargetModifyFollowsTheXrcTgtColumn) {
  QpConfig cfg;
  cfg.type = QpType::kXrcRecv;
  cfg.qpn = wire::Qpn(0x44);
  Qp tgt(cfg, mrs);
  namespace m = qp_attr;
  QpAttr a;
  a.qp_state = QpState::kInit;
  ASSERT_EQ(tgt.modify(a, m::kState | m::kPkeyIndex | m::kPort | m::kAccessFlags), 0);
  a.qp_state = QpState::kRtr;
  a.dest_qp_num = kPeerQpn;
  ASSERT_EQ(tgt.modify(a, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn |
                              m::kMaxDestRdAtomic | m::kMinRnrTimer),
            0);
  a.qp_state = QpState::kRts;
  EXPECT_EQ(tgt.modify(a, m::kState | m::kTimeout | m::kSqPsn | m::kRetryCnt), EINVAL);
  EXPECT_EQ(tgt.modify(a, m::kState | m::kTimeout | m::kSqPsn), 0);
  EXPECT_EQ(tgt.post_send(wr(WrOpcode::kSend, 1, {})), EINVAL);  // no send queue
}

// IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: a completion carries the time of the input that made
// it (the caller's clock, as handed to the QP).
TEST_F(XrcTest, CompletionsCarryTheTimeOfTheInputThatMadeThem) {
  ASSERT_EQ(qp->post_send(wr(WrOpcode::kSend, 1, {sge(local, 8)})), 0);
  drain(1000);
  receive(ack(kSqPsn), {}, 5000);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].timestamp_ns, 5000u);
  ASSERT_EQ(qp->post_recv(recv(2, {sge(local, 64)})), 0);
  receive(packet(Opcode::kRcSendOnly, kRqPsn, true), std::vector<std::uint8_t>(4), 7000);
  const auto r = completions();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].timestamp_ns, 7000u);
}

// ibv_modify_srq(IBV_SRQ_MAX_WR) (rxe_srq_chk_attr): an SRQ grows, and refuses to shrink below
// what is posted or below its armed limit.
TEST_F(XrcTest, SrqResizeKeepsWhatIsPosted) {
  Srq s(4);
  for (std::uint64_t i = 0; i < 4; ++i)
    ASSERT_EQ(s.post_recv(recv(i, {})), 0);
  EXPECT_EQ(s.post_recv(recv(9, {})), ENOMEM);
  EXPECT_EQ(s.resize(3), EINVAL);
  ASSERT_EQ(s.resize(8), 0);
  EXPECT_EQ(s.post_recv(recv(9, {})), 0);
  ASSERT_EQ(s.set_limit(6), 0);
  EXPECT_EQ(s.resize(5), EINVAL);
  EXPECT_EQ(s.max_wr(), 8u);
  EXPECT_EQ(s.take()->wr_id, 0u);  // order kept
}

}  // namespace
}  // namespace xroce::transport::testing
