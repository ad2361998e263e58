// What the switch needs to know of a frame: where the IP and UDP headers are, the ECN
// codepoint, CE marking (with the IPv4 header checksum fixed), whether a frame is RoCEv2 and
// its BTH opcode. The layout is wire/frame_layout.h's, the walker every port uses (so VLAN and
// 802.1ad QinQ tags are taken as the XDP program takes them).
// No I/O; every read is bounds-checked against the frame length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "wire/frame_layout.h"

namespace xroce::sw {

inline constexpr std::uint16_t kRoceV2Port = 4791;

using wire::Ecn;
using wire::is_ect;
using wire::split_udp_superframe;

struct FrameInfo {
  std::size_t l3_offset = 0;  // after the Ethernet header and any 802.1Q/802.1ad tags
  bool ipv4 = false;
  bool ipv6 = false;
  std::uint8_t l4_protocol = 0;  // IPv4 protocol / IPv6 next header
  std::size_t l4_offset = 0;     // valid when ipv4 or ipv6
  bool ipv4_fragment = false;    // a non-first fragment or one with more to come
  Ecn ecn = Ecn::kNotEct;
  bool roce = false;            // UDP destination port 4791 with room for a BTH opcode
  std::uint8_t bth_opcode = 0;  // valid when roce
  wire::FrameLayout layout;     // what the fields above were read from
};

// Parses the headers of a frame; nullopt when it is shorter than an Ethernet header.
std::optional<FrameInfo> classify(std::span<const std::uint8_t> frame);

// Sets CE on an ECT(0)/ECT(1) IPv4 or IPv6 packet and, for IPv4, updates the header checksum
// incrementally (RFC 1624). Returns false (and leaves the frame alone) for anything else. The
// RoCE ICRC masks the TOS/traffic class, so it stays valid.
bool mark_ce(std::span<std::uint8_t> frame, const FrameInfo& info);
// Clears the ECN field (to Not-ECT) of an IPv4 or IPv6 packet that has one set, as a
// misconfigured hop that rewrites the TOS byte does; false (frame untouched) otherwise.
bool bleach_ecn(std::span<std::uint8_t> frame, const FrameInfo& info);

}  // namespace xroce::sw
