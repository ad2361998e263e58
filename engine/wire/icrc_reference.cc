#include "wire/icrc_reference.h"

#include <cassert>
#include <vector>

namespace xroce::wire::reference {

std::uint32_t crc32(Bytes data) {
  constexpr std::uint32_t kReflectedPoly = 0xEDB88320;
  std::uint32_t reg = 0xFFFFFFFF;
  for (std::uint8_t byte : data) {
    reg ^= byte;
    for (int bit = 0; bit < 8; ++bit) {
      reg = (reg & 1) ? (reg >> 1) ^ kReflectedPoly : reg >> 1;
    }
  }
  return ~reg;
}

std::uint32_t icrc(Bytes ip_datagram) {
  assert(!ip_datagram.empty());
  const bool v6 = (ip_datagram[0] >> 4) == 6;
  const std::size_t ip_len = v6 ? 40 : 20;
  assert(ip_datagram.size() >= ip_len + 8 + 12);

  // 8 bytes of ones stand for the LRH, then the datagram with its variant fields masked.
  std::vector<std::uint8_t> s(8, 0xFF);
  s.insert(s.end(), ip_datagram.begin(), ip_datagram.end());
  std::uint8_t* ip = s.data() + 8;
  if (v6) {
    ip[0] |= 0x0F;  // traffic class (high nibble)
    ip[1] = 0xFF;   // traffic class (low nibble), flow label
    ip[2] = 0xFF;
    ip[3] = 0xFF;
    ip[7] = 0xFF;  // hop limit
  } else {
    ip[1] = 0xFF;   // TOS
    ip[8] = 0xFF;   // TTL
    ip[10] = 0xFF;  // header checksum
    ip[11] = 0xFF;
  }
  std::uint8_t* udp = ip + ip_len;
  udp[6] = 0xFF;  // UDP checksum
  udp[7] = 0xFF;
  udp[8 + 4] = 0xFF;  // BTH byte 4: FECN, BECN, Resv6a
  return crc32(s);
}

}  // namespace xroce::wire::reference
