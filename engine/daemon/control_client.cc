#include "daemon/control_client.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

namespace xroce::daemon {

ControlClient::~ControlClient() {
  if (fd_ >= 0) close(fd_);
}

ControlClient::ControlClient(ControlClient&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), seq_(other.seq_) {}

ControlClient& ControlClient::operator=(ControlClient&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    seq_ = other.seq_;
  }
  return *this;
}

int ControlClient::connect(const std::string& socket_path, int timeout_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) return ENAMETOOLONG;
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return err;
  }
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
  return 0;
}

namespace {

// Receives one datagram; stores up to max_fds passed descriptors in fds and closes the rest.
ssize_t receive_reply(int fd, std::vector<char>& in, int* fds, int max_fds) {
  for (int i = 0; i < max_fds; ++i)
    fds[i] = -1;
  iovec iov{in.data(), in.size()};
  alignas(cmsghdr) char control_buf[CMSG_SPACE(sizeof(int) * control::kMaxReplyFds)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control_buf;
  msg.msg_controllen = sizeof(control_buf);
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return n;
  int kept = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int passed;
      std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (kept < max_fds) {
        fds[kept++] = passed;
      } else {
        close(passed);
      }
    }
  }
  return n;
}

void close_all(int* fds, int count) {
  for (int i = 0; i < count; ++i) {
    if (fds[i] >= 0) close(fds[i]);
    fds[i] = -1;
  }
}

}  // namespace

int ControlClient::exchange(control::Op op, const void* request, std::size_t request_len,
                            int pass_fd, std::string& reply_body, int* fds, int max_fds) {
  if (fd_ < 0) return EIO;
  control::Header header;
  header.op = op;
  header.seq = ++seq_;
  std::vector<char> out(sizeof(header) + request_len);
  std::memcpy(out.data(), &header, sizeof(header));
  if (request_len != 0) std::memcpy(out.data() + sizeof(header), request, request_len);

  iovec iov{out.data(), out.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control_buf[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control_buf;
    msg.msg_controllen = sizeof(control_buf);
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno == EAGAIN ? ETIMEDOUT : EIO;

  std::vector<char> in(control::kMaxMessageBytes);
  for (;;) {
    int scratch[control::kMaxReplyFds];
    int* keep = fds != nullptr ? fds : scratch;
    const int keep_count = fds != nullptr ? max_fds : 0;
    n = receive_reply(fd_, in, keep, keep_count);
    if (n < 0) return errno == EAGAIN ? ETIMEDOUT : EIO;
    if (n == 0) return EIO;  // the daemon is gone
    control::Header reply{};
    if (static_cast<std::size_t>(n) >= sizeof(reply)) std::memcpy(&reply, in.data(), sizeof(reply));
    const bool ours = static_cast<std::size_t>(n) >= sizeof(control::Header) &&
                      reply.magic == control::kMagic && reply.version == control::kVersion &&
                      reply.seq == header.seq;
    if (!ours || reply.status != 0) close_all(keep, keep_count);
    if (static_cast<std::size_t>(n) < sizeof(control::Header)) return EIO;
    if (reply.magic != control::kMagic || reply.version != control::kVersion) return EIO;
    if (reply.seq != header.seq) continue;  // a late answer to a call that timed out
    if (reply.status != 0) return reply.status;
    reply_body.assign(in.data() + sizeof(reply), static_cast<std::size_t>(n) - sizeof(reply));
    return 0;
  }
}

int ControlClient::call(control::Op op, const void* request, std::size_t request_len, void* reply,
                        std::size_t reply_len, int pass_fd) {
  std::string body;
  const int status = exchange(op, request, request_len, pass_fd, body);
  if (status != 0) return status;
  if (body.size() < reply_len) return EIO;
  if (reply_len != 0) std::memcpy(reply, body.data(), reply_len);
  return 0;
}

int ControlClient::call_fds(control::Op op, const void* request, std::size_t request_len,
                            void* reply, std::size_t reply_len, int* fds, int max_fds) {
  std::string body;
  const int status = exchange(op, request, request_len, -1, body, fds, max_fds);
  if (status != 0) return status;
  if (body.size() < reply_len) {
    close_all(fds, max_fds);
    return EIO;
  }
  if (reply_len != 0) std::memcpy(reply, body.data(), reply_len);
  return 0;
}

int ControlClient::call_text(control::Op op, const void* request, std::size_t request_len,
                             std::string& text) {
  std::string body;
  const int status = exchange(op, request, request_len, -1, body);
  if (status != 0) return status;
  control::TextReply head{};
  if (body.size() < sizeof(head)) return EIO;
  std::memcpy(&head, body.data(), sizeof(head));
  if (body.size() - sizeof(head) < head.length) return EIO;
  text.assign(body.data() + sizeof(head), head.length);
  return 0;
}

}  // namespace xroce::daemon
