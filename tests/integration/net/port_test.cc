// Packet I/O in real network namespaces: frames cross a veth pair bit-exact through
// either port kind in both directions, the steering program takes only our frames, nothing
// is left attached after a detach or a crash, and the UDP port needs no privileges.
// Needs root (namespaces, XDP); skips with a message otherwise.
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "netns.h"
#include "port_harness.h"
#include "wire/frame.h"

namespace xroce::testing {
namespace {

using namespace std::chrono_literals;

constexpr auto kDeadline = 5s;

#define SKIP_UNLESS_ROOT() \
  if (!running_as_root()) GTEST_SKIP() << "needs root: network namespaces and XDP"

// Frame sizes around the interesting edges: minimum, one UMEM chunk minus the kernel's XDP
// headroom (3840), a chunk (4096), and the 4096-byte RoCE MTU frames over IPv4 (4170) and
// IPv6 (4190), which need multi-buffer AF_XDP on a 9000-byte link.
const std::vector<std::size_t> kFrameSizes = {64, 1000, 3840, 3841, 4096, 4170, 4190};

std::uint32_t test_seed() {
  static const std::uint32_t seed = std::random_device{}();
  return seed;
}

// Where the UDP checksum is in a frame made by make_frame (no VLAN tag).
std::size_t udp_checksum_offset(const std::vector<std::uint8_t>& f) {
  const bool v6 = f[12] == 0x86 && f[13] == 0xDD;
  return 14 + (v6 ? 40 : 20) + 6;
}

// Sends every size over IPv4 and IPv6 from `tx` (in host `from`) to `rx` and checks that the
// frames arrive complete, in order and bit-exact, whichever port kinds are at either end. One
// field excepted: a UDP port sends with segmentation offload, so its kernel fills the UDP
// checksum (over veth it leaves the pseudo-header sum for the peer's kernel); a receiving XDP
// port sees that value where the frame had 0. It must be non-zero, and is compared masked.
void expect_frames_cross(NsPort& tx, NsPort& rx, const Host& from, const Host& to) {
  std::mt19937 rng(test_seed());
  std::vector<std::vector<std::uint8_t>> frames;
  for (bool v6 : {false, true}) {
    for (std::size_t size : kFrameSizes) {
      // ECT(0) and CE in the traffic class: the ECN bits must survive either port.
      const std::uint8_t tclass = frames.size() % 2 ? 0x02 : 0xC3;
      frames.push_back(make_frame(from, to, v6, size,
                                  static_cast<std::uint16_t>(0xC000 + frames.size()), tclass, rng));
    }
  }
  ASSERT_TRUE(tx.run([&](net::Port& p) { return send_all(p, frames, kDeadline); }))
      << "seed " << test_seed();
  auto got = rx.run([&](net::Port& p) { return receive_n(p, frames.size(), kDeadline); });
  ASSERT_EQ(got.size(), frames.size()) << "seed " << test_seed();
  const bool checksum_filled = tx.port().mode() == net::PortMode::kUdpSocket &&
                               rx.port().mode() != net::PortMode::kUdpSocket;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (checksum_filled && got[i].size() == frames[i].size()) {
      const std::size_t at = udp_checksum_offset(got[i]);
      EXPECT_TRUE(got[i][at] != 0 || got[i][at + 1] != 0) << "frame " << i;
      got[i][at] = got[i][at + 1] = 0;
    }
    EXPECT_EQ(got[i], frames[i]) << "frame " << i << " (" << frames[i].size() << " bytes), seed "
                                 << test_seed();
  }
}

// A UD SEND_ONLY frame from the wire codec (ICRC computed) carrying `payload`, PSN `psn`.
std::vector<std::uint8_t> ud_send_frame(const wire::FrameAddress& addr, std::uint32_t psn,
                                        const std::vector<std::uint8_t>& payload) {
  wire::TransportHeaders hdr;
  hdr.bth.opcode = wire::Opcode::kUdSendOnly;
  hdr.bth.dest_qp = wire::Qpn(0x11);
  hdr.bth.psn = wire::Psn(psn);
  hdr.deth = wire::Deth{wire::Qkey(0x11111111), wire::Qpn(0x12)};
  std::vector<std::uint8_t> f(wire::frame_bytes(addr, hdr, payload.size()));
  const auto n = wire::encode_frame(addr, hdr, payload, f);
  EXPECT_TRUE(n.ok());
  f.resize(n.ok() ? *n : 0);
  return f;
}

// Frames from a to b's address family `v6` (the hosts' own addresses and MACs).
wire::FrameAddress address_between(const Host& a, const Host& b, bool v6) {
  wire::FrameAddress addr;
  addr.src_mac = a.mac;
  addr.dst_mac = b.mac;
  addr.src_ip = wire::IpAddr{v6 ? a.ipv6 : a.ipv4};
  addr.dst_ip = wire::IpAddr{v6 ? b.ipv6 : b.ipv4};
  return addr;
}

// Every received frame decodes (a non-zero UDP checksum verifies or is the one left for
// offload), its ICRC verifies, and it carries payloads[i] at PSN i, in order.
void expect_wire_frames(const std::vector<std::vector<std::uint8_t>>& got,
                        const std::vector<std::vector<std::uint8_t>>& payloads) {
  ASSERT_EQ(got.size(), payloads.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    auto d = wire::decode_frame(got[i]);
    ASSERT_TRUE(d.ok()) << "frame " << i << ": " << wire::to_string(d.error());
    EXPECT_TRUE(d->icrc_ok) << "frame " << i;
    EXPECT_EQ(d->hdr.bth.psn, wire::Psn(static_cast<std::uint32_t>(i))) << "in order";
    EXPECT_TRUE(
        std::equal(d->payload.begin(), d->payload.end(), payloads[i].begin(), payloads[i].end()))
        << "frame " << i;
  }
}

// veth has native XDP but no zero-copy AF_XDP: the default order settles on copy mode.
net::PortMode expected_mode(PortKind k) {
  switch (k) {
    case PortKind::kAfXdp:
      return net::PortMode::kAfXdpCopy;
    case PortKind::kAfXdpSkb:
      return net::PortMode::kAfXdpSkb;
    case PortKind::kUdp:
    case PortKind::kUdpNoGro:
      return net::PortMode::kUdpSocket;
  }
  return net::PortMode::kUdpSocket;
}

class PortPair : public ::testing::TestWithParam<std::tuple<PortKind, PortKind>> {};

TEST_P(PortPair, FramesArriveBitExactInBothDirections) {
  SKIP_UNLESS_ROOT();
  const auto [kind_a, kind_b] = GetParam();
  VethPair net(fmt::format("pair{}{}", static_cast<int>(kind_a), static_cast<int>(kind_b)));
  NsPort a(net.a(), net.b(), kind_a);
  NsPort b(net.b(), net.a(), kind_b);
  if (!a.ok() && kind_a != PortKind::kUdp) GTEST_SKIP() << "AF_XDP unavailable: " << a.error();
  if (!b.ok() && kind_b != PortKind::kUdp) GTEST_SKIP() << "AF_XDP unavailable: " << b.error();
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  RecordProperty("mode_a", net::to_string(a.port().mode()));
  RecordProperty("mode_b", net::to_string(b.port().mode()));
  EXPECT_EQ(a.port().mode(), expected_mode(kind_a));
  EXPECT_EQ(b.port().mode(), expected_mode(kind_b));
  expect_frames_cross(a, b, net.a(), net.b());
  expect_frames_cross(b, a, net.b(), net.a());
  EXPECT_EQ(a.port().stats().rx_drops, 0u);
  EXPECT_EQ(b.port().stats().rx_drops, 0u);
}

// Frames from the wire codec (UD SEND_ONLY, ICRC computed) still decode with a valid ICRC at
// the other end, whichever ports carry them: the ports change nothing the ICRC covers.
TEST_P(PortPair, WireCodecFramesArriveWithAValidIcrc) {
  SKIP_UNLESS_ROOT();
  const auto [kind_a, kind_b] = GetParam();
  VethPair net(fmt::format("icrc{}{}", static_cast<int>(kind_a), static_cast<int>(kind_b)));
  NsPort a(net.a(), net.b(), kind_a);
  NsPort b(net.b(), net.a(), kind_b);
  if (!a.ok() && kind_a != PortKind::kUdp) GTEST_SKIP() << "AF_XDP unavailable: " << a.error();
  if (!b.ok() && kind_b != PortKind::kUdp) GTEST_SKIP() << "AF_XDP unavailable: " << b.error();
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  std::vector<std::vector<std::uint8_t>> frames;
  std::vector<std::vector<std::uint8_t>> payloads;
  for (bool v6 : {false, true}) {
    wire::FrameAddress addr = address_between(net.a(), net.b(), v6);
    addr.traffic_class = 0x02;  // ECT(0)
    addr.udp_src_port = 0xC123;
    for (std::size_t len : {0, 1000, 4096}) {
      std::vector<std::uint8_t> payload(len);
      for (std::size_t i = 0; i < len; ++i)
        payload[i] = static_cast<std::uint8_t>(i * 7 + len);
      frames.push_back(ud_send_frame(addr, static_cast<std::uint32_t>(frames.size()), payload));
      payloads.push_back(std::move(payload));
    }
  }
  ASSERT_TRUE(a.run([&](net::Port& p) { return send_all(p, frames, kDeadline); }));
  auto got = b.run([&](net::Port& p) { return receive_n(p, frames.size(), kDeadline); });
  expect_wire_frames(got, payloads);
}

// Two-buffer frames (3841..7680 bytes) are handed out as one view across two adjacent UMEM
// chunks, without a copy, and arrive bit-exact; three-buffer frames are still copied whole.
// The port fills its ring with consecutive chunks and the kernel takes them in order, so on a
// fresh port every two-buffer frame lands in adjacent chunks and is joined in place.
TEST(AfXdpMultiBuffer, TwoBufferFramesAreJoinedInPlaceBitExact) {
  SKIP_UNLESS_ROOT();
  VethPair net("join");
  NsPort a(net.a(), net.b(), PortKind::kAfXdp);
  NsPort b(net.b(), net.a(), PortKind::kAfXdp);
  if (!a.ok() || !b.ok()) GTEST_SKIP() << "AF_XDP unavailable: " << a.error() << b.error();
  const std::vector<std::size_t> sizes = {4170, 64, 4190, 3841, 8000, 1000};
  constexpr std::size_t kRounds = 50;
  std::mt19937 rng(test_seed());
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::size_t r = 0; r < kRounds; ++r) {
    for (std::size_t size : sizes) {
      frames.push_back(make_frame(net.a(), net.b(), size == 4190, size,
                                  static_cast<std::uint16_t>(0xC000 + frames.size()), 0x02, rng));
    }
  }
  ASSERT_TRUE(a.run([&](net::Port& p) { return send_all(p, frames, kDeadline); }))
      << "seed " << test_seed();
  auto got = b.run([&](net::Port& p) { return receive_n(p, frames.size(), kDeadline); });
  ASSERT_EQ(got.size(), frames.size()) << "seed " << test_seed();
  for (std::size_t i = 0; i < frames.size(); ++i) {
    ASSERT_EQ(got[i], frames[i]) << "frame " << i << " (" << frames[i].size() << " bytes), seed "
                                 << test_seed();
  }
  const net::PortStats s = b.port().stats();
  EXPECT_EQ(s.rx_drops, 0u);
  EXPECT_EQ(s.rx_joined_in_place, 3 * kRounds) << "4170, 4190 and 3841 bytes: two buffers each";
  EXPECT_EQ(s.rx_reassembled, kRounds) << "8000 bytes: three buffers";
}

