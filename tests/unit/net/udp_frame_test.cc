// Unit tests of the Ethernet/IP/UDP envelope the ports strip and synthesize (net/udp_frame.h).
// Pure functions; they live beside the port tests because they build with the ports.
#include "net/udp_frame.h"

#include <gtest/gtest.h>

#include <vector>

#include "wire/frame.h"

namespace xroce::net {
namespace {

UdpEnvelope sample(bool v6, bool vlan) {
  UdpEnvelope e;
  e.dst_mac = {0x02, 0, 0, 0, 0, 0x02};
  e.src_mac = {0x02, 0, 0, 0, 0, 0x01};
  if (vlan) e.vlan_tci = 0x600A;
  if (v6) {
    e.src_ip = {0x20, 0x01, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1};
    e.dst_ip = {0x20, 0x01, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2};
    e.flow_label = 0x1FACE;
  } else {
    e.src_ip = v4_mapped(0xC6120001);  // 198.18.0.1
    e.dst_ip = v4_mapped(0xC6120002);
    e.ipv4_id = 0x1234;
  }
  e.traffic_class = 0xC3;
  e.hop_limit = 7;
  e.src_port = 0xC001;
  return e;
}

std::vector<std::uint8_t> frame_of(const UdpEnvelope& e, std::size_t payload_len) {
  std::vector<std::uint8_t> f(envelope_bytes(e) + payload_len);
  for (std::size_t i = envelope_bytes(e); i < f.size(); ++i)
    f[i] = static_cast<std::uint8_t>(i);
  write_envelope(e, payload_len, f.data() + envelope_bytes(e));
  return f;
}

TEST(UdpFrame, EnvelopeRoundTripsForEveryShape) {
  for (bool v6 : {false, true}) {
    for (bool vlan : {false, true}) {
      const UdpEnvelope e = sample(v6, vlan);
      const auto f = frame_of(e, 33);
      EXPECT_EQ(f.size(), 33 + 14 + (vlan ? 4 : 0) + (v6 ? 40 : 20) + 8);
      const auto p = parse_udp_frame(f);
      ASSERT_TRUE(p.has_value()) << "v6 " << v6 << " vlan " << vlan;
      EXPECT_EQ(p->env.src_ip, e.src_ip);
      EXPECT_EQ(p->env.dst_ip, e.dst_ip);
      EXPECT_EQ(p->env.src_mac, e.src_mac);
      EXPECT_EQ(p->env.vlan_tci, e.vlan_tci);
      EXPECT_EQ(p->env.traffic_class, e.traffic_class);
      EXPECT_EQ(p->env.hop_limit, e.hop_limit);
      EXPECT_EQ(p->env.flow_label, e.flow_label);
      EXPECT_EQ(p->env.ipv4_id, e.ipv4_id);
      EXPECT_EQ(p->env.src_port, e.src_port);
      EXPECT_EQ(p->env.dst_port, kRoceUdpPort);
      ASSERT_EQ(p->payload.size(), 33u);
      EXPECT_EQ(p->payload.data(), f.data() + envelope_bytes(e));
    }
  }
}

// RFC 1071 worked example (a common IPv4/UDP header): checksum 0xB861.
TEST(UdpFrame, Ipv4HeaderChecksumMatchesAKnownHeader) {
  const std::uint8_t h[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
                              0x00, 0x00, 0xC0, 0xA8, 0x00, 0x01, 0xC0, 0xA8, 0x00, 0xC7};
  EXPECT_EQ(ipv4_header_checksum(h), 0xB861);
}

// Every frame cut short of its UDP length is refused, never read past (ASan checks the rest).
TEST(UdpFrame, TruncatedFramesAreRefused) {
  for (bool v6 : {false, true}) {
    for (bool vlan : {false, true}) {
      const auto f = frame_of(sample(v6, vlan), 10);
      for (std::size_t len = 0; len < f.size(); ++len) {
        std::vector<std::uint8_t> cut(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(len));
        EXPECT_FALSE(parse_udp_frame(cut).has_value()) << "length " << len;
      }
    }
  }
}

TEST(UdpFrame, InconsistentLengthsAndNonUdpAreRefused) {
  auto f = frame_of(sample(false, false), 10);
  auto bad_udp = f;
  bad_udp[14 + 20 + 5] = 30;  // UDP length beyond the IP datagram
  EXPECT_FALSE(parse_udp_frame(bad_udp).has_value());
  auto tcp = f;
  tcp[14 + 9] = 6;
  EXPECT_FALSE(parse_udp_frame(tcp).has_value());
  auto fragment = f;
  fragment[14 + 6] = 0x20;  // more fragments
  EXPECT_FALSE(parse_udp_frame(fragment).has_value());
  auto arp = f;
  arp[12] = 0x08;
  arp[13] = 0x06;
  EXPECT_FALSE(parse_udp_frame(arp).has_value());
  // Ethernet padding after the UDP datagram is not payload.
  auto padded = f;
  padded.resize(f.size() + 6, 0);
  const auto p = parse_udp_frame(padded);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->payload.size(), 10u);
}

// rxe sets the IPv4 identification, which the ICRC covers and a UDP socket hides: the port
// writes ID 0 and recover_ipv4_id finds the sender's.
TEST(UdpFrame, RecoversTheIpv4IdentificationOfAForeignSender) {
  wire::FrameAddress a;
  a.src_ip = wire::IpAddr::v4(0xC6120001);
  a.dst_ip = wire::IpAddr::v4(0xC6120002);
  a.ipv4_id = 0xBEEF;  // as rxe's ip_select_ident would
  a.traffic_class = 0x02;
  wire::TransportHeaders h;
  h.bth.opcode = wire::Opcode::kRcSendOnly;
  h.bth.dest_qp = wire::Qpn(17);
  h.bth.psn = wire::Psn(42);
  const std::vector<std::uint8_t> payload(1000, 0x5A);
  std::vector<std::uint8_t> sent(wire::frame_bytes(a, h, payload.size()));
  ASSERT_TRUE(wire::encode_frame(a, h, payload, sent).ok());

  // What a socket reader knows: the UDP payload (BTH .. ICRC) and the addresses; ID unknown.
  const auto parsed = parse_udp_frame(sent);
  ASSERT_TRUE(parsed);
  UdpEnvelope env = parsed->env;
  env.ipv4_id = 0;
  std::vector<std::uint8_t> got(envelope_bytes(env) + parsed->payload.size());
  std::uint8_t* payload_begin = got.data() + envelope_bytes(env);
  std::copy(parsed->payload.begin(), parsed->payload.end(), payload_begin);
  write_envelope(env, parsed->payload.size(), payload_begin);
  const auto before = wire::decode_frame(got);
  ASSERT_TRUE(before.ok());
  EXPECT_FALSE(before.value().icrc_ok);

  EXPECT_EQ(recover_ipv4_id(env, parsed->payload.size(), payload_begin), IcrcCheck::kVerified);
  const auto after = wire::decode_frame(got);  // also checks the IPv4 header checksum
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after.value().icrc_ok);
  EXPECT_EQ(after.value().addr.ipv4_id, 0xBEEF);
  EXPECT_EQ(got, sent);

