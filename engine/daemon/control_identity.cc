#include "daemon/control_identity.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5 (asm-generic/socket.h); Debian 12's headers predate it
#endif

namespace xroce::daemon {

namespace {

// Where /proc/self/fd/<fd> points, or "".
std::string fd_target(int fd) {
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  char target[PATH_MAX];
  const ssize_t n = readlink(link.c_str(), target, sizeof target);
  return n <= 0 || static_cast<std::size_t>(n) >= sizeof target ? std::string()
                                                                : std::string(target, n);
}

// `pid`'s number in each PID namespace it is in, outermost first (the NSpid line of its
// status): a /proc mounted in a container names the process by the innermost one.
std::vector<pid_t> namespace_pids(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::vector<pid_t> pids;
    std::istringstream numbers(line.substr(6));
    for (pid_t n = 0; numbers >> n;)
      pids.push_back(n);
    return pids;
  }
  return {pid};
}

// Whether `fd` is the procfs file <pid>/<name> of process `pid`, open with `access_mode`. The
// path is read as the daemon sees it, which depends on where the client's /proc is mounted (a
// client in another mount namespace or a chroot shows its own mount point, or a path from the
// root of its namespace) and on its PID namespace: so the file system must be procfs and the
// last two components "<that process's number there>/<name>", whatever precedes them. A file
// of this kind cannot be forged (only procfs makes it) and is opened with the opener's own
// ptrace rights over that process, never the daemon's.
bool is_proc_file(int fd, pid_t pid, const std::string& name, int access_mode) {
  const int flags = fcntl(fd, F_GETFL);
  struct statfs fs {};
  if (flags < 0 || (flags & O_ACCMODE) != access_mode || fstatfs(fd, &fs) != 0 ||
      fs.f_type != PROC_SUPER_MAGIC) {
    return false;
  }
  const std::string target = fd_target(fd);
  const std::string suffix = "/" + name;
  if (target.size() <= suffix.size() ||
      target.compare(target.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  const std::string dir = target.substr(0, target.size() - suffix.size());
  const std::string number = dir.substr(dir.rfind('/') + 1);
  pid_t named = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), named);
  if (ec != std::errc() || end != number.data() + number.size() || number.empty()) return false;
  for (const pid_t p : namespace_pids(pid))
    if (p == named) return true;
  return false;
}

}  // namespace

std::optional<ConnectionPeer> ConnectionPeer::of(int connection) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(connection, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid <= 0) {
    return std::nullopt;
  }
  int pidfd = -1;
  len = sizeof(pidfd);
  if (getsockopt(connection, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) != 0) {
    // Older kernels: pin the pid now. Should the peer have exited and its pid been re-used in
    // between, the new process is not the sender of anything on this connection, which
    // sent_by_opener() requires.
    pidfd = static_cast<int>(syscall(SYS_pidfd_open, cred.pid, 0));
  }
  if (pidfd < 0) return std::nullopt;
  return ConnectionPeer(cred.pid, cred.uid, cred.gid, Fd(pidfd));
}

Fd ConnectionPeer::dup_pidfd() const {
  return Fd(fcntl(pidfd_.get(), F_DUPFD_CLOEXEC, 0));
}

bool ConnectionPeer::exited() const {
  pollfd p{pidfd_.get(), POLLIN, 0};
  return poll(&p, 1, 0) != 0;
}

bool ConnectionPeer::sent_by_opener(const std::optional<SenderCredentials>& sender) const {
  // The pid was translated when the datagram was received; checking that the opener still
  // runs afterwards means that number was the opener's (a live process's pid is its own).
  return sender && sender->pid == pid_ && !exited();
}

int prepare_listening_socket(int listener) {
  const int on = 1;
  return setsockopt(listener, SOL_SOCKET, SO_PASSCRED, &on, sizeof on) == 0 ? 0 : errno;
}

bool is_image_of(pid_t pid, int mem_fd, int maps_fd) {
  return is_proc_file(mem_fd, pid, "mem", O_RDWR) && is_proc_file(maps_fd, pid, "maps", O_RDONLY);
}

bool is_eventfd(int fd) {
  return fd >= 0 && fd_target(fd) == "anon_inode:[eventfd]";
}

bool is_socket(int fd) {
  struct stat st {};
  return fd >= 0 && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace xroce::daemon
