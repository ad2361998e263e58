// DCQCN reaction point: one QP's sending rate, driven by CNPs (decrease) and by its rate-increase
// timer and byte counter (increase). docs/protocol.md §5.4; where it is silent, the DCQCN authors'
// ns-3 simulator (bobzhuyb/ns3-rdma). engine/cc/README.md lists every choice and its source.
//
// Sans-I/O. Time is an argument in nanoseconds and must not go backwards between calls. Calling
// order: deliver each event with on_cnp / on_bytes_sent, and call on_timer(now) once now reaches
// next_deadline(); every entry point first runs the deadlines that are due, so a late on_timer
// is caught up exactly. Then read rate_mbps() and pace the QP with it.
//
// The parameters are read through a pointer at every event (run-time changes apply from the next
// event); the DcqcnParams object must outlive the reaction point.
#pragma once

#include <cstdint>
#include <optional>

#include "cc/params.h"

namespace xroce::cc {

using TimeNs = std::uint64_t;

enum class RpStage {
  kUnlimited,         // at the max rate, no limiter, no timers (before the first CNP, or after
                      // the rate recovered)
  kFastRecovery,      // the event that fired has counted fewer than F stages: Rc -> (Rt + Rc)/2
  kAdditiveIncrease,  // one counter has reached F: Rt += R_AI
  kHyperIncrease,     // both counters have reached F: Rt += i * R_HAI
};
const char* stage_name(RpStage stage);

struct RpCounters {
  // ConnectX hw_counters names.
  std::uint64_t rp_cnp_handled = 0;  // CNPs taken by an enabled reaction point
  std::uint64_t rp_cnp_ignored = 0;  // CNPs that arrived while the QP's priority is disabled
  // xroce's own.
  std::uint64_t rate_cuts = 0;      // multiplicative decreases done
  std::uint64_t cnp_coalesced = 0;  // handled CNPs folded into a cut already pending
  std::uint64_t timer_events = 0;
  std::uint64_t byte_events = 0;
};

class ReactionPoint {
 public:
  // `line_rate_mbps` is the port's speed; the QP starts there, unlimited. `priority` (0..7) is
  // the QP's traffic priority, checked against rp_enable/<prio>.
  ReactionPoint(const DcqcnParams& params, double line_rate_mbps, int priority = 0);

  // A CNP for this QP arrived.
  void on_cnp(TimeNs now);
  // `bytes` of this QP left the port (data and retransmissions alike).
  void on_bytes_sent(std::uint64_t bytes, TimeNs now);
  // Runs every deadline at or before `now`.
  void on_timer(TimeNs now);
  // When on_timer must next run; nullopt when nothing is armed (unlimited, no cut pending). The
  // alpha update timer needs no wake-up: alpha is brought up to date when it is next used.
  std::optional<TimeNs> next_deadline() const;

  // The rate the QP may send at now (Rc), in Mb/s.
  double rate_mbps() const { return rc_mbps_; }
  double target_rate_mbps() const { return rt_mbps_; }
  double alpha() const { return alpha_; }
  RpStage stage() const { return stage_; }
  bool limited() const { return stage_ != RpStage::kUnlimited; }
  std::uint32_t timer_stage() const { return timer_count_; }
  std::uint32_t byte_stage() const { return byte_count_; }
  bool cut_pending() const { return cut_pending_; }
  double max_rate_mbps() const;
  double min_rate_mbps() const;
  int priority() const { return priority_; }
  const RpCounters& counters() const { return counters_; }

  // Rc within this of the max rate counts as recovered: the limiter is released. Rc approaches
  // the ceiling by halving the gap, which in floating point would take ~50 more events.
  static constexpr double kReleaseSlackMbps = 1.0;

 private:
  enum class Source { kTimer, kBytes };

  void run_due(TimeNs now);
  void start_limiter(TimeNs now);
  void cut(TimeNs at);
  void clamp_target_on_cut();
  void increase_event(Source source, TimeNs at);
  void release_limiter();
  void advance_alpha(TimeNs now);
  void raise_alpha_now();
  std::optional<TimeNs> cut_deadline() const;
  TimeNs timer_period_ns(bool hyper) const;
  bool in_hyper() const;
  double decay() const { return params_->dce_tcp_g / 1024.0; }  // 1 - g

  const DcqcnParams* params_;
  double line_rate_mbps_;
  int priority_;
  RpCounters counters_;

  double rc_mbps_;
  double rt_mbps_;
  double alpha_ = 1.0;
  RpStage stage_ = RpStage::kUnlimited;
  bool seen_cnp_ = false;  // the first-CNP initialisation has run

  std::uint32_t timer_count_ = 0;
  std::uint32_t byte_count_ = 0;
  std::uint64_t bytes_since_event_ = 0;
  std::uint64_t byte_period_ = 0;  // B, or B/2 in hyper increase with hyper_halves_periods
  TimeNs timer_deadline_ = 0;      // meaningful while limited

  bool cut_pending_ = false;
  bool has_cut_ = false;
  TimeNs last_cut_ = 0;

  TimeNs alpha_tick_end_ = 0;       // end of the current alpha period
  bool cnp_in_alpha_tick_ = false;  // ConnectX: a CNP arrived in the current alpha period
  TimeNs last_now_ = 0;
};

}  // namespace xroce::cc
