#include "validate_channel.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace xroce::cli::validate {

namespace {

constexpr std::size_t kMaxLineBytes = 1 << 20;

}  // namespace

LineChannel::~LineChannel() {
  if (fd_ >= 0) close(fd_);
}

LineChannel::LineChannel(LineChannel&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), pending_(std::move(other.pending_)) {}

LineChannel& LineChannel::operator=(LineChannel&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    pending_ = std::move(other.pending_);
  }
  return *this;
}

int LineChannel::connect(const std::string& host, int port, std::chrono::milliseconds deadline,
                         std::string& error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found)) {
    error = fmt::format("cannot resolve {}: {}", host, gai_strerror(rc));
    return EINVAL;
  }
  fd_ = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int err = fd_ < 0 ? errno : 0;
  if (err == 0 && ::connect(fd_, found->ai_addr, found->ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd_, POLLOUT, 0};
      err = poll(&p, 1, static_cast<int>(deadline.count())) == 1 ? 0 : ETIMEDOUT;
      socklen_t len = sizeof err;
      if (err == 0) getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    }
  }
  freeaddrinfo(found);
  if (err != 0) {
    error = fmt::format("{}:{}: {}", host, port, std::strerror(err));
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return err;
  }
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  return 0;
}

bool LineChannel::send(const nlohmann::json& message) {
  const std::string line = message.dump() + "\n";
  std::size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n = ::send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

bool LineChannel::fill() {
  char buf[4096];
  for (;;) {
    const ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      pending_.append(buf, static_cast<std::size_t>(n));
      if (pending_.size() > kMaxLineBytes) return false;
      continue;
    }
    if (n == 0) return false;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  }
}

std::optional<std::string> LineChannel::take_line() {
  const auto nl = pending_.find('\n');
  if (nl == std::string::npos) return std::nullopt;
  std::string line = pending_.substr(0, nl);
  pending_.erase(0, nl + 1);
  return line;
}

std::optional<nlohmann::json> LineChannel::receive(std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    if (auto line = take_line()) {
      auto j = nlohmann::json::parse(*line, nullptr, false);
      if (j.is_discarded()) return std::nullopt;
      return j;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
    if (!fill()) {
      if (auto line = take_line()) {
        auto j = nlohmann::json::parse(*line, nullptr, false);
        if (!j.is_discarded()) return j;
      }
      return std::nullopt;
    }
  }
}

std::optional<nlohmann::json> LineChannel::call(const nlohmann::json& request,
                                                std::chrono::milliseconds deadline) {
  if (!send(request)) return std::nullopt;
  return receive(deadline);
}

}  // namespace xroce::cli::validate
