// NeighbourTable: the pure state machine of route and neighbour resolution (neighbour.h). The
// socket shell is neighbour_resolver.cc.
#include "net/neighbour.h"

#include <linux/neighbour.h>
#include <linux/rtnetlink.h>

#include <climits>

namespace xroce::net {

const char* to_string(NeighbourState s) {
  switch (s) {
    case NeighbourState::kResolved:
      return "resolved";
    case NeighbourState::kLocal:
      return "local";
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

}  // namespace

std::uint32_t NeighbourTable::next_seq() {
  if (++seq_ == 0) ++seq_;  // 0 marks notifications
  return seq_;
}

std::uint8_t NeighbourTable::default_hop_limit(const wire::IpAddr& dst) const {
  return dst.is_v4() ? options_.hop_limit_v4 : options_.hop_limit_v6;
}

void NeighbourTable::load_addresses() {
  dump_seq_ = next_seq();
  dump_.clear();
  requests_.push_back(encode_dump_addresses(dump_seq_));
}

std::optional<int> NeighbourTable::local_holder(int ifindex, const wire::IpAddr& dst) const {
  for (auto it = local_.lower_bound({dst.bytes, INT_MIN}); it != local_.end(); ++it) {
    if (it->first != dst.bytes) break;
    // A link-local address is ours only on its own link.
    if (!dst.is_link_local_v6() || ifindex == 0 || it->second == ifindex) return it->second;
  }
  return std::nullopt;
}

bool NeighbourTable::is_local(int ifindex, const wire::IpAddr& dst) const {
  return local_holder(ifindex, dst).has_value();
}

NeighbourAnswer NeighbourTable::local_answer(const NeighbourKey& key, int holder) const {
  NeighbourAnswer a;
  a.key = key;
  a.state = NeighbourState::kLocal;
  a.next_hop = key.dst;
  a.ifindex = holder;
  a.source = key.dst;
  a.hop_limit = default_hop_limit(key.dst);
  return a;
}

NeighbourAnswer NeighbourTable::answer_of(const NeighbourKey& key, const Entry& e) const {
  NeighbourAnswer a;
  a.key = key;
  a.via_gateway = e.via_gateway;
  a.next_hop = e.next_hop;
  a.ifindex = e.oif;
  a.source = e.source;
  a.hop_limit = e.hop_limit;
  if (e.phase == Phase::kLocal) {
    a.state = NeighbourState::kLocal;
  } else if (e.have_mac) {
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
  if (const auto holder = local_holder(ifindex, dst)) return local_answer(key, *holder);
  auto [it, inserted] = entries_.try_emplace(key);
  Entry& e = it->second;
  e.used_ns = now_ns;
  if (inserted) {
    e.next_hop = dst;
    e.oif = ifindex;
    e.hop_limit = default_hop_limit(dst);
    e.confirmed_ns = now_ns;
  }
  if (inserted || (!pending(e) && now_ns >= e.deadline_ns)) start(now_ns, key, e);
  // A resolved entry being re-validated keeps answering with its MAC, as the kernel's STALE
  // entries do.
  return answer_of(key, e);
}

void NeighbourTable::start(std::uint64_t now_ns, const NeighbourKey& key, Entry& e) {
  e.phase = Phase::kRoute;
  e.seq = next_seq();
  e.use_seq = 0;
  e.solicited_ns = 0;
  e.started_ns = now_ns;
  e.deadline_ns = now_ns + options_.retry_interval_ns;
  requests_.push_back(encode_get_route(e.seq, key.ifindex, key.dst));
}

void NeighbourTable::ask_neighbour(std::uint64_t now_ns, const NeighbourKey& /*key*/, Entry& e) {
  e.phase = Phase::kNeighbour;
  e.seq = next_seq();
  e.deadline_ns = now_ns + options_.retry_interval_ns;
  requests_.push_back(encode_get_neigh(e.seq, e.oif, e.next_hop));
}

void NeighbourTable::trigger(std::uint64_t now_ns, Entry& e) {
  if (e.use_seq != 0) return;
  e.use_seq = next_seq();
  requests_.push_back(encode_use_neigh(e.use_seq, e.oif, e.next_hop));
  // After the NTF_USE, which leaves the kernel an INCOMPLETE entry for the answer to update.
  solicit(now_ns, e);
}

void NeighbourTable::solicit(std::uint64_t now_ns, Entry& e) {
  if (e.next_hop.is_v4()) return;
  if (e.solicited_ns != 0 && now_ns < e.solicited_ns + options_.solicit_interval_ns) return;
  e.solicited_ns = now_ns;
  solicitations_.push_back({e.oif, e.next_hop, e.source});
}

void NeighbourTable::finish(std::uint64_t now_ns, const NeighbourKey& key, Entry& e, Phase phase) {
  e.phase = phase;
  e.seq = 0;
  e.use_seq = 0;
  e.have_mac = phase == Phase::kResolved;
  e.deadline_ns = now_ns + (phase == Phase::kUnreachable ? options_.unreachable_lifetime_ns
                                                         : options_.resolved_lifetime_ns);
  NeighbourAnswer a = answer_of(key, e);
  if (e.have_mac) {
    a.mac_changed = e.answered && e.answered_mac != e.mac;
    e.answered_mac = e.mac;
    e.answered = true;
  }
  answers_.push_back(a);
}

void NeighbourTable::revalidate_all(std::uint64_t now_ns) {
  // An entry asking for its route already will hear the current one.
  for (auto& [key, e] : entries_)
    if (e.phase != Phase::kRoute) start(now_ns, key, e);
}

void NeighbourTable::handle_message(std::uint64_t now_ns, const NlMessage& message) {
  const bool reply = is_reply(message, port_id_);
  if (const auto* r = std::get_if<NlRoute>(&message)) {
    if (reply) {
      on_route_reply(now_ns, *r);
    } else {
      revalidate_all(now_ns);  // a route was added, changed or removed
    }
  } else if (const auto* n = std::get_if<NlNeigh>(&message)) {
    on_neigh(now_ns, *n);
  } else if (const auto* a = std::get_if<NlAddr>(&message)) {
    on_addr(*a, reply);
    // A new address may be a destination's; a removed one may have carried a route.
    if (!reply) revalidate_all(now_ns);
  } else if (const auto* d = std::get_if<NlDone>(&message)) {
    if (reply) on_done(*d);
  } else if (const auto* err = std::get_if<NlError>(&message)) {
    if (reply) on_error(now_ns, *err);
  }
}

void NeighbourTable::handle_lost_notifications(std::uint64_t now_ns) {
  revalidate_all(now_ns);
  load_addresses();
}

void NeighbourTable::on_route_reply(std::uint64_t now_ns, const NlRoute& r) {
  for (auto& [key, e] : entries_) {
    if (e.phase != Phase::kRoute || e.seq != r.seq) continue;
    if (r.type == RTN_LOCAL) {
      e.oif = r.oif;
      e.next_hop = key.dst;
      e.via_gateway = false;
      e.source = key.dst;
      finish(now_ns, key, e, Phase::kLocal);
      return;
    }
    // rxe sends on the netdev it is bound to: a route out of another one does not reach.
    if (r.type != RTN_UNICAST || (key.ifindex != 0 && r.oif != 0 && r.oif != key.ifindex)) {
      finish(now_ns, key, e, Phase::kUnreachable);
      return;
    }
    const int oif = r.oif != 0 ? r.oif : key.ifindex;
    const wire::IpAddr next_hop = r.gateway.value_or(key.dst);
    // The MAC belongs to the next hop: a new one must be resolved before frames go again.
    if (oif != e.oif || !(next_hop == e.next_hop)) e.have_mac = false;
    e.oif = oif;
    e.next_hop = next_hop;
    e.via_gateway = r.gateway.has_value();
    e.source = r.prefsrc;
    e.hop_limit = r.hop_limit.value_or(default_hop_limit(key.dst));
    ask_neighbour(now_ns, key, e);
    return;
  }
}

void NeighbourTable::on_neigh(std::uint64_t now_ns, const NlNeigh& n) {
  // Replies and notifications alike: every entry whose next hop this neighbour is.
  for (auto& [key, e] : entries_) {
    const bool waiting = e.phase == Phase::kNeighbour;
    if (!(waiting || e.phase == Phase::kResolved)) continue;
    if (e.oif != n.ifindex || !(e.next_hop == n.addr)) continue;
    if (n.deleted) {
      if (e.phase == Phase::kResolved) e.deadline_ns = now_ns;  // re-validate at next resolve
      continue;
    }
    e.nud = n.nud_state;
    if ((n.nud_state & kNudValid) && n.lladdr) {
      const bool changed = e.have_mac && e.mac != *n.lladdr;
      e.mac = *n.lladdr;
      if (waiting || changed) {
        finish(now_ns, key, e, Phase::kResolved);
      } else {
        e.deadline_ns = now_ns + options_.resolved_lifetime_ns;  // the kernel vouches for it
      }
    } else if (n.nud_state & NUD_FAILED) {
      if (!waiting) {
        // The next hop stopped answering at the MAC we had (it may have a new one): resolve
        // it again from scratch, a broadcast the new MAC answers.
        e.have_mac = false;
        e.phase = Phase::kNeighbour;
        e.seq = 0;
        e.use_seq = 0;
        e.started_ns = now_ns;
        e.deadline_ns = now_ns + options_.retry_interval_ns;
        trigger(now_ns, e);
      } else if (e.use_seq == 0) {
        trigger(now_ns, e);  // a failure left from earlier: try ourselves
      } else {
        // Our probe failed. Keep trying until give-up: a neighbour may come up late, and
        // for IPv6 the kernel sends no solicitation of its own for an NTF_USE until the
        // link-local address has passed DAD (ndisc_send_ns; rule 4's solicitations go
        // meanwhile).
        e.use_seq = 0;
      }
    } else if (waiting) {
      trigger(now_ns, e);  // NUD_NONE / INCOMPLETE: make sure resolution runs
    }
  }
}

void NeighbourTable::on_addr(const NlAddr& a, bool reply) {
  const std::pair<std::array<std::uint8_t, 16>, int> item{a.addr.bytes, a.ifindex};
  if (reply && a.seq == dump_seq_) {
    dump_.insert(item);
    return;
  }
  if (a.deleted) {
    local_.erase(item);
    dump_.erase(item);
  } else {
    local_.insert(item);
    if (dump_seq_ != 0) dump_.insert(item);
  }
}

void NeighbourTable::on_done(const NlDone& d) {
  if (d.seq != dump_seq_ || dump_seq_ == 0) return;
  local_.swap(dump_);
  dump_.clear();
  dump_seq_ = 0;
}

void NeighbourTable::on_error(std::uint64_t now_ns, const NlError& err) {
  if (err.error == 0) return;  // the acknowledgement of an NTF_USE request
  if (err.seq == dump_seq_) {
    dump_seq_ = 0;  // keep what we had; a later loss of notifications dumps again
    dump_.clear();
    return;
  }
  for (auto& [key, e] : entries_) {
    if (e.seq == err.seq && e.phase == Phase::kRoute) {
      finish(now_ns, key, e, Phase::kUnreachable);  // no route (ENETUNREACH, ...)
      return;
    }
    if (e.seq == err.seq && e.phase == Phase::kNeighbour) {
      trigger(now_ns, e);  // ENOENT: the kernel has no entry yet
      return;
    }
    if (e.use_seq == err.seq && e.phase == Phase::kNeighbour) {
      finish(now_ns, key, e, Phase::kUnreachable);  // the kernel refused to resolve
      return;
    }
  }
  // Anything else answers a confirmation of an entry in use (confirm_in_use): nothing to do.
}

// NTF_USE for a resolved entry used since the last one, at most once per confirm interval:
// what the kernel's own packets through the neighbour would do (neigh_event_send). Only for
// entries the kernel's NUD machine runs: on a PERMANENT entry NTF_USE would drop its
// permanence (__neigh_update's NEIGH_UPDATE_F_USE) and start ARP for a static neighbour.
void NeighbourTable::confirm_in_use(std::uint64_t now_ns, Entry& e) {
  constexpr std::uint16_t kNudDynamic = NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE;
  if (e.phase != Phase::kResolved || e.used_ns <= e.confirmed_ns) return;
  if (now_ns < e.confirmed_ns + options_.confirm_interval_ns) return;
  e.confirmed_ns = now_ns;
  if ((e.nud & kNudDynamic) == 0 || (e.nud & (NUD_PERMANENT | NUD_NOARP)) != 0) return;
  requests_.push_back(encode_use_neigh(next_seq(), e.oif, e.next_hop));
}

void NeighbourTable::handle_timeout(std::uint64_t now_ns) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    const NeighbourKey& key = it->first;
    Entry& e = it->second;
    if (pending(e) && now_ns >= e.deadline_ns) {
      if (now_ns - e.started_ns >= options_.give_up_ns) {
        finish(now_ns, key, e, Phase::kUnreachable);
      } else if (e.phase == Phase::kRoute) {
        e.seq = next_seq();
        e.deadline_ns = now_ns + options_.retry_interval_ns;
        requests_.push_back(encode_get_route(e.seq, key.ifindex, key.dst));
      } else {
        ask_neighbour(now_ns, key, e);
        // Solicited before and still no answer: again, at the solicitation's own interval.
        if (e.solicited_ns != 0) solicit(now_ns, e);
      }
    }
    confirm_in_use(now_ns, e);
    if (!pending(e) && now_ns >= e.used_ns + options_.forget_after_ns) {
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

std::optional<std::uint64_t> NeighbourTable::next_deadline() const {
  std::optional<std::uint64_t> next;
  for (const auto& [key, e] : entries_) {
    std::uint64_t t = e.used_ns + options_.forget_after_ns;
    if (pending(e)) t = e.deadline_ns;
    if (e.phase == Phase::kResolved && e.used_ns > e.confirmed_ns)
      t = std::min(t, e.confirmed_ns + options_.confirm_interval_ns);
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

std::optional<NeighbourSolicitation> NeighbourTable::poll_solicitation() {
  if (solicitations_.empty()) return std::nullopt;
  NeighbourSolicitation s = solicitations_.front();
  solicitations_.pop_front();
  return s;
}

std::optional<NeighbourAnswer> NeighbourTable::poll_answer() {
  if (answers_.empty()) return std::nullopt;
  NeighbourAnswer a = answers_.front();
  answers_.pop_front();
  return a;
}

}  // namespace xroce::net
