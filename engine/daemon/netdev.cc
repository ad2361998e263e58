#include "daemon/netdev.h"
#include "xroce/fd.h"

#include <ifaddrs.h>
#include <linux/ethtool.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace xroce::daemon {

namespace {

ifreq request_for(const std::string& name) {
  ifreq req{};
  std::strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
  return req;
}

// Link detected, as ethtool prints it (ETHTOOL_GLINK: the driver's carrier; veth answers it).
// SIOCGIFFLAGS cannot say: IFF_LOWER_UP does not fit its 16-bit flags. A driver without
// get_link answers EOPNOTSUPP; then IFF_RUNNING is the best there is.
bool read_carrier(int sock, const std::string& name, bool running) {
  ethtool_value link{};
  link.cmd = ETHTOOL_GLINK;
  ifreq req = request_for(name);
  req.ifr_data = reinterpret_cast<char*>(&link);
  if (ioctl(sock, SIOCETHTOOL, &req) != 0) return running;
  return link.data != 0;
}

// ETHTOOL_GSET is deprecated but answered by every driver that knows its speed (veth says
// 10000); SPEED_UNKNOWN and errors count as unknown (0).
uint32_t read_speed_mbps(int sock, const std::string& name) {
  ethtool_cmd cmd{};
  cmd.cmd = ETHTOOL_GSET;
  ifreq req = request_for(name);
  req.ifr_data = reinterpret_cast<char*>(&cmd);
  if (ioctl(sock, SIOCETHTOOL, &req) != 0) return 0;
  const uint32_t speed = ethtool_cmd_speed(&cmd);
  return speed == static_cast<uint32_t>(SPEED_UNKNOWN) ? 0 : speed;
}

}  // namespace

wire::Result<device::NetdevState, int> read_netdev(const std::string& name) {
  if (name.empty() || name.size() >= IFNAMSIZ) return wire::Err{ENODEV};
  Fd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (sock.get() < 0) return wire::Err{errno};
  device::NetdevState state;
  state.name = name;
  state.ifindex = static_cast<int>(if_nametoindex(name.c_str()));
  if (state.ifindex == 0) return wire::Err{ENODEV};

  ifreq req = request_for(name);
  if (ioctl(sock.get(), SIOCGIFFLAGS, &req) != 0) return wire::Err{errno};
  state.up = (req.ifr_flags & IFF_UP) != 0;
  state.carrier = read_carrier(sock.get(), name, (req.ifr_flags & IFF_RUNNING) != 0);
  req = request_for(name);
  if (ioctl(sock.get(), SIOCGIFMTU, &req) != 0) return wire::Err{errno};
  state.mtu = static_cast<uint32_t>(req.ifr_mtu);
  req = request_for(name);
  if (ioctl(sock.get(), SIOCGIFHWADDR, &req) != 0) return wire::Err{errno};
  std::memcpy(state.mac.data(), req.ifr_hwaddr.sa_data, state.mac.size());
  state.speed_mbps = read_speed_mbps(sock.get(), name);
  return state;
}

std::vector<device::IpAddress> read_addresses(const std::string& name) {
  std::vector<device::IpAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || name != a->ifa_name) continue;
    if (a->ifa_addr->sa_family == AF_INET) {
      uint8_t bytes[4];
      std::memcpy(bytes, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, 4);
      out.push_back(device::IpAddress::v4_from(bytes));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      uint8_t bytes[16];
      std::memcpy(bytes, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, 16);
      out.push_back(device::IpAddress::v6_from(bytes));
    }
  }
  freeifaddrs(list);
  return out;
}

NetlinkWatcher::NetlinkWatcher() {
  fd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd_ < 0) return;
  sockaddr_nl addr{};
  addr.nl_family = AF_NETLINK;
  addr.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd_);
    fd_ = -1;
  }
}

NetlinkWatcher::~NetlinkWatcher() {
  if (fd_ >= 0) close(fd_);
}

bool NetlinkWatcher::drain() {
  bool any = false;
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n > 0) {
      any = true;
      continue;
    }
    // ENOBUFS means we missed messages: a full re-read is what the caller does anyway.
    if (n < 0 && errno == ENOBUFS) {
      any = true;
      continue;
    }
    return any;
  }
}

}  // namespace xroce::daemon
