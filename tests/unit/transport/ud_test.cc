// UD send and receive: DETH, Q_Key rules, the 40-byte GRH area (docs/protocol.md §2.2, §4).
#include <gtest/gtest.h>

#include <algorithm>

#include "protocol_harness.h"

namespace xroce::transport::testing {
namespace {

using wire::Opcode;

class UdTest : public ProtocolTest {
 protected:
  void SetUp() override {
    QpOptions o;
    o.type = QpType::kUd;
    make_qp(o);
  }
  WorkRequest ud_send(std::uint64_t id, std::uint32_t len, std::uint32_t qkey) {
    auto w = wr(WrOpcode::kSendWithImm, id, {sge(local, len)});
    w.imm_data = 5;
    w.ud = UdDestination{3, wire::Qpn(0x77), wire::Qkey(qkey)};
    return w;
  }
  wire::TransportHeaders datagram(std::uint32_t qkey) {
    auto h = packet(Opcode::kUdSendOnly, 1);
    h.deth = wire::Deth{wire::Qkey(qkey), wire::Qpn(0x55)};
    return h;
  }
};

TEST_F(UdTest, SendCarriesDethAndCompletesWhenTransmitted) {
  fill(local, 100, 2);
  ASSERT_EQ(qp->post_send(ud_send(1, 100, 0x999)), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode(), Opcode::kUdSendOnlyImm);
  EXPECT_EQ(out[0].hdr().bth.dest_qp, wire::Qpn(0x77));
  EXPECT_EQ(out[0].psn(), kSqPsn);
  EXPECT_EQ(out[0].hdr().deth->qkey, wire::Qkey(0x999));
  EXPECT_EQ(out[0].hdr().deth->src_qp, kLocalQpn);
  EXPECT_EQ(out[0].hdr().imm, 5u);
  EXPECT_EQ(out[0].t.av_id, 3u);
  EXPECT_EQ(out[0].payload.size(), 100u);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
}

TEST_F(UdTest, WrQkeyWithTheHighBitUsesTheQpsQkey) {
  ASSERT_EQ(qp->post_send(ud_send(1, 8, 0x80000000)), 0);
  EXPECT_EQ(drain()[0].hdr().deth->qkey, wire::Qkey(0x1234));
}

// C10-93.1.1: a message longer than the port's MTU puts no packet on the wire and completes
// without an error; the send queue goes on with the next WQE.
TEST_F(UdTest, MessageLargerThanThePortMtuIsNotSentAndCompletesWithoutError) {
  ASSERT_EQ(qp->post_send(ud_send(1, 4097, 1)), 0);  // port MTU 4096
  ASSERT_EQ(qp->post_send(ud_send(2, 4096, 1)), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].payload.size(), 4096u);
  const auto c = completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[1].wr_id, 2u);
  EXPECT_EQ(c[1].status, WcStatus::kSuccess);
  EXPECT_EQ(qp->state(), QpState::kRts);
}

TEST_F(UdTest, ThePortMtuBoundsDatagramsBothWays) {
  QpOptions o;
  o.type = QpType::kUd;
  o.port_mtu = PathMtu::k1024;
  make_qp(o);
  ASSERT_EQ(qp->post_send(ud_send(1, 1025, 1)), 0);
  ASSERT_EQ(qp->post_send(ud_send(2, 1024, 1)), 0);
  const auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].payload.size(), 1024u);
  EXPECT_EQ(completions().size(), 2u);
  ASSERT_EQ(qp->post_recv(recv(4, {sge(local, 2048)})), 0);
  qp->handle_packet(0, datagram(0x1234), std::vector<std::uint8_t>(1025, 1));
  EXPECT_TRUE(completions().empty());
  qp->handle_packet(0, datagram(0x1234), std::vector<std::uint8_t>(1024, 2));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].byte_len, 40u + 1024u);
}

TEST_F(UdTest, ReceivePutsTheGrhAreaFirstAndReportsTheSource) {
  ASSERT_EQ(qp->post_recv(recv(4, {sge(local, 200)})), 0);
  RxMeta meta;
  for (std::size_t i = 0; i < meta.grh.size(); ++i)
    meta.grh[i] = static_cast<std::uint8_t>(0xA0 + i);
  std::vector<std::uint8_t> payload(60, 0x5A);
  qp->handle_packet(0, datagram(0x1234), payload, meta);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[0].byte_len, 40u + 60u);
  EXPECT_EQ(c[0].src_qp, wire::Qpn(0x55));
  EXPECT_EQ(c[0].wc_flags, wc_flags::kGrh);
  EXPECT_TRUE(std::equal(meta.grh.begin(), meta.grh.end(), bytes(local, 40).begin()));
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), bytes(local + 40, 60).begin()));
  EXPECT_TRUE(drain().empty());  // UD is never acknowledged
}

