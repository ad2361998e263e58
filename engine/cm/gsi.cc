#include "cm/gsi.h"

namespace xroce::cm {

wire::TransportHeaders gsi_headers(std::uint32_t psn) {
  wire::TransportHeaders h;
  h.bth.opcode = wire::Opcode::kUdSendOnly;
  h.bth.pkey = kDefaultPkey;
  h.bth.dest_qp = wire::Qpn(kGsiQpn);
  h.bth.psn = wire::Psn(psn);
  h.deth = wire::Deth{wire::kGsiQkey, wire::Qpn(kGsiQpn)};
  return h;
}

std::optional<std::vector<std::uint8_t>> encode_gsi_frame(const wire::FrameAddress& addr,
                                                          std::uint32_t psn,
                                                          std::span<const std::uint8_t> mad) {
  const wire::TransportHeaders h = gsi_headers(psn);
  std::vector<std::uint8_t> frame(wire::frame_bytes(addr, h, mad.size()));
  auto n = wire::encode_frame(addr, h, mad, frame);
  if (!n) return std::nullopt;
  frame.resize(*n);
  return frame;
}

bool is_gsi_mad(const wire::DecodedFrame& f) {
  return f.hdr.bth.opcode == wire::Opcode::kUdSendOnly && f.hdr.bth.dest_qp.value() == kGsiQpn &&
         f.hdr.deth && f.hdr.deth->src_qp.value() == kGsiQpn &&
         f.hdr.deth->qkey == wire::kGsiQkey && f.payload.size() >= kMadBytes;
}

MadPeer peer_of(const wire::DecodedFrame& f) {
  MadPeer p;
  p.remote_gid = f.addr.src_ip.bytes;
  p.local_gid = f.addr.dst_ip.bytes;
  p.hop_limit = 64;  // our answers take the route's hop limit, not what is left of the peer's
  p.traffic_class = f.addr.traffic_class & 0xfc;  // without the ECN bits
  p.flow_label = f.addr.flow_label;
  return p;
}

}  // namespace xroce::cm
