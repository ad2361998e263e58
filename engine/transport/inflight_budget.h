// A bound on the request PSNs a device has sent and not yet seen acknowledged, summed over all
// its RC QPs, and how the QPs that want to send share it.
//
// Why: every QP's own window (QpConfig::max_unacked_psns) is sized for one QP. A thousand QPs
// each filling their window put 128,000 packets on the wire at once, far beyond the frames the
// receiver's port ring holds; the ring overflows, every QP sees a PSN gap, and their go-back-N
// retransmissions of whole windows collide again until retry_cnt runs out. The budget keeps the
// sum within `limit_psns`, a sender-side cap in the spirit of a TCP sender's congestion window
// but per device.
//
// How it is shared: the QPs in demand (holding PSNs, or refused and waiting) share the limit
// evenly, but never below a grant of kGrantPsns each. A QP holding nothing starts only where a
// whole grant fits under the limit, and while any QP waits every QP needs that room for its
// next PSN: so when more QPs want to send than the limit has grants, limit / grant of them send
// at a time, each a grant's worth, rather than all of them one packet each. A share of one
// packet would make every request ask for its own ACK (the requester sets AckReq where the
// budget stops it) and every ACK a frame of its own; a grant lets the responder answer a
// grant's packets with one ACK (AckReq on the message's last packet, rxe_req.c
// init_req_packet) and keeps the number of frames in flight, ACKs included, within the ring.
// Who starts next among the waiting QPs is the order in which their worker polls them (the
// worker rotates it, worker.h), so every QP progresses.
//
// Shared by the QPs of one device, which run on several workers: the counts are atomics and a
// decision may see a slightly stale sum; the bound is approximate by a few packets (and by the
// PSNs of one READ, which takes all its PSNs at once), never unsafe. The QPs a worker queued
// for the budget may hold nothing, so no packet of theirs wakes that worker: the ACKs that free
// the budget arrive at others. The release hook tells it (the daemon's hook wakes the device's
// workers that have QPs waiting, Worker::wake_for_budget).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <utility>

namespace xroce::transport {

// What one QP holds of a budget: unacknowledged PSNs, and whether the budget refused it a new
// PSN it wanted to send.
struct BudgetHolding {
  std::uint32_t psns = 0;
  bool waiting = false;
  bool in_demand() const { return psns != 0 || waiting; }
  friend bool operator==(const BudgetHolding&, const BudgetHolding&) = default;
};

class InflightBudget {
 public:
  // The least share of a QP in demand, in PSNs: two of perftest's 64 KiB messages at a
  // 4096-byte MTU, so that a QP sends two messages per turn and the responder can answer both
  // with one ACK (the second's AckReq coalesces the first's, Responder::queue_ack). With one
  // message per grant every message took an ACK of its own and the sender switched QPs every
  // 16 packets: ib_write_bw -q 1000 -t 16 -n 40 between two namespaces went from 0.59-0.68x
  // the one-QP rate (udp) and 0.56-0.83x (afxdp) to 0.76-0.82x and 0.73-1.16x, four rounds each
  // of bench/bench-qps.sh, alternating (bench/README.md "Grants of two messages"). 64 was no
  // better than 32 in two rounds, and leaves only four QPs of a 256-PSN budget sending at once.
  static constexpr std::uint32_t kGrantPsns = 32;

  explicit InflightBudget(std::uint32_t limit_psns) : limit_psns_(std::max(1u, limit_psns)) {}
  InflightBudget(const InflightBudget&) = delete;
  InflightBudget& operator=(const InflightBudget&) = delete;

  std::uint32_t limit_psns() const { return limit_psns_.load(std::memory_order_relaxed); }
  // Any thread: a new limit, taken by the next decisions (what QPs hold already stays theirs).
  void set_limit_psns(std::uint32_t limit_psns) {
    limit_psns_.store(std::max(1u, limit_psns), std::memory_order_relaxed);
  }
  std::uint32_t in_flight_psns() const { return in_flight_psns_.load(std::memory_order_relaxed); }
  // QPs holding PSNs or waiting for the budget.
  std::uint32_t active_qps() const { return active_qps_.load(std::memory_order_relaxed); }
  std::uint32_t waiting_qps() const { return waiting_qps_.load(std::memory_order_relaxed); }
  std::uint32_t grant_psns() const { return std::min(kGrantPsns, limit_psns()); }

  // Whether a QP that holds `held_psns` unacknowledged PSNs may send one more new PSN, with
  // `unsynced_psns` more in flight than the device was told yet (a packet being built).
  bool may_take(std::uint32_t held_psns, std::uint32_t unsynced_psns = 0) const {
    const std::uint32_t limit = limit_psns();
    const std::uint32_t in_flight = in_flight_psns() + unsynced_psns;
    if (in_flight >= limit || held_psns >= share_psns()) return false;
    // Starting, or going on while others wait: only where a whole grant still fits, so that a
    // QP already sending does not keep the last free PSNs from the ones waiting to start.
    if (held_psns == 0 || waiting_qps() > 0) return in_flight + grant_psns() <= limit;
    return true;
  }
  // The share of the limit each QP in demand may hold.
  std::uint32_t share_psns() const {
    return std::max(grant_psns(), limit_psns() / std::max(1u, active_qps()));
  }

  // Called on the thread whose update() freed PSNs while QPs waited for the budget. Set before
  // any QP uses the budget, and cleared only once none can (it is not synchronized with
  // update()); it must not call back into the budget.
  void set_release_hook(std::function<void()> hook) { release_hook_ = std::move(hook); }

  // A QP's holding changed from `before` to `after`.
  void update(BudgetHolding before, BudgetHolding after) {
    if (before == after) return;
    if (after.psns > before.psns) {
      in_flight_psns_.fetch_add(after.psns - before.psns, std::memory_order_relaxed);
    } else if (after.psns < before.psns) {
      in_flight_psns_.fetch_sub(before.psns - after.psns, std::memory_order_relaxed);
      if (release_hook_ && waiting_qps() > 0) release_hook_();
    }
    if (!before.in_demand() && after.in_demand())
      active_qps_.fetch_add(1, std::memory_order_relaxed);
    if (before.in_demand() && !after.in_demand())
      active_qps_.fetch_sub(1, std::memory_order_relaxed);
    if (!before.waiting && after.waiting) waiting_qps_.fetch_add(1, std::memory_order_relaxed);
    if (before.waiting && !after.waiting) waiting_qps_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<std::uint32_t> limit_psns_;
  std::atomic<std::uint32_t> in_flight_psns_{0};
  std::atomic<std::uint32_t> active_qps_{0};
  std::atomic<std::uint32_t> waiting_qps_{0};
  std::function<void()> release_hook_;
};

}  // namespace xroce::transport
