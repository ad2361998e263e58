#include "cm/ip_service.h"

#include <cstring>

#include "wire/byteorder.h"

namespace xroce::cm {
namespace {

constexpr std::uint8_t kIpVersion4 = 4 << 4;  // "IPV" in the high nibble
constexpr std::uint8_t kIpVersion6 = 6 << 4;
constexpr std::size_t kSrcAddr = 4, kDstAddr = 20;

// IPv4 sits in the last four bytes with zeros before it (the kernel's union cma_ip_addr), not
// as an IPv4-mapped address.
void put_addr(std::uint8_t* p, const wire::IpAddr& a) {
  if (a.is_v4()) {
    std::memset(p, 0, 12);
    std::memcpy(p + 12, a.bytes.data() + 12, 4);
  } else {
    std::memcpy(p, a.bytes.data(), 16);
  }
}

wire::IpAddr get_addr(const std::uint8_t* p, bool v4) {
  if (v4) return wire::IpAddr::v4(wire::load_be32(p + 12));
  std::array<std::uint8_t, 16> b{};
  std::memcpy(b.data(), p, 16);
  return wire::IpAddr::v6(b);
}

}  // namespace

std::optional<PortSpace> port_space_of(std::uint64_t id) {
  if ((id & 0xffffffffff000000ull) != kIpServiceIdBase) return std::nullopt;
  switch (static_cast<PortSpace>(id >> 16)) {
    case PortSpace::kTcp:
      return PortSpace::kTcp;
    case PortSpace::kUdp:
      return PortSpace::kUdp;
    case PortSpace::kIb:
      return PortSpace::kIb;
    case PortSpace::kIpoib:
      return PortSpace::kIpoib;
  }
  return std::nullopt;
}

void encode_ip_header(const IpHeader& header, std::span<std::uint8_t> out) {
  std::uint8_t* p = out.data();
  p[0] = kIpHeaderVersion;
  p[1] = header.src.is_v4() ? kIpVersion4 : kIpVersion6;
  wire::store_be16(p + 2, header.src_port);
  put_addr(p + kSrcAddr, header.src);
  put_addr(p + kDstAddr, header.dst);
}

std::optional<IpHeader> decode_ip_header(std::span<const std::uint8_t> in) {
  if (in.size() < kIpHeaderBytes || in[0] != kIpHeaderVersion) return std::nullopt;
  const std::uint8_t version = in[1] & 0xf0;
  if (version != kIpVersion4 && version != kIpVersion6) return std::nullopt;
  const bool v4 = version == kIpVersion4;
  IpHeader h;
  h.src_port = wire::load_be16(in.data() + 2);
  h.src = get_addr(in.data() + kSrcAddr, v4);
  h.dst = get_addr(in.data() + kDstAddr, v4);
  return h;
}

}  // namespace xroce::cm
