#include "cc/reaction_point.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace xroce::cc {
namespace {

constexpr TimeNs kNsPerUs = 1000;
constexpr std::uint64_t kLoopPowLimit = 64;  // beyond this many alpha periods, use std::pow

double power(double base, std::uint64_t exponent) {
  if (exponent > kLoopPowLimit) return std::pow(base, static_cast<double>(exponent));
  double out = 1.0;
  for (std::uint64_t i = 0; i < exponent; ++i)
    out *= base;
  return out;
}

}  // namespace

const char* stage_name(RpStage stage) {
  switch (stage) {
    case RpStage::kUnlimited:
      return "unlimited";
    case RpStage::kFastRecovery:
      return "fast_recovery";
    case RpStage::kAdditiveIncrease:
      return "additive_increase";
    case RpStage::kHyperIncrease:
      return "hyper_increase";
  }
  return "?";
}

ReactionPoint::ReactionPoint(const DcqcnParams& params, double line_rate_mbps, int priority)
    : params_(&params), line_rate_mbps_(line_rate_mbps), priority_(priority) {
  assert(line_rate_mbps > 0);
  assert(priority >= 0 && priority < kPriorities);
  rc_mbps_ = rt_mbps_ = max_rate_mbps();
  alpha_ = params.initial_alpha_value / 1024.0;
}

double ReactionPoint::max_rate_mbps() const {
  const std::uint32_t cap = params_->rpg_max_rate;
  return cap == 0 ? line_rate_mbps_ : std::min<double>(cap, line_rate_mbps_);
}

// A floor above the ceiling (a small rpg_max_rate) yields to the ceiling.
double ReactionPoint::min_rate_mbps() const {
  return std::min<double>(params_->rpg_min_rate, max_rate_mbps());
}

void ReactionPoint::on_cnp(TimeNs now) {
  run_due(now);
  if (!params_->rp_enabled(priority_)) {
    ++counters_.rp_cnp_ignored;
    return;
  }
  ++counters_.rp_cnp_handled;
  if (!seen_cnp_) {
    // docs/protocol.md §5.4 (ConnectX): the first CNP sets alpha and the starting rate, then cuts
    // as usual. Like HPCC's ns-3 model of ConnectX (rdma-hw.cc cnp_received_mlx), this CNP does not
    // also count towards the first alpha period.
    seen_cnp_ = true;
    alpha_ = params_->initial_alpha_value / 1024.0;
    alpha_tick_end_ = now + params_->dce_tcp_rtt * kNsPerUs;
    cnp_in_alpha_tick_ = false;
    if (params_->rate_to_set_on_first_cnp != 0) {
      rc_mbps_ = rt_mbps_ = std::min<double>(params_->rate_to_set_on_first_cnp, max_rate_mbps());
    }
    cut(now);
    if (params_->alpha_update_on_cnp) raise_alpha_now();
    return;
  }
  // rate_reduce_monitor_period: at most one cut per period. A CNP inside the period after a cut
  // schedules one cut at its end; more CNPs before then fold into it.
  const TimeNs period = params_->rate_reduce_monitor_period * kNsPerUs;
  if (!has_cut_ || period == 0 || now >= last_cut_ + period || !limited()) {
    cut(now);
  } else if (!cut_pending_) {
    cut_pending_ = true;
  } else {
    ++counters_.cnp_coalesced;
  }
  // docs/protocol.md §5.4 paper rule 1 cuts with alpha as it was, then raises it.
  if (params_->alpha_update_on_cnp) {
    raise_alpha_now();
  } else {
    cnp_in_alpha_tick_ = true;
  }
}

void ReactionPoint::on_bytes_sent(std::uint64_t bytes, TimeNs now) {
  run_due(now);
  // The byte counter runs only while the rate is limited [NS3: counts only in a QCN stage].
  if (!limited() || params_->rpg_byte_reset == 0) return;
  if (byte_period_ == 0) byte_period_ = params_->rpg_byte_reset;  // B was 0 at the last cut
  bytes_since_event_ += bytes;
  if (bytes_since_event_ >= byte_period_) {
    // One event per crossing; the excess is dropped, as the author simulator resets its counter.
    bytes_since_event_ = 0;
    increase_event(Source::kBytes, now);
  }
}

void ReactionPoint::on_timer(TimeNs now) {
  run_due(now);
}

std::optional<TimeNs> ReactionPoint::cut_deadline() const {
  if (!cut_pending_) return std::nullopt;
  return last_cut_ + params_->rate_reduce_monitor_period * kNsPerUs;
}

std::optional<TimeNs> ReactionPoint::next_deadline() const {
  std::optional<TimeNs> out = cut_deadline();
  if (limited() && (!out || timer_deadline_ < *out)) out = timer_deadline_;
  return out;
}

void ReactionPoint::run_due(TimeNs now) {
  assert(now >= last_now_ && "time must not go backwards");
  last_now_ = now;
  for (;;) {
    const std::optional<TimeNs> cut_at = cut_deadline();
    const bool timer_due = limited() && timer_deadline_ <= now;
    if (cut_at && *cut_at <= now && (!timer_due || *cut_at <= timer_deadline_)) {
      cut(*cut_at);  // a cut and a timer at the same instant: the cut wins and restarts the timer
    } else if (timer_due) {
      increase_event(Source::kTimer, timer_deadline_);
    } else {
      break;
    }
  }
  advance_alpha(now);
}

