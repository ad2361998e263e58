// Byte-level frame edits: header location, CE marking with the IPv4 checksum fixed, the range
// corruption may touch.
#include "net/sim/frame_edit.h"

#include <gtest/gtest.h>

#include "test_frames.h"

namespace xroce::net::sim {
namespace {

using testing::FrameSpec;
using testing::make_frame;

TEST(NetsimFrameEdit, ParsesIpv4Ipv6AndVlan) {
  auto v4 = parse_layout(make_frame({}));
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->ip_offset, 14u);
  EXPECT_FALSE(v4->ipv6);
  EXPECT_EQ(v4->udp_offset, 34u);
  auto v6 = parse_layout(make_frame({.ipv6 = true, .vlan = true}));
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->ip_offset, 18u);
  EXPECT_TRUE(v6->ipv6);
  EXPECT_EQ(v6->udp_offset, 58u);
  EXPECT_FALSE(parse_layout(Frame(10, 0)));
}

TEST(NetsimFrameEdit, ReadsAddressesAndPorts) {
  const Frame f = make_frame({.src = 3, .dst = 9, .udp_sport = 0xC123});
  EXPECT_EQ(destination_mac(f), testing::mac_of(9));
  EXPECT_EQ(destination_ip(f), testing::ip4_of(9));
  EXPECT_EQ(udp_source_port(f), 0xC123);
  EXPECT_EQ(destination_ip(make_frame({.dst = 4, .ipv6 = true})), testing::ip6_of(4));
}

TEST(NetsimFrameEdit, MarkCeOnIpv4SetsEcnAndKeepsChecksumValid) {
  Frame f = make_frame({.traffic_class = 0x6A});  // DSCP 26, ECT(0)
  ASSERT_EQ(ecn_of(f), wire::Ecn::kEct0);
  const Frame before = f;
  ASSERT_TRUE(mark_ce(f));
  EXPECT_EQ(ecn_of(f), wire::Ecn::kCe);
  EXPECT_EQ(f[15], 0x6B);  // DSCP kept
  const wire::Bytes header(&f[14], 20);
  EXPECT_EQ(wire::load_be16(&f[24]), ipv4_header_checksum(header));
  EXPECT_NE(wire::load_be16(&f[24]), wire::load_be16(&before[24]));
  // Only TOS and checksum changed.
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (i != 15 && i != 24 && i != 25) {
      EXPECT_EQ(f[i], before[i]) << i;
    }
  }
}

TEST(NetsimFrameEdit, Ipv4ChecksumMatchesKnownFrame) {
  // docs/protocol.md §1.8, the self-generated RC SEND_ONLY frame: checksum 0x1479.
  const std::uint8_t header[20] = {0x45, 0x02, 0x00, 0x3c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11,
                                   0x14, 0x79, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x02};
  EXPECT_EQ(ipv4_header_checksum(wire::Bytes(header, 20)), 0x1479);
}

TEST(NetsimFrameEdit, MarkCeOnIpv6SetsTrafficClassEcn) {
  Frame f = make_frame({.ipv6 = true, .vlan = true, .traffic_class = 0xA9});  // ECT(1)
  ASSERT_EQ(ecn_of(f), wire::Ecn::kEct1);
  const Frame before = f;
  ASSERT_TRUE(mark_ce(f));
  EXPECT_EQ(ecn_of(f), wire::Ecn::kCe);
  EXPECT_EQ(f[18], 0x6A);  // version 6, traffic class high nibble 0xA
  EXPECT_EQ(f[19], 0xB0);  // traffic class low nibble 0x9 | 0x3 = 0xB, flow label 0
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (i != 19) {
      EXPECT_EQ(f[i], before[i]) << i;
    }
  }
}

TEST(NetsimFrameEdit, NonIpFrameIsLeftAlone) {
  Frame f(64, 0);
  f[12] = 0x88;
  f[13] = 0xCC;  // LLDP
  const Frame before = f;
  EXPECT_FALSE(mark_ce(f));
  EXPECT_EQ(f, before);
  EXPECT_FALSE(ecn_of(f));
}

TEST(NetsimFrameEdit, CoveredRangeStartsAtBthAndEndsAtUdpLength) {
  Frame f = make_frame({.payload = 16});
  const std::size_t frame_len = f.size();
  f.resize(frame_len + 6, 0);  // Ethernet padding beyond the UDP datagram
  const auto r = icrc_covered_range(f);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->begin, 42u);
  EXPECT_EQ(r->masked_byte, 46u);
  EXPECT_EQ(r->end, frame_len);
}

}  // namespace
}  // namespace xroce::net::sim
