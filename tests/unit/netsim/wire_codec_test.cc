// The simulator against the real wire codec: every frame the wire corrupts fails the
// receiver's ICRC check (or does not even decode), and CE marking by a switch keeps frames
// valid (ECN and the IPv4 checksum are masked out of the ICRC, docs/protocol.md §1.7).
#include <gtest/gtest.h>

#include "net/sim/network.h"
#include "test_frames.h"
#include "wire/frame.h"

namespace xroce::net::sim {
namespace {

using testing::host_config;

constexpr std::uint64_t kSeed = 0xC0DEC;

wire::FrameAddress address(bool ipv6, std::uint8_t traffic_class) {
  wire::FrameAddress a;
  a.src_mac = testing::mac_of(1);
  a.dst_mac = testing::mac_of(2);
  a.src_ip = ipv6 ? testing::ip6_of(1) : testing::ip4_of(1);
  a.dst_ip = ipv6 ? testing::ip6_of(2) : testing::ip4_of(2);
  a.traffic_class = traffic_class;
  return a;
}

// RC SEND_ONLY frames with PSN i and (i % 1000) payload bytes, alternately IPv4 and IPv6.
Frame encoded_frame(std::uint32_t i, std::uint8_t traffic_class) {
  wire::TransportHeaders h;
  h.bth.opcode = wire::Opcode::kRcSendOnly;
  h.bth.dest_qp = wire::Qpn(0x11);
  h.bth.psn = wire::Psn(i);
  h.bth.ack_req = true;
  std::vector<std::uint8_t> payload(i % 1000);
  for (std::size_t k = 0; k < payload.size(); ++k)
    payload[k] = static_cast<std::uint8_t>(k * 7);
  const auto a = address(i % 2 == 1, traffic_class);
  Frame f(wire::frame_bytes(a, h, payload.size()));
  const auto n = wire::encode_frame(a, h, payload, f);
  EXPECT_TRUE(n.ok());
  return f;
}

struct Delivered {
  std::vector<Delivery> frames;
  PortStats stats;
};

Delivered send_through(std::uint32_t count, std::uint8_t traffic_class, const PortConfig& sw_out,
                       const Impairments& wire_faults) {
  Network net(kSeed);
  const NodeId a = net.add_host(host_config(1));
  const NodeId b = net.add_host(host_config(2));
  const NodeId sw = net.add_switch("sw");
  PortConfig in;
  in.link.impair = wire_faults;
  net.connect(a, sw, in);
  const Link out = net.connect(sw, b, sw_out, PortConfig{});
  for (std::uint32_t i = 0; i < count; ++i)
    net.send(net.now(), a, encoded_frame(i, traffic_class));
  net.run_until_idle();
  Delivered d;
  while (auto got = net.receive(b))
    d.frames.push_back(std::move(*got));
  d.stats = net.stats(out.a_to_b);
  return d;
}

TEST(NetsimWireCodec, EveryCorruptedFrameFailsTheIcrcCheck) {
  for (unsigned bits = 1; bits <= 3; ++bits) {
    const auto got =
        send_through(3'000, 0x02, PortConfig{}, {.corrupt = 0.5, .corrupt_bits = bits});
    ASSERT_EQ(got.frames.size(), 3'000u);
    std::uint64_t bad = 0;
    for (const auto& d : got.frames) {
      const Frame original = encoded_frame(static_cast<std::uint32_t>(d.id), 0x02);
      const auto decoded = wire::decode_frame(d.frame);
      if (d.frame == original) {
        ASSERT_TRUE(decoded.ok());
        EXPECT_TRUE(decoded->icrc_ok);
        continue;
      }
      ++bad;
      // A flip may break the BTH so that the frame does not decode at all; if it decodes,
      // the ICRC must not verify.
      if (decoded.ok()) {
        EXPECT_FALSE(decoded->icrc_ok) << "frame " << d.id << " bits " << bits << " seed " << kSeed;
      }
    }
    EXPECT_GT(bad, 1'300u);
    EXPECT_LT(bad, 1'700u);
  }
}

TEST(NetsimWireCodec, CeMarkedFramesStillVerify) {
  PortConfig marking;
  marking.queue.ecn = {.enabled = true, .kmin_bytes = 0, .kmax_bytes = 0, .pmax = 1.0};
  // Slow egress: frame 0 goes onto the wire, frame 1 finds an empty queue (q = 0 <= Kmin), every
  // later frame finds frames waiting (q > Kmax = 0) and is marked.
  marking.link.rate_bps = 1'000'000'000;
  const auto got = send_through(500, 0x6A, marking, {});
  ASSERT_EQ(got.frames.size(), 500u);
  EXPECT_EQ(got.stats.ecn_marked, 498u);
  for (const auto& d : got.frames) {
    const auto decoded = wire::decode_frame(d.frame);
    ASSERT_TRUE(decoded.ok()) << wire::to_string(decoded.error());
    EXPECT_TRUE(decoded->icrc_ok);
    const bool marked = d.id >= 2;
    EXPECT_EQ(decoded->ecn, marked ? wire::Ecn::kCe : wire::Ecn::kEct0);
    EXPECT_EQ(decoded->addr.traffic_class, marked ? 0x6B : 0x6A);
    EXPECT_EQ(decoded->hdr.bth.psn, wire::Psn(static_cast<std::uint32_t>(d.id)));
  }
}

}  // namespace
}  // namespace xroce::net::sim