void ReactionPoint::cut(TimeNs at) {
  advance_alpha(at);
  clamp_target_on_cut();
  // Rc * (1 - alpha_fx / 2^rpg_gd) with alpha_fx = 1024 * alpha; rpg_gd = 11 gives alpha / 2.
  const double by_alpha = 1.0 - std::ldexp(alpha_, 10 - static_cast<int>(params_->rpg_gd));
  const double floor_factor = params_->rpg_min_dec_fac / 100.0;
  rc_mbps_ = std::max(min_rate_mbps(), rc_mbps_ * std::max(by_alpha, floor_factor));
  timer_count_ = byte_count_ = 0;
  bytes_since_event_ = 0;
  byte_period_ = params_->rpg_byte_reset;
  timer_deadline_ = at + timer_period_ns(false);
  stage_ = RpStage::kFastRecovery;
  has_cut_ = true;
  last_cut_ = at;
  cut_pending_ = false;
  ++counters_.rate_cuts;
}

// docs/protocol.md §5.4 paper rule 4, the three settings of [NS3] rpr_cnm_received.
void ReactionPoint::clamp_target_on_cut() {
  bool clamp = false;
  if (params_->clamp_tgt_rate) {
    clamp = true;
  } else if (params_->clamp_tgt_rate_ati) {
    clamp = timer_count_ > 0 || byte_count_ > 0;
  } else {
    clamp = byte_count_ > 0;
  }
  if (clamp || !limited()) rt_mbps_ = rc_mbps_;
}

bool ReactionPoint::in_hyper() const {
  const std::uint32_t f = params_->rpg_threshold;
  return timer_count_ >= f && byte_count_ >= f;
}

TimeNs ReactionPoint::timer_period_ns(bool hyper) const {
  const TimeNs period = params_->rpg_time_reset * kNsPerUs;
  return hyper && params_->hyper_halves_periods ? period / 2 : period;
}

void ReactionPoint::increase_event(Source source, TimeNs at) {
  // [NS3] rpr_hyper_time / rpr_hyper_byte: the next period is halved when this event finds the
  // QP already in hyper increase.
  const bool was_hyper = in_hyper();
  std::uint32_t fired = 0;
  std::uint32_t other = 0;
  if (source == Source::kTimer) {
    ++counters_.timer_events;
    fired = ++timer_count_;
    other = byte_count_;
    timer_deadline_ = at + timer_period_ns(was_hyper);
  } else {
    ++counters_.byte_events;
    fired = ++byte_count_;
    other = timer_count_;
    const std::uint64_t b = params_->rpg_byte_reset;
    byte_period_ = was_hyper && params_->hyper_halves_periods ? b / 2 : b;
  }
  const std::uint32_t f = params_->rpg_threshold;
  // The stage follows from the counters (docs/protocol.md §5.4 paper rule 3): the firing counter
  // still below F is fast recovery; otherwise additive while the other is below F, else hyper.
  double increase = 0;
  if (fired < f) {
    stage_ = RpStage::kFastRecovery;
  } else if (other < f) {
    stage_ = RpStage::kAdditiveIncrease;
    increase = params_->rpg_ai_rate;
  } else {
    stage_ = RpStage::kHyperIncrease;
    increase = params_->rpg_hai_rate * (std::min(timer_count_, byte_count_) - f + 1.0);
  }
  // [NS3] AdjustRates: QCN's guard against a stale target after deep cuts.
  const bool first_stage = timer_count_ == 1 || byte_count_ == 1;
  if (params_->tgt_rate_guard && first_stage && rt_mbps_ > 10 * rc_mbps_) {
    rt_mbps_ /= 8;
  } else {
    rt_mbps_ += increase;
  }
  const double ceiling = max_rate_mbps();
  // docs/protocol.md §5.4 (paper): Rt and Rc capped at the max rate.
  rt_mbps_ = std::min(rt_mbps_, ceiling);
  rc_mbps_ = std::min((rt_mbps_ + rc_mbps_) / 2, ceiling);
  if (rc_mbps_ >= ceiling - kReleaseSlackMbps && rt_mbps_ >= ceiling) release_limiter();
}

// docs/protocol.md §5.4 (paper): "when Rc reaches it the limiter is released". alpha keeps its
// value and keeps decaying; the next CNP cuts from the max rate with it.
void ReactionPoint::release_limiter() {
  rc_mbps_ = rt_mbps_ = max_rate_mbps();
  stage_ = RpStage::kUnlimited;
  timer_count_ = byte_count_ = 0;
  bytes_since_event_ = 0;
}

// Applies every alpha period that ended at or before `now`: the first one raises alpha if a CNP
// arrived in it (ConnectX), the rest only decay it: alpha <- (1 - g) alpha each.
void ReactionPoint::advance_alpha(TimeNs now) {
  if (!seen_cnp_ || now < alpha_tick_end_) return;
  const TimeNs period = params_->dce_tcp_rtt * kNsPerUs;
  const std::uint64_t ticks = (now - alpha_tick_end_) / period + 1;
  const double d = decay();
  alpha_ = cnp_in_alpha_tick_ ? alpha_ * d + (1 - d) : alpha_ * d;
  cnp_in_alpha_tick_ = false;
  alpha_ *= power(d, ticks - 1);
  alpha_tick_end_ += ticks * period;
}

// Paper: alpha <- (1 - g) alpha + g at each CNP; the decay timer restarts from here.
void ReactionPoint::raise_alpha_now() {
  const double d = decay();
  alpha_ = alpha_ * d + (1 - d);
  alpha_tick_end_ = last_now_ + params_->dce_tcp_rtt * kNsPerUs;
}

}  // namespace xroce::cc