// A17.4.5.1: a RoCE v2 UD completion says whether the datagram came over IPv4 or IPv6. As mlx5,
// in wc.sl: L3 type 2 (IPv4) or 1 (IPv6) plus the UDP bit; UCX's ud_verbs takes the GID
// length from it, and a wrong one drops every IPv4 datagram.
TEST_F(UdTest, ReceiveReportsTheNetworkHeaderTypeInSl) {
  RxMeta v4;  // the IPv4 header in the last 20 bytes of the area, the first 20 undefined
  v4.grh[20] = 0x45;
  RxMeta v6;
  v6.grh[0] = 0x60;
  for (const auto& [meta, sl] : {std::pair{v4, roce_sl::kUdpIpv4}, {v6, roce_sl::kUdpIpv6}}) {
    ASSERT_EQ(qp->post_recv(recv(4, {sge(local, 200)})), 0);
    qp->handle_packet(0, datagram(0x1234), std::vector<std::uint8_t>(8), meta);
    const auto c = completions();
    ASSERT_EQ(c.size(), 1u);
    EXPECT_EQ(c[0].status, WcStatus::kSuccess);
    EXPECT_EQ(c[0].sl, sl);
  }
  EXPECT_EQ(roce_sl::kUdpIpv4 & 0x7, 2);  // what uct_ud_iface_check_grh tests for IPv4
}

TEST_F(UdTest, WrongQkeyOrNoReceiveWqeDropsSilently) {
  qp->handle_packet(0, datagram(0x1234), {});
  EXPECT_EQ(qp->counters().ud_no_recv_drops, 1u);
  ASSERT_EQ(qp->post_recv(recv(4, {sge(local, 200)})), 0);
  qp->handle_packet(0, datagram(0x9999), {});
  EXPECT_EQ(qp->counters().dropped, 1u);
  EXPECT_TRUE(completions().empty());
  EXPECT_EQ(qp->state(), QpState::kRts);
}

// A receive posted since the owner's last pull (transport::ReceiveSource) takes the datagram:
// UD has no RNR, so a WQE overlooked there is a datagram lost.
TEST_F(UdTest, ADatagramFindsAReceivePostedSinceTheLastPull) {
  struct Late final : ReceiveSource {
    Qp* qp = nullptr;
    std::optional<RecvRequest> wqe;
    void pull_receives() override {
      if (!wqe) return;
      EXPECT_EQ(qp->post_recv(*wqe), 0);
      wqe.reset();
    }
  } late;
  late.qp = qp.get();
  late.wqe = recv(6, {sge(local, 200)});
  qp->set_receive_source(&late);
  qp->handle_packet(0, datagram(0x1234), std::vector<std::uint8_t>(8, 3));
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 6u);
  EXPECT_EQ(qp->counters().ud_no_recv_drops, 0u);
  EXPECT_EQ(qp->counters().receives_pulled_late, 1u);
  qp->handle_packet(0, datagram(0x1234), std::vector<std::uint8_t>(8, 3));
  EXPECT_EQ(qp->counters().ud_no_recv_drops, 1u);  // nothing left to pull
}

TEST_F(UdTest, DatagramLongerThanThePortMtuIsDroppedWithoutTakingAReceive) {
  ASSERT_EQ(qp->post_recv(recv(4, {sge(local, 8192)})), 0);
  std::vector<std::uint8_t> too_long(4096 + 4, 1);  // the harness's port MTU is 4096
  qp->handle_packet(0, datagram(0x1234), too_long);
  EXPECT_TRUE(completions().empty());
  EXPECT_EQ(qp->counters().dropped, 1u);
  std::vector<std::uint8_t> fits(4096, 2);
  qp->handle_packet(0, datagram(0x1234), fits);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 4u);
  EXPECT_EQ(c[0].byte_len, 40u + 4096u);
}

TEST_F(UdTest, ReceiveBufferWithoutRoomForTheGrhIsALengthError) {
  ASSERT_EQ(qp->post_recv(recv(4, {sge(local, 50)})), 0);
  std::vector<std::uint8_t> payload(11);
  qp->handle_packet(0, datagram(0x1234), payload);
  const auto c = completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kLocLenErr);
}

}  // namespace
}  // namespace xroce::transport::testing
