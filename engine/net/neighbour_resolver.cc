// NeighbourResolver: the socket shell around NeighbourTable (neighbour.h).
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
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

// A raw ICMPv6 socket that sends neighbour solicitations and reads nothing: every type is
// filtered out, so nothing queues on it. Hop limit 255, as RFC 4861 7.1.1 has receivers check.
// -1 when it cannot be opened (CAP_NET_RAW missing).
int open_icmp6_socket() {
  const int fd = ::socket(AF_INET6, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_ICMPV6);
  if (fd < 0) return -1;
  icmp6_filter filter;
  ICMP6_FILTER_SETBLOCKALL(&filter);
  const int hops = 255;
  if (::setsockopt(fd, IPPROTO_ICMPV6, ICMP6_FILTER, &filter, sizeof filter) != 0 ||
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_MULTICAST_HOPS, &hops, sizeof hops) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The interface's MAC for the source link-layer address option, which a multicast
// solicitation from a unicast source must carry (RFC 4861 4.3).
// Both ioctls ask the namespace of `fd`, not the calling thread's (if_indextoname would).
bool interface_mac(int fd, int ifindex, std::array<std::uint8_t, 6>& mac) {
  ifreq ifr{};
  ifr.ifr_ifindex = ifindex;
  if (::ioctl(fd, SIOCGIFNAME, &ifr) != 0) return false;
  if (::ioctl(fd, SIOCGIFHWADDR, &ifr) != 0) return false;
  std::memcpy(mac.data(), ifr.ifr_hwaddr.sa_data, mac.size());
  return true;
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
  std::unique_ptr<NeighbourResolver> r(new NeighbourResolver(fd, open_icmp6_socket(), options));
  r->table_.set_port_id(local.nl_pid);
  r->table_.load_addresses();
  r->flush_requests();
  return r;
}

NeighbourResolver::~NeighbourResolver() {
  ::close(fd_);
  if (icmp6_fd_ >= 0) ::close(icmp6_fd_);
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
  // After the NTF_USE requests just sent: their INCOMPLETE entries take the answers.
  while (auto solicitation = table_.poll_solicitation())
    send_solicitation(*solicitation);
}

// A multicast neighbour solicitation (RFC 4861 4.3) for s.target to its solicited-node group
// out of s.ifindex, from s.source or, without one, the address the kernel picks for that
// interface (never a tentative one). The kernel fills in the checksum of a raw ICMPv6 socket
// (RFC 3542 3.1). Best effort: a send that fails leaves the kernel's own path and the table's
// next solicitation.
void NeighbourResolver::send_solicitation(const NeighbourSolicitation& s) {
  if (icmp6_fd_ < 0) return;
  std::array<std::uint8_t, 6> mac{};
  if (!interface_mac(icmp6_fd_, s.ifindex, mac)) return;
  struct {
    nd_neighbor_solicit ns;
    nd_opt_hdr option;
    std::array<std::uint8_t, 6> mac;
  } __attribute__((packed)) message{};
  message.ns.nd_ns_type = ND_NEIGHBOR_SOLICIT;
  std::memcpy(&message.ns.nd_ns_target, s.target.bytes.data(), 16);
  message.option.nd_opt_type = ND_OPT_SOURCE_LINKADDR;
  message.option.nd_opt_len = 1;  // in units of 8 bytes
  message.mac = mac;
  sockaddr_in6 to{};
  to.sin6_family = AF_INET6;
  to.sin6_scope_id = static_cast<std::uint32_t>(s.ifindex);
  // ff02::1:ffXX:XXXX, the low 24 bits of the target.
  std::array<std::uint8_t, 16> group{0xff, 0x02};
  group[11] = 0x01;
  group[12] = 0xff;
  std::copy_n(s.target.bytes.begin() + 13, 3, group.begin() + 13);
  std::memcpy(&to.sin6_addr, group.data(), group.size());
  in6_pktinfo info{};
  info.ipi6_ifindex = static_cast<unsigned>(s.ifindex);
  if (s.source) std::memcpy(&info.ipi6_addr, s.source->bytes.data(), 16);
  alignas(cmsghdr) std::array<std::uint8_t, CMSG_SPACE(sizeof(in6_pktinfo))> control{};
  iovec iov{&message, sizeof message};
  msghdr msg{};
  msg.msg_name = &to;
  msg.msg_namelen = sizeof to;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = IPPROTO_IPV6;
  c->cmsg_type = IPV6_PKTINFO;
  c->cmsg_len = CMSG_LEN(sizeof info);
  std::memcpy(CMSG_DATA(c), &info, sizeof info);
  (void)::sendmsg(icmp6_fd_, &msg, MSG_DONTWAIT);
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
