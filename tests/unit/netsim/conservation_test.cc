// Frame accounting over random traffic on a two-switch fabric, many seeds: every frame is
// accounted for by exactly one counter; lossless fabrics deliver everything, in order per
// (source, destination); the network ends empty and unpaused. Failures print the seed.
#include <gtest/gtest.h>

#include <map>
#include <utility>

#include "net/sim/network.h"
#include "net/sim/rng.h"
#include "test_frames.h"

namespace xroce::net::sim {
namespace {

using testing::host_config;
using testing::make_frame;

constexpr std::uint8_t kHosts = 6;  // hosts 1-3 on switch s1, hosts 4-6 on switch s2
constexpr int kFrames = 2'000;
constexpr std::uint64_t kSeeds = 15;

struct Fabric {
  Network net;
  std::vector<NodeId> hosts;
  NodeId s1 = 0, s2 = 0;
  Link trunk;
  explicit Fabric(std::uint64_t seed) : net(seed) {}
};

// Random capacities, rates and jitter from the test's own stream (not the network's).
void build(Fabric& f, Rng& rng, Overflow overflow, const Impairments& impair) {
  f.s1 = f.net.add_switch("s1");
  f.s2 = f.net.add_switch("s2");
  auto random_port = [&] {
    PortConfig c;
    c.link.rate_bps = rng.between(1, 40) * 1'000'000'000;
    c.link.propagation_ns = rng.between(100, 2'000);
    c.link.jitter_ns = rng.between(0, 500);
    c.link.impair = impair;
    c.queue.capacity_bytes = rng.between(3'000, 30'000);
    c.queue.overflow = overflow;
    c.queue.ecn = {.enabled = true, .kmin_bytes = 1'000, .kmax_bytes = 8'000, .pmax = 0.3};
    return c;
  };
  for (std::uint8_t i = 1; i <= kHosts; ++i) {
    f.hosts.push_back(f.net.add_host(host_config(i)));
    PortConfig host_side = random_port();
    host_side.queue.capacity_bytes = 0;  // hosts queue what they send without limit
    f.net.connect(f.hosts.back(), i <= kHosts / 2 ? f.s1 : f.s2, host_side, random_port());
  }
  f.trunk = f.net.connect(f.s1, f.s2, random_port(), random_port());
  for (std::uint8_t i = 1; i <= kHosts; ++i) {
    const bool behind_s2 = i > kHosts / 2;
    if (behind_s2) f.net.add_route(f.s1, testing::ip4_of(i), f.trunk.a_to_b);
    if (!behind_s2) f.net.add_route(f.s2, testing::ip4_of(i), f.trunk.b_to_a);
  }
}

struct Outcome {
  std::map<std::pair<NodeId, NodeId>, std::vector<std::uint32_t>> psns;  // (origin, dest)
  std::map<std::pair<NodeId, NodeId>, std::uint32_t> sent;
};

// Random traffic: random source and destination (switches route local hosts by learned MAC,
// remote ones by the IP routes toward the trunk), sizes and gaps.
Outcome drive(Fabric& f, Rng& rng) {
  Outcome out;
  for (int i = 0; i < kFrames; ++i) {
    const auto src = static_cast<std::uint8_t>(rng.between(1, kHosts));
    auto dst = static_cast<std::uint8_t>(rng.between(1, kHosts - 1));
    if (dst >= src) ++dst;
    const NodeId from = f.hosts[src - 1], to = f.hosts[dst - 1];
    const std::uint32_t psn = out.sent[{from, to}]++;
    const auto payload = static_cast<std::size_t>(rng.between(0, 1'500));
    f.net.send(f.net.now(), from,
               make_frame({.src = src, .dst = dst, .psn = psn, .payload = payload}));
    f.net.run_until(f.net.now() + rng.between(0, 200));
  }
  f.net.run_until_idle();
  for (const NodeId h : f.hosts) {
    while (auto d = f.net.receive(h))
      out.psns[{d->origin, h}].push_back(testing::psn_of(d->frame));
  }
  return out;
}

// Per port: enqueued = sent, delivered = sent - lost + duplicated. Per switch: every frame
// received was unroutable, dropped at an egress queue, or enqueued there.
void expect_accounting(const Fabric& f, std::uint64_t seed) {
  std::map<NodeId, std::uint64_t> arrived_at, left_by_egress;
  for (NodeId n = 0; n < f.net.node_count(); ++n) {
    for (const PortId p : f.net.ports(n)) {
      const PortStats s = f.net.stats(p);
      EXPECT_EQ(s.enqueued, s.sent) << "seed " << seed << " port " << p;
      EXPECT_EQ(s.delivered, s.sent - s.lost + s.duplicated) << "seed " << seed << " port " << p;
      EXPECT_EQ(f.net.queue_bytes(p), 0u) << "seed " << seed;
      EXPECT_FALSE(f.net.paused(p)) << "seed " << seed;
      arrived_at[f.net.port_peer(p)] += s.delivered;
      if (f.net.is_switch(n)) left_by_egress[n] += s.enqueued + s.dropped_overflow;
    }
  }
  for (const NodeId sw : {f.s1, f.s2}) {
    const SwitchStats& s = f.net.switch_stats(sw);
    EXPECT_EQ(s.received, arrived_at[sw]) << "seed " << seed;
    EXPECT_EQ(s.unroutable, 0u) << "seed " << seed;
    EXPECT_EQ(s.received, left_by_egress[sw]) << "seed " << seed;
  }
}

TEST(NetsimConservation, LosslessFabricDeliversEverythingInOrder) {
  int seeds_with_pauses = 0;
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    Rng rng(seed ^ 0xFAB);
    Fabric f(seed);
    build(f, rng, Overflow::kLossless, {});
    const Outcome out = drive(f, rng);
    std::uint64_t paused = 0;
    for (NodeId n = 0; n < f.net.node_count(); ++n) {
      for (const PortId p : f.net.ports(n)) {
        paused += f.net.stats(p).paused;
        EXPECT_EQ(f.net.stats(p).dropped_overflow, 0u) << "seed " << seed;
      }
    }
    seeds_with_pauses += paused > 0;
    for (const auto& [flow, count] : out.sent) {
      const auto it = out.psns.find(flow);
      ASSERT_NE(it, out.psns.end()) << "seed " << seed;
      ASSERT_EQ(it->second.size(), count) << "seed " << seed;
      for (std::uint32_t i = 0; i < count; ++i)
        ASSERT_EQ(it->second[i], i) << "seed " << seed;
    }
    expect_accounting(f, seed);
  }
  EXPECT_GE(seeds_with_pauses,
            kSeeds * 2 / 3);  // the load does fill queues: lossless mode is exercised
}

TEST(NetsimConservation, DropTailFabricWithFaultsAccountsForEveryFrame) {
  const Impairments faults{.loss = 0.02, .duplicate = 0.01, .corrupt = 0.005, .reorder = 0.02};
  std::uint64_t dropped = 0;
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    Rng rng(seed ^ 0xFAB);
    Fabric f(seed);
    build(f, rng, Overflow::kDropTail, faults);
    drive(f, rng);
    expect_accounting(f, seed);
    for (NodeId n = 0; n < f.net.node_count(); ++n) {
      for (const PortId p : f.net.ports(n))
        dropped += f.net.stats(p).dropped_overflow;
    }
  }
  EXPECT_GT(dropped, 0u);
}

}  // namespace
}  // namespace xroce::net::sim
