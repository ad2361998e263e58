// Route and neighbour resolution: for a destination IP address, what the namespace's routing
// and neighbour tables say about reaching it, as rxe gets it from the kernel's dst and
// neighbour cache (rxe_find_route4/6) and the verbs core from rdma_addr_find_l2_eth_by_grh().
// Every path of the daemon that needs a destination MAC asks a resolver: the workers for each
// frame, and the control thread for rdma_cm's address and route resolution.
//
// The answer for (ifindex, dst):
//   - kLocal: dst is an address of this namespace (any interface; an IPv6 link-local one only
//     on `ifindex`). Answered from the address list the resolver keeps (RTM_GETADDR dump, then
//     address notifications), or from a route of type RTN_LOCAL: never from the neighbour
//     table. Frames to it are the daemon's loopback, never the wire's.
//   - kResolved: the next hop's MAC, and the route: on-link or via a gateway, next hop, egress
//     interface, preferred source address, hop limit (the route's RTAX_HOPLIMIT, else the
//     namespace's default, as ip4_dst_hoplimit/ip6_dst_hoplimit give the kernel).
//   - kPending: asked; the answer comes later through poll_answer().
//   - kUnreachable: no route (through `ifindex`, when given), or the next hop did not answer
//     before give-up. Remembered for unreachable_lifetime_ns, then asked again.
//
// How an entry is resolved (rules the unit tests check, tests/unit/net/neighbour_test.cc):
//   1. RTM_GETROUTE for dst, forced out of ifindex (RTA_OIF) when one is given, as rxe forces
//      the route out of its netdev. RTN_LOCAL: local. Another unicast route's gateway
//      (RTA_GATEWAY/RTA_VIA) is the next hop; without one dst is on-link and its own next hop.
//      Anything else (unreachable, blackhole, prohibit, an error) is unreachable.
//   2. RTM_GETNEIGH (egress interface, next hop): an entry in a NUD state with a link-layer
//      address (REACHABLE, STALE, DELAY, PROBE, PERMANENT, NOARP) answers.
//   3. Otherwise resolution is triggered with RTM_NEWNEIGH + NTF_USE: the kernel sends ARP or
//      a neighbour solicitation as for a packet of its own. The MAC comes back as an
//      RTM_NEWNEIGH notification, or from re-asking RTM_GETNEIGH every retry_interval_ns. No
//      MAC before give_up_ns: unreachable. (NTF_USE needs CAP_NET_ADMIN.)
//   4. For an IPv6 next hop the resolver also sends the solicitation itself (poll_solicitation,
//      at once and then every solicit_interval_ns while pending), from the route's preferred
//      source or the address the kernel picks. NTF_USE hands the kernel no packet, and without
//      one ndisc_send_ns() sources a solicitation only from a link-local address that has
//      passed DAD, or sends none: right after link-up (DAD takes 1-2 s) and on links with no
//      link-local address, the kernel's NUD machine stays silent, where rxe's packets, which
//      carry their source, are solicited for at once. RFC 4861 7.2.2 asks for the prompting
//      packet's source, an address of the interface: the GID's. The answer (an NA to that
//      address) updates the kernel's INCOMPLETE entry as any answer would, and comes back
//      through rule 2.
// How a resolved entry stays true:
//   - Neighbour notifications (RTNLGRP_NEIGH) are followed as they arrive: a new MAC for the
//     next hop (a gratuitous ARP, an unsolicited neighbour advertisement, a re-probe) replaces
//     the old one at once, and the answer is queued with mac_changed set. A FAILED next hop
//     is resolved again from scratch (broadcast ARP / multicast NS: a neighbour that changed
//     its MAC answers with the new one); until then the entry is pending, then unreachable.
//   - While an entry is in use (resolve() called since the last confirmation) it is "used" in
//     the kernel's table with NTF_USE at most once per confirm_interval_ns, as the kernel's
//     own packets would (never a PERMANENT or NOARP entry: NTF_USE turns a static entry into
//     a dynamic one): the kernel then keeps confirming the neighbour with its NUD machine
//     (REACHABLE -> DELAY -> PROBE), and a neighbour that no longer answers its old MAC goes
//     FAILED (above). Without any announcement a changed MAC is thus followed within the
//     kernel's reachable time + delay_first_probe_time + ucast_solicit * retrans_time (about
//     53 s with Linux defaults at worst; sooner with shorter neigh sysctls); with one (a
//     gratuitous ARP, an unsolicited NA) at once.
//   - Route and address notifications (RTNLGRP_IPV4_ROUTE/IPV6_ROUTE/IPV4_IFADDR/IPV6_IFADDR)
//     re-validate every entry: the route is asked again while the old answer keeps being
//     given; a changed next hop drops the old MAC.
//   - A resolved entry is re-asked from step 1 once it is older than resolved_lifetime_ns and
//     used again (a notification the socket dropped is caught then), and lost notifications
//     (ENOBUFS) re-validate every entry at once. Entries unused for forget_after_ns are
//     forgotten.
//
// Structure (sans-I/O, like the transport): NeighbourTable is the pure state machine, fed
// decoded rtnetlink messages (rtnetlink.h) and the time, emitting requests and answers;
// NeighbourResolver is the thin shell that owns a non-blocking NETLINK_ROUTE socket and moves
// bytes between it and a table.
//
// Threading: a resolver (and its table) belongs to one thread. Each worker owns one and polls
// its fd in its sleep; the control thread may own another (rdma_cm). Nothing here blocks except
// NeighbourResolver::resolve_blocking, which is for tools and tests only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "net/rtnetlink.h"
#include "wire/frame.h"

