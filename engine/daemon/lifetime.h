// How long a daemon runs (Lifetime), and the on-demand rule as a value with time a parameter,
// so that the rule's races (a launcher connecting while another client comes and goes) are
// tested with a clock the test moves (tests/unit/daemon/lifetime_test.cc), not with sleeps.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>

namespace xroce::daemon {

enum class Lifetime {
  // Until SIGTERM/SIGINT, or until its last device is deleted: xroced run by hand or by
  // systemd (packaging/systemd/xroced.service).
  kService,
  // Started by `xroce link add` or `xroce up` to serve their request: as kService, and also
  // once it has served no device and no client for kUnusedGraceMs after a client came (the add
  // that started it failed), or when none came within kFirstClientMs (its launcher died). A
  // failed add so leaves no daemon behind, in a namespace that may be deleted next.
  kOnDemand,
};

class LifetimeRule {
 public:
  using Clock = std::chrono::steady_clock;

  // How long an on-demand daemon waits for the client that started it: the launcher connects
  // as soon as it reads "ok", so this only ends a daemon whose launcher died first.
  static constexpr int kFirstClientMs = 15000;
  // How long an on-demand daemon stays with nothing to serve once a client came: the launcher
  // that read "ok" may be about to connect while another client comes and goes.
  static constexpr int kUnusedGraceMs = 100;

  LifetimeRule(Lifetime lifetime, Clock::time_point started)
      : lifetime_(lifetime), started_(started) {}

  // A client connected (whatever becomes of it).
  void client_came() { had_client_ = true; }

  // Whether the daemon is done at `now`, given whether it serves a device or a client then.
  // A service never is. Serving anything starts the grace afresh the next time nothing is.
  bool done(bool serving, Clock::time_point now) {
    if (lifetime_ != Lifetime::kOnDemand || serving) {
      unused_since_.reset();
      return false;
    }
    if (had_client_ && !unused_since_) unused_since_ = now;
    return wait_ms(now) == 0;
  }

  // How long the daemon, serving nothing, may sleep before done() may turn true: epoll_wait's
  // timeout. -1: never by time (a service, or a client served until the last done()).
  int wait_ms(Clock::time_point now) const {
    if (lifetime_ != Lifetime::kOnDemand) return -1;
    Clock::time_point until;
    if (!had_client_) {
      until = started_ + std::chrono::milliseconds(kFirstClientMs);
    } else if (unused_since_) {
      until = *unused_since_ + std::chrono::milliseconds(kUnusedGraceMs);
    } else {
      return -1;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
    return static_cast<int>(std::max<std::int64_t>(0, left.count()));
  }

 private:
  Lifetime lifetime_;
  Clock::time_point started_;
  bool had_client_ = false;
  std::optional<Clock::time_point> unused_since_;
};

}  // namespace xroce::daemon
