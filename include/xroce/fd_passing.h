// Datagrams that carry file descriptors (SCM_RIGHTS) and the sender's credentials
// (SCM_CREDENTIALS) over Unix sockets: the one place in xroce that builds or parses socket
// control messages. The daemon, the provider, the CLI, the benchmarks and the tests use it.
//
// Ownership: every descriptor that arrives is owned by the ReceivedMessage, so whatever the
// receiver does not take out of it is closed, whatever the message was (too short, a bad
// header, more descriptors than it wanted). A message is meant to carry at most kMaxPassedFds:
// the receive buffer has room for a few more, which the kernel closes beyond it, and a message
// that brought more than kMaxPassedFds says so (fds_truncated). Received descriptors are
// close-on-exec.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <span>
#include <vector>

#include "xroce/fd.h"

namespace xroce {

// The most descriptors one message carries in xroce's protocols.
inline constexpr std::size_t kMaxPassedFds = 4;

// Who sent a datagram, as the kernel vouches for it (SCM_CREDENTIALS, with SO_PASSCRED on the
// receiving socket): the sending process's pid in the receiver's pid namespace (0 when it has
// exited or is not visible there), and its real uid and gid.
struct SenderCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

struct ReceivedMessage {
  std::size_t bytes = 0;       // the datagram's length; 0 with closed: the peer closed
  bool closed = false;         // orderly shutdown by the peer
  bool truncated = false;      // the datagram was longer than the buffer (MSG_TRUNC)
  bool fds_truncated = false;  // more descriptors came than kMaxPassedFds
  std::vector<Fd> fds;         // in the order they were sent
  std::optional<SenderCredentials> sender;

  // Takes descriptor `index` (an invalid Fd if there is none); the rest stay owned here.
  Fd take(std::size_t index) { return index < fds.size() ? std::move(fds[index]) : Fd(); }
};

// Receives one datagram into `buffer`. 0, or an errno (EAGAIN on a non-blocking socket with
// nothing pending); EINTR is retried. `out` is reset first.
int receive_message(int socket, std::span<std::byte> buffer, ReceivedMessage& out, int flags = 0);

// Sends one datagram, with copies of `fds` for the receiver (the caller keeps its own). 0 or an
// errno; EINTR is retried. MSG_NOSIGNAL is always added.
int send_message(int socket, std::span<const std::byte> data, std::span<const int> fds = {},
                 int flags = 0);

// The bytes of any object, for send_message and receive_message.
template <typename T>
std::span<const std::byte> bytes_of_object(const T& value) {
  return std::as_bytes(std::span<const T, 1>(&value, 1));
}

}  // namespace xroce