// A frame built in a buffer the AF_XDP port lends (a pair of adjacent UMEM chunks) leaves from
// where it was built, at any offset: within the first chunk, across the two, or in the second
// only; every one arrives bit-exact. A lent buffer given back unused is lent again; a frame in
// the lending region that was not lent, or that runs past its pair, is refused, not sent.
TEST(AfXdpLending, FramesBuiltInLentBuffersArriveBitExact) {
  SKIP_UNLESS_ROOT();
  VethPair net("lend");
  NsPort a(net.a(), net.b(), PortKind::kAfXdp);
  NsPort b(net.b(), net.a(), PortKind::kAfXdp);
  if (!a.ok() || !b.ok()) GTEST_SKIP() << "AF_XDP unavailable: " << a.error() << b.error();
  struct Placement {
    std::size_t size;
    std::size_t offset;
  };
  const std::vector<Placement> placements = {
      {4170, 70}, {64, 0}, {4190, 50}, {1000, 4000}, {3000, 4096 + 10}, {4096, 4096}, {8192, 0}};
  constexpr std::size_t kRounds = 40;
  std::mt19937 rng(test_seed());
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::size_t r = 0; r < kRounds; ++r) {
    for (const Placement& at : placements) {
      frames.push_back(make_frame(net.a(), net.b(), at.size == 4190, at.size,
                                  static_cast<std::uint16_t>(0xC000 + frames.size()), 0x02, rng));
    }
  }
  const bool sent = a.run([&](net::Port& p) {
    const auto until = std::chrono::steady_clock::now() + kDeadline;
    for (std::size_t i = 0; i < frames.size(); ++i) {
      const Placement& at = placements[i % placements.size()];
      std::span<std::uint8_t> lent;
      while ((lent = p.lend_tx(4096 + 256)).empty()) {
        if (!p.flush() || std::chrono::steady_clock::now() > until) return false;
      }
      if (lent.size() < at.offset + at.size) return false;
      std::memcpy(lent.data() + at.offset, frames[i].data(), at.size);
      const net::TxFrame frame(lent.data() + at.offset, at.size);
      for (;;) {
        const auto taken = p.transmit(std::span<const net::TxFrame>(&frame, 1));
        if (!taken) return false;
        if (*taken == 1) break;
        if (!p.flush() || std::chrono::steady_clock::now() > until) return false;
      }
    }
    return send_all(p, {}, kDeadline);
  });
  ASSERT_TRUE(sent) << "seed " << test_seed();
  auto got = b.run([&](net::Port& p) { return receive_n(p, frames.size(), kDeadline); });
  ASSERT_EQ(got.size(), frames.size()) << "seed " << test_seed();
  for (std::size_t i = 0; i < frames.size(); ++i) {
    ASSERT_EQ(got[i], frames[i]) << "frame " << i << " (" << frames[i].size() << " bytes), seed "
                                 << test_seed();
  }
  EXPECT_EQ(a.port().stats().tx_rejected, 0u);

  // Every buffer lent, all given back, all lent again; then the refusals.
  a.run([&](net::Port& p) {
    std::vector<std::span<std::uint8_t>> all;
    for (std::span<std::uint8_t> l; !(l = p.lend_tx(4096)).empty();)
      all.push_back(l);
    ASSERT_GE(all.size(), 2u);
    EXPECT_TRUE(p.lend_tx(4096).empty()) << "nothing left to lend";
    const std::size_t lent = all.size();
    for (auto l : all)
      p.return_tx(l);
    all.clear();
    for (std::span<std::uint8_t> l; !(l = p.lend_tx(4096)).empty();)
      all.push_back(l);
    EXPECT_EQ(all.size(), lent) << "every buffer given back is lent again";
    EXPECT_TRUE(p.lend_tx(2 * 8192).empty()) << "larger than a pair";

    const std::uint64_t packets = p.stats().tx_packets;
    // Given back, then sent anyway: not lent, so refused.
    const std::span<std::uint8_t> returned = all.back();
    all.pop_back();
    p.return_tx(returned);
    std::memcpy(returned.data(), frames[0].data(), frames[0].size());
    const net::TxFrame stale(returned.data(), frames[0].size());
    // Runs past the end of its pair.
    const std::span<std::uint8_t> last = all.back();
    all.pop_back();
    const net::TxFrame overrun(last.data() + 8192 - 100, 200);
    const std::array<net::TxFrame, 2> bad = {stale, overrun};
    const auto taken = p.transmit(bad);
    ASSERT_TRUE(taken);
    EXPECT_EQ(*taken, 2u) << "refused frames are taken, not retried";
    EXPECT_EQ(p.stats().tx_rejected, 2u);
    EXPECT_EQ(p.stats().tx_packets, packets);
    for (auto l : all)
      p.return_tx(l);
    std::size_t again = 0;
    for (std::span<std::uint8_t> l; !(l = p.lend_tx(4096)).empty(); ++again)
      all.push_back(l);
    EXPECT_EQ(again, lent) << "the overrun frame's pair came back with its refusal";
    for (auto l : all)
      p.return_tx(l);
  });
  // Nothing of the refused frames reached the peer.
  EXPECT_TRUE(b.run([&](net::Port& p) { return receive_n(p, 1, 200ms); }).empty());
}

