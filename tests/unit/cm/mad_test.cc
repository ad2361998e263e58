// CM MAD encoding: every message round-trips, and fields land where IBA 12.6 puts them (byte
// offsets checked by hand here; tshark checks them independently in gsi_golden_test).
#include <gtest/gtest.h>

#include "cm/ip_service.h"
#include "cm/mad.h"

namespace xroce::cm {
namespace {

ReqMsg sample_req() {
  ReqMsg m;
  m.local_comm_id = 0x11223344;
  m.service_id = service_id(PortSpace::kTcp, 7174);
  m.local_ca_guid = 0x0200c0fffe123456;
  m.local_qpn = 0x000123;
  m.responder_resources = 4;
  m.initiator_depth = 3;
  m.remote_cm_response_timeout = 20;
  m.end_to_end_flow_control = true;
  m.starting_psn = 0xabcdef;
  m.local_cm_response_timeout = 20;
  m.retry_count = 7;
  m.path_mtu = 3;
  m.rnr_retry_count = 6;
  m.max_cm_retries = 15;
  m.srq = true;
  m.primary.local_gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1};
  m.primary.remote_gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 2};
  m.primary.flow_label = 0x12345;
  m.primary.packet_rate = 3;
  m.primary.traffic_class = 0x68;
  m.primary.hop_limit = 64;
  m.primary.sl = 5;
  m.primary.local_ack_timeout = 17;
  for (std::size_t i = 0; i < m.private_data.size(); ++i)
    m.private_data[i] = static_cast<std::uint8_t>(i + 1);
  return m;
}

TEST(CmMad, ReqFieldsAtTheirIbaOffsets) {
  const MadBuffer mad = encode_cm_mad(0x0102030405060708, sample_req());
  EXPECT_EQ(mad[0], 1);     // base version
  EXPECT_EQ(mad[1], 0x07);  // CM class
  EXPECT_EQ(mad[2], 2);     // class version
  EXPECT_EQ(mad[3], 0x03);  // Send
  EXPECT_EQ(mad[8], 0x01);
  EXPECT_EQ(mad[15], 0x08);  // TID
  EXPECT_EQ(mad[16], 0x00);
  EXPECT_EQ(mad[17], 0x10);  // REQ
  const std::uint8_t* d = mad.data() + kMadHeaderBytes;
  EXPECT_EQ(d[0], 0x11);
  EXPECT_EQ(d[3], 0x44);
  EXPECT_EQ(d[8 + 4], 0x01);  // service ID 0x0000000001061c06
  EXPECT_EQ(d[8 + 5], 0x06);
  EXPECT_EQ(d[8 + 6], 0x1c);
  EXPECT_EQ(d[8 + 7], 0x06);
  EXPECT_EQ(d[32], 0x00);  // local QPN 0x000123, responder resources 4
  EXPECT_EQ(d[34], 0x23);
  EXPECT_EQ(d[35], 4);
  EXPECT_EQ(d[39], 3);                       // initiator depth
  EXPECT_EQ(d[43], (20 << 3) | 0 << 1 | 1);  // remote CM timeout 20, RC, flow control
  EXPECT_EQ(d[44], 0xab);                    // starting PSN
  EXPECT_EQ(d[47], (20 << 3) | 7);           // local CM timeout, retry count
  EXPECT_EQ(d[48], 0xff);                    // P_Key
  EXPECT_EQ(d[50], (3 << 4) | 6);            // MTU 1024, RNR retry 6
  EXPECT_EQ(d[51], (15 << 4) | 8);           // max CM retries, SRQ
  EXPECT_EQ(d[56 + 12], 198);                // primary local GID
  EXPECT_EQ(d[72 + 15], 2);                  // primary remote GID
  EXPECT_EQ(d[88], 0x12);                    // flow label 0x12345 << 12 | rate 3
  EXPECT_EQ(d[89], 0x34);
  EXPECT_EQ(d[90], 0x50);
  EXPECT_EQ(d[91], 3);
  EXPECT_EQ(d[92], 0x68);
  EXPECT_EQ(d[93], 64);
  EXPECT_EQ(d[94], 5 << 4);
  EXPECT_EQ(d[95], 17 << 3);
  EXPECT_EQ(d[140], 1);  // private data
  EXPECT_EQ(d[231], 92);
}

