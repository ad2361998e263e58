#include "net/sim/frame_edit.h"

#include <algorithm>

#include "wire/opcode.h"

namespace xroce::net::sim {
namespace {

constexpr std::size_t kBthMaskedByte = 4;  // FECN, BECN, Resv6a: masked out of the ICRC

}  // namespace

std::optional<FrameLayout> parse_layout(wire::Bytes frame) {
  const wire::FrameLayout l = wire::walk_frame(frame);
  if (!l.has_ip() || l.stop == wire::WalkStop::kTruncatedIp) return std::nullopt;
  FrameLayout layout;
  layout.ip_offset = l.ip_offset;
  layout.ipv6 = l.ip == wire::IpVersion::kV6;
  if (l.has_udp()) layout.udp_offset = l.udp_offset;
  return layout;
}

std::optional<wire::MacAddr> destination_mac(wire::Bytes frame) {
  if (frame.size() < wire::kMacBytes) return std::nullopt;
  wire::MacAddr mac;
  std::copy_n(frame.begin(), wire::kMacBytes, mac.begin());
  return mac;
}

std::optional<wire::IpAddr> destination_ip(wire::Bytes frame) {
  const wire::FrameLayout l = wire::walk_frame(frame);
  if (!l.has_ip()) return std::nullopt;
  return wire::address_of(frame, l).dst_ip;
}

std::optional<std::uint16_t> udp_source_port(wire::Bytes frame) {
  const wire::FrameLayout l = wire::walk_frame(frame);
  if (!l.has_udp()) return std::nullopt;
  return wire::load_be16(&frame[l.udp_offset]);
}

std::optional<wire::Ecn> ecn_of(wire::Bytes frame) {
  const wire::FrameLayout l = wire::walk_frame(frame);
  if (!l.has_ip()) return std::nullopt;
  return wire::ecn_of(frame, l);
}

bool mark_ce(wire::MutableBytes frame) {
  const wire::FrameLayout l = wire::walk_frame(frame);
  if (!l.has_ip()) return false;
  wire::set_ecn_ce(frame, l);
  return true;
}

std::optional<CoveredRange> icrc_covered_range(wire::Bytes frame) {
  const wire::FrameLayout l = wire::walk_frame(frame);
  if (!l.has_udp()) return std::nullopt;
  const std::size_t bth = l.udp_payload_offset();
  // The UDP length bounds the datagram (Ethernet may pad after it).
  const std::size_t udp_end = l.udp_offset + wire::load_be16(&frame[l.udp_offset + 4]);
  const std::size_t end = std::min(udp_end, frame.size());
  if (end < bth + wire::kBthBytes) return std::nullopt;
  return CoveredRange{bth, end, bth + kBthMaskedByte};
}

}  // namespace xroce::net::sim