namespace xroce::net {

struct NeighbourKey {
  int ifindex = 0;  // 0: wherever the route leads
  wire::IpAddr dst;
  auto operator<=>(const NeighbourKey& o) const {
    if (ifindex != o.ifindex) return ifindex <=> o.ifindex;
    return dst.bytes <=> o.dst.bytes;
  }
  bool operator==(const NeighbourKey&) const = default;
};

enum class NeighbourState : std::uint8_t {
  kResolved,     // mac is the next hop's
  kLocal,        // dst is an address of this namespace: no MAC, no neighbour
  kPending,      // asked; the answer comes through poll_answer()
  kUnreachable,  // no route (through ifindex), or the next hop did not answer
};
const char* to_string(NeighbourState s);

struct NeighbourAnswer {
  NeighbourKey key;
  NeighbourState state = NeighbourState::kPending;
  bool via_gateway = false;            // the next hop is the route's gateway (else dst is on-link)
  wire::IpAddr next_hop;               // dst itself, or the gateway (once the route is known)
  int ifindex = 0;                     // egress interface (kLocal: the interface that holds dst)
  std::optional<wire::IpAddr> source;  // the route's preferred source address
  std::uint8_t hop_limit = 64;         // TTL / hop limit for packets on this route
  wire::MacAddr mac{};                 // kResolved only
  bool mac_changed = false;            // (poll_answer) kResolved with another MAC than the last one
};

// A neighbour solicitation for the shell to send (rule 4 above): for `target`, out of
// `ifindex`, from `source` when the route names one (else the kernel's choice).
struct NeighbourSolicitation {
  int ifindex = 0;
  wire::IpAddr target;
  std::optional<wire::IpAddr> source;
};

struct NeighbourOptions {
  std::uint64_t resolved_lifetime_ns = 10'000'000'000;    // then re-asked from the route on
  std::uint64_t confirm_interval_ns = 1'000'000'000;      // NTF_USE at most this often in use
  std::uint64_t unreachable_lifetime_ns = 1'000'000'000;  // how long a failure is remembered
  std::uint64_t retry_interval_ns = 200'000'000;          // re-ask while pending
  std::uint64_t give_up_ns = 3'000'000'000;               // pending longer: unreachable
  std::uint64_t forget_after_ns = 60'000'000'000;         // unused this long: forgotten
  std::uint64_t solicit_interval_ns = 1'000'000'000;      // own IPv6 solicitations (RFC 4861
                                                          // RETRANS_TIMER) while pending
  // The namespace's default TTL / hop limit, for routes without RTAX_HOPLIMIT.
  std::uint8_t hop_limit_v4 = 64;
  std::uint8_t hop_limit_v6 = 64;
};

class NeighbourTable {
 public:
  explicit NeighbourTable(NeighbourOptions options = {}) : options_(options) {}

