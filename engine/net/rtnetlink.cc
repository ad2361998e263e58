#include "net/rtnetlink.h"

#include <linux/if_addr.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstring>

namespace xroce::net {
namespace {

std::span<const std::uint8_t> addr_bytes(const wire::IpAddr& a) {
  return a.is_v4() ? std::span<const std::uint8_t>(a.bytes).subspan(12)
                   : std::span<const std::uint8_t>(a.bytes);
}
std::uint8_t family_of(const wire::IpAddr& a) {
  return a.is_v4() ? AF_INET : AF_INET6;
}

std::optional<wire::IpAddr> ip_from(std::uint8_t family, std::span<const std::uint8_t> b) {
  wire::IpAddr a;
  if (family == AF_INET && b.size() == 4) {
    a.bytes[10] = a.bytes[11] = 0xff;
    std::memcpy(a.bytes.data() + 12, b.data(), 4);
    return a;
  }
  if (family == AF_INET6 && b.size() == 16) {
    std::memcpy(a.bytes.data(), b.data(), 16);
    return a;
  }
  return std::nullopt;
}

// Builds one netlink message: header, fixed body, then attributes appended with attr().
class NlWriter {
 public:
  NlWriter(std::uint16_t type, std::uint16_t flags, std::uint32_t seq, const void* body,
           std::size_t body_len) {
    nlmsghdr h{};
    h.nlmsg_type = type;
    h.nlmsg_flags = flags;
    h.nlmsg_seq = seq;
    append(&h, sizeof h);
    append(body, body_len);
  }
  void attr(std::uint16_t type, std::span<const std::uint8_t> payload) {
    rtattr a{};
    a.rta_type = type;
    a.rta_len = static_cast<std::uint16_t>(RTA_LENGTH(payload.size()));
    append(&a, sizeof a);
    append(payload.data(), payload.size());
  }
  std::vector<std::uint8_t> finish() {
    const auto len = static_cast<std::uint32_t>(buf_.size());
    std::memcpy(buf_.data() + offsetof(nlmsghdr, nlmsg_len), &len, sizeof len);
    return std::move(buf_);
  }