// Copy mode keeps the transmit ring's need_wakeup flag set, so the port kicks (a `sendto`) only
// while the kernel has not taken every descriptor: frames sent cost kicks, at most one per frame
// (each kick moves up to 32 descriptors), and flushing a ring the kernel has emptied, as a
// worker does at every turn, costs none.
TEST(AfXdpKicks, FlushingARingTheKernelHasTakenMakesNoSystemCall) {
  SKIP_UNLESS_ROOT();
  VethPair net("kick");
  NsPort a(net.a(), net.b(), PortKind::kAfXdp);
  NsPort b(net.b(), net.a(), PortKind::kAfXdp);
  if (!a.ok() || !b.ok()) GTEST_SKIP() << "AF_XDP unavailable: " << a.error() << b.error();
  std::mt19937 rng(test_seed());
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::size_t i = 0; i < 64; ++i) {
    frames.push_back(make_frame(net.a(), net.b(), false, i % 2 ? 4170 : 512,
                                static_cast<std::uint16_t>(0xC000 + i), 0x02, rng));
  }
  ASSERT_TRUE(a.run([&](net::Port& p) { return send_all(p, frames, kDeadline); }))
      << "seed " << test_seed();
  const auto got = b.run([&](net::Port& p) { return receive_n(p, frames.size(), kDeadline); });
  ASSERT_EQ(got.size(), frames.size()) << "seed " << test_seed();
  EXPECT_EQ(got, frames) << "seed " << test_seed();
  const std::uint64_t kicks = a.port().stats().tx_kicks;
  EXPECT_GE(kicks, 1u);
  EXPECT_LE(kicks, frames.size());
  a.run([](net::Port& p) {
    for (int i = 0; i < 1000; ++i)
      (void)p.flush();
  });
  EXPECT_EQ(a.port().stats().tx_kicks, kicks) << "a flush with nothing left to send kicked";
  EXPECT_EQ(b.port().stats().tx_kicks, 0u) << "a port that sent nothing kicked";
}

