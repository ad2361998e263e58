#include "frame_edit.h"

namespace xroce::sw {

namespace {

constexpr std::size_t kEthHeaderBytes = 14;
constexpr std::size_t kVlanTagBytes = 4;
constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
constexpr std::uint16_t kEtherTypeIpv6 = 0x86DD;
constexpr std::uint16_t kEtherTypeVlan = 0x8100;
constexpr std::uint16_t kEtherTypeQinQ = 0x88A8;
constexpr std::size_t kIpv6HeaderBytes = 40;
constexpr std::size_t kUdpHeaderBytes = 8;
constexpr std::uint8_t kProtoUdp = 17;

std::uint16_t load16(std::span<const std::uint8_t> f, std::size_t at) {
  return static_cast<std::uint16_t>(f[at] << 8 | f[at + 1]);
}
void store16(std::span<std::uint8_t> f, std::size_t at, std::uint16_t v) {
  f[at] = static_cast<std::uint8_t>(v >> 8);
  f[at + 1] = static_cast<std::uint8_t>(v);
}

// One's-complement sum of big-endian 16-bit words (an odd last byte padded with zero).
std::uint32_t sum16(std::span<const std::uint8_t> bytes, std::uint32_t sum = 0) {
  std::size_t i = 0;
  for (; i + 1 < bytes.size(); i += 2)
    sum += static_cast<std::uint32_t>(bytes[i] << 8 | bytes[i + 1]);
  if (i < bytes.size()) sum += static_cast<std::uint32_t>(bytes[i] << 8);
  return sum;
}

std::uint16_t fold(std::uint32_t sum) {
  while (sum >> 16)
    sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(sum);
}

bool parse_ipv4(std::span<const std::uint8_t> f, FrameInfo& info) {
  const std::size_t l3 = info.l3_offset;
  if (f.size() < l3 + 20 || (f[l3] >> 4) != 4) return false;
  const std::size_t ihl = static_cast<std::size_t>(f[l3] & 0x0F) * 4;
  if (ihl < 20 || f.size() < l3 + ihl) return false;
  info.ipv4 = true;
  info.ecn = static_cast<Ecn>(f[l3 + 1] & 0x03);
  info.l4_protocol = f[l3 + 9];
  info.l4_offset = l3 + ihl;
  const std::uint16_t frag = load16(f, l3 + 6);
  info.ipv4_fragment = (frag & 0x3FFF) != 0;  // MF set or a non-zero offset
  return true;
}

bool parse_ipv6(std::span<const std::uint8_t> f, FrameInfo& info) {
  const std::size_t l3 = info.l3_offset;
  if (f.size() < l3 + kIpv6HeaderBytes || (f[l3] >> 4) != 6) return false;
  info.ipv6 = true;
  // Traffic class straddles bytes 0 and 1: its low two bits (ECN) are bits 5:4 of byte 1.
  info.ecn = static_cast<Ecn>((f[l3 + 1] >> 4) & 0x03);
  info.l4_protocol = f[l3 + 6];
  info.l4_offset = l3 + kIpv6HeaderBytes;
  return true;
}

}  // namespace

std::optional<FrameInfo> classify(std::span<const std::uint8_t> frame) {
  if (frame.size() < kEthHeaderBytes) return std::nullopt;
  FrameInfo info;
  std::size_t at = 12;
  std::uint16_t type = load16(frame, at);
  while ((type == kEtherTypeVlan || type == kEtherTypeQinQ) &&
         frame.size() >= at + kVlanTagBytes + 2) {
    at += kVlanTagBytes;
    type = load16(frame, at);
  }
  info.l3_offset = at + 2;
  const bool ip = type == kEtherTypeIpv4   ? parse_ipv4(frame, info)
                  : type == kEtherTypeIpv6 ? parse_ipv6(frame, info)
                                           : false;
  if (!ip || info.l4_protocol != kProtoUdp || info.ipv4_fragment) return info;
  // A RoCE frame: UDP to 4791 with at least the BTH opcode byte after the UDP header.
  const std::size_t udp = info.l4_offset;
  if (frame.size() >= udp + kUdpHeaderBytes + 1 && load16(frame, udp + 2) == kRoceV2Port) {
    info.roce = true;
    info.bth_opcode = frame[udp + kUdpHeaderBytes];
  }
  return info;
}

std::uint16_t ipv4_header_checksum(std::span<const std::uint8_t> header) {
  return static_cast<std::uint16_t>(~fold(sum16(header)));
}

namespace {

// Writes `to` into the ECN field of an IPv4 or IPv6 packet (false for anything else), fixing
// the IPv4 header checksum incrementally.
bool set_ecn(std::span<std::uint8_t> frame, const FrameInfo& info, Ecn to) {
  const std::size_t l3 = info.l3_offset;
  const auto bits = static_cast<std::uint8_t>(to);
  if (info.ipv4) {
    // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), m the 16-bit word holding the TOS byte.
    const std::uint16_t old_word = load16(frame, l3);
    frame[l3 + 1] = static_cast<std::uint8_t>((frame[l3 + 1] & ~0x03) | bits);
    const std::uint16_t new_word = load16(frame, l3);
    const std::uint16_t old_sum = load16(frame, l3 + 10);
    const std::uint32_t sum = static_cast<std::uint16_t>(~old_sum) +
                              static_cast<std::uint16_t>(~old_word) + std::uint32_t{new_word};
    store16(frame, l3 + 10, static_cast<std::uint16_t>(~fold(sum)));
    return true;
  }
  if (info.ipv6) {
    // The traffic class straddles bytes 0 and 1: its ECN bits are bits 5-4 of byte 1.
    frame[l3 + 1] = static_cast<std::uint8_t>((frame[l3 + 1] & ~0x30) | (bits << 4));
    return true;
  }
  return false;
}

}  // namespace

bool mark_ce(std::span<std::uint8_t> frame, const FrameInfo& info) {
  return is_ect(info.ecn) && set_ecn(frame, info, Ecn::kCe);
}

bool bleach_ecn(std::span<std::uint8_t> frame, const FrameInfo& info) {
  return info.ecn != Ecn::kNotEct && set_ecn(frame, info, Ecn::kNotEct);
}

}  // namespace xroce::sw