TEST(CmMad, EveryMessageRoundTrips) {
  RepMsg rep;
  rep.local_comm_id = 1;
  rep.remote_comm_id = 2;
  rep.local_qpn = 0x456;
  rep.starting_psn = 0x123456;
  rep.responder_resources = 2;
  rep.initiator_depth = 1;
  rep.target_ack_delay = 15;
  rep.rnr_retry_count = 7;
  rep.srq = true;
  rep.end_to_end_flow_control = true;
  rep.local_ca_guid = 0x1122334455667788;
  rep.private_data[195] = 9;
  RejMsg rej;
  rej.local_comm_id = 3;
  rej.remote_comm_id = 4;
  rej.message = MessageRef::kRep;
  rej.reason = 28;
  rej.ari_length = 8;
  rej.ari[7] = 1;
  rej.private_data[147] = 2;
  MraMsg mra;
  mra.local_comm_id = 5;
  mra.remote_comm_id = 6;
  mra.message = MessageRef::kRep;
  mra.service_timeout = 24;
  RtuMsg rtu;
  rtu.local_comm_id = 7;
  rtu.remote_comm_id = 8;
  DreqMsg dreq;
  dreq.local_comm_id = 9;
  dreq.remote_comm_id = 10;
  dreq.remote_qpn = 0xabcdef;
  DrepMsg drep;
  drep.local_comm_id = 11;
  drep.remote_comm_id = 12;
  SidrReqMsg sreq;
  sreq.request_id = 13;
  sreq.service_id = service_id(PortSpace::kUdp, 7174);
  SidrRepMsg srep;
  srep.request_id = 14;
  srep.status = SidrStatus::kValid;
  srep.qpn = 0x42;
  srep.qkey = 0x01234567;
  srep.service_id = sreq.service_id;
  ReqMsg req = sample_req();
  req.alternate = req.primary;
  req.alternate->hop_limit = 3;
  const CmMessage messages[] = {req, rep, rej, mra, rtu, dreq, drep, sreq, srep};
  for (const CmMessage& m : messages) {
    const MadBuffer mad = encode_cm_mad(42, m);
    auto decoded = decode_cm_mad(mad);
    ASSERT_TRUE(decoded) << message_name(m);
    EXPECT_EQ(decoded->transaction_id, 42u);
    EXPECT_EQ(decoded->message, m) << message_name(m);
  }
}

TEST(CmMad, DecodeRejectsWhatIsNotACmSend) {
  MadBuffer mad = encode_cm_mad(1, RtuMsg{});
  EXPECT_EQ(decode_cm_mad(std::span(mad).first(100)).error(), MadError::kTooShort);
  auto bad = mad;
  bad[0] = 2;
  EXPECT_EQ(decode_cm_mad(bad).error(), MadError::kBadBaseVersion);
  bad = mad;
  bad[1] = 0x03;  // SubnAdm
  EXPECT_EQ(decode_cm_mad(bad).error(), MadError::kNotCm);
  bad = mad;
  bad[2] = 1;
  EXPECT_EQ(decode_cm_mad(bad).error(), MadError::kBadClassVersion);
  bad = mad;
  bad[3] = 0x01;  // Get
  EXPECT_EQ(decode_cm_mad(bad).error(), MadError::kBadMethod);
  bad = mad;
  bad[17] = 0x19;  // LAP
  EXPECT_EQ(decode_cm_mad(bad).error(), MadError::kUnsupportedAttr);
}

TEST(IpService, ServiceIdsOfThePortSpaces) {
  EXPECT_EQ(service_id(PortSpace::kTcp, 0x1234), 0x0000000001061234ull);
  EXPECT_EQ(service_id(PortSpace::kUdp, 1), 0x0000000001110001ull);
  EXPECT_EQ(service_id(PortSpace::kIb, 2), 0x00000000013f0002ull);
  EXPECT_EQ(port_space_of(0x0000000001061234ull), PortSpace::kTcp);
  EXPECT_EQ(port_of(0x0000000001061234ull), 0x1234);
  EXPECT_FALSE(port_space_of(0x0000000002061234ull));
  EXPECT_FALSE(port_space_of(0x0000000001991234ull));
}

TEST(IpService, HeaderCarriesBothAddressesAndTheSourcePort) {
  IpHeader h{4242, wire::IpAddr::v4(0xc6120001), wire::IpAddr::v4(0xc6120002)};
  std::array<std::uint8_t, kIpHeaderBytes> b{};
  encode_ip_header(h, b);
  EXPECT_EQ(b[0], 0);
  EXPECT_EQ(b[1], 0x40);
  EXPECT_EQ(b[2] << 8 | b[3], 4242);
  for (int i = 4; i < 16; ++i)
    EXPECT_EQ(b[i], 0) << i;  // IPv4 with zeros before it, not IPv4-mapped
  EXPECT_EQ(b[16], 198);
  EXPECT_EQ(b[35], 2);
  auto back = decode_ip_header(b);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->src, h.src);
  EXPECT_EQ(back->dst, h.dst);
  EXPECT_EQ(back->src_port, 4242);
  std::array<std::uint8_t, 16> v6{0x20, 0x01, 0, 2};
  IpHeader h6{1, wire::IpAddr::v6(v6), wire::IpAddr::v6(v6)};
  encode_ip_header(h6, b);
  EXPECT_EQ(b[1], 0x60);
  EXPECT_EQ(decode_ip_header(b)->dst, h6.dst);
  b[1] = 0x50;
  EXPECT_FALSE(decode_ip_header(b));
}

}  // namespace
}  // namespace xroce::cm
