#include "cc/pacer.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace xroce::cc {
namespace {

// Time to serialise `bytes` at `rate_mbps`: bits / (rate * 1e6 b/s) = bits * 1e6 / rate ps.
std::uint64_t transmit_time_ps(std::uint64_t bytes, double rate_mbps) {
  return static_cast<std::uint64_t>(std::llround(static_cast<double>(bytes) * 8e6 / rate_mbps));
}

}  // namespace

std::uint64_t Pacer::on_sent(std::uint64_t now_ns, std::uint32_t bytes, double rate_mbps) {
  assert(rate_mbps > 0);
  assert(may_send(now_ns));
  const std::uint64_t now_ps = now_ns * kPsPerNs;
  // An idle QP earns up to burst_bytes of credit: its virtual clock may lag `now` by that much.
  // At least just under 1 ns, so a caller that sends at next_send_ns() (rounded up) loses no
  // time to the rounding.
  const std::uint64_t credit_ps = std::max(transmit_time_ps(burst_bytes_, rate_mbps), kPsPerNs - 1);
  const std::uint64_t earliest = now_ps > credit_ps ? now_ps - credit_ps : 0;
  next_send_ps_ = std::max(next_send_ps_, earliest) + transmit_time_ps(bytes, rate_mbps);
  return next_send_ns();
}

std::uint64_t Pacer::on_rate_change(std::uint64_t now_ns, double old_rate_mbps,
                                    double new_rate_mbps) {
  assert(old_rate_mbps > 0 && new_rate_mbps > 0);
  const std::uint64_t now_ps = now_ns * kPsPerNs;
  if (next_send_ps_ > now_ps) {
    const double remaining_ps = static_cast<double>(next_send_ps_ - now_ps);
    next_send_ps_ = now_ps + static_cast<std::uint64_t>(
                                 std::llround(remaining_ps * old_rate_mbps / new_rate_mbps));
  }
  return next_send_ns();
}

}  // namespace xroce::cc
