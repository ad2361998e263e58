// Seeded impairments at their configured rates. The seed is fixed, so each count is exact and
// the bounds (4 standard deviations of a binomial) only say the rate is the configured one.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <set>

#include "net/sim/frame_edit.h"
#include "net/sim/network.h"
#include "test_frames.h"

namespace xroce::net::sim {
namespace {

using testing::host_config;
using testing::make_frame;

constexpr std::uint64_t kSeed = 0x5EED;
constexpr std::uint32_t kFrames = 100'000;

struct LinkRun {
  std::vector<Delivery> deliveries;
  PortStats stats;
};

// How the link of run_point_to_point runs besides its impairments, and how far apart its frames
// are sent (0: all at once).
struct LinkShape {
  TimeNs jitter_ns = 0;
  TimeNs stall_every_ns = 0;
  TimeNs stall_max_ns = 0;
  TimeNs spacing_ns = 0;
};

// kFrames frames a -> b over a 100 Gb/s, 1 us link with `impair`; frame i carries PSN i and is
// sent at i * shape.spacing_ns.
LinkRun run_point_to_point(const Impairments& impair, const LinkShape& shape = {}) {
  Network net(kSeed);
  const NodeId a = net.add_host(host_config(1));
  const NodeId b = net.add_host(host_config(2));
  PortConfig c;
  c.link.rate_bps = 100'000'000'000;
  c.link.propagation_ns = 1'000;
  c.link.jitter_ns = shape.jitter_ns;
  c.link.stall_every_ns = shape.stall_every_ns;
  c.link.stall_max_ns = shape.stall_max_ns;
  c.link.impair = impair;
  const Link link = net.connect(a, b, c);
  for (std::uint32_t i = 0; i < kFrames; ++i) {
    const TimeNs at = TimeNs{i} * shape.spacing_ns;
    if (at != 0) net.run_until(at);
    net.send(at, a, make_frame({.psn = i}));
  }
  net.run_until_idle();
  LinkRun run;
  while (auto d = net.receive(b))
    run.deliveries.push_back(std::move(*d));
  run.stats = net.stats(link.a_to_b);
  return run;
}

void expect_binomial(std::uint64_t count, std::uint64_t n, double p) {
  const double mean = static_cast<double>(n) * p;
  const double sd = std::sqrt(mean * (1.0 - p));
  EXPECT_GT(static_cast<double>(count), mean - 4 * sd) << "seed " << kSeed;
  EXPECT_LT(static_cast<double>(count), mean + 4 * sd) << "seed " << kSeed;
}

TEST(NetsimImpairments, NoneConfiguredDeliversEverythingInOrderUnchanged) {
  const LinkRun run = run_point_to_point({});
  ASSERT_EQ(run.deliveries.size(), kFrames);
  for (std::uint32_t i = 0; i < kFrames; ++i) {
    ASSERT_EQ(run.deliveries[i].id, i);
    ASSERT_EQ(run.deliveries[i].frame, make_frame({.psn = i}));
  }
  EXPECT_EQ(run.stats.sent, kFrames);
  EXPECT_EQ(run.stats.delivered, kFrames);
}

TEST(NetsimImpairments, LossAtItsRate) {
  const LinkRun run = run_point_to_point({.loss = 0.02});
  expect_binomial(run.stats.lost, kFrames, 0.02);
  EXPECT_EQ(run.deliveries.size(), kFrames - run.stats.lost);
  std::uint64_t last = 0;
  for (const auto& d : run.deliveries) {
    EXPECT_TRUE(d.id == 0 || d.id > last);
    last = d.id;
  }
}

TEST(NetsimImpairments, DuplicationAtItsRateCopiesArriveTogether) {
  const LinkRun run = run_point_to_point({.duplicate = 0.01});
  expect_binomial(run.stats.duplicated, kFrames, 0.01);
  EXPECT_EQ(run.deliveries.size(), kFrames + run.stats.duplicated);
  std::uint64_t copies = 0;
  for (std::size_t i = 1; i < run.deliveries.size(); ++i) {
    const auto& prev = run.deliveries[i - 1];
    const auto& cur = run.deliveries[i];
    if (cur.id != prev.id) continue;
    ++copies;
    EXPECT_EQ(cur.frame, prev.frame);
    EXPECT_EQ(cur.at, prev.at);
  }
  EXPECT_EQ(copies, run.stats.duplicated);
  EXPECT_EQ(run.stats.delivered, run.deliveries.size());
}

int bit_difference(const Frame& a, const Frame& b) {
  int bits = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    bits += std::popcount(unsigned{a[i]} ^ b[i]);
  return bits;
}

TEST(NetsimImpairments, CorruptionAtItsRateFlipsBitsTheIcrcCoversKeepingLength) {
  const LinkRun run = run_point_to_point({.corrupt = 0.005, .corrupt_bits = 2});
  expect_binomial(run.stats.corrupted, kFrames, 0.005);
  ASSERT_EQ(run.deliveries.size(), kFrames);
  const auto range = icrc_covered_range(make_frame({}));
  ASSERT_TRUE(range);
  std::uint64_t changed = 0;
  for (const auto& d : run.deliveries) {
    const Frame original = make_frame({.psn = static_cast<std::uint32_t>(d.id)});
    ASSERT_EQ(d.frame.size(), original.size());
    if (d.frame == original) continue;
    ++changed;
    EXPECT_EQ(bit_difference(d.frame, original), 2);
    for (std::size_t i = 0; i < original.size(); ++i) {
      if (d.frame[i] == original[i]) continue;
      EXPECT_GE(i, range->begin);
      EXPECT_NE(i, range->masked_byte);  // FECN/BECN are outside the ICRC
    }
  }
  EXPECT_EQ(changed, run.stats.corrupted);
}

TEST(NetsimImpairments, WholeFrameCorruptionCanHitAnyByte) {
  Impairments imp{.corrupt = 0.05, .corrupt_bits = 3};
  imp.corrupt_scope = Impairments::CorruptScope::kWholeFrame;
  const LinkRun run = run_point_to_point(imp);
  expect_binomial(run.stats.corrupted, kFrames, 0.05);
  std::set<std::size_t> positions;
  for (const auto& d : run.deliveries) {
    const Frame original = make_frame({.psn = static_cast<std::uint32_t>(d.id)});
    ASSERT_EQ(d.frame.size(), original.size());
    if (d.frame == original) continue;
    EXPECT_EQ(bit_difference(d.frame, original), 3);
    for (std::size_t i = 0; i < original.size(); ++i) {
      if (d.frame[i] != original[i]) positions.insert(i);
    }
  }
  EXPECT_EQ(positions.size(), make_frame({}).size());  // every byte was hit at least once
}

TEST(NetsimImpairments, ReorderingHoldsFramesBackAtItsRate) {
  const LinkRun run = run_point_to_point({.reorder = 0.02});
  expect_binomial(run.stats.reordered, kFrames, 0.02);
  ASSERT_EQ(run.deliveries.size(), kFrames);
  // A held frame arrives after frames sent later than it (1-10 us late, 10 ns apart).
  std::uint64_t late = 0, highest = 0;
  std::set<std::uint64_t> seen;
  for (const auto& d : run.deliveries) {
    if (d.id < highest) ++late;
    highest = std::max(highest, d.id);
    EXPECT_TRUE(seen.insert(d.id).second);
  }
  EXPECT_EQ(late, run.stats.reordered);
}

TEST(NetsimImpairments, JitterDelaysButNeverReorders) {
  const LinkRun plain = run_point_to_point({});
  const LinkRun jittery = run_point_to_point({}, {.jitter_ns = 500});
  ASSERT_EQ(jittery.deliveries.size(), kFrames);
  std::uint64_t delayed = 0;
  for (std::uint32_t i = 0; i < kFrames; ++i) {
    ASSERT_EQ(jittery.deliveries[i].id, i);
    const TimeNs base = plain.deliveries[i].at;
    EXPECT_GE(jittery.deliveries[i].at, base);
    delayed += jittery.deliveries[i].at > base;
    if (i > 0) {
      EXPECT_GE(jittery.deliveries[i].at, jittery.deliveries[i - 1].at);
    }
  }
  EXPECT_GT(delayed, kFrames / 2);
}

// A link that stalls (LinkConfig::stall_every_ns) holds what would arrive during a stall and
// delivers it at the stall's end, in order; between stalls it is the plain link. One frame per
// microsecond for 100 ms, stalls of up to 1 ms every 2 ms on average.
TEST(NetsimImpairments, AStallingLinkHoldsFramesAndDeliversThemInOrderAtTheStallsEnd) {
  const std::vector<Delivery> plain = run_point_to_point({}, {.spacing_ns = 1'000}).deliveries;
  const std::vector<Delivery> stalled =
      run_point_to_point(
          {}, {.stall_every_ns = 2'000'000, .stall_max_ns = 1'000'000, .spacing_ns = 1'000})
          .deliveries;
  ASSERT_EQ(plain.size(), kFrames);
  ASSERT_EQ(stalled.size(), kFrames);
  std::uint64_t held = 0, stalls = 0;
  TimeNs longest = 0;
  for (std::uint32_t i = 0; i < kFrames; ++i) {
    ASSERT_EQ(stalled[i].id, i);
    ASSERT_EQ(stalled[i].frame, plain[i].frame);
    ASSERT_GE(stalled[i].at, plain[i].at);
    if (stalled[i].at == plain[i].at) continue;
    ++held;
    longest = std::max(longest, stalled[i].at - plain[i].at);
    // A held frame arrives with everything else the stall held: at its end, together.
    if (i > 0 && stalled[i - 1].at != stalled[i].at) ++stalls;
    if (i > 0 && stalled[i - 1].at == plain[i - 1].at) {
      EXPECT_LT(stalled[i].at - plain[i].at, 1'000'001u);
    }
  }
  // About 100 ms / 2.5 ms stalls of 0.5 ms on average: a fifth of the frames held.
  EXPECT_GT(stalls, 20u);
  EXPECT_LT(stalls, 80u);
  EXPECT_GT(held, kFrames / 10);
  EXPECT_LT(held, kFrames / 3);
  EXPECT_LE(longest, 1'000'000u);
  EXPECT_GT(longest, 500'000u);
}

TEST(NetsimImpairments, CountersAddUpWithEverythingOn) {
  const LinkRun run =
      run_point_to_point({.loss = 0.02, .duplicate = 0.01, .corrupt = 0.005, .reorder = 0.02});
  const PortStats& s = run.stats;
  EXPECT_EQ(s.sent, kFrames);
  EXPECT_EQ(s.delivered, s.sent - s.lost + s.duplicated);
  EXPECT_EQ(run.deliveries.size(), s.delivered);
  expect_binomial(s.lost, kFrames, 0.02);
  // The other draws apply to frames that survived the loss draw.
  expect_binomial(s.duplicated, kFrames - s.lost, 0.01);
  expect_binomial(s.corrupted, kFrames - s.lost, 0.005);
  expect_binomial(s.reordered, kFrames - s.lost, 0.02);
}

}  // namespace
}  // namespace xroce::net::sim
