#include "validate_probe.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

namespace xroce::cli::validate {

namespace {

constexpr std::size_t kMaxDatagram = 65536;

// DF on, no path-MTU cache (a probe larger than the path is lost, not refused), and the TOS /
// traffic class of received datagrams delivered as ancillary data.
bool set_probe_options(int fd, bool ipv6) {
  const int one = 1;
  if (ipv6) {
    const int probe = IPV6_PMTUDISC_PROBE;
    return setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &probe, sizeof probe) == 0 &&
           setsockopt(fd, IPPROTO_IPV6, IPV6_DONTFRAG, &one, sizeof one) == 0 &&
           setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof one) == 0 &&
           // A dual-stack responder also receives IPv4 (as mapped addresses).
           setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof one) == 0;
  }
  const int probe = IP_PMTUDISC_PROBE;
  return setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &probe, sizeof probe) == 0 &&
         setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof one) == 0;
}

bool set_tos(int fd, bool ipv6, int tos) {
  if (ipv6) return setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof tos) == 0;
  return setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos) == 0;
}

bool is_mapped_v4(const sockaddr_storage& a) {
  if (a.ss_family != AF_INET6) return false;
  const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&a);
  return IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr);
}

struct Datagram {
  std::string data;
  int tos = -1;
  sockaddr_storage from{};
  socklen_t from_len = 0;
};

// One datagram with its TOS / traffic class; nullopt on error.
std::optional<Datagram> receive(int fd) {
  std::vector<char> buf(kMaxDatagram);
  char control[256];
  Datagram d;
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_name = &d.from;
  msg.msg_namelen = sizeof d.from;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
  if (n < 0) return std::nullopt;
  d.data.assign(buf.data(), static_cast<std::size_t>(n));
  d.from_len = msg.msg_namelen;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
      d.tos = *reinterpret_cast<unsigned char*>(CMSG_DATA(c));
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
      int tclass = 0;
      std::memcpy(&tclass, CMSG_DATA(c), sizeof tclass);
      d.tos = tclass;
    }
  }
  return d;
}

std::string padded(std::string head, int payload_bytes) {
  if (static_cast<int>(head.size()) < payload_bytes)
    head.append(static_cast<std::size_t>(payload_bytes) - head.size(), '.');
  return head;
}

// The number after "key=" in a probe or reply line, or -1.
long field(const std::string& text, const char* key) {
  const std::string k = std::string(" ") + key + "=";
  const auto at = text.find(k);
  if (at == std::string::npos) return -1;
  return std::strtol(text.c_str() + at + k.size(), nullptr, 10);
}

}  // namespace

ProbeClient::~ProbeClient() {
  if (fd_ >= 0) close(fd_);
}

int ProbeClient::open(const std::string& peer, int port, std::string& error) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(peer.c_str(), service.c_str(), &hints, &found); rc != 0) {
    error = fmt::format("cannot resolve {}: {}", peer, gai_strerror(rc));
    return EINVAL;
  }
  ipv6_ = found->ai_family == AF_INET6;
  fd_ = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const bool ok = fd_ >= 0 && set_probe_options(fd_, ipv6_) &&
                  connect(fd_, found->ai_addr, found->ai_addrlen) == 0;
  const int err = errno;
  freeaddrinfo(found);
  if (!ok) {
    error = fmt::format("probe socket to {}: {}", peer, std::strerror(err));
    return err;
  }
  return 0;
}

std::string ProbeClient::local_address() const {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return {};
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&a)->sin_addr, text, sizeof text);
  } else {
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr, text, sizeof text);
  }
  return text;
}

int ProbeClient::known_path_mtu() const {
  int mtu = 0;
  socklen_t len = sizeof mtu;
  if (ipv6_) {
    getsockopt(fd_, IPPROTO_IPV6, IPV6_MTU, &mtu, &len);
  } else {
    getsockopt(fd_, IPPROTO_IP, IP_MTU, &mtu, &len);
  }
  return mtu;
}

