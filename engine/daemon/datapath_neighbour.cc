#include "daemon/datapath_neighbour.h"
#include "xroce/fd.h"

#include <arpa/inet.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>

namespace xroce::daemon {
namespace {

constexpr std::uint16_t kDiscardPort = 9;
constexpr std::uint16_t kUsableStates =
    NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;

bool send_dump_request(int fd, int family) {
  struct {
    nlmsghdr nh;
    ndmsg nd;
  } req{};
  req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(ndmsg));
  req.nh.nlmsg_type = RTM_GETNEIGH;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.nh.nlmsg_seq = 1;
  req.nd.ndm_family = static_cast<std::uint8_t>(family);
  return send(fd, &req, req.nh.nlmsg_len, 0) == static_cast<ssize_t>(req.nh.nlmsg_len);
}

// One neighbour message: the MAC if it is for (ifindex, ip) and usable.
std::optional<wire::MacAddr> match(const nlmsghdr* nh, int ifindex, const std::uint8_t* ip,
                                   std::size_t ip_len) {
  const auto* nd = static_cast<const ndmsg*>(NLMSG_DATA(nh));
  if (nd->ndm_ifindex != ifindex || (nd->ndm_state & kUsableStates) == 0) return std::nullopt;
  const std::uint8_t* dst = nullptr;
  std::optional<wire::MacAddr> mac;
  int len = static_cast<int>(RTM_PAYLOAD(nh));
  for (const rtattr* a = RTM_RTA(nd); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    if (a->rta_type == NDA_DST && RTA_PAYLOAD(a) == ip_len)
      dst = static_cast<const std::uint8_t*>(RTA_DATA(a));
    if (a->rta_type == NDA_LLADDR && RTA_PAYLOAD(a) == 6) {
      mac.emplace();
      std::memcpy(mac->data(), RTA_DATA(a), 6);
    }
  }
  if (dst == nullptr || std::memcmp(dst, ip, ip_len) != 0) return std::nullopt;
  return mac;
}

}  // namespace

std::optional<wire::MacAddr> lookup_neighbour(int ifindex, const wire::IpAddr& ip) {
  Fd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (fd.get() < 0) return std::nullopt;
  const bool v4 = ip.is_v4();
  const std::uint8_t* want = v4 ? ip.bytes.data() + 12 : ip.bytes.data();
  const std::size_t want_len = v4 ? 4 : 16;
  if (!send_dump_request(fd.get(), v4 ? AF_INET : AF_INET6)) return std::nullopt;
  std::optional<wire::MacAddr> found;
  alignas(nlmsghdr) std::array<char, 16384> buf;
  for (;;) {
    const ssize_t n = recv(fd.get(), buf.data(), buf.size(), 0);
    if (n <= 0) return found;
    int left = static_cast<int>(n);
    for (const auto* nh = reinterpret_cast<const nlmsghdr*>(buf.data()); NLMSG_OK(nh, left);
         nh = NLMSG_NEXT(nh, left)) {
      if (nh->nlmsg_type == NLMSG_DONE || nh->nlmsg_type == NLMSG_ERROR) return found;
      if (nh->nlmsg_type != RTM_NEWNEIGH || found) continue;
      found = match(nh, ifindex, want, want_len);
    }
  }
}

bool solicit_neighbour(int ifindex, const wire::IpAddr& ip) {
  const bool v4 = ip.is_v4();
  Fd fd(socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return false;
  (void)setsockopt(fd.get(), SOL_SOCKET, SO_BINDTOIFINDEX, &ifindex, sizeof(ifindex));
  sockaddr_storage to{};
  socklen_t to_len = 0;
  if (v4) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&to);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(kDiscardPort);
    std::memcpy(&sin->sin_addr, ip.bytes.data() + 12, 4);
    to_len = sizeof(sockaddr_in);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&to);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(kDiscardPort);
    std::memcpy(&sin6->sin6_addr, ip.bytes.data(), 16);
    sin6->sin6_scope_id = static_cast<std::uint32_t>(ifindex);
    to_len = sizeof(sockaddr_in6);
  }
  return sendto(fd.get(), nullptr, 0, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), to_len) == 0;
}

}  // namespace xroce::daemon
