// Incast in the deterministic simulator: N senders, each with one RC QP keeping `outstanding`
// RDMA WRITEs of `message_bytes` in flight (long-lived flows), to one receiver through a switch
// whose port toward the receiver is the bottleneck: it ECN-marks RED-style (Kmin, Kmax, Pmax)
// and is lossless (pause-on-full, PFC-like) or drop-tail. The QPs run the real transport core
// with engine/cc's DCQCN attached through QpCongestion (or nothing, for `cc = false`).
// Pure and seeded: one configuration, one run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cc/params.h"
#include "cc/qp_congestion.h"
#include "cc/sim/fluid_model.h"
#include "net/sim/network.h"
#include "transport/verbs.h"

namespace xroce::cc::sim {

struct IncastConfig {
  std::uint64_t seed = 1;
  std::uint32_t senders = 2;
  double rate_gbps = 25;  // every link, the bottleneck included
  bool cc = true;
  DcqcnParams params = DcqcnParams::connectx();
  std::string profile = "connectx";  // for reports only: `params` is what runs
  std::uint64_t duration_us = 10'000;
  // Sender i starts at a seeded offset uniform in [0, start_spread_us) (0 = all at t = 0). Real
  // senders never start in the same nanosecond, and their timers then run out of phase.
  std::uint64_t start_spread_us = 0;
  // The fairness/utilisation window is [warmup_fraction * duration, duration): the flows start
  // together at t = 0 at line rate and the first part of the run is their convergence.
  double warmup_fraction = 0.5;
  transport::PathMtu mtu = transport::PathMtu::k4096;
  std::uint32_t outstanding = 4;  // WRITEs in flight per sender
  std::uint32_t message_bytes = 64 * 1024;
  std::uint64_t propagation_ns = 1'000;  // per link, one way
  // Bottleneck port. Zeros take the defaults scaled with the line rate (see incast.cc).
  std::uint64_t kmin_bytes = 0;
  std::uint64_t kmax_bytes = 0;
  double pmax = 0;
  std::uint64_t buffer_bytes = 0;  // egress queue capacity (the pause / drop point)
  bool lossless = true;
  std::uint64_t bin_us = 20;  // time series resolution (per-flow rate, queue depth)
  bool cnp_generation = true;
};

// The defaults `run_incast` fills in for zero Kmin/Kmax/Pmax/buffer: per 25 Gb/s of line rate
// Kmin 10 KB and Kmax 40 KB, Pmax 0.2, and a buffer of 10 Kmax.
IncastConfig with_defaults(IncastConfig config);

struct FlowResult {
  std::uint32_t sender = 0;
  double throughput_gbps = 0;  // frame bytes through the bottleneck in the window
  double final_rate_gbps = 0;  // the reaction point's Rc at the end
  double final_alpha = 0;
  std::uint64_t writes_completed = 0;
  CcCounters counters;             // the sender QP's RP side plus its receiver QP's NP side
  std::uint64_t timer_events = 0;  // the sender's rate-increase events, by source
  std::uint64_t byte_events = 0;
  std::vector<double> rate_series_gbps;  // measured per bin over the whole run
  std::vector<double> rc_series_gbps;    // the reaction point's Rc at each bin's start
};

struct IncastResult {
  IncastConfig config;  // with defaults filled in
  std::vector<FlowResult> flows;
  double window_start_us = 0;
  double window_end_us = 0;
  double jain = 0;         // Jain's index of the flows' throughput in the window
  double utilization = 0;  // bottleneck frame bytes in the window / (line rate * window)
  double fair_share_gbps = 0;
  // Swing: per flow, the coefficient of variation of its rate over 1 ms averages (`swing_bin_us`,
  // rounded to whole bins) in the window, then the mean and max over flows.
  std::uint64_t swing_bin_us = 0;
  double swing_cv_mean = 0;
  double swing_cv_max = 0;
  // Convergence: the start of the earliest `swing_bin_us` window after which every such window
  // has Jain >= 0.95 over the flows' bytes in it; -1 if never.
  double converged_at_us = -1;
  net::sim::QueueDepthSummary queue;  // bottleneck depth seen by arrivals in the window
  std::uint64_t drops = 0;            // bottleneck drop-tail drops in the window
  std::uint64_t drops_total = 0;      // over the whole run
  std::uint64_t ecn_marked = 0;       // in the window
  std::uint64_t ecn_marked_total = 0;
  std::uint64_t pauses = 0;  // pause events of the senders' ports in the window
  std::uint64_t paused_ns = 0;
  std::uint64_t retransmitted_packets = 0;
  std::uint64_t timeouts = 0;
  CcCounters totals;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> queue_series;  // (ns, bytes)
  std::uint64_t bin_ns = 0;
  std::uint64_t frames = 0;  // frames the hosts sent, for cost estimates
  std::string failure;       // empty when the run was sound (no QP error, no stall)
  bool ok() const { return failure.empty(); }
};

IncastResult run_incast(const IncastConfig& config);

double jain_index(const std::vector<double>& x);

// The fluid model of this incast (after with_defaults): its N, line rate, marking, DCQCN
// parameters and duration, with the model's packet = one full-MTU data frame.
FluidConfig fluid_config_for(const IncastConfig& config);

// The `xroce sim --incast` command line for this configuration.
std::string reproduce_command(const IncastConfig& config);

}  // namespace xroce::cc::sim
