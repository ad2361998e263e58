#include "daemon/worker_sleep.h"

#include <algorithm>

namespace xroce::daemon {

bool SleepPolicy::should_sleep(bool busy, std::uint64_t now_ns) {
  if (busy) {
    idle_since_ns_ = 0;
    return false;
  }
  if (idle_since_ns_ == 0) {
    idle_since_ns_ = now_ns;
    return false;
  }
  if (now_ns - idle_since_ns_ < spin_ns_ && sleeper_->spin_allowed(now_ns)) return false;
  idle_since_ns_ = 0;
  return true;
}

std::optional<Wakeup> SleepPolicy::sleep(const WaitSet& set,
                                         std::optional<std::uint64_t> deadline_ns,
                                         std::uint64_t now_ns, bool moderated) {
  moderated_ = moderated;
  std::uint64_t wait_ns = kMaxSleepNs;
  if (deadline_ns)
    wait_ns = *deadline_ns > now_ns ? std::min(*deadline_ns - now_ns, kMaxSleepNs) : 0;
  const std::optional<Wakeup> woke = sleeper_->wait(set, wait_ns);
  if (!woke) {
    suspended_ = true;
    return std::nullopt;
  }
  count(*woke);
  return woke;
}

Wakeup SleepPolicy::resume() {
  suspended_ = false;
  const Wakeup woke = sleeper_->resume();
  count(woke);
  return woke;
}

void SleepPolicy::count(const Wakeup& woke) {
  if (!woke.slept) return;
  sleeps_.fetch_add(1, std::memory_order_relaxed);
  if (moderated_) moderated_sleeps_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace xroce::daemon
