// The pure parts of neighbour resolution: the rtnetlink codec and the NeighbourTable state
// machine. The socket shell is neighbour_resolver.cc.
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "device/neighbour.h"

namespace xroce::device {

const char* to_string(NeighbourState s) {
  switch (s) {
    case NeighbourState::kResolved:
      return "resolved";
    case NeighbourState::kPending:
      return "pending";
    case NeighbourState::kUnreachable:
      return "unreachable";
  }
  return "?";
}

namespace {

// NUD states in which the kernel's entry carries a usable link-layer address.
constexpr std::uint16_t kNudValid =
    NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;

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
    f(a.rta_type, attrs.subspan(RTA_LENGTH(0), a.rta_len - RTA_LENGTH(0)));
    const std::size_t step = RTA_ALIGN(a.rta_len);
    if (step >= attrs.size()) return;
    attrs = attrs.subspan(step);
  }
}

std::optional<NlMessage> decode_route(std::uint32_t seq, std::span<const std::uint8_t> body) {
  if (body.size() < sizeof(rtmsg)) return std::nullopt;
  rtmsg rt;
  std::memcpy(&rt, body.data(), sizeof rt);
  NlRoute r;
  r.seq = seq;
  for_each_attr(body.subspan(NLMSG_ALIGN(sizeof rt)), [&](std::uint16_t type, auto p) {
    if (type == RTA_OIF && p.size() == 4) {
      std::uint32_t oif;
      std::memcpy(&oif, p.data(), 4);
      r.oif = static_cast<int>(oif);
    } else if (type == RTA_GATEWAY) {
      r.gateway = ip_from(rt.rtm_family, p);
    } else if (type == RTA_VIA && p.size() >= sizeof(rtvia)) {
      // An IPv4 route through an IPv6 next hop (RFC 5549): rtvia is a family and an address.
      r.gateway = ip_from(static_cast<std::uint8_t>(p[0]), p.subspan(2));
    }
  });
  return r;
}

std::optional<NlMessage> decode_neigh(std::uint32_t seq, bool deleted,
                                      std::span<const std::uint8_t> body) {
  if (body.size() < sizeof(ndmsg)) return std::nullopt;
  ndmsg nd;
  std::memcpy(&nd, body.data(), sizeof nd);
  if (nd.ndm_family != AF_INET && nd.ndm_family != AF_INET6) return std::nullopt;
  NlNeigh n;
  n.seq = seq;
  n.deleted = deleted;
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

}  // namespace

std::vector<std::uint8_t> encode_get_route(std::uint32_t seq, int ifindex,
                                           const wire::IpAddr& dst) {
  rtmsg rt{};
  rt.rtm_family = family_of(dst);
  rt.rtm_dst_len = dst.is_v4() ? 32 : 128;
  NlWriter w(RTM_GETROUTE, NLM_F_REQUEST, seq, &rt, sizeof rt);
  w.attr(RTA_DST, addr_bytes(dst));
  const auto oif = static_cast<std::uint32_t>(ifindex);
  w.attr(RTA_OIF, bytes_of(oif));
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
          m = NlError{h.nlmsg_seq, -error};
        }
        break;
      case RTM_NEWROUTE:
        m = decode_route(h.nlmsg_seq, body);
        break;
      case RTM_NEWNEIGH:
      case RTM_DELNEIGH:
        m = decode_neigh(h.nlmsg_seq, h.nlmsg_type == RTM_DELNEIGH, body);
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

// --- NeighbourTable -----------------------------------------------------------------------

std::uint32_t NeighbourTable::next_seq() {
  if (++seq_ == 0) ++seq_;  // 0 marks notifications
  return seq_;
}

NeighbourAnswer NeighbourTable::answer_of(const NeighbourKey& key, const Entry& e) const {
  NeighbourAnswer a;
  a.key = key;
  a.next_hop = e.next_hop;
  if (e.have_mac) {
    a.state = NeighbourState::kResolved;
    a.mac = e.mac;
  } else if (e.phase == Phase::kUnreachable) {
    a.state = NeighbourState::kUnreachable;
  } else {
    a.state = NeighbourState::kPending;
  }
  return a;
}

NeighbourAnswer NeighbourTable::resolve(std::uint64_t now_ns, int ifindex,
                                        const wire::IpAddr& dst) {
  const NeighbourKey key{ifindex, dst};
  auto [it, inserted] = entries_.try_emplace(key);
  Entry& e = it->second;
  const bool settled = e.phase == Phase::kResolved || e.phase == Phase::kUnreachable;
  if (inserted || (settled && now_ns >= e.deadline_ns)) start(now_ns, key, e);
  // A resolved entry being re-validated keeps answering with its MAC, as the kernel's STALE
  // entries do.
  return answer_of(key, e);
}

void NeighbourTable::start(std::uint64_t now_ns, const NeighbourKey& key, Entry& e) {
  e.phase = Phase::kRoute;
  e.seq = next_seq();
  e.use_seq = 0;
  e.started_ns = now_ns;
  e.deadline_ns = now_ns + options_.retry_interval_ns;
  requests_.push_back(encode_get_route(e.seq, key.ifindex, key.dst));
}

void NeighbourTable::ask_neighbour(std::uint64_t now_ns, const NeighbourKey& key, Entry& e) {
  e.phase = Phase::kNeighbour;
  e.seq = next_seq();
  e.deadline_ns = now_ns + options_.retry_interval_ns;
  requests_.push_back(encode_get_neigh(e.seq, key.ifindex, e.next_hop));
}

