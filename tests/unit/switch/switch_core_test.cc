// The switch's pure parts: header parsing and CE marking on real encoded frames, and the egress
// queue's marking rule, drop-tail limit, rate limit and depth statistics with scripted time.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "egress_queue.h"
#include "frame_edit.h"
#include "wire/frame.h"
#include "wire/icrc.h"

namespace xroce::sw {
namespace {

namespace w = xroce::wire;

std::vector<std::uint8_t> frame(bool ipv6, std::uint8_t tos, std::optional<std::uint16_t> vlan,
                                w::Opcode opcode = w::Opcode::kRcSendOnly) {
  w::FrameAddress a;
  a.src_mac = {0x02, 0, 0, 0, 0, 1};
  a.dst_mac = {0x02, 0, 0, 0, 0, 2};
  a.vlan_tci = vlan;
  if (ipv6) {
    std::array<std::uint8_t, 16> ip{0x20, 0x01, 0x00, 0x02};
    ip[15] = 1;
    a.src_ip = w::IpAddr::v6(ip);
    ip[15] = 2;
    a.dst_ip = w::IpAddr::v6(ip);
    a.flow_label = 0xABCDE;
  } else {
    a.src_ip = w::IpAddr::v4(0xC6120001);
    a.dst_ip = w::IpAddr::v4(0xC6120002);
  }
  a.traffic_class = tos;
  w::TransportHeaders h;
  h.bth.opcode = opcode;
  h.bth.dest_qp = w::Qpn(0x33);
  if (opcode == w::Opcode::kRcWriteOnly) h.reth = w::Reth{0x1000, w::Rkey(1), 64};
  const std::vector<std::uint8_t> payload(64, 0xA5);
  std::vector<std::uint8_t> f(w::frame_bytes(a, h, payload.size()));
  EXPECT_TRUE(w::encode_frame(a, h, payload, f).ok());
  return f;
}

struct Case {
  bool ipv6;
  std::optional<std::uint16_t> vlan;
};

class FrameEditTest : public ::testing::TestWithParam<Case> {};

TEST_P(FrameEditTest, MarksEctAsCeKeepingChecksumsAndIcrc) {
  const auto [ipv6, vlan] = GetParam();
  for (const std::uint8_t tos : {0x02, 0x01, 0x6A, 0x69}) {  // ECT(0), ECT(1), DSCP 26 + either
    auto f = frame(ipv6, tos, vlan);
    const auto info = classify(f);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->ipv4, !ipv6);
    EXPECT_EQ(info->ipv6, ipv6);
    EXPECT_TRUE(info->roce);
    EXPECT_EQ(info->bth_opcode, 0x04);
    EXPECT_EQ(static_cast<std::uint8_t>(info->ecn), tos & 3);
    ASSERT_TRUE(mark_ce(f, *info));
    const auto d = w::decode_frame(f);  // verifies the IPv4 header checksum
    ASSERT_TRUE(d.ok()) << w::to_string(d.error());
    EXPECT_TRUE(d->icrc_ok);
    EXPECT_EQ(d->ecn, w::Ecn::kCe);
    EXPECT_EQ(d->addr.traffic_class, tos | 3) << "the DSCP is kept";
    if (ipv6) {
      EXPECT_EQ(d->addr.flow_label, 0xABCDEu);
    }
    if (!ipv6) {
      EXPECT_TRUE(w::ipv4_header_checksum_ok(std::span(f).subspan(info->l3_offset, 20)));
    }
  }
}

TEST_P(FrameEditTest, LeavesNotEctAndCeAlone) {
  const auto [ipv6, vlan] = GetParam();
  for (const std::uint8_t tos : {0x00, 0x03, 0x68}) {
    auto f = frame(ipv6, tos, vlan);
    const auto before = f;
    const auto info = classify(f);
    ASSERT_TRUE(info);
    EXPECT_FALSE(mark_ce(f, *info));
    EXPECT_EQ(f, before);
  }
}

TEST_P(FrameEditTest, BleachClearsEveryEcnCodepointAndKeepsTheDscp) {
  const auto [ipv6, vlan] = GetParam();
  for (const std::uint8_t tos : {0x01, 0x02, 0x03, 0x6a}) {
    auto f = frame(ipv6, tos, vlan);
    const auto info = classify(f);
    ASSERT_TRUE(info);
    ASSERT_TRUE(bleach_ecn(f, *info));
    const auto d = w::decode_frame(f);  // verifies the IPv4 header checksum
    ASSERT_TRUE(d.ok()) << w::to_string(d.error());
    EXPECT_TRUE(d->icrc_ok);
    EXPECT_EQ(d->ecn, w::Ecn::kNotEct);
    EXPECT_EQ(d->addr.traffic_class, tos & ~3) << "the DSCP is kept";
    if (!ipv6) {
      EXPECT_TRUE(w::ipv4_header_checksum_ok(std::span(f).subspan(info->l3_offset, 20)));
    }
  }
  auto not_ect = frame(ipv6, 0x68, vlan);
  const auto before = not_ect;
  EXPECT_FALSE(bleach_ecn(not_ect, *classify(not_ect)));
  EXPECT_EQ(not_ect, before);
}

// A UDP port sending with segmentation offload hands the veth one superframe per send: the
// first frame's headers, then every frame's UDP payload, each segment's ICRC already computed
// for the IPv4 identification its segment will carry (the first's + k). Split, each frame is
// the one a NIC would have sent: it decodes, its ICRC verifies, its UDP checksum is complete.
TEST_P(FrameEditTest, SplitsAUdpSuperframeIntoTheFramesOnTheWire) {
  const auto [ipv6, vlan] = GetParam();
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::size_t i = 0; i < 3; ++i)
    frames.push_back(frame(ipv6, 0x02, vlan));
  const auto first = classify(frames[0]);
  ASSERT_TRUE(first);
  const std::size_t headers = first->layout.udp_payload_offset();
  const std::size_t segment = frames[0].size() - headers;
  std::vector<std::uint8_t> super = frames[0];
  for (std::size_t k = 1; k < frames.size(); ++k) {
    std::vector<std::uint8_t> payload(frames[k].begin() + static_cast<std::ptrdiff_t>(headers),
                                      frames[k].end());
    if (!ipv6) {
      const std::size_t icrc_at = payload.size() - w::kIcrcBytes;
      const std::size_t datagram = w::kIpv4HeaderBytes + w::kUdpHeaderBytes + icrc_at;
      w::store_icrc(&payload[icrc_at],
                    w::load_icrc(&payload[icrc_at]) ^
                        w::icrc_ipv4_id_change(datagram, static_cast<std::uint16_t>(k)));
    }
    super.insert(super.end(), payload.begin(), payload.end());
  }
  const std::size_t udp = first->layout.udp_offset;
  w::store_be16(&super[udp + 4], static_cast<std::uint16_t>(super.size() - udp));
  w::store_be16(&super[udp + 6], 0x1234);  // a partial checksum: the segments get full ones

