// A plain, obviously-correct ICRC for tests and benchmarks only: it materialises the whole
// masked string of docs/protocol.md §1.7 and runs a bit-at-a-time CRC-32 over it. The engine uses
// icrc_compute() (icrc.h); the two must always agree.
#pragma once

#include <cstdint>

#include "wire/byteorder.h"

namespace xroce::wire::reference {

// Bit-at-a-time CRC-32 (IEEE 802.3 reflected, as zlib's crc32(0, data, len)).
std::uint32_t crc32(Bytes data);

// Same contract as icrc_compute(): `ip_datagram` from the IP header to the byte before the ICRC.
std::uint32_t icrc(Bytes ip_datagram);

}  // namespace xroce::wire::reference
