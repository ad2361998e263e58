// The daemon's Sleeper (worker_platform.h): a worker sleeps in io_uring on its port's fd, its
// eventfd (notify), its doorbells and its resolver's socket, with the earliest deadline as the
// timeout, and spins instead only while the host has a core for every runnable thread.
//
// Doorbell eventfds are watched with one multishot poll each, for as long as a QP using them
// lives on the worker; the poll is removed (and the removal submitted) before unwatch_doorbell
// returns, so the control thread may close the fd as soon as the QP is gone. The port, eventfd
// and resolver polls are one-shot and re-armed before each sleep that lacks them.
//
// Threading: notify() from any thread; everything else on the worker thread.
#pragma once

#include <liburing.h>

#include <cstdint>
#include <map>

#include "daemon/worker_platform.h"

namespace xroce::daemon {

class UringSleeper final : public Sleeper {
 public:
  // `slice_ns`: the worker thread's EEVDF time slice (sched_setattr's sched_runtime for
  // SCHED_OTHER, Linux 6.12+; 0 leaves the default). A slice shorter than the busy-polling
  // applications' lets a woken worker preempt them at once instead of waiting out their slice
  // (up to a scheduler tick, 4 ms at HZ=250): the difference between ~20 us and ~ms round trips
  // on a host with fewer cores than busy threads. Older kernels refuse it; the worker runs
  // anyway.
  explicit UringSleeper(std::uint64_t slice_ns = kDefaultSliceNs);
  ~UringSleeper() override;
  UringSleeper(const UringSleeper&) = delete;
  UringSleeper& operator=(const UringSleeper&) = delete;

  static constexpr std::uint64_t kDefaultSliceNs = 100'000;

  void on_thread_start() override;
  void notify() override;
  bool spin_allowed(std::uint64_t now_ns) override;
  void watch_doorbell(int fd) override;
  void unwatch_doorbell(int fd) override;
  std::optional<Wakeup> wait(const WaitSet& set, std::uint64_t wait_ns) override;

 private:
  void arm_poll(int fd, std::uint64_t tag);
  void submit_doorbell_change(int fd, bool watch);
  void reap(Wakeup& woke);

  std::uint64_t slice_ns_;
  int wake_fd_ = -1;
  int loadavg_fd_ = -1;
  unsigned long cpus_ = 1;
  static constexpr std::uint64_t kSpinCheckNs = 1'000'000;
  std::uint64_t spin_checked_ns_ = 0;
  bool spin_allowed_ = true;
  io_uring ring_{};
  bool ring_ok_ = false;
  bool port_poll_armed_ = false;
  bool wake_poll_armed_ = false;
  bool resolver_poll_armed_ = false;
  std::map<int, std::uint32_t> doorbell_users_;  // doorbell fd -> QPs that ring it
};

}  // namespace xroce::daemon
