// The RDMA IP CM Service (IBA vol. 1 annex A11): how rdma_cm puts IP addressing on top of the
// IB CM. A connection to IP address A, port P in port space S uses service ID
// 0x0000000001SSPPPP (S: 0x06 TCP, 0x11 UDP, 0x3F IB; A11.2.1) and starts the REQ's (or
// SIDR_REQ's) private data with a 36-byte header carrying both IP addresses and the source
// port (A11.2.2), the kernel's struct cma_hdr. The consumer's private data follows it, so a
// REQ leaves 92 - 36 = 56 bytes to the consumer and a SIDR_REQ 216 - 36 = 180.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "wire/frame.h"

namespace xroce::cm {

// rdma_port_space values (the low 16 bits of the service ID's upper half).
enum class PortSpace : std::uint16_t {
  kIpoib = 0x0002,
  kIb = 0x013f,
  kTcp = 0x0106,
  kUdp = 0x0111
};

inline constexpr std::uint64_t kIpServiceIdBase = 0x0000000001000000ull;
inline constexpr std::uint64_t kIpServiceIdMask = 0xffffffffffff0000ull;  // port space only

inline constexpr std::uint64_t service_id(PortSpace space, std::uint16_t port) {
  return std::uint64_t{static_cast<std::uint16_t>(space)} << 16 | port;
}
// The port space and port of an IP-based service ID, or nullopt for another service ID.
std::optional<PortSpace> port_space_of(std::uint64_t service_id);
inline std::uint16_t port_of(std::uint64_t service_id) {
  return static_cast<std::uint16_t>(service_id);
}

inline constexpr std::size_t kIpHeaderBytes = 36;
inline constexpr std::uint8_t kIpHeaderVersion = 0x00;  // A11.2.2 "MajV/MinV"

struct IpHeader {
  std::uint16_t src_port = 0;  // the sender's port
  wire::IpAddr src;            // IPv4 addresses as IPv4-mapped
  wire::IpAddr dst;
};

// Writes the header into the first kIpHeaderBytes of `out` (which must be at least that long).
void encode_ip_header(const IpHeader& header, std::span<std::uint8_t> out);
// nullopt when the version or IP version is not one rdma_cm sends, or the two addresses are of
// different families.
std::optional<IpHeader> decode_ip_header(std::span<const std::uint8_t> in);

}  // namespace xroce::cm
