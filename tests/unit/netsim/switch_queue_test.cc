// Switch egress queues: RED-style ECN marking on enqueue, drop-tail overflow, and lossless
// (PFC-like) mode that pauses the sender instead of dropping.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>

#include "net/sim/frame_edit.h"
#include "net/sim/network.h"
#include "test_frames.h"

namespace xroce::net::sim {
namespace {

using testing::host_config;
using testing::make_frame;

constexpr std::uint64_t kSeed = 0xEC7;

TEST(NetsimEcn, MarkingProbabilityFollowsRed) {
  const EcnConfig ecn{.enabled = true, .kmin_bytes = 1'000, .kmax_bytes = 3'000, .pmax = 0.2};
  EXPECT_EQ(ecn_marking_probability(ecn, 0), 0.0);
  EXPECT_EQ(ecn_marking_probability(ecn, 1'000), 0.0);
  EXPECT_DOUBLE_EQ(ecn_marking_probability(ecn, 2'000), 0.1);
  EXPECT_DOUBLE_EQ(ecn_marking_probability(ecn, 3'000), 0.2);
  EXPECT_EQ(ecn_marking_probability(ecn, 3'001), 1.0);
}

constexpr std::size_t kFrameBytes = 1'000;
constexpr std::size_t kBurst = 40;
constexpr std::size_t kBursts = 1'000;
constexpr std::uint64_t kKmin = 10 * kFrameBytes;
constexpr std::uint64_t kKmax = 20 * kFrameBytes;
constexpr double kPmax = 0.5;

// Bursts of kBurst 1000-byte frames a -> switch -> b, the switch egress 100x slower than the
// ingress, so frame j of a burst finds exactly (j - 1) frames waiting (frame 0 goes straight
// onto the wire). Returns, per position j, how many deliveries carried CE.
struct EcnRun {
  std::array<std::uint64_t, kBurst> ce_at{};
  PortStats egress;
};

EcnRun run_bursts(std::uint8_t traffic_class, bool ecn_enabled, std::size_t bursts = kBursts) {
  Network net(kSeed);
  const NodeId a = net.add_host(host_config(1));
  const NodeId b = net.add_host(host_config(2));
  const NodeId sw = net.add_switch("sw");
  PortConfig fast;
  fast.link.rate_bps = 100'000'000'000;
  fast.link.propagation_ns = 100;
  PortConfig slow = fast;
  slow.link.rate_bps = 1'000'000'000;
  slow.queue.ecn = {
      .enabled = ecn_enabled, .kmin_bytes = kKmin, .kmax_bytes = kKmax, .pmax = kPmax};
  net.connect(a, sw, fast);
  const Link out = net.connect(sw, b, slow, fast);
  EcnRun run;
  for (std::size_t burst = 0; burst < bursts; ++burst) {
    for (std::uint32_t j = 0; j < kBurst; ++j) {
      net.send(net.now(), a,
               make_frame({.traffic_class = traffic_class, .psn = j, .payload = 942}));
    }
    net.run_until_idle();
    while (auto d = net.receive(b)) {
      EXPECT_EQ(d->frame.size(), kFrameBytes);
      if (ecn_of(d->frame) == wire::Ecn::kCe) ++run.ce_at[testing::psn_of(d->frame)];
    }
  }
  run.egress = net.stats(out.a_to_b);
  return run;
}

TEST(NetsimEcn, MarksNothingAtOrBelowKminSomeBetweenAllAboveKmax) {
  const EcnRun run = run_bursts(0x02, true);  // ECT(0)
  double expected_between = 0, variance_between = 0;
  std::uint64_t marked_between = 0, total = 0;
  for (std::size_t j = 0; j < kBurst; ++j) {
    const std::uint64_t depth = j == 0 ? 0 : (j - 1) * kFrameBytes;
    total += run.ce_at[j];
    if (depth <= kKmin) {
      EXPECT_EQ(run.ce_at[j], 0u) << "position " << j;
    } else if (depth > kKmax) {
      EXPECT_EQ(run.ce_at[j], kBursts) << "position " << j;
    } else {
      const double p = kPmax * static_cast<double>(depth - kKmin) / (kKmax - kKmin);
      const double sd = std::sqrt(kBursts * p * (1 - p));
      EXPECT_NEAR(static_cast<double>(run.ce_at[j]), kBursts * p, 4 * sd + 1)
          << "position " << j << " seed " << kSeed;
      expected_between += kBursts * p;
      variance_between += kBursts * p * (1 - p);
      marked_between += run.ce_at[j];
    }
  }
  EXPECT_NEAR(static_cast<double>(marked_between), expected_between,
              4 * std::sqrt(variance_between));
  EXPECT_EQ(run.egress.ecn_marked, total);
}

TEST(NetsimEcn, NeverMarksNotEctFramesOrWhenDisabled) {
  // 200 bursts: 4000 frames above Kmax that would all be marked if they were ECT.
  const EcnRun not_ect = run_bursts(0x00, true, 200);
  const EcnRun disabled = run_bursts(0x02, false, 200);
  for (std::size_t j = 0; j < kBurst; ++j) {
    EXPECT_EQ(not_ect.ce_at[j], 0u);
    EXPECT_EQ(disabled.ce_at[j], 0u);
  }
  EXPECT_EQ(not_ect.egress.ecn_marked, 0u);
  EXPECT_EQ(disabled.egress.ecn_marked, 0u);
}

// 2:1 incast: hosts 1 and 2 each send kIncastFrames 1000-byte frames at line rate to host 3
// through one switch whose egress toward host 3 holds 20 KB.
constexpr std::uint32_t kIncastFrames = 500;
constexpr std::uint64_t kCapacity = 20'000;

struct IncastRun {
  std::map<NodeId, std::vector<std::uint32_t>> psns_by_origin;
  PortStats egress;
  std::array<PortStats, 2> senders;
  QueueDepthSummary depth;
};

IncastRun run_incast(Overflow overflow) {
  Network net(kSeed);
  const NodeId h1 = net.add_host(host_config(1));
  const NodeId h2 = net.add_host(host_config(2));
  const NodeId h3 = net.add_host(host_config(3));
  const NodeId sw = net.add_switch("sw");
  PortConfig c;
  c.link.rate_bps = 10'000'000'000;
  c.link.propagation_ns = 1'000;
  c.queue.capacity_bytes = kCapacity;
  c.queue.overflow = overflow;
  PortConfig host_side = c;
  host_side.queue.capacity_bytes = 0;  // the hosts' own queues are unbounded
  net.connect(h1, sw, host_side, c);
  net.connect(h2, sw, host_side, c);
  const Link out = net.connect(sw, h3, c, host_side);
  for (std::uint32_t i = 0; i < kIncastFrames; ++i) {
    net.send(0, h1, make_frame({.src = 1, .dst = 3, .psn = i, .payload = 942}));
    net.send(0, h2, make_frame({.src = 2, .dst = 3, .psn = i, .payload = 942}));
  }
  net.run_until_idle();
  IncastRun run;
  while (auto d = net.receive(h3))
    run.psns_by_origin[d->origin].push_back(testing::psn_of(d->frame));
  run.egress = net.stats(out.a_to_b);
  run.senders = {net.stats(net.host_port(h1)), net.stats(net.host_port(h2))};
  run.depth = net.queue_depth(out.a_to_b);
  return run;
}

TEST(NetsimSwitchQueue, DropTailDropsWhenTheQueueOverflows) {
  const IncastRun run = run_incast(Overflow::kDropTail);
  EXPECT_GT(run.egress.dropped_overflow, 0u);
  std::uint64_t delivered = 0;
  for (const auto& [origin, psns] : run.psns_by_origin)
    delivered += psns.size();
  EXPECT_EQ(delivered + run.egress.dropped_overflow, 2 * kIncastFrames);
  EXPECT_EQ(run.senders[0].paused + run.senders[1].paused, 0u);
  EXPECT_LE(run.depth.max_bytes, kCapacity);
}

TEST(NetsimSwitchQueue, LosslessPausesTheSendersAndNeverDrops) {
  const IncastRun run = run_incast(Overflow::kLossless);
  EXPECT_EQ(run.egress.dropped_overflow, 0u);
  ASSERT_EQ(run.psns_by_origin.size(), 2u);
  for (const auto& [origin, psns] : run.psns_by_origin) {
    ASSERT_EQ(psns.size(), kIncastFrames) << "origin " << origin;
    for (std::uint32_t i = 0; i < kIncastFrames; ++i)
      EXPECT_EQ(psns[i], i);
  }
  EXPECT_GT(run.egress.refused, 0u);
  for (const auto& s : run.senders) {
    EXPECT_GT(s.paused, 0u);
    EXPECT_GT(s.paused_ns, 0u);
  }
  EXPECT_LE(run.depth.max_bytes, kCapacity);
  EXPECT_GT(run.depth.p99_bytes, kCapacity / 2);
}

TEST(NetsimSwitchQueue, LosslessBackpressurePropagatesAcrossSwitches) {
  // h1, h2 -> s1 -> trunk -> s2 -> h3; every switch queue lossless and small.
  Network net(kSeed);
  const NodeId h1 = net.add_host(host_config(1));
  const NodeId h2 = net.add_host(host_config(2));
  const NodeId h3 = net.add_host(host_config(3));
  const NodeId s1 = net.add_switch("s1");
  const NodeId s2 = net.add_switch("s2");
  PortConfig c;
  c.link.rate_bps = 10'000'000'000;
  c.link.propagation_ns = 500;
  c.queue.capacity_bytes = 5'000;
  c.queue.overflow = Overflow::kLossless;
  PortConfig host_side = c;
  host_side.queue.capacity_bytes = 0;
  net.connect(h1, s1, host_side, c);
  net.connect(h2, s1, host_side, c);
  PortConfig slow = c;
  slow.link.rate_bps = 1'000'000'000;
  const Link out = net.connect(s2, h3, slow, host_side);
  const Link trunk = net.connect(s1, s2, c);
  net.add_route(s1, testing::mac_of(3), trunk.a_to_b);
  for (std::uint32_t i = 0; i < 200; ++i) {
    net.send(0, h1, make_frame({.src = 1, .dst = 3, .psn = i, .payload = 942}));
    net.send(0, h2, make_frame({.src = 2, .dst = 3, .psn = i, .payload = 942}));
  }
  net.run_until_idle();
  std::uint64_t delivered = 0;
  while (net.receive(h3))
    ++delivered;
  EXPECT_EQ(delivered, 400u);
  EXPECT_GT(net.stats(trunk.a_to_b).paused, 0u);       // s2 paused s1's trunk port
  EXPECT_GT(net.stats(net.host_port(h1)).paused, 0u);  // and s1 paused the hosts
  EXPECT_EQ(net.stats(out.a_to_b).dropped_overflow + net.stats(trunk.a_to_b).dropped_overflow, 0u);
  EXPECT_FALSE(net.paused(trunk.a_to_b));
}

}  // namespace
}  // namespace xroce::net::sim
