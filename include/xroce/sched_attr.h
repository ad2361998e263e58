// struct sched_attr and the two system calls that read and write it, and the autogroup's nice, for
// the daemon's workers and the provider's polling threads (an EEVDF slice is sched_attr's
// sched_runtime for SCHED_OTHER, Linux 6.12+). <linux/sched/types.h> defines the struct, but its
// sched_param clashes with glibc's, and glibc 2.36 wraps neither call.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace xroce {

// SCHED_ATTR_SIZE_VER0.
struct SchedAttr {
  std::uint32_t size = sizeof(SchedAttr);
  std::uint32_t sched_policy = 0;
  std::uint64_t sched_flags = 0;
  std::int32_t sched_nice = 0;
  std::uint32_t sched_priority = 0;
  std::uint64_t sched_runtime = 0;  // SCHED_OTHER: the EEVDF slice in ns (0: the default)
  std::uint64_t sched_deadline = 0;
  std::uint64_t sched_period = 0;
};
static_assert(sizeof(SchedAttr) == 48);

inline constexpr std::uint64_t kSchedFlagResetOnFork = 0x01;  // SCHED_FLAG_RESET_ON_FORK

// The calling thread's attributes; false (errno set) when the kernel refuses.
inline bool get_sched_attr(SchedAttr& attr) {
  return syscall(SYS_sched_getattr, 0, &attr, sizeof(attr), 0) == 0;
}
inline bool set_sched_attr(const SchedAttr& attr) {
  return syscall(SYS_sched_setattr, 0, &attr, 0) == 0;
}

// What set_nice_and_slice could apply.
enum class NiceAndSlice { kBoth, kNiceOnly, kSliceOnly, kNeither };

// Sets the calling thread's nice value and EEVDF slice (SCHED_OTHER; slice_ns 0: the default)
// in one call; where the kernel refuses both together (a negative nice needs CAP_SYS_NICE;
// before 6.12 SCHED_OTHER ignores or rejects sched_runtime), each alone, nice first, so an
// unprivileged thread still gets its slice.
inline NiceAndSlice set_nice_and_slice(int nice, std::uint64_t slice_ns) {
  const auto set = [](int n, std::uint64_t s) {
    SchedAttr attr;
    attr.sched_policy = SCHED_OTHER;
    attr.sched_nice = n;
    attr.sched_runtime = s;
    return set_sched_attr(attr);
  };
  if (set(nice, slice_ns)) return NiceAndSlice::kBoth;
  if (nice != 0 && set(nice, 0)) return NiceAndSlice::kNiceOnly;
  if (nice != 0 && set(0, slice_ns)) return NiceAndSlice::kSliceOnly;
  return NiceAndSlice::kNeither;
}

// Gives the process's autogroup (sched(7), "The autogroup feature": the scheduler weighs each
// session's group of threads before the threads in it) the nice value `nice`; false when the
// kernel has no autogroups (CONFIG_SCHED_AUTOGROUP) or refuses (a negative value needs
// CAP_SYS_NICE). Harmless where the kernel does not use the group: autogroups switched off
// (kernel.sched_autogroup_enabled), or a process in a cgroup of its own (a systemd unit), whose
// cgroup's cpu.weight governs instead. The group is the session's: only a process that leads
// its own should change it.
inline bool set_autogroup_nice(int nice) {
  const int fd = open("/proc/self/autogroup", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const std::string text = std::to_string(nice);
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

}  // namespace xroce
