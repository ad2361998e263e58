// Incast with DCQCN end to end: N senders, one receiver, one switch port that ECN-marks (RED,
// Kmin/Kmax/Pmax) and pauses when full (lossless, PFC-like) or drops (drop-tail). The senders'
// QPs run the real transport core with engine/cc attached (QpCongestion).
//
// DCQCN settings in these tests: the paper profile with R_AI and R_HAI scaled to the line rate
// (40 and 200 Mb/s per 25 Gb/s, as HPCC's configurations scale them; the paper's values are for
// 40 Gb/s and recover too slowly at 100 Gb/s), Kmin/Kmax 10/40 KB per 25 Gb/s, Pmax 0.2, buffer
// 10 Kmax. Fairness and utilisation are measured over the second half of the run (the flows
// all start at line rate at t = 0; the first half is their convergence).
//
// Every case prints its seed and the `xroce sim` command that reproduces it when it fails.
// XROCE_SEED overrides the base seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cc/sim/incast.h"
#include "incast_plot.h"

namespace xroce::cc::sim {
namespace {

std::uint64_t base_seed() {
  const char* s = std::getenv("XROCE_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : 1;
}

IncastConfig dcqcn_config(std::uint32_t senders, double rate_gbps, std::uint64_t seed) {
  IncastConfig c;
  c.seed = seed;
  c.senders = senders;
  c.rate_gbps = rate_gbps;
  c.cc = true;
  c.params = DcqcnParams::paper();
  const double scale = rate_gbps / 25;
  c.params.rpg_ai_rate = static_cast<std::uint32_t>(40 * scale);
  c.params.rpg_hai_rate = static_cast<std::uint32_t>(200 * scale);
  c.profile = "paper,rpg_ai_rate=" + std::to_string(c.params.rpg_ai_rate) +
              ",rpg_hai_rate=" + std::to_string(c.params.rpg_hai_rate);
  // Simulated time: enough for the slowest case to converge, short enough for ASan.
  c.duration_us = rate_gbps <= 25 ? 20'000 : 10'000;
  return with_defaults(c);
}

std::string describe(const IncastResult& r) {
  std::string s =
      "seed " + std::to_string(r.config.seed) + "\n  reproduce: " + reproduce_command(r.config) +
      "\n  jain " + std::to_string(r.jain) + " utilisation " + std::to_string(r.utilization) +
      " queue p50/p99/max " + std::to_string(r.queue.p50_bytes) + "/" +
      std::to_string(r.queue.p99_bytes) + "/" + std::to_string(r.queue.max_bytes) + " drops " +
      std::to_string(r.drops_total) + " pauses " + std::to_string(r.pauses) + "\n  flows (Gb/s):";
  for (const auto& f : r.flows)
    s += " " + std::to_string(f.throughput_gbps);
  return s;
}

struct Case {
  std::uint32_t senders;
  double rate_gbps;
};

class DcqcnIncast : public ::testing::TestWithParam<Case> {};

TEST_P(DcqcnIncast, ConvergesToAFairShareAtHighUtilisationWithAShortQueueAndNoPause) {
  const Case k = GetParam();
  const IncastConfig c = dcqcn_config(k.senders, k.rate_gbps, base_seed() + k.senders);
  const IncastResult r = run_incast(c);
  SCOPED_TRACE(describe(r));
  ASSERT_TRUE(r.ok()) << r.failure;
  EXPECT_GE(r.jain, 0.95);
  EXPECT_GE(r.utilization, 0.90);
  // The queue sits in the marking band: it reaches Kmin (marks are what holds it) and stays
  // around Kmax, far below the pause point; nothing is dropped or paused.
  EXPECT_GE(r.queue.p99_bytes, c.kmin_bytes);
  EXPECT_LE(r.queue.p50_bytes, c.kmax_bytes);
  EXPECT_LE(r.queue.p99_bytes, 2 * c.kmax_bytes);
  EXPECT_EQ(r.drops_total, 0u);
  EXPECT_EQ(r.pauses, 0u);
  EXPECT_EQ(r.retransmitted_packets, 0u);
  // The loop ran: the switch marked, every marked packet reached an NP, CNPs were sent and
  // every one was taken by a reaction point (none lost, none ignored). The run stops with a
  // few frames still on the wire (1 µs of propagation per link), hence the small slack.
  constexpr std::uint64_t kOnTheWire = 8;
  EXPECT_GT(r.ecn_marked_total, 0u);
  EXPECT_LE(r.totals.np_ecn_marked_roce_packets, r.ecn_marked_total);
  EXPECT_LE(r.ecn_marked_total, r.totals.np_ecn_marked_roce_packets + kOnTheWire);
  EXPECT_GT(r.totals.np_cnp_sent, 0u);
  EXPECT_LE(r.totals.rp_cnp_handled, r.totals.np_cnp_sent);
  EXPECT_LE(r.totals.np_cnp_sent, r.totals.rp_cnp_handled + k.senders);
  EXPECT_EQ(r.totals.rp_cnp_ignored, 0u);
}

INSTANTIATE_TEST_SUITE_P(Incast, DcqcnIncast,
                         ::testing::Values(Case{2, 25}, Case{4, 25}, Case{8, 25}, Case{16, 25},
                                           Case{2, 100}, Case{4, 100}, Case{8, 100}, Case{16, 100}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return "N" + std::to_string(info.param.senders) + "_" +
                                  std::to_string(static_cast<int>(info.param.rate_gbps)) + "G";
                         });

// The ConnectX profile exactly as the firmware ships it (docs/protocol.md §5.5, nothing changed),
// on the same port. Its alpha (a 1 µs grid, g = 5/1024) stays at 0.01 - 0.06 in an incast, so a cut
// is 0.5 - 3 % and the flows take 3 - 40 ms to converge (docs/dcqcn-results.md §3): hence a
// longer run than the paper-profile cases, measured over its second half.
struct ConnectxCase {
  std::uint32_t senders;
  double rate_gbps;
  std::uint64_t duration_us;
};

class ConnectxIncast : public ::testing::TestWithParam<ConnectxCase> {};

TEST_P(ConnectxIncast, FirmwareDefaultsConvergeToAFairShareWithAShortQueue) {
  const ConnectxCase k = GetParam();
  IncastConfig c;
  c.seed = base_seed() + k.senders;
  c.senders = k.senders;
  c.rate_gbps = k.rate_gbps;
  c.params = DcqcnParams::connectx();
  c.profile = "connectx";
  c.duration_us = k.duration_us;
  c = with_defaults(c);
  const IncastResult r = run_incast(c);
  SCOPED_TRACE(describe(r));
  ASSERT_TRUE(r.ok()) << r.failure;
  EXPECT_GE(r.jain, 0.95);
  EXPECT_GE(r.utilization, 0.90);
  EXPECT_GE(r.queue.p99_bytes, c.kmin_bytes);
  EXPECT_LE(r.queue.p50_bytes, c.kmax_bytes);
  EXPECT_LE(r.queue.p99_bytes, 2 * c.kmax_bytes);
  EXPECT_EQ(r.drops_total, 0u);
  EXPECT_EQ(r.pauses, 0u);
  EXPECT_EQ(r.totals.rp_cnp_ignored, 0u);
  // alpha is what makes the profile slow: it never gets near the paper's 0.5 - 1.
  for (const FlowResult& f : r.flows)
    EXPECT_LT(f.final_alpha, 0.2) << "flow " << f.sender;
}

INSTANTIATE_TEST_SUITE_P(Incast, ConnectxIncast,
                         ::testing::Values(ConnectxCase{2, 25, 20'000},
                                           ConnectxCase{4, 100, 30'000}),
                         [](const ::testing::TestParamInfo<ConnectxCase>& info) {
                           return "N" + std::to_string(info.param.senders) + "_" +
                                  std::to_string(static_cast<int>(info.param.rate_gbps)) + "G";
                         });

// The packet-level incast against the fluid model with the same parameters (docs/protocol.md §5.6):
// the authors' N = 2 scenario at 40 Gb/s with the paper profile and marking (Kmin 5 KB, Kmax 200
// KB, Pmax 1 %, 1 KB MTU). Each flow's alpha is set by the rate of CNPs it gets; after 20 ms it
// must be where the model's is, and the flows' mean rate where the model settles (C/N). The model's
// flows are identical, so it says nothing of how two real flows share: over 20 ms they may still
// be apart (docs/dcqcn-results.md §1, the N = 2 drift), so fairness is not checked here.
TEST(IncastVsFluidModel, PaperProfileTwoFlowsAlphaAndRateTrackTheModel) {
  IncastConfig c;
  c.seed = base_seed();
  c.senders = 2;
  c.rate_gbps = 40;
  c.params = DcqcnParams::paper();
  c.profile = "paper";
  c.mtu = transport::PathMtu::k1024;
  c.outstanding = 8;
  c.kmin_bytes = 5'000;
  c.kmax_bytes = 200'000;
  c.pmax = 0.01;
  c.buffer_bytes = 2'000'000;
  c.duration_us = 20'000;
  const IncastResult r = run_incast(c);
  const FluidResult fluid = run_fluid_model(fluid_config_for(r.config));
  SCOPED_TRACE(describe(r));
  ASSERT_TRUE(r.ok()) << r.failure;
  const FluidSample& end = fluid.samples.back();
  EXPECT_NEAR(end.rc_gbps, 20, 0.2);
  double mean_gbps = 0;
  for (const FlowResult& f : r.flows) {
    EXPECT_NEAR(f.final_alpha, end.alpha, 0.05) << "flow " << f.sender;
    mean_gbps += f.throughput_gbps / static_cast<double>(r.flows.size());
  }
  EXPECT_NEAR(mean_gbps, end.rc_gbps, 0.05 * end.rc_gbps);
}

TEST(NoCcIncast, LosslessPortFillsToThePausePointWhereDcqcnHoldsTheQueueNearKmax) {
  IncastConfig c = dcqcn_config(8, 25, base_seed());
  c.duration_us = 10'000;
  const IncastResult with = run_incast(c);
  c.cc = false;
  const IncastResult without = run_incast(c);
  SCOPED_TRACE("with dcqcn: " + describe(with) + "\nwithout: " + describe(without));
  ASSERT_TRUE(with.ok() && without.ok());
  // Without congestion control the queue stands at the buffer, held there by pauses; nothing
  // is marked as CE because nothing is sent ECN-capable.
  EXPECT_GE(without.queue.p50_bytes, c.buffer_bytes - c.buffer_bytes / 10);
  EXPECT_GT(without.pauses, 0u);
  EXPECT_EQ(without.ecn_marked_total, 0u);
  EXPECT_EQ(without.totals.np_cnp_sent, 0u);
  EXPECT_LE(with.queue.p99_bytes, 2 * c.kmax_bytes);
  EXPECT_LT(4 * with.queue.p99_bytes, without.queue.p50_bytes);
}

TEST(NoCcIncast, DropTailPortDropsAndRetransmitsWithoutCcButNotWithDcqcn) {
  IncastConfig c = dcqcn_config(8, 25, base_seed());
  c.duration_us = 10'000;
  c.lossless = false;
  const IncastResult with = run_incast(c);
  c.cc = false;
  const IncastResult without = run_incast(c);
  SCOPED_TRACE("with dcqcn: " + describe(with) + "\nwithout: " + describe(without));
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_GT(without.drops, 0u);  // in the steady-state window, not only the start
  EXPECT_GT(without.retransmitted_packets, 0u);
  EXPECT_EQ(with.drops, 0u);
  EXPECT_LT(with.drops_total, without.drops_total);
  EXPECT_GE(with.jain, 0.95);
}

TEST(CnpGeneration, SwitchedOffAtTheReceiverTheSendersNeverSlowDown) {
  IncastConfig c = dcqcn_config(4, 25, base_seed());
  c.duration_us = 4'000;
  c.cnp_generation = false;
  const IncastResult r = run_incast(c);
  SCOPED_TRACE(describe(r));
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r.totals.np_ecn_marked_roce_packets, 0u);  // marks still arrive and are counted
  EXPECT_EQ(r.totals.np_cnp_sent, 0u);
  EXPECT_EQ(r.totals.rate_cuts, 0u);
  EXPECT_GT(r.pauses, 0u);  // only the pause keeps the queue in bounds
}

TEST(IncastDeterminism, SameSeedSameRun) {
  IncastConfig c = dcqcn_config(4, 25, base_seed());
  c.duration_us = 2'000;
  const IncastResult a = run_incast(c);
  const IncastResult b = run_incast(c);
  SCOPED_TRACE(describe(a));
  ASSERT_EQ(a.flows.size(), b.flows.size());
  for (std::size_t i = 0; i < a.flows.size(); ++i)
    EXPECT_EQ(a.flows[i].rate_series_gbps, b.flows[i].rate_series_gbps);
  EXPECT_EQ(a.queue_series, b.queue_series);
  EXPECT_EQ(a.totals.np_cnp_sent, b.totals.np_cnp_sent);
}

// Index of the first time-series bin in which the flow's bytes reached the bottleneck.
std::size_t first_busy_bin(const FlowResult& f) {
  for (std::size_t b = 0; b < f.rate_series_gbps.size(); ++b)
    if (f.rate_series_gbps[b] > 0) return b;
  return f.rate_series_gbps.size();
}

TEST(IncastStart, SpreadStartsEachSenderAtItsOwnSeededOffset) {
  IncastConfig c = dcqcn_config(4, 25, base_seed());
  c.duration_us = 1'000;
  c.bin_us = 10;
  const IncastResult together = run_incast(c);
  c.start_spread_us = 500;
  const IncastResult spread = run_incast(c);
  const IncastResult again = run_incast(c);
  SCOPED_TRACE(describe(spread));
  ASSERT_TRUE(together.ok() && spread.ok());
  std::vector<std::size_t> firsts;
  for (std::size_t i = 0; i < spread.flows.size(); ++i) {
    EXPECT_EQ(first_busy_bin(together.flows[i]), 0u);  // all start at t = 0
    // A sender's first frame crosses two 1 µs links and two 4 KB serialisations (~4 µs)
    // after its start, which lies in [0, 500 µs): bins 0..50.
    firsts.push_back(first_busy_bin(spread.flows[i]));
    EXPECT_LE(firsts.back(), 50u);
    EXPECT_EQ(first_busy_bin(again.flows[i]), firsts.back());  // seeded: the same offsets
  }
  std::sort(firsts.begin(), firsts.end());
  EXPECT_GT(firsts.back(), firsts.front()) << "the offsets should differ";
}

TEST(IncastPlot, SvgHasOnePolylinePerFlowPlusTheQueueAndALegend) {
  IncastConfig c = dcqcn_config(3, 25, base_seed());
  c.duration_us = 1'000;
  const IncastResult r = run_incast(c);
  const std::string svg = cli::plot_incast_svg(r);
  std::size_t lines = 0;
  for (std::size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1))
    ++lines;
  EXPECT_EQ(lines, 4u);
  EXPECT_NE(svg.find("flow 2"), std::string::npos);
  EXPECT_NE(svg.find("queue depth"), std::string::npos);
  EXPECT_EQ(svg.rfind("</svg>"), svg.size() - 7);
}

TEST(JainIndex, EqualSharesAreOneAndOneHogIsOneOverN) {
  EXPECT_DOUBLE_EQ(jain_index({5, 5, 5, 5}), 1.0);
  EXPECT_DOUBLE_EQ(jain_index({8, 0, 0, 0}), 0.25);
  EXPECT_NEAR(jain_index({1, 2}), 0.9, 1e-12);
}

}  // namespace
}  // namespace xroce::cc::sim
