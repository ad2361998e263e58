#include "net/sim/frame_edit.h"

namespace xroce::net::sim {
namespace {

constexpr std::size_t kMacLen = 6;
constexpr std::size_t kEthHeaderLen = 14;
constexpr std::size_t kVlanTagLen = 4;
constexpr std::uint16_t kEtherTypeVlan = 0x8100;
constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
constexpr std::uint16_t kEtherTypeIpv6 = 0x86DD;
constexpr std::size_t kIpv4MinHeaderLen = 20;
constexpr std::size_t kIpv6HeaderLen = 40;
constexpr std::size_t kUdpHeaderLen = 8;
constexpr std::size_t kBthLen = 12;
constexpr std::size_t kBthMaskedByte = 4;  // FECN, BECN, Resv6a: masked out of the ICRC
constexpr std::uint8_t kIpProtoUdp = 17;
constexpr std::uint8_t kEcnMask = 0x03;
constexpr std::uint8_t kIpv6EcnMaskByte1 = 0x30;  // ECN bits of the traffic class in byte 1

}  // namespace

std::optional<FrameLayout> parse_layout(wire::Bytes frame) {
  if (frame.size() < kEthHeaderLen) return std::nullopt;
  std::size_t off = 2 * kMacLen;
  std::uint16_t ethertype = wire::load_be16(&frame[off]);
  off += 2;
  if (ethertype == kEtherTypeVlan) {
    if (frame.size() < kEthHeaderLen + kVlanTagLen) return std::nullopt;
    ethertype = wire::load_be16(&frame[off + 2]);
    off += kVlanTagLen;
  }
  FrameLayout layout;
  layout.ip_offset = off;
  std::size_t ip_header_len = 0;
  std::uint8_t protocol = 0;
  if (ethertype == kEtherTypeIpv4) {
    if (frame.size() < off + kIpv4MinHeaderLen || (frame[off] >> 4) != 4) return std::nullopt;
    ip_header_len = std::size_t{frame[off] & 0x0Fu} * 4;
    if (ip_header_len < kIpv4MinHeaderLen || frame.size() < off + ip_header_len) {
      return std::nullopt;
    }
    protocol = frame[off + 9];
  } else if (ethertype == kEtherTypeIpv6) {
    if (frame.size() < off + kIpv6HeaderLen || (frame[off] >> 4) != 6) return std::nullopt;
    layout.ipv6 = true;
    ip_header_len = kIpv6HeaderLen;
    protocol = frame[off + 6];
  } else {
    return std::nullopt;
  }
  const std::size_t udp = off + ip_header_len;
  if (protocol == kIpProtoUdp && frame.size() >= udp + kUdpHeaderLen) layout.udp_offset = udp;
  return layout;
}

std::optional<wire::MacAddr> destination_mac(wire::Bytes frame) {
  if (frame.size() < kMacLen) return std::nullopt;
  wire::MacAddr mac;
  for (std::size_t i = 0; i < kMacLen; ++i)
    mac[i] = frame[i];
  return mac;
}

std::optional<wire::IpAddr> destination_ip(wire::Bytes frame) {
  const auto layout = parse_layout(frame);
  if (!layout) return std::nullopt;
  wire::IpAddr ip;
  const std::uint8_t* p = &frame[layout->ip_offset];
  if (layout->ipv6) {
    for (std::size_t i = 0; i < 16; ++i)
      ip.bytes[i] = p[24 + i];
  } else {
    ip.bytes[10] = 0xFF;
    ip.bytes[11] = 0xFF;
    for (std::size_t i = 0; i < 4; ++i)
      ip.bytes[12 + i] = p[16 + i];
  }
  return ip;
}

std::optional<std::uint16_t> udp_source_port(wire::Bytes frame) {
  const auto layout = parse_layout(frame);
  if (!layout || !layout->udp_offset) return std::nullopt;
  return wire::load_be16(&frame[*layout->udp_offset]);
}

std::optional<wire::Ecn> ecn_of(wire::Bytes frame) {
  const auto layout = parse_layout(frame);
  if (!layout) return std::nullopt;
  const std::uint8_t* p = &frame[layout->ip_offset];
  const std::uint8_t bits = layout->ipv6 ? (p[1] >> 4) & kEcnMask : p[1] & kEcnMask;
  return static_cast<wire::Ecn>(bits);
}

std::uint16_t ipv4_header_checksum(wire::Bytes header) {
  constexpr std::size_t kChecksumOffset = 10;
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i + 1 < header.size(); i += 2) {
    if (i == kChecksumOffset) continue;
    sum += wire::load_be16(&header[i]);
  }
  while (sum >> 16)
    sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

bool mark_ce(wire::MutableBytes frame) {
  const auto layout = parse_layout(frame);
  if (!layout) return false;
  std::uint8_t* p = &frame[layout->ip_offset];
  if (layout->ipv6) {
    p[1] |= kIpv6EcnMaskByte1;
    return true;
  }
  p[1] |= kEcnMask;
  const std::size_t header_len = std::size_t{p[0] & 0x0Fu} * 4;
  wire::store_be16(p + 10, ipv4_header_checksum(wire::Bytes(p, header_len)));
  return true;
}

std::optional<CoveredRange> icrc_covered_range(wire::Bytes frame) {
  const auto layout = parse_layout(frame);
  if (!layout || !layout->udp_offset) return std::nullopt;
  const std::size_t bth = *layout->udp_offset + kUdpHeaderLen;
  // The UDP length bounds the datagram (Ethernet may pad after it, docs/protocol.md §1.1).
  const std::size_t udp_end =
      *layout->udp_offset + wire::load_be16(&frame[*layout->udp_offset + 4]);
  const std::size_t end = udp_end < frame.size() ? udp_end : frame.size();
  if (end < bth + kBthLen) return std::nullopt;
  return CoveredRange{bth, end, bth + kBthMaskedByte};
}

}  // namespace xroce::net::sim
