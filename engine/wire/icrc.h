// ICRC, the invariant CRC at the end of every RoCEv2 packet (PROTOCOL.md §1.9).
//
// The ICRC is zlib's CRC-32 (IEEE 802.3, reflected, init and final XOR 0xFFFFFFFF) over
// 8 bytes of 0xFF, the IP header and UDP header and BTH with their variant fields set to ones,
// then everything after the BTH up to the ICRC. It is written least-significant byte first.
#pragma once

#include <cstddef>
#include <cstdint>

#include "wire/byteorder.h"

namespace xroce::wire {

inline constexpr std::size_t kIpv4HeaderBytes = 20;
inline constexpr std::size_t kIpv6HeaderBytes = 40;
inline constexpr std::size_t kUdpHeaderBytes = 8;

// Computes the ICRC of one RoCEv2 datagram. `ip_datagram` runs from the first byte of the IP
// header to the last byte before the ICRC (headers, payload and pad). The IP version is taken
// from its first nibble; IPv4 has no options (the ICRC masks assume a 20-byte header).
// Precondition (asserted): the datagram holds at least the IP and UDP headers and a BTH.
// Uses ISA-L's folding CRC-32 and never copies more than the 60 masked header bytes.
std::uint32_t icrc_compute(Bytes ip_datagram);

// The ICRC field is the one little-endian value in a RoCEv2 packet.
inline std::uint32_t load_icrc(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}
inline void store_icrc(std::uint8_t* p, std::uint32_t v) {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
  p[2] = static_cast<std::uint8_t>(v >> 16);
  p[3] = static_cast<std::uint8_t>(v >> 24);
}

}  // namespace xroce::wire