// rx_reads counts a UDP port's reads of its socket and rx_empty_reads those that found nothing:
// idle, each receive reads once and finds nothing; the frames sent after are all read, by at
// least one read and at most one per frame that found something.
TEST(UdpReads, EveryReadIsCountedAndTheEmptyOnesApart) {
  SKIP_UNLESS_ROOT();
  VethPair net("reads");
  NsPort a(net.a(), net.b(), PortKind::kUdp);
  NsPort b(net.b(), net.a(), PortKind::kUdp);
  ASSERT_TRUE(a.ok() && b.ok()) << a.error() << b.error();
  constexpr std::uint64_t kIdleReceives = 1000;
  const bool idle_empty = b.run([&](net::Port& p) {
    std::array<net::RxFrame, 32> got;
    for (std::uint64_t i = 0; i < kIdleReceives; ++i) {
      const auto n = p.receive(got);
      if (!n || *n != 0) return false;
    }
    return true;
  });
  ASSERT_TRUE(idle_empty);
  EXPECT_EQ(b.port().stats().rx_reads, kIdleReceives);
  EXPECT_EQ(b.port().stats().rx_empty_reads, kIdleReceives);

  std::mt19937 rng(test_seed());
  std::vector<std::vector<std::uint8_t>> frames;
  for (int i = 0; i < 10; ++i)
    frames.push_back(make_frame(net.a(), net.b(), i % 2 != 0, 300 + 64 * i, 0xC000, 0x02, rng));
  ASSERT_TRUE(a.run([&](net::Port& p) { return send_all(p, frames, kDeadline); }));
  const auto got = b.run([&](net::Port& p) { return receive_n(p, frames.size(), kDeadline); });
  EXPECT_EQ(got, frames) << "seed " << test_seed();
  const net::PortStats after = b.port().stats();
  const std::uint64_t found = after.rx_reads - after.rx_empty_reads;
  EXPECT_GE(found, 1u);
  EXPECT_LE(found, frames.size());
  EXPECT_EQ(a.port().stats().rx_reads, 0u) << "a port that only sent read its socket";
}

