#include "daemon/worker_uring.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "xroce/sched_attr.h"

namespace xroce::daemon {
namespace {

constexpr std::uint64_t kTagPort = 1;
constexpr std::uint64_t kTagWake = 2;
constexpr std::uint64_t kTagResolver = 4;
constexpr std::uint64_t kTagDoorbell = 3ull << 32;  // | fd: a multishot poll on a doorbell
constexpr std::uint64_t kTagMask = ~0ull << 32;
constexpr unsigned kRingEntries = 8;

}  // namespace

UringSleeper::UringSleeper(std::uint64_t slice_ns, int nice) : slice_ns_(slice_ns), nice_(nice) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  loadavg_fd_ = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  cpus_ = cpus > 0 ? static_cast<unsigned long>(cpus) : 1;
  ring_ok_ = io_uring_queue_init(kRingEntries, &ring_, 0) == 0;
}

UringSleeper::~UringSleeper() {
  if (ring_ok_) io_uring_queue_exit(&ring_);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (loadavg_fd_ >= 0) close(loadavg_fd_);
}

void UringSleeper::on_thread_start() {
  // The daemon's autogroup gets the workers' nice. With autogroups (sched(7), "The autogroup
  // feature"; on by default) the scheduler weighs each session's group of threads against the
  // other groups first, and only then the threads inside one group. `xroce link add` starts the
  // daemon in a session of its own, so a worker's nice alone weighs only against the daemon's
  // other threads, while the daemon's group competes at nice 0 with the group of each
  // application session: a woken worker then waits out a busy-polling application's turn
  // instead of preempting it. Traced with `perf sched` during `ib_write_lat` on a 2-vCPU host: a
  // worker woken by the request's arrival ran 1.8-2.7 ms later, when the application's turn
  // ended; the peer's tail probe fired first, and `ib_write_lat`'s p99 was 1.5-1.8 ms.
  // Written by each worker (the same value, so the order does not matter), and only by a session
  // leader: the group is the session's, so only a process that leads its own (xroced as `xroce
  // link add` starts it) has it to itself. A process that shares its session (a test running
  // workers in-process, xroced run from a terminal) would raise the shell's whole session.
  if (nice_ != 0 && getsid(0) == getpid()) (void)xroce::set_autogroup_nice(nice_);
  // Each setting alone where both together are refused: an unprivileged daemon keeps its slice.
  (void)xroce::set_nice_and_slice(nice_, slice_ns_);
}

void UringSleeper::notify() {
  const std::uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

// Spinning only pays while every runnable thread has a core. Otherwise the spin takes the core
// from the application that is to poll the completion just written (or post the next request),
// and a runnable worker, unlike a woken one, does not preempt it: it waits for the end of the
// application's slice (a tick). So when the host has more runnable threads than cores, an idle
// worker sleeps at once, and its wakeup (port, doorbell) preempts with its short slice.
// Runnable threads come from /proc/loadavg's fourth field, read at most once a millisecond.
bool UringSleeper::spin_allowed(std::uint64_t now_ns) {
  if (now_ns - spin_checked_ns_ < kSpinCheckNs) return spin_allowed_;
  spin_checked_ns_ = now_ns;
  if (loadavg_fd_ < 0) return spin_allowed_;
  char buf[128];
  const ssize_t n = pread(loadavg_fd_, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return spin_allowed_;
  buf[n] = '\0';
  unsigned long running = 0;  // "0.50 0.40 0.30 3/512 1234": 3 runnable, this thread included
  if (std::sscanf(buf, "%*s %*s %*s %lu/", &running) == 1) spin_allowed_ = running <= cpus_;
  return spin_allowed_;
}

void UringSleeper::watch_doorbell(int fd) {
  if (ring_ok_ && doorbell_users_[fd]++ == 0) submit_doorbell_change(fd, true);
}

void UringSleeper::unwatch_doorbell(int fd) {
  const auto it = doorbell_users_.find(fd);
  if (it == doorbell_users_.end() || --it->second != 0) return;
  doorbell_users_.erase(it);
  if (ring_ok_) submit_doorbell_change(fd, false);
}

void UringSleeper::submit_doorbell_change(int fd, bool watch) {
  io_uring_sqe* sqe = next_sqe();
  if (sqe == nullptr) return;
  const std::uint64_t tag = kTagDoorbell | static_cast<std::uint32_t>(fd);
  if (watch) {
    io_uring_prep_poll_multishot(sqe, fd, POLLIN);
    io_uring_sqe_set_data64(sqe, tag);
  } else {
    io_uring_prep_poll_remove(sqe, tag);
    io_uring_sqe_set_data64(sqe, 0);
  }
  io_uring_submit(&ring_);
}

io_uring_sqe* UringSleeper::next_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe != nullptr) return sqe;
  (void)io_uring_submit(&ring_);
  return io_uring_get_sqe(&ring_);
}

void UringSleeper::arm_poll(int fd, std::uint64_t tag) {
  io_uring_sqe* sqe = next_sqe();
  if (sqe == nullptr) return;
  io_uring_prep_poll_add(sqe, fd, POLLIN);
  io_uring_sqe_set_data64(sqe, tag);
  if (tag == kTagPort) port_poll_armed_ = true;
  if (tag == kTagWake) wake_poll_armed_ = true;
  if (tag == kTagResolver) resolver_poll_armed_ = true;
}

std::optional<Wakeup> UringSleeper::wait(const WaitSet& set, std::uint64_t wait_ns) {
  Wakeup woke;
  if (!ring_ok_) return woke;  // no ring: the worker spins
  if (!port_poll_armed_) arm_poll(set.port_fd, kTagPort);
  if (!wake_poll_armed_) arm_poll(wake_fd_, kTagWake);
  if (!resolver_poll_armed_ && set.resolver_fd >= 0) arm_poll(set.resolver_fd, kTagResolver);
  if (wait_ns > 0) {
    __kernel_timespec ts{};
    ts.tv_sec = static_cast<long long>(wait_ns / 1'000'000'000u);
    ts.tv_nsec = static_cast<long long>(wait_ns % 1'000'000'000u);
    io_uring_cqe* cqe = nullptr;
    (void)io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
    woke.slept = true;
  }
  reap(woke);
  return woke;
}

// Takes every completion: drains the eventfds that fired, re-arms a multishot doorbell poll
// the kernel ended, and notes which one-shot polls must be armed again.
void UringSleeper::reap(Wakeup& woke) {
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
    const std::uint64_t tag = io_uring_cqe_get_data64(cqe);
    if ((tag & kTagMask) == kTagDoorbell) {
      const int fd = static_cast<int>(tag & ~kTagMask);
      std::uint64_t count = 0;
      if (cqe->res > 0) (void)!read(fd, &count, sizeof(count));  // the fd is non-blocking
      if ((cqe->flags & IORING_CQE_F_MORE) == 0 && doorbell_users_.contains(fd)) {
        io_uring_sqe* sqe = next_sqe();
        if (sqe != nullptr) {
          io_uring_prep_poll_multishot(sqe, fd, POLLIN);
          io_uring_sqe_set_data64(sqe, tag);
        }
      }
    }
    if (tag == kTagPort) port_poll_armed_ = false;
    if (tag == kTagResolver) {
      resolver_poll_armed_ = false;
      woke.resolver_readable = true;
    }
    if (tag == kTagWake) {
      wake_poll_armed_ = false;
      std::uint64_t count = 0;
      (void)!read(wake_fd_, &count, sizeof(count));
    }
    io_uring_cqe_seen(&ring_, cqe);
  }
}

}  // namespace xroce::daemon
