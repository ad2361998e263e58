#include "daemon/control_identity.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77  // Linux 6.5 (asm-generic/socket.h); Debian 12's headers predate it
#endif

namespace xroce::daemon {

namespace {

// Where /proc/self/fd/<fd> points, or "".
std::string fd_target(int fd) {
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  char target[256];
  const ssize_t n = readlink(link.c_str(), target, sizeof target);
  return n <= 0 || static_cast<std::size_t>(n) >= sizeof target ? std::string()
                                                                : std::string(target, n);
}

bool is_proc_file(int fd, const std::string& expected_path, int access_mode) {
  const int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && (flags & O_ACCMODE) == access_mode && fd_target(fd) == expected_path;
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
  const std::string dir = "/proc/" + std::to_string(pid);
  return is_proc_file(mem_fd, dir + "/mem", O_RDWR) &&
         is_proc_file(maps_fd, dir + "/maps", O_RDONLY);
}

bool is_eventfd(int fd) {
  return fd >= 0 && fd_target(fd) == "anon_inode:[eventfd]";
}

bool is_socket(int fd) {
  struct stat st {};
  return fd >= 0 && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace xroce::daemon