  const auto split = split_udp_superframe(super, static_cast<std::uint16_t>(segment));
  ASSERT_EQ(split.size(), frames.size());
  for (std::size_t k = 0; k < split.size(); ++k) {
    SCOPED_TRACE("segment " + std::to_string(k));
    ASSERT_EQ(split[k].size(), frames[k].size());
    const auto d = w::decode_frame(split[k]);  // verifies a non-zero UDP checksum
    ASSERT_TRUE(d.ok()) << w::to_string(d.error());
    EXPECT_TRUE(d->icrc_ok);
    EXPECT_NE(d->udp_checksum, 0);
    EXPECT_EQ(d->payload.size(), 64u);
    if (!ipv6) {
      EXPECT_EQ(w::load_be16(&split[k][first->layout.ip_offset + 4]), k);
    }
  }
  EXPECT_TRUE(split_udp_superframe(super, 0).empty());
  EXPECT_TRUE(split_udp_superframe(std::vector<std::uint8_t>(10, 0), 100).empty());
}

INSTANTIATE_TEST_SUITE_P(Families, FrameEditTest,
                         ::testing::Values(Case{false, std::nullopt}, Case{true, std::nullopt},
                                           Case{false, 0x6005}, Case{true, 0x0007}));

TEST(FrameEdit, ClassifiesOpcodesNonRoceAndShortFrames) {
  auto write = frame(false, 0, std::nullopt, w::Opcode::kRcWriteOnly);
  EXPECT_EQ(classify(write)->bth_opcode, 0x0A);
  auto other = write;
  other[14 + 20 + 3] = 0xB8;  // UDP destination port 4792
  EXPECT_FALSE(classify(other)->roce);
  const std::vector<std::uint8_t> arp = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0,
                                         0,    0,    0,    1,    0x08, 0x06, 0, 1};
  const auto info = classify(arp);
  ASSERT_TRUE(info);
  EXPECT_FALSE(info->ipv4 || info->ipv6 || info->roce);
  EXPECT_FALSE(classify(std::vector<std::uint8_t>(13)));
  // Cut inside the IPv4 header: parsed as nothing, never read past the end.
  EXPECT_FALSE(classify(std::span(write).first(20))->ipv4);
}

