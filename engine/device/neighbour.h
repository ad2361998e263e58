// Neighbour resolution: the destination MAC for a packet leaving netdev `ifindex` towards IP
// address `dst`, from the kernel's routing and neighbour tables over rtnetlink, as rxe gets it
// from the kernel's dst/neighbour cache.
//
// Steps for a key (ifindex, dst) not in the cache:
//   1. RTM_GETROUTE for dst, forced out of ifindex (RTA_OIF): the route's RTA_GATEWAY, if any,
//      is the next hop; otherwise dst is on-link and is its own next hop.
//   2. RTM_GETNEIGH (ifindex, next hop): a NUD_REACHABLE/STALE/DELAY/PROBE/PERMANENT/NOARP entry
//      with a link-layer address answers.
//   3. Otherwise trigger resolution with RTM_NEWNEIGH carrying NTF_USE (what `ip neigh ... use`
//      sends): the kernel runs neigh_event_send(), i.e. ARP or neighbour solicitation exactly as
//      if it had a packet for that neighbour, and sends nothing else. (The alternative, a
//      connected UDP socket's send to the discard port, puts a real datagram on the wire and
//      draws an ICMP error from the peer; NTF_USE needs CAP_NET_ADMIN, which the daemon has.)
//      The answer then comes as an RTM_NEWNEIGH notification (group RTNLGRP_NEIGH), or, if the
//      notification was missed, from re-asking RTM_GETNEIGH every retry interval (a NUD_FAILED
//      entry is triggered again then). No answer before the give-up time makes the key
//      unreachable for a while. Known limit of NTF_USE: the kernel sends an IPv6 solicitation
//      only once the interface's link-local address has passed DAD (with no packet to take a
//      source address from, ndisc_send_ns needs a non-tentative link-local), so resolution
//      right after link-up waits for DAD; the retries cover that.
// Resolved entries expire after a lifetime and are asked again; neighbour notifications update
// or drop cached entries as they arrive.
//
// Structure (sans-I/O, like the transport): NeighbourTable is the pure state machine — it is
// fed decoded netlink messages and the time, and emits netlink requests to send and answers;
// NeighbourResolver is the thin shell that owns a non-blocking NETLINK_ROUTE socket and moves
// bytes between it and a table. The codec functions below are pure too.
//
// Threading: a NeighbourResolver (and its table) belongs to one thread, typically one worker;
// each worker may own its own. Nothing here blocks: resolve() answers from the cache or says
// kPending; the answer arrives later from poll_answer() after on_readable()/on_timeout().
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "wire/frame.h"

namespace xroce::device {

struct NeighbourKey {
  int ifindex = 0;
  wire::IpAddr dst;
  auto operator<=>(const NeighbourKey& o) const {
    if (ifindex != o.ifindex) return ifindex <=> o.ifindex;
    return dst.bytes <=> o.dst.bytes;
  }
  bool operator==(const NeighbourKey&) const = default;
};

enum class NeighbourState : std::uint8_t {
  kResolved,     // mac is valid
  kPending,      // asked; the answer comes through poll_answer()
  kUnreachable,  // no route through ifindex, or the neighbour did not answer
};
const char* to_string(NeighbourState s);

struct NeighbourAnswer {
  NeighbourKey key;
  NeighbourState state = NeighbourState::kPending;
  wire::MacAddr mac{};
  wire::IpAddr next_hop;  // dst itself, or the gateway
};

struct NeighbourOptions {
  std::uint64_t resolved_lifetime_ns = 30'000'000'000;    // re-ask the kernel after this
  std::uint64_t unreachable_lifetime_ns = 1'000'000'000;  // how long a failure is remembered
  std::uint64_t retry_interval_ns = 200'000'000;          // re-send RTM_GETNEIGH while pending
  std::uint64_t give_up_ns = 3'000'000'000;               // pending longer: unreachable
};

// --- rtnetlink codec (pure) ---------------------------------------------------------------

// Requests. Each is one complete netlink message carrying `seq`.
std::vector<std::uint8_t> encode_get_route(std::uint32_t seq, int ifindex, const wire::IpAddr& dst);
std::vector<std::uint8_t> encode_get_neigh(std::uint32_t seq, int ifindex,
                                           const wire::IpAddr& addr);
std::vector<std::uint8_t> encode_use_neigh(std::uint32_t seq, int ifindex,
                                           const wire::IpAddr& addr);

// What the table needs from replies and notifications.
struct NlRoute {
  std::uint32_t seq = 0;
  int oif = 0;
  std::optional<wire::IpAddr> gateway;
};
struct NlNeigh {
  std::uint32_t seq = 0;  // 0 for notifications
  bool deleted = false;   // RTM_DELNEIGH
  int ifindex = 0;
  wire::IpAddr addr;
  std::uint16_t nud_state = 0;  // NUD_* bits
  std::optional<wire::MacAddr> lladdr;
};
struct NlError {
  std::uint32_t seq = 0;
  int error = 0;  // positive errno; 0 is an acknowledgement
};
using NlMessage = std::variant<NlRoute, NlNeigh, NlError>;

// Decodes every message in a datagram read from a NETLINK_ROUTE socket; skips message types
// and address families it does not know and stops at the first truncated message.
std::vector<NlMessage> decode_netlink(std::span<const std::uint8_t> datagram);

// --- the state machine (pure) -----------------------------------------------------------

class NeighbourTable {
 public:
  explicit NeighbourTable(NeighbourOptions options = {}) : options_(options) {}

