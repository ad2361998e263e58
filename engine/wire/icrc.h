// ICRC, the invariant CRC at the end of every RoCEv2 packet (Annex A17; docs/protocol.md §1.7).
//
// The ICRC is zlib's CRC-32 (IEEE 802.3, reflected, init and final XOR 0xFFFFFFFF) over
// 8 bytes of 0xFF, the IP header and UDP header and BTH with their variant fields set to ones,
// then everything after the BTH up to the ICRC. It is written least-significant byte first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "wire/byteorder.h"
#include "wire/frame_layout.h"

namespace xroce::wire {

// Computes the ICRC of one RoCEv2 datagram. `ip_datagram` runs from the first byte of the IP
// header to the last byte before the ICRC (headers, payload and pad). The IP version is taken
// from its first nibble; IPv4 has no options (the ICRC masks assume a 20-byte header).
// Precondition (asserted): the datagram holds at least the IP and UDP headers and a BTH.
// Uses ISA-L's folding CRC-32 and never copies more than the 60 masked header bytes.
std::uint32_t icrc_compute(Bytes ip_datagram);

// The IPv4 identification that makes `ip_datagram`'s ICRC equal `icrc_wire`, if there is one
// (whatever ID the datagram holds now). For a port that sees datagrams without their IP header
// (a UDP socket): the ICRC covers the identification, which the kernel does not pass up, and
// senders such as rxe set it. The CRC is affine in those 16 bits, so the ID is found by solving
// a 32 x 16 linear system over GF(2) (16 ICRCs of a zero datagram of the same length, cached
// per length and thread), not by trying 65536 values. A corrupted datagram has a solution with
// probability 2^-16: such a port checks 16 bits instead of 32 (the link's FCS still applies).
std::optional<std::uint16_t> icrc_solve_ipv4_id(Bytes ip_datagram, std::uint32_t icrc_wire);
// The same for a caller that has just computed the datagram's ICRC as it stands (`icrc_now`,
// icrc_compute of the same bytes; asserted in debug builds): it is not computed again. A port
// that checks every datagram first and solves only for those that fail pays one CRC, not two.
std::optional<std::uint16_t> icrc_solve_ipv4_id(Bytes ip_datagram, std::uint32_t icrc_wire,
                                                std::uint32_t icrc_now);

// What an IPv4 datagram's ICRC changes by (XOR) when its identification changes by `id_change`
// (XOR), for a datagram of `datagram_bytes` (IP header to the ICRC, exclusive). For a sender
// that knows which identification the kernel will give a datagram it did not build the IP
// header of (UDP segmentation offload numbers the segments of one send 0, 1, 2, ...): it fixes
// the ICRC without computing it again. Uses the solver's cached columns for that length.
std::uint32_t icrc_ipv4_id_change(std::size_t datagram_bytes, std::uint16_t id_change);

// The two ways icrc_compute advances the raw (un-inverted) CRC-32 register over short inputs,
// for tests that hold each against the reference: carry-less multiplies where the CPU has them
// (`carry_less`, for 16 bytes or more) and slicing-by-8, the fallback and the tail of the other.
namespace detail {
std::uint32_t crc32_register_update(std::uint32_t reg, Bytes bytes, bool carry_less);
bool carry_less_available();
}  // namespace detail

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
