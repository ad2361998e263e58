#include "xroce/control_client.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "xroce/control_message.h"
#include "xroce/fd_passing.h"

namespace xroce::control {

int ControlClient::connect(const std::string& socket_path, int timeout_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) return ENAMETOOLONG;
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  Fd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errno;
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return errno;
  fd_ = std::move(fd);
  return 0;
}

void ControlClient::shutdown() {
  if (fd_.valid()) ::shutdown(fd_.get(), SHUT_RDWR);
}

int ControlClient::exchange(Op op, const void* request, std::size_t request_len,
                            std::span<const int> pass_fds, std::string& reply_body,
                            std::span<Fd> fds) {
  if (!fd_.valid()) return EIO;
  const uint32_t seq = ++seq_;
  const std::string out =
      encode_message(op, seq, 0, std::string_view(static_cast<const char*>(request), request_len));
  if (int err = send_message(fd_.get(), std::as_bytes(std::span(out)), pass_fds)) {
    return err == EAGAIN ? ETIMEDOUT : EIO;
  }
  std::vector<std::byte> in(kMaxMessageBytes);
  for (;;) {
    ReceivedMessage message;
    if (int err = receive_message(fd_.get(), in, message)) return err == EAGAIN ? ETIMEDOUT : EIO;
    if (message.closed) return EIO;  // the daemon is gone
    const auto datagram = std::span<const std::byte>(in.data(), message.bytes);
    const auto header = decode_header(datagram);
    if (!header || message.truncated) return EIO;
    if (header->seq != seq) continue;    // a late answer to a call that timed out
    if (header->status < 0) return EIO;  // not an errno: a reply we cannot make sense of
    if (header->status != 0) return header->status;
    if (message.fds.size() < fds.size()) return EIO;
    for (std::size_t i = 0; i < fds.size(); ++i)
      fds[i] = message.take(i);
    reply_body.assign(body_of(datagram));
    return 0;
  }
}

int ControlClient::call(Op op, const void* request, std::size_t request_len, void* reply,
                        std::size_t reply_len, std::span<const int> pass_fds) {
  std::string body;
  const int status = exchange(op, request, request_len, pass_fds, body, {});
  if (status != 0) return status;
  if (body.size() < reply_len) return EIO;
  if (reply_len != 0) std::memcpy(reply, body.data(), reply_len);
  return 0;
}

int ControlClient::call_fds(Op op, const void* request, std::size_t request_len, void* reply,
                            std::size_t reply_len, std::span<Fd> fds,
                            std::span<const int> pass_fds) {
  std::string body;
  const int status = exchange(op, request, request_len, pass_fds, body, fds);
  if (status == 0 && body.size() < reply_len) {
    for (Fd& fd : fds)
      fd.reset();
    return EIO;
  }
  if (status != 0) return status;
  if (reply_len != 0) std::memcpy(reply, body.data(), reply_len);
  return 0;
}

int ControlClient::call_text(Op op, const void* request, std::size_t request_len,
                             std::string& text) {
  text.clear();
  for (bool first = true;; first = false) {
    std::string body;
    const int status = first ? exchange(op, request, request_len, {}, body, {})
                             : exchange(Op::text_next, nullptr, 0, {}, body, {});
    if (status != 0) return status;
    TextReply head{};
    if (!read_body(body, head) || body.size() - sizeof(head) < head.length) return EIO;
    text.append(body.data() + sizeof(head), head.length);
    if (head.more == 0) return 0;
  }
}

}  // namespace xroce::control
