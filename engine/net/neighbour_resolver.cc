// NeighbourResolver: the socket shell around NeighbourTable (neighbour.h).
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <fstream>

#include "net/neighbour.h"

namespace xroce::net {
namespace {

// Large enough for any single reply, dump part or notification batch the kernel sends us.
constexpr std::size_t kReceiveBufferBytes = 32 * 1024;
// Notifications queue here while the owner is busy; a burst beyond it is ENOBUFS (handled).
constexpr int kSocketBufferBytes = 1 << 20;
constexpr std::uint8_t kDefaultHopLimit = 64;

std::uint64_t steady_now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::uint8_t read_hop_limit(const char* path) {
  std::ifstream in(path);
  unsigned value = 0;
  if (!(in >> value) || value == 0 || value > 255) return kDefaultHopLimit;
  return static_cast<std::uint8_t>(value);
}

}  // namespace

std::uint8_t namespace_hop_limit(bool v4) {
  return v4 ? read_hop_limit("/proc/sys/net/ipv4/ip_default_ttl")
            : read_hop_limit("/proc/sys/net/ipv6/conf/default/hop_limit");
}

std::unique_ptr<NeighbourResolver> NeighbourResolver::open(NeighbourOptions options, int& error) {
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) {
    error = errno;
    return nullptr;
  }
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kSocketBufferBytes, sizeof kSocketBufferBytes);
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  // Neighbour state changes (the answers to NTF_USE, new MACs), routes and addresses.
  local.nl_groups = RTMGRP_NEIGH | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE | RTMGRP_IPV4_IFADDR |
                    RTMGRP_IPV6_IFADDR;
  socklen_t len = sizeof local;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    error = errno;
    ::close(fd);
    return nullptr;
  }
  options.hop_limit_v4 = namespace_hop_limit(true);
  options.hop_limit_v6 = namespace_hop_limit(false);
  std::unique_ptr<NeighbourResolver> r(new NeighbourResolver(fd, options));
  r->table_.set_port_id(local.nl_pid);
  r->table_.load_addresses();
  r->flush_requests();
  return r;
}

NeighbourResolver::~NeighbourResolver() {
  ::close(fd_);
}

NeighbourAnswer NeighbourResolver::resolve(std::uint64_t now_ns, int ifindex,
                                           const wire::IpAddr& dst) {
  NeighbourAnswer a = table_.resolve(now_ns, ifindex, dst);
  flush_requests();
  return a;
}

void NeighbourResolver::flush_requests() {
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  while (auto request = table_.poll_request()) {
    // A request the socket refuses (EAGAIN, ENOBUFS) is dropped: the table re-asks after its
    // retry interval, so loss here only delays the answer.
    (void)::sendto(fd_, request->data(), request->size(), 0, reinterpret_cast<sockaddr*>(&kernel),
                   sizeof kernel);
  }
}

void NeighbourResolver::on_readable(std::uint64_t now_ns) {
  std::array<std::uint8_t, kReceiveBufferBytes> buf;
  for (;;) {
    const ssize_t n = ::recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == ENOBUFS) {  // notifications were lost: nothing cached can be trusted
        table_.handle_lost_notifications(now_ns);
        continue;
      }
      break;  // EAGAIN: drained
    }
    if (n == 0) break;
    for (const NlMessage& m : decode_netlink({buf.data(), static_cast<std::size_t>(n)}))
      table_.handle_message(now_ns, m);
  }
  flush_requests();
}

void NeighbourResolver::on_timeout(std::uint64_t now_ns) {
  table_.handle_timeout(now_ns);
  flush_requests();
}

NeighbourAnswer NeighbourResolver::resolve_blocking(int ifindex, const wire::IpAddr& dst,
                                                    std::uint64_t timeout_ns) {
  const std::uint64_t until = steady_now_ns() + timeout_ns;
  NeighbourAnswer a = resolve(steady_now_ns(), ifindex, dst);
  while (a.state == NeighbourState::kPending) {
    const std::uint64_t now = steady_now_ns();
    if (now >= until) break;
    std::uint64_t wake = until;
    if (const auto d = next_deadline()) wake = std::clamp(*d, now, until);
    pollfd p{fd_, POLLIN, 0};
    const int ms = static_cast<int>((wake - now + 999'999) / 1'000'000);
    if (::poll(&p, 1, ms) > 0) on_readable(steady_now_ns());
    if (const auto d = next_deadline(); d && *d <= steady_now_ns()) on_timeout(steady_now_ns());
    while (poll_answer()) {
    }
    a = resolve(steady_now_ns(), ifindex, dst);
  }
  return a;
}

}  // namespace xroce::net
