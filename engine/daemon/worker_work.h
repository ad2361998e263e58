// Which hosted QPs a worker's turn visits, so that a turn costs in proportion to the QPs that
// have something to do, not to the QPs hosted (a thousand, of which a budget lets sixteen send).
//
// A QP is drained in a turn when it was marked (WorkList) since its last drain: its rings had
// work (worker_ready.h), a packet reached it, a timer of it fell due (DeadlineQueue), the
// control thread reached it (find_qp_on_worker), it was just placed, the device's
// InflightBudget has room for it again (the worker's budget queue), or its last drain left
// output behind (it transmitted and may have more, or egress had no room). Anything else that
// makes a QP produce output is one of its deadlines (ACK coalescing, RNR, retransmission, the
// pacer's release), which the DeadlineQueue holds.
//
// Threading: the owning worker's thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <span>
#include <vector>

#include "daemon/worker_qps.h"

namespace xroce::daemon {

class WorkList {
 public:
  // Marks `hosted` for the next drain (listed once however often it is marked).
  void mark(Hosted& hosted) {
    if (hosted.listed) return;
    hosted.listed = true;
    next_.push_back(&hosted);
  }
  // The QPs marked so far, in the order they were marked; marking starts a new list. The span
  // stays valid until the next take().
  std::span<Hosted* const> take() {
    taken_.swap(next_);
    next_.clear();
    for (Hosted* h : taken_)
      h->listed = false;
    return taken_;
  }
  // Before `hosted` goes (between turns: never during a drain of what take() returned).
  void forget(Hosted& hosted) {
    if (!hosted.listed) return;
    std::erase(next_, &hosted);
    hosted.listed = false;
  }
  bool empty() const { return next_.empty(); }

 private:
  std::vector<Hosted*> next_;
  std::vector<Hosted*> taken_;
};

// The QPs' earliest deadlines in time order: a min-heap of (deadline, QPN) in which an entry
// counts only while it is its QP's current key (Hosted::timer_key); outdated ones are dropped
// as they surface, and the heap is rebuilt when they outnumber the live ones.
class DeadlineQueue {
 public:
  // The earliest deadline of `hosted` (QP `qpn`) is now `deadline` (nullopt: none).
  void set(std::uint32_t qpn, Hosted& hosted, std::optional<std::uint64_t> deadline) {
    if (hosted.timer_key == deadline) return;
    hosted.timer_key = deadline;
    if (deadline) heap_.push(Entry{*deadline, qpn});
  }
  // Calls due(Hosted&) once for each QP whose key is at or before now_ns, and clears its key
  // (its next set() enters it again).
  template <class Due>
  void pop_due(std::uint64_t now_ns, HostedQps& qps, Due&& due) {
    while (!heap_.empty() && heap_.top().deadline_ns <= now_ns) {
      const Entry e = heap_.top();
      heap_.pop();
      Hosted* h = live(e, qps);
      if (h == nullptr) continue;
      h->timer_key.reset();
      due(*h);
    }
  }
  // The earliest live key.
  std::optional<std::uint64_t> earliest(HostedQps& qps) {
    while (!heap_.empty() && live(heap_.top(), qps) == nullptr)
      heap_.pop();
    if (heap_.empty()) return std::nullopt;
    return heap_.top().deadline_ns;
  }
  // Drops the outdated entries once they are most of the heap.
  void compact(HostedQps& qps) {
    if (heap_.size() <= 4 * qps.size() + 64) return;
    Heap fresh;
    for (auto& [qpn, hosted] : qps)
      if (hosted.timer_key) fresh.push(Entry{*hosted.timer_key, qpn});
    heap_.swap(fresh);
  }
  std::size_t size() const { return heap_.size(); }

 private:
  struct Entry {
    std::uint64_t deadline_ns;
    std::uint32_t qpn;
    bool operator>(const Entry& o) const { return deadline_ns > o.deadline_ns; }
  };
  using Heap = std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>>;

  static Hosted* live(const Entry& e, HostedQps& qps) {
    const auto it = qps.find(e.qpn);
    if (it == qps.end() || it->second.timer_key != e.deadline_ns) return nullptr;
    return &it->second;
  }

  Heap heap_;
};

}  // namespace xroce::daemon
