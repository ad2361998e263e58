// Destination MACs for the AF_XDP port: the kernel's neighbour table, read over rtnetlink.
// A UDP port needs none of this: the kernel puts the Ethernet header on.
//
// Threading: free functions, each call opens its own socket; a worker calls them only when its
// cache misses (once per destination), never per packet.
#pragma once

#include <optional>

#include "wire/frame.h"

namespace xroce::daemon {

// The MAC the kernel has for `ip` on interface `ifindex`, if its entry is usable (reachable,
// stale, delay, probe, permanent).
std::optional<wire::MacAddr> lookup_neighbour(int ifindex, const wire::IpAddr& ip);

// Makes the kernel resolve `ip`: sends one empty UDP datagram to the discard port (9) out of
// `ifindex`, which makes the kernel ARP/NDP for it. Returns false if the send failed.
bool solicit_neighbour(int ifindex, const wire::IpAddr& ip);

}  // namespace xroce::daemon