// A UDP port writes every frame into the socket itself: it lends nothing.
TEST(AfXdpLending, AUdpPortLendsNothing) {
  SKIP_UNLESS_ROOT();
  VethPair net("lendudp");
  NsPort a(net.a(), net.b(), PortKind::kUdp);
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_TRUE(a.run([](net::Port& p) { return p.lend_tx(64).empty(); }));
}

// The UDP port sends the packets of one message (one destination, equal lengths, the last
// shorter) in segmented sends (UDP_SEGMENT). Whichever port receives, every packet arrives in
// order with its payload and an ICRC that verifies: segment k of an IPv4 send leaves with
// identification k, and the port rewrote its ICRC for that ID. Not an AF_XDP port in SKB mode
// at the veth's other end: generic XDP takes the send whole (engine/net/udp_port.h).
class UdpSegmentation : public ::testing::TestWithParam<PortKind> {};

TEST_P(UdpSegmentation, AMessageSentInSegmentedSendsArrivesPacketByPacket) {
  SKIP_UNLESS_ROOT();
  const PortKind kind_b = GetParam();
  VethPair net(fmt::format("gso{}", static_cast<int>(kind_b)));
  NsPort a(net.a(), net.b(), PortKind::kUdp);
  NsPort b(net.b(), net.a(), kind_b);
  if (!b.ok() && kind_b != PortKind::kUdp) GTEST_SKIP() << "AF_XDP unavailable: " << b.error();
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  std::vector<std::vector<std::uint8_t>> frames;
  std::vector<std::vector<std::uint8_t>> payloads;
  for (bool v6 : {false, true}) {
    wire::FrameAddress addr = address_between(net.a(), net.b(), v6);
    addr.udp_src_port = 0xC321;
    for (std::size_t i = 0; i < 20; ++i) {
      std::vector<std::uint8_t> payload(i + 1 < 20 ? 4096 : 500);
      for (std::size_t j = 0; j < payload.size(); ++j)
        payload[j] = static_cast<std::uint8_t>(j * 13 + frames.size());
      frames.push_back(ud_send_frame(addr, static_cast<std::uint32_t>(frames.size()), payload));
      payloads.push_back(std::move(payload));
    }
  }
  ASSERT_TRUE(a.run([&](net::Port& p) { return send_all(p, frames, kDeadline); }));
  auto got = b.run([&](net::Port& p) { return receive_n(p, frames.size(), kDeadline); });
  EXPECT_GE(a.port().stats().tx_gso_sends, 2u);  // at least one per address family
  expect_wire_frames(got, payloads);
  EXPECT_EQ(b.port().stats().rx_drops, 0u);
  // A UDP port with receive offload reads each segmented send as one datagram.
  if (kind_b == PortKind::kUdp) {
    EXPECT_GE(b.port().stats().rx_gro_datagrams, 2u);
  } else {
    EXPECT_EQ(b.port().stats().rx_gro_datagrams, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Receivers, UdpSegmentation,
                         ::testing::Values(PortKind::kAfXdp, PortKind::kUdp, PortKind::kUdpNoGro),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// Receive offload (UDP_GRO): the port reads a segmented send as one datagram into consecutive
// buffers, each segment where its headers can go in front of it, and hands the segments out as
// frames. Seeded messages whose packets change length (a longer first packet, a shorter last,
// runs of 1 to 70 packets of 64 B to 4 KB, IPv4 and IPv6) all arrive in order, bit-exact, none
// dropped, whether they landed where the port expected or were copied into place. Then, with
// lengths steady (16-packet messages: a longer first packet, 15 of 4 KB), the segments land in
// buffers of their own: only each message's first packet, 16 bytes longer than the expected
// length, is moved.
TEST(UdpReceiveOffload, SegmentsOfChangingLengthsArriveFrameByFrame) {
  SKIP_UNLESS_ROOT();
  const std::uint32_t seed = ::testing::UnitTest::GetInstance()->random_seed();
  SCOPED_TRACE(fmt::format("seed {} (--gtest_random_seed={} repeats this run)", seed, seed));
  VethPair net("gro");
  NsPort a(net.a(), net.b(), PortKind::kUdp);
  NsPort b(net.b(), net.a(), PortKind::kUdp);
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  std::mt19937 rng(seed);
  std::vector<std::vector<std::uint8_t>> frames;
  std::vector<std::vector<std::uint8_t>> payloads;
  const auto add = [&](const wire::FrameAddress& addr, std::size_t len) {
    std::vector<std::uint8_t> payload(len);
    for (auto& byte : payload)
      byte = static_cast<std::uint8_t>(rng());
    frames.push_back(ud_send_frame(addr, static_cast<std::uint32_t>(frames.size()), payload));
    payloads.push_back(std::move(payload));
  };
  const auto add_message = [&](const wire::FrameAddress& addr, std::size_t first,
                               std::size_t middle, std::size_t packets, std::size_t last) {
    add(addr, first);
    for (std::size_t i = 2; i < packets; ++i)
      add(addr, middle);
    if (packets > 1) add(addr, last);
  };
  for (int m = 0; m < 60; ++m) {
    wire::FrameAddress addr = address_between(net.a(), net.b(), rng() % 4 == 0);
    addr.udp_src_port = 0xC400;
    const std::size_t middle = std::array<std::size_t, 5>{64, 1000, 2048, 4000, 4096}[rng() % 5];
    const std::size_t packets = 1 + rng() % 70;
    const std::size_t first = rng() % 2 == 0 ? middle : std::min<std::size_t>(middle + 16, 4096);
    add_message(addr, first, middle, packets, 1 + rng() % middle);
  }
  ASSERT_TRUE(a.run([&](net::Port& p) { return send_all(p, frames, kDeadline); }));
  auto got = b.run([&](net::Port& p) { return receive_n(p, frames.size(), kDeadline); });
  expect_wire_frames(got, payloads);
  EXPECT_EQ(b.port().stats().rx_drops, 0u);
  EXPECT_GT(b.port().stats().rx_gro_datagrams, 0u);

  // Steady lengths: one message to set what the port expects, then the measured ones.
  const wire::FrameAddress addr = address_between(net.a(), net.b(), false);
  const auto send_and_receive = [&](std::size_t messages) {
    const std::size_t before = frames.size();
    for (std::size_t m = 0; m < messages; ++m)
      add_message(addr, 4080, 4064, 16, 4064);
    std::vector<std::vector<std::uint8_t>> more(frames.begin() + static_cast<long>(before),
                                                frames.end());
    ASSERT_TRUE(a.run([&](net::Port& p) { return send_all(p, more, kDeadline); }));
    auto in = b.run([&](net::Port& p) { return receive_n(p, more.size(), kDeadline); });
    got.insert(got.end(), in.begin(), in.end());
  };
  send_and_receive(1);
  const net::PortStats at = b.port().stats();
  constexpr std::size_t kMessages = 20;
  send_and_receive(kMessages);
  expect_wire_frames(got, payloads);
  EXPECT_EQ(b.port().stats().rx_drops, 0u);
  EXPECT_GE(b.port().stats().rx_gro_datagrams - at.rx_gro_datagrams, kMessages);
  // Each message's first packet is 16 bytes longer than the expected length: moved. The others
  // landed in place.
  EXPECT_LE(b.port().stats().rx_gro_copied - at.rx_gro_copied, kMessages)
      << "of " << kMessages * 16 << " frames";
}

// A port holds, received and unread, as many frames as its receive_frames says: what a device
// takes as the bound of its in-flight budget (Device::set_port_receive_frames, a quarter of it).
// That many frames of a 4096-byte-MTU packet's size, sent to a port nobody reads meanwhile,
// all wait and then arrive whole.
class ReceiveCapacity : public ::testing::TestWithParam<PortKind> {};

TEST_P(ReceiveCapacity, AsManyFramesAsThePortSaysItHoldsWaitUnreadAndArriveWhole) {
  SKIP_UNLESS_ROOT();
  VethPair net("hold");
  NsPort a(net.a(), net.b(), GetParam());
  NsPort b(net.b(), net.a(), GetParam());
  if (GetParam() == PortKind::kAfXdp && (!a.ok() || !b.ok()))
    GTEST_SKIP() << "AF_XDP unavailable: " << a.error() << b.error();
  ASSERT_TRUE(a.ok() && b.ok()) << a.error() << b.error();
  constexpr std::size_t kFrameBytes = 4170;
  const std::size_t holds = b.port().receive_frames(kFrameBytes);
  // AF_XDP: the receive half of 4,096 UMEM chunks, two chunks a frame (multi-buffer). UDP: the
  // 16 MiB socket buffer the daemon asks for, at two pages a frame.
  EXPECT_EQ(holds, GetParam() == PortKind::kUdp ? 2048u : 1024u);
  std::mt19937 rng(test_seed());
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::size_t i = 0; i < holds; ++i) {
    frames.push_back(make_frame(net.a(), net.b(), false, kFrameBytes, 0xC000, 0x02, rng));
  }
  ASSERT_TRUE(a.run([&](net::Port& p) { return send_all(p, frames, kDeadline); }))
      << "seed " << test_seed();
  const auto got = b.run([&](net::Port& p) { return receive_n(p, frames.size(), kDeadline); });
  ASSERT_EQ(got.size(), frames.size()) << "seed " << test_seed();
  // Each in order with its payload. A UDP port sends equal frames in segmented sends, which
  // number their IPv4 identifications and rewrite ICRC and checksums to match
  // (UdpSegmentation): those bytes are the port's, the payload between is the sender's.
  constexpr std::size_t kHeaderBytes =
      wire::kEthHeaderBytes + wire::kIpv4HeaderBytes + wire::kUdpHeaderBytes;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    ASSERT_EQ(got[i].size(), frames[i].size()) << "frame " << i << ", seed " << test_seed();
    const auto end = got[i].end() - wire::kIcrcBytes;
    const auto diff =
        std::mismatch(got[i].begin() + kHeaderBytes, end, frames[i].begin() + kHeaderBytes);
    ASSERT_TRUE(diff.first == end) << "frame " << i << " differs at byte "
                                   << (diff.first - got[i].begin()) << ", seed " << test_seed();
  }
  EXPECT_EQ(b.port().stats().rx_drops, 0u);
}

INSTANTIATE_TEST_SUITE_P(Kinds, ReceiveCapacity,
                         ::testing::Values(PortKind::kAfXdp, PortKind::kUdp),
                         [](const auto& info) { return std::string(to_string(info.param)); });

INSTANTIATE_TEST_SUITE_P(
    AllKinds, PortPair,
    ::testing::Combine(::testing::Values(PortKind::kAfXdp, PortKind::kUdp, PortKind::kAfXdpSkb),
                       ::testing::Values(PortKind::kAfXdp, PortKind::kUdp, PortKind::kAfXdpSkb)),
    [](const auto& info) {
      return std::string(to_string(std::get<0>(info.param))) + "_to_" +
             to_string(std::get<1>(info.param));
    });

}  // namespace
}  // namespace xroce::testing
