#include "xroce/fd_passing.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace xroce {

namespace {

// Room for both control messages the kernel may deliver on one datagram.
constexpr std::size_t kControlBytes =
    CMSG_SPACE(sizeof(int) * kMaxPassedFds) + CMSG_SPACE(sizeof(ucred));

// Takes ownership of every descriptor in one SCM_RIGHTS message.
void take_rights(const cmsghdr& c, std::vector<Fd>& fds) {
  const std::size_t count = (c.cmsg_len - CMSG_LEN(0)) / sizeof(int);
  for (std::size_t i = 0; i < count; ++i) {
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(&c) + i * sizeof(int), sizeof(int));
    fds.emplace_back(fd);
  }
}

}  // namespace

int receive_message(int socket, std::span<std::byte> buffer, ReceivedMessage& out, int flags) {
  out = ReceivedMessage{};
  iovec iov{buffer.data(), buffer.size()};
  alignas(cmsghdr) char control[kControlBytes] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(socket, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  // Descriptors first, whatever else is wrong with the message: from here on they are owned.
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET) continue;
    if (c->cmsg_type == SCM_RIGHTS) {
      take_rights(*c, out.fds);
    } else if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(ucred))) {
      ucred cred{};
      std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
      out.sender = SenderCredentials{cred.pid, cred.uid, cred.gid};
    }
  }
  out.bytes = static_cast<std::size_t>(n);
  out.closed = n == 0;
  out.truncated = (msg.msg_flags & MSG_TRUNC) != 0;
  out.fds_truncated = (msg.msg_flags & MSG_CTRUNC) != 0 || out.fds.size() > kMaxPassedFds;
  return 0;
}

int send_message(int socket, std::span<const std::byte> data, std::span<const int> fds, int flags) {
  if (fds.size() > kMaxPassedFds) return EINVAL;
  iovec iov{const_cast<std::byte*>(data.data()), data.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)] = {};
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = sendmsg(socket, &msg, flags | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n < 0 ? errno : 0;
}

}  // namespace xroce