  // The port id the shell's socket got from the kernel: messages carrying it (and a sequence
  // number) are replies, others notifications (rtnetlink.h).
  void set_port_id(std::uint32_t port_id) { port_id_ = port_id; }
  // Queues a dump of the namespace's addresses (the shell does this once when it opens);
  // until it is answered, local addresses are recognised by their RTN_LOCAL route.
  void load_addresses();

  // kLocal at once for an address of the namespace; else from the cache if fresh; else
  // kPending, queueing requests (poll_request) unless already pending. Marks the entry used.
  NeighbourAnswer resolve(std::uint64_t now_ns, int ifindex, const wire::IpAddr& dst);
  // Whether `dst` is an address of the namespace (as far as the address list knows).
  bool is_local(int ifindex, const wire::IpAddr& dst) const;

  void handle_message(std::uint64_t now_ns, const NlMessage& message);
  // The socket dropped notifications (ENOBUFS): re-validate everything.
  void handle_lost_notifications(std::uint64_t now_ns);
  void handle_timeout(std::uint64_t now_ns);
  std::optional<std::uint64_t> next_deadline() const;

  // Outputs, drained after any input. Answers come for entries that settled (resolved,
  // local, unreachable) and for resolved entries whose MAC changed.
  std::optional<std::vector<std::uint8_t>> poll_request();
  std::optional<NeighbourSolicitation> poll_solicitation();
  std::optional<NeighbourAnswer> poll_answer();

  std::size_t size() const { return entries_.size(); }

 private:
  enum class Phase : std::uint8_t { kRoute, kNeighbour, kResolved, kLocal, kUnreachable };
  struct Entry {
    Phase phase = Phase::kRoute;
    // The route, once known.
    int oif = 0;
    bool via_gateway = false;
    wire::IpAddr next_hop;
    std::optional<wire::IpAddr> source;
    std::uint8_t hop_limit = 64;
    // The neighbour.
    wire::MacAddr mac{};
    bool have_mac = false;           // mac is valid (also while re-validating)
    std::uint16_t nud = 0;           // the kernel entry's NUD state, as last seen
    wire::MacAddr answered_mac{};    // the MAC the last kResolved answer carried
    bool answered = false;           // there was one
    std::uint32_t seq = 0;           // outstanding RTM_GETROUTE / RTM_GETNEIGH, 0 = none
    std::uint32_t use_seq = 0;       // the NTF_USE request that triggered resolution, 0 = none
    std::uint64_t started_ns = 0;    // when this resolution began
    std::uint64_t deadline_ns = 0;   // retry (pending), expiry (settled)
    std::uint64_t used_ns = 0;       // last resolve()
    std::uint64_t confirmed_ns = 0;  // last NTF_USE sent for an entry in use
    std::uint64_t solicited_ns = 0;  // last own solicitation of this resolution, 0 = none
  };
  using Entries = std::map<NeighbourKey, Entry>;

