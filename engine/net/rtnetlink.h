// The rtnetlink messages the route and neighbour resolver (neighbour.h) exchanges with the
// kernel: requests it sends, and the replies and notifications it reads, decoded into plain
// structs. Pure functions, no socket: the resolver's shell moves the bytes.
//
// Replies and notifications look alike on the wire. A reply carries the sender's sequence
// number and, in nlmsg_pid, the port id of the socket that asked; a notification carries port
// id 0, or that of whoever made the change, with that requester's sequence number (route
// notifications) or 0 (neighbour and address notifications). Every decoded message keeps both,
// and is_reply() tells them apart.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "wire/frame.h"

namespace xroce::net {

// --- requests (each one complete netlink message carrying `seq`) --------------------------

// RTM_GETROUTE for `dst`; forced out of `ifindex` (RTA_OIF) unless it is 0. The kernel answers
// with one RTM_NEWROUTE (the route it would use) or an error (ENETUNREACH, ...).
std::vector<std::uint8_t> encode_get_route(std::uint32_t seq, int ifindex, const wire::IpAddr& dst);
// RTM_GETNEIGH for `addr` on `ifindex`: one RTM_NEWNEIGH, or ENOENT when the kernel has none.
std::vector<std::uint8_t> encode_get_neigh(std::uint32_t seq, int ifindex,
                                           const wire::IpAddr& addr);
// RTM_NEWNEIGH with NTF_USE (what `ip neigh ... use` sends): the kernel runs neigh_event_send()
// as if it had a packet for the neighbour: ARP / neighbour solicitation for an unresolved
// entry, DELAY then a unicast probe for a STALE one, nothing but "used now" for a REACHABLE
// one. Asks for an acknowledgement (an NlError with error 0).
std::vector<std::uint8_t> encode_use_neigh(std::uint32_t seq, int ifindex,
                                           const wire::IpAddr& addr);
// RTM_GETADDR dump of every IPv4 and IPv6 address of the namespace: RTM_NEWADDR messages, then
// NLMSG_DONE.
std::vector<std::uint8_t> encode_dump_addresses(std::uint32_t seq);

// --- what the resolver needs from replies and notifications ---------------------------------

struct NlRoute {
  std::uint32_t seq = 0;
  std::uint32_t pid = 0;
  bool deleted = false;                   // RTM_DELROUTE
  std::uint8_t type = 0;                  // rtm_type: RTN_UNICAST, RTN_LOCAL, RTN_UNREACHABLE, ...
  int oif = 0;                            // RTA_OIF
  std::optional<wire::IpAddr> gateway;    // RTA_GATEWAY, or RTA_VIA (IPv4 over an IPv6 next hop)
  std::optional<wire::IpAddr> prefsrc;    // RTA_PREFSRC
  std::optional<std::uint8_t> hop_limit;  // RTAX_HOPLIMIT in RTA_METRICS, when the route sets one
};
struct NlNeigh {
  std::uint32_t seq = 0;
  std::uint32_t pid = 0;
  bool deleted = false;  // RTM_DELNEIGH
  int ifindex = 0;
  wire::IpAddr addr;
  std::uint16_t nud_state = 0;  // NUD_* bits
  std::optional<wire::MacAddr> lladdr;
};
struct NlAddr {
  std::uint32_t seq = 0;
  std::uint32_t pid = 0;
  bool deleted = false;  // RTM_DELADDR
  int ifindex = 0;
  wire::IpAddr addr;  // IFA_LOCAL when present (IPv4), else IFA_ADDRESS
};
struct NlDone {  // the end of a dump
  std::uint32_t seq = 0;
  std::uint32_t pid = 0;
};
struct NlError {
  std::uint32_t seq = 0;
  std::uint32_t pid = 0;
  int error = 0;  // positive errno; 0 is an acknowledgement
};
using NlMessage = std::variant<NlRoute, NlNeigh, NlAddr, NlDone, NlError>;

// Whether `m` answers a request of the socket with port id `port_id` (else a notification).
bool is_reply(const NlMessage& m, std::uint32_t port_id);

// Decodes every message in a datagram read from a NETLINK_ROUTE socket; skips message types
// and address families it does not know and stops at the first truncated message.
std::vector<NlMessage> decode_netlink(std::span<const std::uint8_t> datagram);

}  // namespace xroce::net
