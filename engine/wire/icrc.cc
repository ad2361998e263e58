#include "wire/icrc.h"

#include <isa-l/crc.h>

#include <array>
#include <cassert>
#include <cstring>

#include "wire/opcode.h"

namespace xroce::wire {
namespace {

// zlib crc32() of the 8-byte 0xFF placeholder for the LRH that RoCEv2 does not have. rxe seeds
// its raw register with 0xDEBB20E3 instead, which is the same state before the final inversion.
constexpr std::uint32_t kCrcOfLrhPlaceholder = ~std::uint32_t{0xDEBB20E3};

constexpr std::size_t kMaxMaskedBytes = kIpv6HeaderBytes + kUdpHeaderBytes + kBthBytes;
constexpr std::size_t kUdpChecksumOffset = 6;
constexpr std::size_t kBthResv8aOffset = 4;  // FECN, BECN, Resv6a

// Sets the variant fields of the IP, UDP and BTH headers to ones, in place (PROTOCOL.md §1.9).
// Returns the length of the masked prefix.
std::size_t mask_variant_fields(std::uint8_t* p, bool v6) {
  std::size_t ip_len;
  if (v6) {
    ip_len = kIpv6HeaderBytes;
    // Version stays; traffic class and flow label become ones.
    p[0] |= 0x0F;
    p[1] = 0xFF;
    p[2] = 0xFF;
    p[3] = 0xFF;
    p[7] = 0xFF;  // hop limit
  } else {
    ip_len = kIpv4HeaderBytes;
    p[1] = 0xFF;   // TOS (DSCP + ECN)
    p[8] = 0xFF;   // TTL
    p[10] = 0xFF;  // header checksum
    p[11] = 0xFF;
  }
  std::uint8_t* udp = p + ip_len;
  udp[kUdpChecksumOffset] = 0xFF;
  udp[kUdpChecksumOffset + 1] = 0xFF;
  udp[kUdpHeaderBytes + kBthResv8aOffset] = 0xFF;
  return ip_len + kUdpHeaderBytes + kBthBytes;
}

}  // namespace

std::uint32_t icrc_compute(Bytes ip_datagram) {
  assert(!ip_datagram.empty());
  const bool v6 = (ip_datagram[0] >> 4) == 6;
  const std::size_t prefix =
      (v6 ? kIpv6HeaderBytes : kIpv4HeaderBytes) + kUdpHeaderBytes + kBthBytes;
  assert(ip_datagram.size() >= prefix);
  std::array<std::uint8_t, kMaxMaskedBytes> masked;
  std::memcpy(masked.data(), ip_datagram.data(), prefix);
  mask_variant_fields(masked.data(), v6);
  // crc32_gzip_refl(previous, ...) continues a zlib-style CRC: it inverts on entry and exit.
  std::uint32_t crc = crc32_gzip_refl(kCrcOfLrhPlaceholder, masked.data(), prefix);
  return crc32_gzip_refl(crc, ip_datagram.data() + prefix, ip_datagram.size() - prefix);
}

}  // namespace xroce::wire