EgressConfig config(std::uint64_t buffer, std::uint64_t rate, std::optional<EcnThresholds> ecn) {
  EgressConfig c;
  c.buffer_bytes = buffer;
  c.rate_mbit = rate;
  c.ecn = ecn;
  c.seed = 42;
  return c;
}

TEST(EgressQueue, MarksNeverAtOrBelowKminAlwaysAboveKmaxAndInBetweenAtTheRampRate) {
  EgressQueue q(config(1 << 30, 0, EcnThresholds{10'000, 20'000, 0.5}));
  std::size_t marks_mid = 0;
  std::size_t mid = 0;
  // Fill 1000 bytes at a time; the decision depends on the bytes already queued.
  for (int i = 0; i < 30'000; ++i) {
    const std::uint64_t depth = q.depth_bytes();
    const auto a = q.admit(1000, true);
    const bool mark = a == EgressQueue::Admission::kQueuedMarkCe;
    if (depth <= 10'000) {
      ASSERT_FALSE(mark) << depth;
    }
    if (depth > 20'000) {
      ASSERT_TRUE(mark) << depth;
    }
    if (depth == 15'000) {
      ++mid;
      marks_mid += mark;
    }
    q.push(std::vector<std::uint8_t>(1000), 1000, mark);
    if (q.depth_bytes() >= 25'000) {
      while (!q.empty())
        q.pop(0, true);
    }
  }
  // p(15000) = 0.5 * 5000 / 10000 = 0.25.
  ASSERT_GT(mid, 1000u);
  EXPECT_NEAR(static_cast<double>(marks_mid) / static_cast<double>(mid), 0.25, 0.05);
  EXPECT_EQ(q.admit(1000, false), EgressQueue::Admission::kQueued) << "Not-ECT is never marked";
}

TEST(EgressQueue, DropsTailWhenFullAndCountsIt) {
  EgressQueue q(config(3000, 0, std::nullopt));
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(q.admit(1000, false), EgressQueue::Admission::kQueued);
    q.push(std::vector<std::uint8_t>(1010), 1000, false);
  }
  EXPECT_EQ(q.admit(1, false), EgressQueue::Admission::kDroppedFull);
  EXPECT_EQ(q.counters().dropped_full, 1u);
  EXPECT_EQ(q.depth_bytes(), 3000u);
  EXPECT_EQ(q.counters().queue_max_bytes, 3000u);
  ASSERT_NE(q.head_if_ready(0), nullptr);
  EXPECT_EQ(q.head_if_ready(0)->size(), 1010u) << "the buffer is sent as queued";
}

TEST(EgressQueue, RateLimitSpacesFramesByTheirWireTime) {
  // 1000 Mbit/s: a 1250-byte frame takes 10 us. Burst tolerance: 100 us.
  EgressQueue q(config(1 << 20, 1000, std::nullopt));
  for (int i = 0; i < 100; ++i)
    q.push(std::vector<std::uint8_t>(1250), 1250, false);
  const std::uint64_t t0 = 1'000'000'000;
  std::uint64_t now = t0;
  std::size_t sent_at_once = 0;
  while (q.head_if_ready(now)) {
    q.pop(now, true);
    ++sent_at_once;
  }
  EXPECT_EQ(sent_at_once, 11u) << "one frame plus the 100 us tolerance's worth";
  // From then on one frame per 10 us.
  for (int i = 0; i < 50; ++i) {
    const auto ready = q.head_ready_ns();
    ASSERT_TRUE(ready);
    EXPECT_EQ(*ready, t0 + (sent_at_once + static_cast<std::uint64_t>(i)) * 10'000 - 100'000);
    ASSERT_EQ(q.head_if_ready(*ready - 1), nullptr);
    now = *ready;
    q.pop(now, true);
  }
  EXPECT_EQ(q.counters().tx, sent_at_once + 50);
  EXPECT_EQ(q.counters().tx_bytes, (sent_at_once + 50) * 1250);
}

TEST(EgressQueue, DepthPercentileFromArrivals) {
  EgressQueue q(config(1 << 20, 0, std::nullopt));
  // 99 arrivals find an empty queue, one finds 500 KB.
  for (int i = 0; i < 99; ++i)
    (void)q.admit(100, false);
  q.push(std::vector<std::uint8_t>(500'000), 500'000, false);
  (void)q.admit(100, false);
  EXPECT_EQ(q.counters().queue_max_bytes, 500'000u);
  EXPECT_LT(q.depth_p99_bytes(), 256u) << "the 99th percentile is the empty queue's bin";
  (void)q.admit(100, false);
  EXPECT_EQ(q.depth_p99_bytes(), 500'000u) << "2 % of arrivals saw 500 KB (clamped to the max)";
}

}  // namespace
}  // namespace xroce::sw