std::optional<ProbeAnswer> ProbeClient::probe(int ip_bytes, int tos, int reply_ip_bytes,
                                              int reply_tos, int tries, int timeout_ms,
                                              std::string& error) {
  const int headers = ip_header_bytes(ipv6_) + kUdpHeaderBytes;
  if (!set_tos(fd_, ipv6_, tos)) {
    error = fmt::format("cannot set TOS {:#x}: {}", tos, std::strerror(errno));
    return std::nullopt;
  }
  for (int attempt = 0; attempt < tries; ++attempt) {
    const std::uint32_t seq = ++seq_;
    const std::string message =
        padded(fmt::format("XRV1 probe seq={} reply_bytes={} reply_tos={}\n", seq, reply_ip_bytes,
                           reply_tos),
               ip_bytes - headers);
    if (send(fd_, message.data(), message.size(), 0) < 0) {
      // EMSGSIZE: larger than the local interface allows.
      error = fmt::format("{}-byte probe not sent: {}", ip_bytes, std::strerror(errno));
      return std::nullopt;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const auto d = receive(fd_);
      if (!d || d->data.rfind("XRV1 reply ", 0) != 0 || field(d->data, "seq") != seq) continue;
      ProbeAnswer a;
      a.peer_got_bytes = static_cast<int>(field(d->data, "got_bytes"));
      a.peer_got_tos = static_cast<int>(field(d->data, "got_tos"));
      a.reply_bytes = static_cast<int>(d->data.size()) + headers;
      a.reply_tos = d->tos;
      return a;
    }
  }
  return std::nullopt;
}

int open_probe_responder(const std::string& addr, int port, std::string& error) {
  sockaddr_storage a{};
  socklen_t len = 0;
  in_addr v4{};
  if (!addr.empty() && inet_pton(AF_INET, addr.c_str(), &v4) == 1) {
    auto* s = reinterpret_cast<sockaddr_in*>(&a);
    s->sin_family = AF_INET;
    s->sin_port = htons(static_cast<std::uint16_t>(port));
    s->sin_addr = v4;
    len = sizeof *s;
  } else {
    auto* s = reinterpret_cast<sockaddr_in6*>(&a);
    s->sin6_family = AF_INET6;
    s->sin6_port = htons(static_cast<std::uint16_t>(port));
    if (!addr.empty() && inet_pton(AF_INET6, addr.c_str(), &s->sin6_addr) != 1) {
      error = fmt::format("bad listen address '{}'", addr);
      return -1;
    }
    len = sizeof *s;
  }
  const bool ipv6 = a.ss_family == AF_INET6;
  const int fd = socket(a.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  const int off = 0;
  if (fd < 0 || (ipv6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) != 0) ||
      !set_probe_options(fd, ipv6) || bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    error = fmt::format("probe socket on port {}: {}", port, std::strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

bool answer_one_probe(int fd) {
  const auto d = receive(fd);
  if (!d || d->data.rfind("XRV1 probe ", 0) != 0) return false;
  // The reply goes back the way the probe came: IPv4 (possibly as a mapped address on a
  // dual-stack socket) or IPv6.
  const bool v6_peer = d->from.ss_family == AF_INET6 && !is_mapped_v4(d->from);
  const int headers = ip_header_bytes(v6_peer) + kUdpHeaderBytes;
  const long reply_bytes = field(d->data, "reply_bytes");
  const long reply_tos = field(d->data, "reply_tos");
  const long seq = field(d->data, "seq");
  if (seq < 0 || reply_bytes < headers + 64 || reply_bytes > 65535 || reply_tos < 0 ||
      reply_tos > 255) {
    return false;
  }
  int local_family = 0;
  socklen_t flen = sizeof local_family;
  getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &local_family, &flen);
  const int tos = static_cast<int>(reply_tos);
  // On a dual-stack socket, IPv4 traffic takes IP_TOS; IPv6 traffic IPV6_TCLASS.
  if (local_family == AF_INET6 && v6_peer) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof tos);
  } else {
    setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
  }
  const int got_bytes = static_cast<int>(d->data.size()) + headers;
  const std::string reply =
      padded(fmt::format("XRV1 reply seq={} got_bytes={} got_tos={}\n", seq, got_bytes, d->tos),
             static_cast<int>(reply_bytes) - headers);
  (void)!sendto(fd, reply.data(), reply.size(), 0, reinterpret_cast<const sockaddr*>(&d->from),
                d->from_len);
  return true;
}

}  // namespace xroce::cli::validate
