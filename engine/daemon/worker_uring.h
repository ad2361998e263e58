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
  // `nice`: the worker thread's nice value. A NIC's packet processing does not queue behind
  // applications for a CPU (hardware; rxe runs in softirq context, ahead of every process),
  // but a worker at nice 0 gets no more of a core than each busy-polling application thread
  // beside it: on a host with more runnable threads than cores its ACKs then wait out other
  // threads' turns, long enough for a peer's ACK timeout (perftest's default: 67 ms) to fire
  // again and again until retry-exceeded (`ib_write_lat -a` with six busy loops on 2 vCPUs).
  // At -10 a worker weighs ~9x a nice-0 thread (the kernel's sched_prio_to_weight); it sleeps
  // when idle on a loaded host (spin_allowed), so the weight goes to packet work only. Needs
  // CAP_SYS_NICE (the daemon runs as root); refused, the worker keeps nice 0. The daemon's
  // autogroup gets the same nice (on_thread_start): across sessions the kernel weighs groups,
  // not threads.
  explicit UringSleeper(std::uint64_t slice_ns = kDefaultSliceNs, int nice = kDefaultNice);
  ~UringSleeper() override;
  UringSleeper(const UringSleeper&) = delete;
  UringSleeper& operator=(const UringSleeper&) = delete;

  static constexpr std::uint64_t kDefaultSliceNs = 100'000;
  static constexpr int kDefaultNice = -10;

  void on_thread_start() override;
  void notify() override;
  bool spin_allowed(std::uint64_t now_ns) override;
  void watch_doorbell(int fd) override;
  void unwatch_doorbell(int fd) override;
  std::optional<Wakeup> wait(const WaitSet& set, std::uint64_t wait_ns) override;

 private:
  // A free SQE, submitting what is queued first when the SQ (kRingEntries) is full: a poll left
  // unarmed for want of one would be a lost wakeup (the wake fd) or a doorbell no longer heard.
  // nullptr only when the kernel takes nothing.
  io_uring_sqe* next_sqe();
  void arm_poll(int fd, std::uint64_t tag);
  void submit_doorbell_change(int fd, bool watch);
  void reap(Wakeup& woke);

  std::uint64_t slice_ns_;
  int nice_;
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
