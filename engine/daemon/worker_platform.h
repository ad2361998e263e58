// What the worker loop (worker.h) asks of the operating system: the time, and a way to sleep
// until there is work and to be woken. Behind these two interfaces the loop is pure code: the
// daemon passes MonotonicClock and UringSleeper (worker_uring.h: io_uring, an eventfd,
// /proc/loadavg, the scheduler slice), the simulator (engine/daemon/sim) a virtual clock and a
// sleeper of its own, and the same loop runs over both.
//
// Calls per turn of the loop, not per packet: a virtual call here costs nothing the packets see.
#pragma once

#include <cstdint>
#include <optional>

namespace xroce::daemon {

// CLOCK_MONOTONIC in nanoseconds.
std::uint64_t monotonic_now_ns();

class Clock {
 public:
  virtual ~Clock() = default;
  // Nanoseconds on a clock that never goes backwards. Worker thread only.
  virtual std::uint64_t now_ns() = 0;
};

class MonotonicClock final : public Clock {
 public:
  std::uint64_t now_ns() override { return monotonic_now_ns(); }
};

// What a sleeping worker waits on besides its doorbells and notify().
struct WaitSet {
  int port_fd = -1;      // readable when the port has frames (net::Port::wait_fd)
  int resolver_fd = -1;  // the neighbour resolver's socket; -1: none
};

// How a wait ended.
struct Wakeup {
  bool slept = false;              // the worker did sleep (counted in sleeps)
  bool resolver_readable = false;  // the loop must read the resolver's socket
};

// The sleep/wake mechanism of one worker.
//
// Contract: the worker publishes "I sleep" (seq_cst) before its last look for work and only
// then calls wait(); a producer that adds work after that look sees the flag and calls
// notify(). So notify() may come before wait() starts: the next wait() must then return at
// once. A watched doorbell that fires, or a readable fd of the WaitSet, ends the wait likewise
// (also one that was already readable when the wait started).
class Sleeper {
 public:
  virtual ~Sleeper() = default;
  // Worker thread, once, before the first turn.
  virtual void on_thread_start() {}
  // Any thread: ends the wait in progress, or the next one.
  virtual void notify() = 0;
  // Worker thread: whether an idle worker may spin now instead of sleeping.
  virtual bool spin_allowed(std::uint64_t now_ns) = 0;
  // Worker thread: wake on this doorbell eventfd from now on / no longer. Counted per fd (an
  // SRQ's doorbell serves many QPs); once the last unwatch returns, the caller may close it.
  virtual void watch_doorbell(int fd) = 0;
  virtual void unwatch_doorbell(int fd) = 0;
  // Worker thread: sleeps until something in `set`, a doorbell or notify() is ready, or until
  // wait_ns has passed (0: do not block, only take what is ready). Returns what woke it, or
  // nullopt when the sleeper suspends the wait instead of blocking: the simulator does, its
  // workers sharing one thread. A suspended worker stays asleep, and its next turn starts
  // with resume(), which says how the wait ended.
  virtual std::optional<Wakeup> wait(const WaitSet& set, std::uint64_t wait_ns) = 0;
  virtual Wakeup resume() { return Wakeup{true, false}; }
};

}  // namespace xroce::daemon