  static bool pending(const Entry& e) {
    return e.phase == Phase::kRoute || e.phase == Phase::kNeighbour;
  }
  void start(std::uint64_t now_ns, const NeighbourKey& key, Entry& e);
  void ask_neighbour(std::uint64_t now_ns, const NeighbourKey& key, Entry& e);
  void trigger(std::uint64_t now_ns, Entry& e);
  void solicit(std::uint64_t now_ns, Entry& e);
  void finish(std::uint64_t now_ns, const NeighbourKey& key, Entry& e, Phase phase);
  void revalidate_all(std::uint64_t now_ns);
  void on_route_reply(std::uint64_t now_ns, const NlRoute& r);
  void on_neigh(std::uint64_t now_ns, const NlNeigh& n);
  void on_addr(const NlAddr& a, bool reply);
  void on_done(const NlDone& d);
  void on_error(std::uint64_t now_ns, const NlError& err);
  void confirm_in_use(std::uint64_t now_ns, Entry& e);
  NeighbourAnswer answer_of(const NeighbourKey& key, const Entry& e) const;
  NeighbourAnswer local_answer(const NeighbourKey& key, int holder) const;
  std::optional<int> local_holder(int ifindex, const wire::IpAddr& dst) const;
  std::uint8_t default_hop_limit(const wire::IpAddr& dst) const;
  std::uint32_t next_seq();

  NeighbourOptions options_;
  std::uint32_t port_id_ = 0;
  Entries entries_;
  // The namespace's addresses: (address, interface). While a dump runs, what it has listed
  // so far goes to dump_ as well, which replaces local_ when the dump ends.
  using AddressSet = std::set<std::pair<std::array<std::uint8_t, 16>, int>>;
  AddressSet local_;
  AddressSet dump_;
  std::uint32_t dump_seq_ = 0;
  std::deque<std::vector<std::uint8_t>> requests_;
  std::deque<NeighbourSolicitation> solicitations_;
  std::deque<NeighbourAnswer> answers_;
  std::uint32_t seq_ = 0;
};

// --- the I/O shell ----------------------------------------------------------------------

class NeighbourResolver {
 public:
  // Opens a non-blocking NETLINK_ROUTE socket in the calling thread's network namespace,
  // subscribed to neighbour, route and address notifications, and starts reading the
  // namespace's addresses; and a raw ICMPv6 socket there for solicitations (rule 4). The hop-limit
  // defaults come from the namespace's sysctls (net.ipv4.ip_default_ttl,
  // net.ipv6.conf.default.hop_limit). nullptr and `error` (errno) on failure.
  static std::unique_ptr<NeighbourResolver> open(NeighbourOptions options, int& error);
  ~NeighbourResolver();
  NeighbourResolver(const NeighbourResolver&) = delete;
  NeighbourResolver& operator=(const NeighbourResolver&) = delete;

  // Non-blocking ask: the answer at once when local or cached, else kPending (neighbour.h top).
  NeighbourAnswer resolve(std::uint64_t now_ns, int ifindex, const wire::IpAddr& dst);
  // Poll this for readability (epoll, io_uring) and call on_readable when it is (or now and
  // then: it returns at once when nothing is waiting).
  int fd() const { return fd_; }
  void on_readable(std::uint64_t now_ns);
  // Call at or after next_deadline().
  void on_timeout(std::uint64_t now_ns);
  std::optional<std::uint64_t> next_deadline() const { return table_.next_deadline(); }
  std::optional<NeighbourAnswer> poll_answer() { return table_.poll_answer(); }

  // Asks and waits (poll on the socket) until the answer settles or `timeout_ns` passes; the
  // last answer either way. For tools and tests only: it blocks its thread.
  NeighbourAnswer resolve_blocking(int ifindex, const wire::IpAddr& dst, std::uint64_t timeout_ns);

 private:
  NeighbourResolver(int fd, int icmp6_fd, NeighbourOptions options)
      : fd_(fd), icmp6_fd_(icmp6_fd), table_(options) {}
  void flush_requests();
  void send_solicitation(const NeighbourSolicitation& s);

  int fd_;
  // A raw ICMPv6 socket of the same namespace for own solicitations (rule 4); -1 when it could
  // not be opened (no CAP_NET_RAW): then the kernel's NTF_USE path alone resolves IPv6.
  int icmp6_fd_;
  NeighbourTable table_;
};

// The namespace's default TTL (IPv4) or hop limit (IPv6) from its sysctls, 64 when they cannot
// be read: what a route without its own hop limit gives packets. Reads /proc/sys/net of the
// calling thread's namespace.
std::uint8_t namespace_hop_limit(bool v4);

}  // namespace xroce::net
