// The DCQCN fluid model of the CoNEXT'16 paper and the authors' MATLAB code (docs/protocol.md §5.6,
// [C16], [FM]) for N identical flows into one bottleneck: the queue q, and each flow's current rate
// R_C, target rate R_T and alpha, as delay differential equations integrated with a fixed step. The
// packet-level incast (incast.h) is compared against it in docs/dcqcn-results.md.
//
// Rates are in packets/s of `packet_bytes`, as in the model. Every term is lagged by the
// feedback delay tau*: p = p(q(t - tau*)) and R = R_C(t - tau*). The model's flows are identical,
// so it says where they settle and how fast, not how fairly they share. Pure: no I/O.
#pragma once

#include <cstdint>
#include <vector>

#include "cc/params.h"

namespace xroce::cc::sim {

struct FluidConfig {
  std::uint32_t flows = 2;
  double line_rate_gbps = 40;
  double packet_bytes = 1000;  // [FM] packetSize = 8e3 bits
  // Marking (RED on the instantaneous queue, docs/protocol.md §5.1).
  double kmin_bytes = 5'000;
  double kmax_bytes = 200'000;
  double pmax = 0.01;
  // DCQCN (docs/protocol.md §5.5, paper values).
  double g = 1.0 / 256;
  double cnp_interval_us = 50;       // tau: at most one CNP per flow per tau
  double alpha_period_us = 55;       // tau'
  double timer_us = 55;              // T
  double byte_counter_bytes = 10e6;  // B
  double fast_recovery_steps = 5;    // F
  double rai_mbps = 40;              // R_AI
  double feedback_delay_us = 4;      // tau* ([C16]: 4 µs "small", 85 µs "large")
  // Start: every flow at the line rate, R_T = line rate, alpha as given (the model starts at 1).
  double initial_alpha = 1;
  double duration_us = 100'000;
  double step_ns = 100;  // Euler step
  double sample_us = 50;
};

// The fluid model's parameters for a DCQCN profile (rpg_time_reset = T, rpg_byte_reset = B,
// rpg_threshold = F, rpg_ai_rate = R_AI, 1 - dce_tcp_g/1024 = g, dce_tcp_rtt = tau',
// min_time_between_cnps = tau, initial_alpha_value/1024) and an incast's port and MTU. The model
// is the paper's algorithm (alpha raised per CNP); for the ConnectX profile it is only indicative.
FluidConfig fluid_config_for(const DcqcnParams& params, std::uint32_t flows, double line_rate_gbps,
                             double packet_bytes, double kmin_bytes, double kmax_bytes,
                             double pmax);

struct FluidSample {
  double t_us = 0;
  double rc_gbps = 0;  // one flow's current rate
  double rt_gbps = 0;
  double alpha = 0;
  double queue_bytes = 0;
  double p = 0;  // marking probability at the queue then
};

struct FluidResult {
  FluidConfig config;
  std::vector<FluidSample> samples;
  double fair_share_gbps = 0;
  // First time after which R_C stays within 10 % of the fair share to the end; -1 if never.
  double settled_at_us = -1;
  // Over the second half of the run: mean queue, min/max of R_C, mean alpha and p.
  double queue_mean_bytes = 0;
  double rc_min_gbps = 0;
  double rc_max_gbps = 0;
  double alpha_mean = 0;
  double p_mean = 0;
};

FluidResult run_fluid_model(const FluidConfig& config);

// The RED marking probability of the model (docs/protocol.md §5.1) at a queue of `q_bytes`.
double fluid_marking_probability(const FluidConfig& c, double q_bytes);

}  // namespace xroce::cc::sim
