#include "cc/sim/fluid_model.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>

namespace xroce::cc::sim {

namespace {

constexpr double kBitsPerByte = 8;
constexpr double kSettleBand = 0.10;  // "within 10 % of the fair share", as docs/protocol.md §5.6
constexpr double kPMaxUsable = 1 - 1e-12;  // keeps log1p(-p) finite at p = 1
// A byte counter of 0 (off) becomes one too large to ever fire.
constexpr double kByteCounterOffBytes = 1e18;

// 1 - (1 - p)^x: the probability that at least one of x packets is marked.
double any_marked(double p, double x) {
  return -std::expm1(x * std::log1p(-p));
}

// (1 - p)^x: the probability that none of x packets is marked.
double none_marked(double p, double x) {
  return std::exp(x * std::log1p(-p));
}

// Rate of events that fire after `n` unmarked packets sent at `rate` packets/s:
// rate * p / ((1 - p)^-n - 1), which tends to rate / n as p -> 0 (docs/protocol.md §5.6).
double event_rate(double rate, double p, double n) {
  if (p < 1e-12) return rate / n;
  const double denom = std::expm1(-n * std::log1p(-p));
  if (!std::isfinite(denom)) return 0;
  return rate * p / denom;
}

struct State {
  double q = 0;   // packets
  double rc = 0;  // packets/s
  double rt = 0;
  double alpha = 0;
};

}  // namespace

double fluid_marking_probability(const FluidConfig& c, double q_bytes) {
  if (q_bytes <= c.kmin_bytes) return 0;
  if (q_bytes > c.kmax_bytes) return 1;
  return (q_bytes - c.kmin_bytes) / (c.kmax_bytes - c.kmin_bytes) * c.pmax;
}

FluidConfig fluid_config_for(const DcqcnParams& params, std::uint32_t flows, double line_rate_gbps,
                             double packet_bytes, double kmin_bytes, double kmax_bytes,
                             double pmax) {
  FluidConfig c;
  c.flows = flows;
  c.line_rate_gbps = line_rate_gbps;
  c.packet_bytes = packet_bytes;
  c.kmin_bytes = kmin_bytes;
  c.kmax_bytes = kmax_bytes;
  c.pmax = pmax;
  c.g = 1 - params.dce_tcp_g / 1024.0;
  c.cnp_interval_us = std::max<double>(params.min_time_between_cnps, 1);
  c.alpha_period_us = params.dce_tcp_rtt;
  c.timer_us = params.rpg_time_reset;
  c.byte_counter_bytes = params.rpg_byte_reset == 0 ? kByteCounterOffBytes : params.rpg_byte_reset;
  c.fast_recovery_steps = params.rpg_threshold;
  c.rai_mbps = params.rpg_ai_rate;
  c.initial_alpha = params.initial_alpha_value / 1024.0;
  return c;
}

FluidResult run_fluid_model(const FluidConfig& c) {
  assert(c.flows > 0 && c.step_ns > 0 && c.packet_bytes > 0);
  const double pkt_bits = c.packet_bytes * kBitsPerByte;
  const double cap = c.line_rate_gbps * 1e9 / pkt_bits;  // C, packets/s
  const double rai = c.rai_mbps * 1e6 / pkt_bits;
  const double b = c.byte_counter_bytes / c.packet_bytes;  // B in packets
  const double f = c.fast_recovery_steps;
  const double tau = c.cnp_interval_us * 1e-6;
  const double tau_prime = c.alpha_period_us * 1e-6;
  const double timer = c.timer_us * 1e-6;
  const double dt = c.step_ns * 1e-9;
  const auto delay_steps =
      static_cast<std::size_t>(std::llround(c.feedback_delay_us * 1e3 / c.step_ns));
  const auto steps = static_cast<std::uint64_t>(c.duration_us * 1e3 / c.step_ns);
  const auto sample_every =
      std::max<std::uint64_t>(1, static_cast<std::uint64_t>(c.sample_us * 1e3 / c.step_ns));

  State s{0, cap, cap, c.initial_alpha};
  // History of (q, R_C) for the lagged terms, one slot per step of the delay: slot k % size holds
  // the values of step k - delay_steps until step k overwrites it. Before t = 0 the flows were
  // in their start state.
  std::vector<std::pair<double, double>> history(std::max<std::size_t>(delay_steps, 1),
                                                 {s.q, s.rc});
  FluidResult out;
  out.config = c;
  out.fair_share_gbps = c.line_rate_gbps / c.flows;
  const double to_gbps = pkt_bits / 1e9;

  for (std::uint64_t k = 0; k <= steps; ++k) {
    const auto& [q_lag, r_lag] = history[k % history.size()];  // the value delay_steps ago
    const double p = std::min(fluid_marking_probability(c, q_lag * c.packet_bytes), kPMaxUsable);
    if (k % sample_every == 0) {
      out.samples.push_back({static_cast<double>(k) * c.step_ns / 1e3, s.rc * to_gbps,
                             s.rt * to_gbps, s.alpha, s.q * c.packet_bytes, p});
    }
    const double cut_rate = any_marked(p, tau * r_lag) / tau;  // CNPs per second
    const double bytes_ev = event_rate(r_lag, p, b);
    const double timer_ev = event_rate(r_lag, p, timer * r_lag);
    const double dq = c.flows * s.rc - cap;
    const double dalpha = c.g / tau_prime * (any_marked(p, tau_prime * r_lag) - s.alpha);
    double drt = -(s.rt - s.rc) * cut_rate + rai * bytes_ev * none_marked(p, f * b) +
                 rai * timer_ev * none_marked(p, f * timer * r_lag);
    double drc = -s.rc * s.alpha / 2 * cut_rate + (s.rt - s.rc) / 2 * (bytes_ev + timer_ev);
    // [FM]: no increase beyond the line rate.
    if (s.rc >= cap && drc > 0) drc = 0;
    if (s.rt >= cap && drt > 0) drt = 0;
    s.q = std::max(0.0, s.q + dq * dt);
    s.alpha = std::clamp(s.alpha + dalpha * dt, 0.0, 1.0);
    s.rt = std::min(s.rt + drt * dt, cap);
    s.rc = std::clamp(s.rc + drc * dt, 0.0, cap);
    history[k % history.size()] = {s.q, s.rc};
  }

  const double share = out.fair_share_gbps;
  for (std::size_t i = out.samples.size(); i-- > 0;) {
    if (std::abs(out.samples[i].rc_gbps - share) > kSettleBand * share) {
      out.settled_at_us = i + 1 < out.samples.size() ? out.samples[i + 1].t_us : -1;
      break;
    }
    out.settled_at_us = out.samples[i].t_us;
  }
  std::size_t n = 0;
  out.rc_min_gbps = c.line_rate_gbps;
  for (const FluidSample& x : out.samples) {
    if (x.t_us < c.duration_us / 2) continue;
    ++n;
    out.queue_mean_bytes += x.queue_bytes;
    out.alpha_mean += x.alpha;
    out.p_mean += x.p;
    out.rc_min_gbps = std::min(out.rc_min_gbps, x.rc_gbps);
    out.rc_max_gbps = std::max(out.rc_max_gbps, x.rc_gbps);
  }
  if (n > 0) {
    out.queue_mean_bytes /= static_cast<double>(n);
    out.alpha_mean /= static_cast<double>(n);
    out.p_mean /= static_cast<double>(n);
  }
  return out;
}

}  // namespace xroce::cc::sim
