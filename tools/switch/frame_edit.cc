#include "frame_edit.h"

namespace xroce::sw {

std::optional<FrameInfo> classify(std::span<const std::uint8_t> frame) {
  if (frame.size() < wire::kEthHeaderBytes) return std::nullopt;
  const wire::FrameLayout l = wire::walk_frame(frame);
  FrameInfo info;
  info.layout = l;
  info.l3_offset = l.ip_offset;
  // An IPv4 header whose options do not fit is parsed as nothing.
  if (!l.has_ip() || l.stop == wire::WalkStop::kTruncatedIp) return info;
  info.ipv4 = l.ip == wire::IpVersion::kV4;
  info.ipv6 = l.ip == wire::IpVersion::kV6;
  info.ecn = wire::ecn_of(frame, l);
  info.l4_protocol = l.ip_protocol;
  info.l4_offset = l.ip_offset + l.ip_header_bytes;
  info.ipv4_fragment = l.ipv4_fragment;
  if (!l.has_udp() || info.ipv4_fragment) return info;
  // A RoCE frame: UDP to 4791 with at least the BTH opcode byte after the UDP header.
  if (frame.size() > l.udp_payload_offset() &&
      wire::load_be16(&frame[l.udp_offset + 2]) == kRoceV2Port) {
    info.roce = true;
    info.bth_opcode = frame[l.udp_payload_offset()];
  }
  return info;
}

bool mark_ce(std::span<std::uint8_t> frame, const FrameInfo& info) {
  if (!is_ect(info.ecn) || !(info.ipv4 || info.ipv6)) return false;
  wire::set_ecn_ce(frame, info.layout);
  return true;
}

bool bleach_ecn(std::span<std::uint8_t> frame, const FrameInfo& info) {
  if (info.ecn == Ecn::kNotEct || !(info.ipv4 || info.ipv6)) return false;
  wire::set_ecn(frame, info.layout, Ecn::kNotEct);
  return true;
}

}  // namespace xroce::sw
