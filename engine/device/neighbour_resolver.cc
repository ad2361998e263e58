// NeighbourResolver: the socket shell around NeighbourTable (neighbour.h).
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include "device/neighbour.h"

namespace xroce::device {

namespace {
// Large enough for any single reply or notification batch the kernel sends us.
constexpr std::size_t kReceiveBufferBytes = 32 * 1024;
}  // namespace

std::unique_ptr<NeighbourResolver> NeighbourResolver::open(NeighbourOptions options, int& error) {
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) {
    error = errno;
    return nullptr;
  }
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  local.nl_groups = RTMGRP_NEIGH;  // neighbour state changes: the answers to NTF_USE
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
    error = errno;
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<NeighbourResolver>(new NeighbourResolver(fd, options));
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
      if (errno == EINTR || errno == ENOBUFS) continue;  // ENOBUFS: notifications were lost
      break;                                             // EAGAIN: drained
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

}  // namespace xroce::device