void NeighbourTable::trigger(const NeighbourKey& key, Entry& e) {
  if (e.use_seq != 0) return;
  e.use_seq = next_seq();
  requests_.push_back(encode_use_neigh(e.use_seq, key.ifindex, e.next_hop));
}

void NeighbourTable::finish(std::uint64_t now_ns, const NeighbourKey& key, Entry& e, Phase phase) {
  e.phase = phase;
  e.seq = 0;
  e.use_seq = 0;
  e.have_mac = phase == Phase::kResolved;
  e.deadline_ns = now_ns + (phase == Phase::kResolved ? options_.resolved_lifetime_ns
                                                      : options_.unreachable_lifetime_ns);
  answers_.push_back(answer_of(key, e));
}

void NeighbourTable::handle_message(std::uint64_t now_ns, const NlMessage& message) {
  if (const auto* r = std::get_if<NlRoute>(&message)) on_route(now_ns, *r);
  if (const auto* n = std::get_if<NlNeigh>(&message)) on_neigh(now_ns, *n);
  if (const auto* err = std::get_if<NlError>(&message)) on_error(now_ns, *err);
}

void NeighbourTable::on_route(std::uint64_t now_ns, const NlRoute& r) {
  for (auto& [key, e] : entries_) {
    if (e.phase != Phase::kRoute || e.seq != r.seq) continue;
    if (r.oif != 0 && r.oif != key.ifindex) {
      finish(now_ns, key, e, Phase::kUnreachable);  // the route leaves through another netdev
    } else {
      e.next_hop = r.gateway.value_or(key.dst);
      ask_neighbour(now_ns, key, e);
    }
    return;
  }
}

void NeighbourTable::on_neigh(std::uint64_t now_ns, const NlNeigh& n) {
  // Replies and notifications alike: every key whose next hop this neighbour is.
  for (auto& [key, e] : entries_) {
    const bool waiting = e.phase == Phase::kNeighbour;
    if (!(waiting || e.phase == Phase::kResolved)) continue;
    if (key.ifindex != n.ifindex || !(e.next_hop == n.addr)) continue;
    if (n.deleted) {
      if (e.phase == Phase::kResolved) e.deadline_ns = now_ns;  // re-validate at next resolve
      continue;
    }
    if ((n.nud_state & kNudValid) && n.lladdr) {
      e.mac = *n.lladdr;
      finish(now_ns, key, e, Phase::kResolved);
    } else if (n.nud_state & NUD_FAILED) {
      if (!waiting) {
        finish(now_ns, key, e, Phase::kUnreachable);  // a resolved neighbour stopped answering
      } else if (e.use_seq == 0) {
        trigger(key, e);  // a failure left from earlier: try ourselves
      } else {
        // Our probe failed. Keep trying until give-up: right after link-up, IPv6 sends no
        // solicitation until the link-local address has passed DAD (ndisc_send_ns).
        e.use_seq = 0;
      }
    } else if (waiting) {
      trigger(key, e);  // NUD_NONE / INCOMPLETE: make sure resolution runs
    }
  }
}

void NeighbourTable::on_error(std::uint64_t now_ns, const NlError& err) {
  if (err.error == 0) return;  // the acknowledgement of an NTF_USE request
  for (auto& [key, e] : entries_) {
    if (e.seq == err.seq && e.phase == Phase::kRoute) {
      finish(now_ns, key, e, Phase::kUnreachable);  // no route (ENETUNREACH, ...)
      return;
    }
    if (e.seq == err.seq && e.phase == Phase::kNeighbour) {
      trigger(key, e);  // ENOENT: the kernel has no entry yet
      return;
    }
    if (e.use_seq == err.seq && e.phase == Phase::kNeighbour) {
      finish(now_ns, key, e, Phase::kUnreachable);  // the kernel refused to resolve
      return;
    }
  }
}

void NeighbourTable::handle_timeout(std::uint64_t now_ns) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    const NeighbourKey& key = it->first;
    Entry& e = it->second;
    const bool pending = e.phase == Phase::kRoute || e.phase == Phase::kNeighbour;
    if (pending && now_ns >= e.deadline_ns) {
      if (now_ns - e.started_ns >= options_.give_up_ns) {
        finish(now_ns, key, e, Phase::kUnreachable);
      } else if (e.phase == Phase::kRoute) {
        e.seq = next_seq();
        e.deadline_ns = now_ns + options_.retry_interval_ns;
        requests_.push_back(encode_get_route(e.seq, key.ifindex, key.dst));
      } else {
        ask_neighbour(now_ns, key, e);
      }
    }
    // Forget entries nobody has asked about for a whole lifetime past their expiry.
    if (!pending && now_ns >= e.deadline_ns + options_.resolved_lifetime_ns) {
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

std::optional<std::uint64_t> NeighbourTable::next_deadline() const {
  std::optional<std::uint64_t> next;
  for (const auto& [key, e] : entries_) {
    const bool pending = e.phase == Phase::kRoute || e.phase == Phase::kNeighbour;
    const std::uint64_t t = pending ? e.deadline_ns : e.deadline_ns + options_.resolved_lifetime_ns;
    if (!next || t < *next) next = t;
  }
  return next;
}

std::optional<std::vector<std::uint8_t>> NeighbourTable::poll_request() {
  if (requests_.empty()) return std::nullopt;
  auto r = std::move(requests_.front());
  requests_.pop_front();
  return r;
}

std::optional<NeighbourAnswer> NeighbourTable::poll_answer() {
  if (answers_.empty()) return std::nullopt;
  NeighbourAnswer a = answers_.front();
  answers_.pop_front();
  return a;
}

}  // namespace xroce::device
