// In-place edits and lookups on Ethernet frame bytes that the simulated switch and wire need:
// locating the IP and UDP headers, ECN codepoints and CE marking, the region the ICRC covers.
// The layout comes from wire/frame_layout.h, the one walker (so VLAN and QinQ tags are taken
// as the ports take them). Every function bounds-checks and leaves a frame it cannot parse
// untouched.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "wire/byteorder.h"
#include "wire/frame_layout.h"

namespace xroce::net::sim {

// Offsets of the headers inside one frame (Ethernet II, up to two VLAN tags).
struct FrameLayout {
  std::size_t ip_offset = 0;
  bool ipv6 = false;
  std::optional<std::size_t> udp_offset;  // set when the IP payload is UDP and fits
};

std::optional<FrameLayout> parse_layout(wire::Bytes frame);

// The frame's destination MAC (first 6 bytes), if it has one.
std::optional<wire::MacAddr> destination_mac(wire::Bytes frame);
// The destination IP in GID form (IPv4 as ::ffff:a.b.c.d), if the frame is IPv4 or IPv6.
std::optional<wire::IpAddr> destination_ip(wire::Bytes frame);
// UDP source port, if the frame carries UDP.
std::optional<std::uint16_t> udp_source_port(wire::Bytes frame);

// The ECN bits of the IP header, if the frame is IP.
std::optional<wire::Ecn> ecn_of(wire::Bytes frame);
// Sets ECN to CE (IPv4 TOS / IPv6 traffic class low bits = 11) and, for IPv4, updates the
// header checksum. Both fields are masked out of the ICRC (rxe_icrc.c rxe_icrc_hdr masks it), so
// the frame stays valid. Returns false if the frame is not IP.
bool mark_ce(wire::MutableBytes frame);

// RFC 1071 checksum of an IPv4 header whose checksum field is taken as zero.
using wire::ipv4_header_checksum;

// Byte range [begin, end) that corruption may flip so that the ICRC check catches it: from the
// BTH to the end of the frame; the caller skips BTH byte 4 (FECN/BECN/Resv6a, masked out of
// the ICRC). nullopt if the frame is not UDP with at least a BTH after the UDP header.
struct CoveredRange {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t masked_byte = 0;  // BTH byte 4, inside [begin, end)
};
std::optional<CoveredRange> icrc_covered_range(wire::Bytes frame);

}  // namespace xroce::net::sim
