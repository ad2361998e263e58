// The one frame walker (wire/frame_layout.h): VLAN tags as the XDP program takes them (802.1Q,
// 802.1ad + 802.1Q, at most two), IPv4 with and without options, IPv6, every truncation; the
// IPv4 checksum and CE marking; and the codec on top of it accepting a QinQ RoCE frame.
#include "wire/frame_layout.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "wire/frame.h"

namespace xroce::wire {
namespace {

using Frame = std::vector<std::uint8_t>;

FrameAddress v4_address() {
  FrameAddress a;
  a.src_mac = {0x02, 0, 0, 0, 0, 0x01};
  a.dst_mac = {0x02, 0, 0, 0, 0, 0x02};
  a.src_ip = IpAddr::v4(0xC6120001);  // 198.18.0.1
  a.dst_ip = IpAddr::v4(0xC6120002);
  a.traffic_class = 0x6A;  // DSCP 26, ECT(0)
  a.udp_src_port = 0xC123;
  a.ipv4_id = 0x1234;
  return a;
}

FrameAddress v6_address() {
  FrameAddress a = v4_address();
  a.src_ip = IpAddr::v6({0x20, 0x01, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
  a.dst_ip = IpAddr::v6({0x20, 0x01, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2});
  a.flow_label = 0xABCDE;
  a.ipv4_id = 0;  // IPv6 has none: what a decode gives back
  return a;
}

TransportHeaders send_only() {
  TransportHeaders h;
  h.bth.opcode = Opcode::kRcSendOnly;
  h.bth.dest_qp = Qpn(0x11);
  h.bth.psn = Psn(100);
  h.bth.ack_req = true;
  return h;
}

Frame encode(const FrameAddress& a, std::size_t payload_len = 16) {
  Frame payload(payload_len);
  for (std::size_t i = 0; i < payload.size(); ++i)
    payload[i] = static_cast<std::uint8_t>(i);
  Frame f(frame_bytes(a, send_only(), payload.size()));
  const auto n = encode_frame(a, send_only(), payload, f);
  EXPECT_TRUE(n.ok() && *n == f.size());
  return f;
}

FrameAddress qinq(FrameAddress a) {
  a.vlan_tci = 0x6005;  // PCP 3, VID 5
  a.outer_vlan = VlanTag{kEtherTypeQinQ, 0x0064};
  return a;
}

TEST(FrameLayout, UntaggedIpv4) {
  const Frame f = encode(v4_address());
  const FrameLayout l = walk_frame(f);
  EXPECT_EQ(l.stop, WalkStop::kUdp);
  EXPECT_EQ(l.vlan_count, 0);
  EXPECT_EQ(l.ether_type, kEtherTypeIpv4);
  EXPECT_EQ(l.ip, IpVersion::kV4);
  EXPECT_EQ(l.ip_offset, 14u);
  EXPECT_EQ(l.ip_header_bytes, 20u);
  EXPECT_EQ(l.ip_protocol, kIpProtoUdp);
  EXPECT_EQ(l.ip_datagram_bytes, f.size() - 14);
  EXPECT_EQ(l.udp_offset, 34u);
  EXPECT_EQ(l.udp_payload_offset(), 42u);
  EXPECT_FALSE(l.ipv4_fragment);
  EXPECT_FALSE(l.inner_vlan());
}

TEST(FrameLayout, Dot1qTag) {
  FrameAddress a = v4_address();
  a.vlan_tci = 0x2007;
  const Frame f = encode(a);
  EXPECT_EQ(load_be16(&f[12]), kEtherTypeVlan);
  const FrameLayout l = walk_frame(f);
  EXPECT_EQ(l.stop, WalkStop::kUdp);
  ASSERT_EQ(l.vlan_count, 1);
  EXPECT_EQ(l.inner_vlan(), (VlanTag{kEtherTypeVlan, 0x2007}));
  EXPECT_FALSE(l.outer_vlan());
  EXPECT_EQ(l.ip_offset, 18u);
  EXPECT_EQ(l.udp_offset, 38u);
}

TEST(FrameLayout, Dot1adOuterAndDot1qInner) {
  const Frame f = encode(qinq(v6_address()));
  EXPECT_EQ(load_be16(&f[12]), kEtherTypeQinQ);
  EXPECT_EQ(load_be16(&f[16]), kEtherTypeVlan);
  const FrameLayout l = walk_frame(f);
  EXPECT_EQ(l.stop, WalkStop::kUdp);
  ASSERT_EQ(l.vlan_count, 2);
  EXPECT_EQ(l.outer_vlan(), (VlanTag{kEtherTypeQinQ, 0x0064}));
  EXPECT_EQ(l.inner_vlan(), (VlanTag{kEtherTypeVlan, 0x6005}));
  EXPECT_EQ(l.ip, IpVersion::kV6);
  EXPECT_EQ(l.ip_offset, 22u);
  EXPECT_EQ(l.ip_header_bytes, 40u);
  EXPECT_EQ(l.udp_offset, 62u);
  EXPECT_EQ(address_of(f, l), qinq(v6_address()));
}

TEST(FrameLayout, EveryPairOfTagTypesAsTheXdpProgramTakesThem) {
  for (const std::uint16_t outer : {kEtherTypeVlan, kEtherTypeQinQ}) {
    for (const std::uint16_t inner : {kEtherTypeVlan, kEtherTypeQinQ}) {
      FrameAddress a = v4_address();
      a.vlan_tci = 9;
      a.vlan_tpid = inner;
      a.outer_vlan = VlanTag{outer, 8};
      const Frame f = encode(a);
      const FrameLayout l = walk_frame(f);
      EXPECT_EQ(l.stop, WalkStop::kUdp) << outer << " " << inner;
      EXPECT_EQ(l.udp_offset, 42u);
      const auto d = decode_frame(f);
      ASSERT_TRUE(d.ok()) << to_string(d.error());
      EXPECT_TRUE(d->icrc_ok);
      EXPECT_EQ(d->addr, a);
    }
  }
}

TEST(FrameLayout, AThirdTagIsNotWalked) {
  Frame f = encode(qinq(v4_address()));
  // Insert a third 802.1Q tag after the two: the XDP program stops after two, and so do we.
  const Frame tag = {0x81, 0x00, 0x00, 0x03};
  f.insert(f.begin() + 20, tag.begin(), tag.end());
  const FrameLayout l = walk_frame(f);
  EXPECT_EQ(l.stop, WalkStop::kNotIp);
  EXPECT_EQ(l.vlan_count, 2);
  EXPECT_EQ(l.ether_type, kEtherTypeVlan);
  EXPECT_EQ(decode_frame(f).error(), FrameError::kNotIp);
}

TEST(FrameLayout, Ipv4OptionsAreWalkedAndTheCodecRefusesThem) {
  Frame f = encode(v4_address());
  // Grow the IPv4 header by one option word (NOP NOP NOP EOL).
  const Frame option = {0x01, 0x01, 0x01, 0x00};
  f.insert(f.begin() + 34, option.begin(), option.end());
  f[14] = 0x46;
  store_be16(&f[16], static_cast<std::uint16_t>(load_be16(&f[16]) + 4));
  store_be16(&f[24], ipv4_header_checksum(Bytes(&f[14], 24)));
  ASSERT_TRUE(ipv4_header_checksum_ok(Bytes(&f[14], 24)));
  const FrameLayout l = walk_frame(f);
  EXPECT_EQ(l.stop, WalkStop::kUdp);
  EXPECT_EQ(l.ip_header_bytes, 24u);
  EXPECT_EQ(l.udp_offset, 38u);
  // RoCEv2 never carries IPv4 options (the ICRC masks a 20-byte header): refused as before.
  EXPECT_EQ(decode_frame(f).error(), FrameError::kBadIpHeader);
  // ...also when the frame ends inside the options.
  EXPECT_EQ(walk_frame(Bytes(f).first(36)).stop, WalkStop::kTruncatedIp);
  EXPECT_EQ(decode_frame(Bytes(f).first(36)).error(), FrameError::kBadIpHeader);
}

TEST(FrameLayout, NotIpNotUdpAndBadVersion) {
  Frame arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  EXPECT_EQ(walk_frame(arp).stop, WalkStop::kNotIp);
  EXPECT_EQ(walk_frame(arp).ip_offset, 14u);
  EXPECT_FALSE(walk_frame(arp).has_ip());

  Frame tcp = encode(v4_address());
  tcp[14 + 9] = 6;
  const FrameLayout lt = walk_frame(tcp);
  EXPECT_EQ(lt.stop, WalkStop::kNotUdp);
  EXPECT_TRUE(lt.has_ip());
  EXPECT_EQ(lt.ip_protocol, 6);

  Frame v6_in_v4 = encode(v4_address());
  v6_in_v4[14] = 0x65;
  EXPECT_EQ(walk_frame(v6_in_v4).stop, WalkStop::kBadIpVersion);
  Frame short_ihl = encode(v4_address());
  short_ihl[14] = 0x44;
  EXPECT_EQ(walk_frame(short_ihl).stop, WalkStop::kBadIpVersion);
  Frame v4_in_v6 = encode(v6_address());
  v4_in_v6[14] = 0x46;
  EXPECT_EQ(walk_frame(v4_in_v6).stop, WalkStop::kBadIpVersion);
}

TEST(FrameLayout, FragmentsAreReportedNotJudged) {
  Frame f = encode(v4_address());
  store_be16(&f[20], kIpv4FlagMf);
  const FrameLayout l = walk_frame(f);
  EXPECT_EQ(l.stop, WalkStop::kUdp);
  EXPECT_TRUE(l.ipv4_fragment);
}

// Every prefix of a QinQ frame stops where its bytes run out, and never reads past them (the
// sanitizer build checks the reads).
TEST(FrameLayout, EveryTruncation) {
  for (const FrameAddress& a : {qinq(v4_address()), qinq(v6_address())}) {
    const Frame f = encode(a);
    const std::size_t ip = 22;
    const std::size_t udp = ip + (a.src_ip.is_v4() ? 20 : 40);
    for (std::size_t n = 0; n < f.size(); ++n) {
      const Frame cut(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n));
      const FrameLayout l = walk_frame(cut);
      WalkStop want = WalkStop::kUdp;
      if (n < ip) {
        want = WalkStop::kTruncatedL2;
      } else if (n < udp) {
        want = WalkStop::kTruncatedIp;
      } else if (n < udp + 8) {
        want = WalkStop::kTruncatedUdp;
      }
      EXPECT_EQ(l.stop, want) << "length " << n;
      if (n < f.size()) {
        EXPECT_FALSE(decode_frame(cut).ok()) << "length " << n;
      }
    }
  }
}

TEST(FrameLayout, Ipv4ChecksumOfAKnownHeader) {
  // An RC SEND_ONLY frame's IPv4 header: checksum 0x1479.
  const std::uint8_t header[20] = {0x45, 0x02, 0x00, 0x3c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11,
                                   0x14, 0x79, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x02};
  EXPECT_EQ(ipv4_header_checksum(Bytes(header, 20)), 0x1479);
  EXPECT_TRUE(ipv4_header_checksum_ok(Bytes(header, 20)));
  std::uint8_t bad[20];
  std::copy(header, header + 20, bad);
  bad[11] ^= 1;
  EXPECT_FALSE(ipv4_header_checksum_ok(Bytes(bad, 20)));
}

TEST(FrameLayout, CeMarkingBehindTwoTagsKeepsChecksumAndIcrc) {
  for (const FrameAddress& a : {qinq(v4_address()), qinq(v6_address())}) {
    Frame f = encode(a);
    const FrameLayout l = walk_frame(f);
    ASSERT_EQ(ecn_of(f, l), Ecn::kEct0);
    set_ecn_ce(f, l);
    EXPECT_EQ(ecn_of(f, l), Ecn::kCe);
    const auto d = decode_frame(f);  // verifies the IPv4 header checksum
    ASSERT_TRUE(d.ok()) << to_string(d.error());
    EXPECT_TRUE(d->icrc_ok);
    EXPECT_EQ(d->ecn, Ecn::kCe);
    EXPECT_EQ(d->addr.traffic_class, 0x6B) << "the DSCP is kept";
    if (a.src_ip.is_v4()) {
      EXPECT_EQ(load_be16(&f[l.ip_offset + 10]), ipv4_header_checksum(Bytes(&f[l.ip_offset], 20)));
    } else {
      EXPECT_EQ(d->addr.flow_label, 0xABCDEu);
    }
  }
}

// A RoCE frame with an 802.1ad S-tag and an 802.1Q C-tag, as a provider network carries it:
// the decoder takes it (the XDP program steers it), the ICRC verifies (it does not cover L2),
// and the frame is the golden one with the tags taken out.
TEST(FrameLayout, DecoderAcceptsQinqRoceWithIcrcOk) {
  const FrameAddress a = qinq(v4_address());
  const Frame tagged = encode(a);
  const auto d = decode_frame(tagged);
  ASSERT_TRUE(d.ok()) << to_string(d.error());
  EXPECT_TRUE(d->icrc_ok);
  EXPECT_EQ(d->ip_offset, 22u);
  EXPECT_EQ(d->addr, a);
  EXPECT_EQ(d->hdr.bth.dest_qp, Qpn(0x11));
  EXPECT_EQ(d->payload.size(), 16u);

  FrameAddress plain = a;
  plain.vlan_tci.reset();
  plain.outer_vlan.reset();
  const Frame untagged = encode(plain);
  Frame stripped = tagged;
  stripped.erase(stripped.begin() + 12, stripped.begin() + 20);
  EXPECT_EQ(stripped, untagged);
}

TEST(FrameLayout, EnvelopeWriterAndWalkerAgree) {
  for (FrameAddress a : {v4_address(), v6_address(), qinq(v4_address()), qinq(v6_address())}) {
    Frame f(envelope_bytes(a) + 5, 0xEE);
    write_envelope(a, UdpFields{4792, 0xBEEF}, 5, f.data());
    const FrameLayout l = walk_frame(f);
    ASSERT_EQ(l.stop, WalkStop::kUdp);
    EXPECT_EQ(l.udp_payload_offset(), envelope_bytes(a));
    EXPECT_EQ(l.ip_offset + l.ip_datagram_bytes, f.size());
    EXPECT_EQ(load_be16(&f[l.udp_offset + 2]), 4792);
    EXPECT_EQ(load_be16(&f[l.udp_offset + 4]), 13);
    EXPECT_EQ(load_be16(&f[l.udp_offset + 6]), 0xBEEF);
    EXPECT_EQ(address_of(f, l), a);
    if (a.src_ip.is_v4()) {
      EXPECT_TRUE(ipv4_header_checksum_ok(Bytes(&f[l.ip_offset], 20)));
    }
  }
}

// A packet socket's virtio-net header marks a UDP superframe with gso_type 5 (the ECN bit may
// be set too) and gives the segment size in host order; anything else is not one.
TEST(VnetHeader, GivesTheSegmentSizeOfAUdpSuperframeOnly) {
  std::array<std::uint8_t, kVnetHeaderBytes> h{};
  const std::uint16_t size = 4112;
  std::memcpy(h.data() + 4, &size, sizeof size);
  h[1] = 5;  // VIRTIO_NET_HDR_GSO_UDP_L4
  EXPECT_EQ(vnet_udp_segment_bytes(h), 4112);
  h[1] = 5 | 0x80;
  EXPECT_EQ(vnet_udp_segment_bytes(h), 4112);
  for (std::uint8_t other : {0, 1, 3, 4, 0x81}) {  // none, TCPv4, UDP (UFO), TCPv6, TCP+ECN
    h[1] = other;
    EXPECT_EQ(vnet_udp_segment_bytes(h), 0) << int{other};
  }
  h[1] = 5;
  EXPECT_EQ(vnet_udp_segment_bytes(std::span(h).first(9)), 0);  // too short to be a header
}

}  // namespace
}  // namespace xroce::wire