  // From the cache if fresh; else kPending, queueing requests (poll_request) unless already
  // pending. A kUnreachable answer is remembered for unreachable_lifetime_ns.
  NeighbourAnswer resolve(std::uint64_t now_ns, int ifindex, const wire::IpAddr& dst);

  void handle_message(std::uint64_t now_ns, const NlMessage& message);
  void handle_timeout(std::uint64_t now_ns);
  std::optional<std::uint64_t> next_deadline() const;

  // Outputs, drained after any input.
  std::optional<std::vector<std::uint8_t>> poll_request();
  std::optional<NeighbourAnswer> poll_answer();

  std::size_t size() const { return entries_.size(); }

 private:
  enum class Phase : std::uint8_t { kRoute, kNeighbour, kResolved, kUnreachable };
  struct Entry {
    Phase phase = Phase::kRoute;
    wire::IpAddr next_hop;
    wire::MacAddr mac{};
    bool have_mac = false;          // mac is valid (also while re-validating)
    std::uint32_t seq = 0;          // outstanding RTM_GETROUTE / RTM_GETNEIGH, 0 = none
    std::uint32_t use_seq = 0;      // the NTF_USE request that triggered resolution, 0 = none
    std::uint64_t started_ns = 0;   // when this resolution began
    std::uint64_t deadline_ns = 0;  // retry (pending), expiry (resolved / unreachable)
  };

  void start(std::uint64_t now_ns, const NeighbourKey& key, Entry& e);
  void ask_neighbour(std::uint64_t now_ns, const NeighbourKey& key, Entry& e);
  void trigger(const NeighbourKey& key, Entry& e);
  void finish(std::uint64_t now_ns, const NeighbourKey& key, Entry& e, Phase phase);
  void on_route(std::uint64_t now_ns, const NlRoute& r);
  void on_neigh(std::uint64_t now_ns, const NlNeigh& n);
  void on_error(std::uint64_t now_ns, const NlError& err);
  NeighbourAnswer answer_of(const NeighbourKey& key, const Entry& e) const;
  std::uint32_t next_seq();

  NeighbourOptions options_;
  std::map<NeighbourKey, Entry> entries_;
  std::deque<std::vector<std::uint8_t>> requests_;
  std::deque<NeighbourAnswer> answers_;
  std::uint32_t seq_ = 0;
};

// --- the I/O shell ----------------------------------------------------------------------

class NeighbourResolver {
 public:
  // Opens a non-blocking NETLINK_ROUTE socket in the calling thread's network namespace,
  // subscribed to neighbour notifications. nullptr and `error` (errno) on failure.
  static std::unique_ptr<NeighbourResolver> open(NeighbourOptions options, int& error);
  ~NeighbourResolver();
  NeighbourResolver(const NeighbourResolver&) = delete;
  NeighbourResolver& operator=(const NeighbourResolver&) = delete;

  // Non-blocking ask: the answer at once when cached, else kPending (see the top of the file).
  NeighbourAnswer resolve(std::uint64_t now_ns, int ifindex, const wire::IpAddr& dst);
  // Poll this for readability (epoll, io_uring) and call on_readable when it is.
  int fd() const { return fd_; }
  void on_readable(std::uint64_t now_ns);
  // Call at or after next_deadline().
  void on_timeout(std::uint64_t now_ns);
  std::optional<std::uint64_t> next_deadline() const { return table_.next_deadline(); }
  std::optional<NeighbourAnswer> poll_answer() { return table_.poll_answer(); }

 private:
  NeighbourResolver(int fd, NeighbourOptions options) : fd_(fd), table_(options) {}
  void flush_requests();

  int fd_;
  NeighbourTable table_;
};

}  // namespace xroce::device
