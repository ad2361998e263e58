// Who is at the other end of a control connection (the daemon acts for a process image, not
// a pid).

//
// At accept the daemon binds the connection to the process that connected: SO_PEERCRED for its
// pid and ids, SO_PEERPIDFD for a pidfd that pins that very process (pidfd_open of the pid where
// the kernel lacks the option, Linux < 6.5). The listening socket has SO_PASSCRED, so the kernel
// attaches the sending process's credentials to every datagram (SCM_CREDENTIALS). A datagram is
// honoured only when it was sent by the process that connected while that process still runs:
// the kernel gives the sender's pid as it stands when the datagram is received (0 once that
// process has exited), and a live process's pid belongs to no other; so a connection inherited
// across fork, handed to another process, or kept after its opener exited and its pid was
// re-used, gets EPERM whatever it asks.
//
// Memory is another matter (engine/device/dma.h): the client hands over its own /proc/self/mem
// and /proc/self/maps at Op::hello, and check_image_descriptors makes sure they are that.
#pragma once

#include <sys/types.h>

#include <optional>

#include "xroce/fd.h"
#include "xroce/fd_passing.h"

namespace xroce::daemon {

class ConnectionPeer {
 public:
  // The process that opened `connection` (an accepted Unix socket), or nullopt if it is gone.
  static std::optional<ConnectionPeer> of(int connection);

  pid_t pid() const { return pid_; }
  uid_t uid() const { return uid_; }
  gid_t gid() const { return gid_; }
  int pidfd() const { return pidfd_.get(); }
  // A descriptor of its own for the same pidfd (for the memory directory); invalid on failure.
  Fd dup_pidfd() const;
  // True once the process has exited (its pidfd is readable).
  bool exited() const;
  // Whether a datagram that arrived with `sender` was sent by the process that connected.
  bool sent_by_opener(const std::optional<SenderCredentials>& sender) const;

 private:
  ConnectionPeer(pid_t pid, uid_t uid, gid_t gid, Fd pidfd)
      : pid_(pid), uid_(uid), gid_(gid), pidfd_(std::move(pidfd)) {}
  pid_t pid_;
  uid_t uid_;
  gid_t gid_;
  Fd pidfd_;
};

// Sets what every accepted connection inherits from the listening socket: SO_PASSCRED.
int prepare_listening_socket(int listener);

// Whether `mem_fd` and `maps_fd` are process `pid`'s own /proc/<pid>/mem (open for reading and
// writing) and /proc/<pid>/maps, as a process gets by opening /proc/self/mem and /proc/self/maps,
// wherever its /proc is mounted and whatever PID namespace it is in.
bool is_image_of(pid_t pid, int mem_fd, int maps_fd);

// Whether `fd` is an eventfd (what the daemon writes into an rdma_cm event channel).
bool is_eventfd(int fd);

// Whether `fd` is a socket (the daemon writes events only into sockets the client made for the
// purpose, never into whatever else a client might pass).
bool is_socket(int fd);

}  // namespace xroce::daemon
