// The DCQCN fluid model (engine/cc/sim/fluid_model.h) with the paper's parameters (docs/protocol.md
// §5.5) against what docs/protocol.md §5.6 says of it: the flows settle at C/N (20 Gb/s within ~5
// ms for N = 2, near 4 Gb/s within ~8 ms for N = 10), the queue at the fixed point q* while p* <
// Pmax and near Kmax beyond, and alpha decays by (1 - g) per tau' without marks.
#include "cc/sim/fluid_model.h"

#include <gtest/gtest.h>

#include <cmath>

namespace xroce::cc::sim {
namespace {

FluidConfig paper(std::uint32_t flows, double duration_us) {
  FluidConfig c;  // the defaults are the paper's values at 40 Gb/s with 1 KB packets
  c.flows = flows;
  c.duration_us = duration_us;
  return c;
}

// docs/protocol.md §5.6: p* ~ cbrt(R_AI N^2 / (tau' C^2) (1/B + N/(T C))^2), rates in packets/s, B
// in packets; q* = p*/Pmax (Kmax - Kmin) + Kmin.
double fixed_point_queue_bytes(const FluidConfig& c) {
  const double pkt_bits = c.packet_bytes * 8;
  const double cap = c.line_rate_gbps * 1e9 / pkt_bits;
  const double rai = c.rai_mbps * 1e6 / pkt_bits;
  const double n = c.flows;
  const double b = c.byte_counter_bytes / c.packet_bytes;
  const double inner = 1 / b + n / (c.timer_us * 1e-6 * cap);
  const double p = std::cbrt(rai * n * n / (c.alpha_period_us * 1e-6 * cap * cap) * inner * inner);
  return p / c.pmax * (c.kmax_bytes - c.kmin_bytes) + c.kmin_bytes;
}

TEST(FluidModel, MarkingProbabilityIsRedOverTheInstantaneousQueue) {
  const FluidConfig c = paper(2, 0);
  EXPECT_EQ(fluid_marking_probability(c, 5'000), 0);
  EXPECT_DOUBLE_EQ(fluid_marking_probability(c, 102'500), 0.005);  // half way: Pmax / 2
  EXPECT_DOUBLE_EQ(fluid_marking_probability(c, 200'000), 0.01);
  EXPECT_EQ(fluid_marking_probability(c, 200'001), 1);
}

TEST(FluidModel, TwoFlowsSettleAtHalfTheLineWithinFiveMsWithTheQueueAtTheFixedPoint) {
  const FluidConfig c = paper(2, 40'000);
  const FluidResult r = run_fluid_model(c);
  EXPECT_GE(r.settled_at_us, 0);
  EXPECT_LE(r.settled_at_us, 5'000);
  EXPECT_NEAR(r.rc_min_gbps, 20, 0.2);
  EXPECT_NEAR(r.rc_max_gbps, 20, 0.2);
  // q* is about 23 KB (docs/protocol.md §5.6); the integration agrees within 50 %.
  const double q_star = fixed_point_queue_bytes(c);
  EXPECT_NEAR(q_star, 23'000, 1'000);
  EXPECT_GT(r.queue_mean_bytes, 0.5 * q_star);
  EXPECT_LT(r.queue_mean_bytes, 1.5 * q_star);
}

TEST(FluidModel, TenFlowsSettleNearFourGbpsWithinEightMs) {
  const FluidResult r = run_fluid_model(paper(10, 20'000));
  EXPECT_GE(r.settled_at_us, 0);
  EXPECT_LE(r.settled_at_us, 8'000);
  EXPECT_NEAR(r.rc_min_gbps, 4, 0.1);
  EXPECT_NEAR(r.rc_max_gbps, 4, 0.1);
}

TEST(FluidModel, TwentyFlowsHoldTheQueueNearKmaxWherePStarExceedsPmax) {
  const FluidConfig c = paper(20, 20'000);
  const FluidResult r = run_fluid_model(c);
  EXPECT_GT(fixed_point_queue_bytes(c), c.kmax_bytes);  // the approximation leaves the band
  EXPECT_GE(r.settled_at_us, 0);
  EXPECT_NEAR(r.rc_min_gbps, 2, 0.2);
  EXPECT_NEAR(r.rc_max_gbps, 2, 0.2);
  EXPECT_GT(r.queue_mean_bytes, 0.75 * c.kmax_bytes);
  EXPECT_LT(r.queue_mean_bytes, 1.25 * c.kmax_bytes);
}

TEST(FluidModel, WithoutMarksOneFlowStaysAtTheLineAndAlphaDecaysExponentially) {
  FluidConfig c = paper(1, 10'000);
  c.kmin_bytes = c.kmax_bytes = 1e12;  // never marks
  const FluidResult r = run_fluid_model(c);
  for (const FluidSample& s : r.samples) {
    ASSERT_DOUBLE_EQ(s.rc_gbps, 40) << "t " << s.t_us;
    ASSERT_EQ(s.queue_bytes, 0) << "t " << s.t_us;
  }
  // d alpha/dt = -(g / tau') alpha  =>  alpha(t) = exp(-g t / tau').
  const FluidSample& last = r.samples.back();
  EXPECT_NEAR(last.alpha, std::exp(-c.g * last.t_us / c.alpha_period_us), 1e-3);
}

}  // namespace
}  // namespace xroce::cc::sim
