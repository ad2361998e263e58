// A bound on the request PSNs a device has sent and not yet seen acknowledged, summed over all
// its RC QPs, and each QP's fair share of it.
//
// Why: every QP's own window (QpConfig::max_unacked_psns) is sized for one QP. A thousand QPs
// each filling their window put 128,000 packets on the wire at once, far beyond the frames the
// receiver's port ring holds (2,048 on AF_XDP); the ring overflows, every QP sees a PSN gap, and
// their go-back-N retransmissions of whole windows collide again until retry_cnt runs out. The
// budget keeps the sum near `limit_psns`, a sender-side cap in the spirit of a TCP sender's
// congestion window but per device: QPs holding PSNs share the limit evenly (limit / active QPs),
// and a QP holding nothing may always send one packet, so no QP starves and the sum stays within
// limit + active QPs.
//
// Shared by the QPs of one device, which run on several workers: the counts are atomics and a
// decision may see a slightly stale sum; the bound is approximate by a few packets, never unsafe.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace xroce::transport {

class InflightBudget {
 public:
  explicit InflightBudget(std::uint32_t limit_psns) : limit_psns_(std::max(1u, limit_psns)) {}
  InflightBudget(const InflightBudget&) = delete;
  InflightBudget& operator=(const InflightBudget&) = delete;

  std::uint32_t limit_psns() const { return limit_psns_; }
  std::uint32_t in_flight_psns() const { return in_flight_psns_.load(std::memory_order_relaxed); }
  std::uint32_t active_qps() const { return active_qps_.load(std::memory_order_relaxed); }

  // Whether a QP that holds `held_psns` unacknowledged PSNs may send one more new PSN.
  bool may_take(std::uint32_t held_psns) const {
    if (held_psns == 0) return true;  // one packet per QP always: nobody starves
    if (in_flight_psns() >= limit_psns_) return false;
    return held_psns < share_psns();
  }
  // The share of the limit each QP holding PSNs may have.
  std::uint32_t share_psns() const {
    return std::max(1u, limit_psns_ / std::max(1u, active_qps()));
  }

  // A QP's holding changed from `before` to `after` PSNs.
  void update(std::uint32_t before, std::uint32_t after) {
    if (before == after) return;
    if (after > before) {
      in_flight_psns_.fetch_add(after - before, std::memory_order_relaxed);
    } else {
      in_flight_psns_.fetch_sub(before - after, std::memory_order_relaxed);
    }
    if (before == 0) active_qps_.fetch_add(1, std::memory_order_relaxed);
    if (after == 0) active_qps_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  const std::uint32_t limit_psns_;
  std::atomic<std::uint32_t> in_flight_psns_{0};
  std::atomic<std::uint32_t> active_qps_{0};
};

}  // namespace xroce::transport