  // A corrupted payload: no identification explains it, nothing is changed.
  got[got.size() - 100] ^= 0x01;
  const std::vector<std::uint8_t> corrupted = got;
  EXPECT_EQ(recover_ipv4_id(env, parsed->payload.size(), payload_begin), IcrcCheck::kNoIdVerifies);
  EXPECT_EQ(got, corrupted);

  // Our own senders' ID 0 verifies as written (nothing changed); IPv6 hides no identification
  // and is not checked here.
  a.ipv4_id = 0;
  ASSERT_TRUE(wire::encode_frame(a, h, payload, sent).ok());
  const auto own = parse_udp_frame(sent);
  ASSERT_TRUE(own);
  std::copy(own->payload.begin(), own->payload.end(), payload_begin);
  write_envelope(env, own->payload.size(), payload_begin);
  EXPECT_EQ(recover_ipv4_id(env, own->payload.size(), payload_begin), IcrcCheck::kVerified);
  EXPECT_EQ(got, sent);
  UdpEnvelope v6 = env;
  v6.dst_ip[0] = 0x20;  // no longer IPv4-mapped
  EXPECT_EQ(recover_ipv4_id(v6, own->payload.size(), payload_begin), IcrcCheck::kNotChecked);
}

}  // namespace
}  // namespace xroce::net