 private:
  void append(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
    buf_.resize(NLMSG_ALIGN(buf_.size()), 0);
  }
  std::vector<std::uint8_t> buf_;
};

template <typename T>
std::span<const std::uint8_t> bytes_of(const T& v) {
  return {reinterpret_cast<const std::uint8_t*>(&v), sizeof v};
}

// Calls f(type, payload) for each attribute in `attrs`, stopping at a malformed one.
template <typename F>
void for_each_attr(std::span<const std::uint8_t> attrs, F&& f) {
  while (attrs.size() >= sizeof(rtattr)) {
    rtattr a;
    std::memcpy(&a, attrs.data(), sizeof a);
    if (a.rta_len < sizeof a || a.rta_len > attrs.size()) return;
    f(static_cast<std::uint16_t>(a.rta_type & NLA_TYPE_MASK),
      attrs.subspan(RTA_LENGTH(0), a.rta_len - RTA_LENGTH(0)));
    const std::size_t step = RTA_ALIGN(a.rta_len);
    if (step >= attrs.size()) return;
    attrs = attrs.subspan(step);
  }
}

std::optional<std::uint32_t> u32_of(std::span<const std::uint8_t> p) {
  if (p.size() != 4) return std::nullopt;
  std::uint32_t v;
  std::memcpy(&v, p.data(), 4);
  return v;
}

std::optional<NlMessage> decode_route(const nlmsghdr& h, std::span<const std::uint8_t> body) {
  if (body.size() < sizeof(rtmsg)) return std::nullopt;
  rtmsg rt;
  std::memcpy(&rt, body.data(), sizeof rt);
  if (rt.rtm_family != AF_INET && rt.rtm_family != AF_INET6) return std::nullopt;
  NlRoute r;
  r.seq = h.nlmsg_seq;
  r.pid = h.nlmsg_pid;
  r.deleted = h.nlmsg_type == RTM_DELROUTE;
  r.type = rt.rtm_type;
  for_each_attr(body.subspan(NLMSG_ALIGN(sizeof rt)), [&](std::uint16_t type, auto p) {
    if (type == RTA_OIF) {
      if (auto oif = u32_of(p)) r.oif = static_cast<int>(*oif);
    } else if (type == RTA_GATEWAY) {
      r.gateway = ip_from(rt.rtm_family, p);
    } else if (type == RTA_VIA && p.size() >= sizeof(rtvia)) {
      // An IPv4 route through an IPv6 next hop (RFC 5549): rtvia is a family and an address.
      r.gateway = ip_from(static_cast<std::uint8_t>(p[0]), p.subspan(2));
    } else if (type == RTA_PREFSRC) {
      r.prefsrc = ip_from(rt.rtm_family, p);
    } else if (type == RTA_METRICS) {
      for_each_attr(p, [&](std::uint16_t metric, auto value) {
        const auto v = u32_of(value);
        if (metric == RTAX_HOPLIMIT && v && *v > 0 && *v <= 255)
          r.hop_limit = static_cast<std::uint8_t>(*v);
      });
    }
  });
  return r;
}

std::optional<NlMessage> decode_neigh(const nlmsghdr& h, std::span<const std::uint8_t> body) {
  if (body.size() < sizeof(ndmsg)) return std::nullopt;
  ndmsg nd;
  std::memcpy(&nd, body.data(), sizeof nd);
  if (nd.ndm_family != AF_INET && nd.ndm_family != AF_INET6) return std::nullopt;
  NlNeigh n;
  n.seq = h.nlmsg_seq;
  n.pid = h.nlmsg_pid;
  n.deleted = h.nlmsg_type == RTM_DELNEIGH;
  n.ifindex = nd.ndm_ifindex;
  n.nud_state = nd.ndm_state;
  bool have_dst = false;
  for_each_attr(body.subspan(NLMSG_ALIGN(sizeof nd)), [&](std::uint16_t type, auto p) {
    if (type == NDA_DST) {
      if (auto a = ip_from(nd.ndm_family, p)) {
        n.addr = *a;
        have_dst = true;
      }
    } else if (type == NDA_LLADDR && p.size() == 6) {
      wire::MacAddr mac;
      std::memcpy(mac.data(), p.data(), 6);
      n.lladdr = mac;
    }
  });
  if (!have_dst) return std::nullopt;
  return n;
}

std::optional<NlMessage> decode_addr(const nlmsghdr& h, std::span<const std::uint8_t> body) {
  if (body.size() < sizeof(ifaddrmsg)) return std::nullopt;
  ifaddrmsg ifa;
  std::memcpy(&ifa, body.data(), sizeof ifa);
  if (ifa.ifa_family != AF_INET && ifa.ifa_family != AF_INET6) return std::nullopt;
  NlAddr a;
  a.seq = h.nlmsg_seq;
  a.pid = h.nlmsg_pid;
  a.deleted = h.nlmsg_type == RTM_DELADDR;
  a.ifindex = static_cast<int>(ifa.ifa_index);
  std::optional<wire::IpAddr> local, address;
  for_each_attr(body.subspan(NLMSG_ALIGN(sizeof ifa)), [&](std::uint16_t type, auto p) {
    if (type == IFA_LOCAL) local = ip_from(ifa.ifa_family, p);
    if (type == IFA_ADDRESS) address = ip_from(ifa.ifa_family, p);
  });
  // On a point-to-point IPv4 link IFA_ADDRESS is the peer's; IFA_LOCAL is always ours.
  if (local) {
    a.addr = *local;
  } else if (address) {
    a.addr = *address;
  } else {
    return std::nullopt;
  }
  return a;
}

std::uint32_t seq_of(const NlMessage& m) {
  return std::visit([](const auto& v) { return v.seq; }, m);
}
std::uint32_t pid_of(const NlMessage& m) {
  return std::visit([](const auto& v) { return v.pid; }, m);
}

}  // namespace

std::vector<std::uint8_t> encode_get_route(std::uint32_t seq, int ifindex,
                                           const wire::IpAddr& dst) {
  rtmsg rt{};
  rt.rtm_family = family_of(dst);
  rt.rtm_dst_len = dst.is_v4() ? 32 : 128;
  NlWriter w(RTM_GETROUTE, NLM_F_REQUEST, seq, &rt, sizeof rt);
  w.attr(RTA_DST, addr_bytes(dst));
  if (ifindex != 0) {
    const auto oif = static_cast<std::uint32_t>(ifindex);
    w.attr(RTA_OIF, bytes_of(oif));
  }
  return w.finish();
}

std::vector<std::uint8_t> encode_get_neigh(std::uint32_t seq, int ifindex,
                                           const wire::IpAddr& addr) {
  ndmsg nd{};
  nd.ndm_family = family_of(addr);
  nd.ndm_ifindex = ifindex;
  NlWriter w(RTM_GETNEIGH, NLM_F_REQUEST, seq, &nd, sizeof nd);
  w.attr(NDA_DST, addr_bytes(addr));
  return w.finish();
}

std::vector<std::uint8_t> encode_use_neigh(std::uint32_t seq, int ifindex,
                                           const wire::IpAddr& addr) {
  ndmsg nd{};
  nd.ndm_family = family_of(addr);
  nd.ndm_ifindex = ifindex;
  nd.ndm_state = NUD_NONE;
  nd.ndm_flags = NTF_USE;  // neigh_event_send(): start ARP / ND as a packet would
  NlWriter w(RTM_NEWNEIGH, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK, seq, &nd, sizeof nd);
  w.attr(NDA_DST, addr_bytes(addr));
  return w.finish();
}

std::vector<std::uint8_t> encode_dump_addresses(std::uint32_t seq) {
  ifaddrmsg ifa{};
  ifa.ifa_family = AF_UNSPEC;  // both families
  NlWriter w(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, seq, &ifa, sizeof ifa);
  return w.finish();
}

bool is_reply(const NlMessage& m, std::uint32_t port_id) {
  return seq_of(m) != 0 && pid_of(m) == port_id;
}

std::vector<NlMessage> decode_netlink(std::span<const std::uint8_t> datagram) {
  std::vector<NlMessage> out;
  while (datagram.size() >= sizeof(nlmsghdr)) {
    nlmsghdr h;
    std::memcpy(&h, datagram.data(), sizeof h);
    if (h.nlmsg_len < sizeof h || h.nlmsg_len > datagram.size()) break;
    const auto body = datagram.subspan(NLMSG_HDRLEN, h.nlmsg_len - NLMSG_HDRLEN);
    std::optional<NlMessage> m;
    switch (h.nlmsg_type) {
      case NLMSG_ERROR:
        if (body.size() >= sizeof(int)) {
          int error;
          std::memcpy(&error, body.data(), sizeof error);
          m = NlError{h.nlmsg_seq, h.nlmsg_pid, -error};
        }
        break;
      case NLMSG_DONE:
        m = NlDone{h.nlmsg_seq, h.nlmsg_pid};
        break;
      case RTM_NEWROUTE:
      case RTM_DELROUTE:
        m = decode_route(h, body);
        break;
      case RTM_NEWNEIGH:
      case RTM_DELNEIGH:
        m = decode_neigh(h, body);
        break;
      case RTM_NEWADDR:
      case RTM_DELADDR:
        m = decode_addr(h, body);
        break;
      default:
        break;
    }
    if (m) out.push_back(*m);
    const std::size_t step = NLMSG_ALIGN(h.nlmsg_len);
    if (step >= datagram.size()) break;
    datagram = datagram.subspan(step);
  }
  return out;
}

}  // namespace xroce::net
