// Sleep policy: when an idle worker spins and when it sleeps, how long, and the handshake that
// lets any thread wake it without a lost wakeup (docs/ARCHITECTURE.md decision 7, the AF_XDP
// need_wakeup idea).
//
//  - Spin or sleep: after a turn without work the worker spins (runs empty turns) for spin_ns,
//    and only while the Sleeper says spinning is allowed (the daemon: while the host has a core
//    for every runnable thread); then it sleeps.
//  - How long: until the earliest deadline the loop names (retransmission, RNR, pacer release,
//    DCQCN timer, resolver retry, a waiting frame's give-up), at most kMaxSleepNs, or until the
//    Sleeper's fds, doorbells or notify() wake it.
//  - Handshake: the worker publishes "I sleep" (publish_asleep, seq_cst) before its last look
//    for work; a producer that pushed work (a command, a handed-over or looped-back frame, a
//    doorbell) calls wake(), which notifies the Sleeper only when that flag is set. Either the
//    worker's look sees the work or the producer sees the flag (seq_cst on both sides).
//
// Threading: wake(), wake_for_stop() and sleeps() from any thread; the rest on the worker.
#pragma once

#include <atomic>
#include <cassert>
#include <cstdint>
#include <memory>
#include <optional>

#include "daemon/worker_platform.h"

namespace xroce::daemon {

class SleepPolicy {
 public:
  static constexpr std::uint64_t kMaxSleepNs = 100'000'000;  // bounds a sleep with nothing armed

  // `sleeper` must not be null.
  SleepPolicy(std::unique_ptr<Sleeper> sleeper, std::uint64_t spin_ns)
      : sleeper_(std::move(sleeper)), spin_ns_(spin_ns) {
    assert(sleeper_ != nullptr);
  }

  Sleeper& sleeper() { return *sleeper_; }

  // Any thread: makes a sleeping worker run a turn.
  void wake() {
    if (sleeping_.load(std::memory_order_seq_cst)) sleeper_->notify();
  }
  // Any thread: wakes the worker whatever its state (it is to stop).
  void wake_for_stop() {
    sleeping_.store(true, std::memory_order_seq_cst);
    sleeper_->notify();
  }
  // Any thread: how many times the worker has slept, and of those how many were moderated
  // (sleep()'s `moderated`).
  std::uint64_t sleeps() const { return sleeps_.load(std::memory_order_relaxed); }
  std::uint64_t moderated_sleeps() const {
    return moderated_sleeps_.load(std::memory_order_relaxed);
  }

  // Worker thread: whether the host has a core for every runnable thread (Sleeper::spin_allowed).
  bool spin_allowed(std::uint64_t now_ns) { return sleeper_->spin_allowed(now_ns); }
  // Worker thread, after each turn (`busy`: it did work): whether the worker should sleep now.
  bool should_sleep(bool busy, std::uint64_t now_ns);
  void publish_asleep() { sleeping_.store(true, std::memory_order_seq_cst); }
  void publish_awake() { sleeping_.store(false, std::memory_order_seq_cst); }
  // Worker thread, asleep (published, and nothing was pending): waits until `deadline_ns` (none:
  // kMaxSleepNs) or a wakeup. nullopt: the Sleeper suspended the wait (worker_platform.h);
  // the worker stays asleep until resume(). `moderated`: the worker did not ask for doorbells
  // (WorkerConfig::moderation_ns); only counted apart.
  std::optional<Wakeup> sleep(const WaitSet& set, std::optional<std::uint64_t> deadline_ns,
                              std::uint64_t now_ns, bool moderated = false);
  bool suspended() const { return suspended_; }
  Wakeup resume();

 private:
  void count(const Wakeup& woke);

  std::unique_ptr<Sleeper> sleeper_;
  std::uint64_t spin_ns_;
  std::uint64_t idle_since_ns_ = 0;  // 0: the last turn did work
  bool suspended_ = false;
  bool moderated_ = false;  // the sleep in progress (or suspended) is a moderated one
  std::atomic<bool> sleeping_{false};
  std::atomic<std::uint64_t> sleeps_{0};
  std::atomic<std::uint64_t> moderated_sleeps_{0};
};

}  // namespace xroce::daemon
