#include "wire/frame.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "wire/icrc.h"

namespace xroce::wire {
namespace {

constexpr std::size_t kMaxUdpLength = 0xFFFF;
constexpr std::uint8_t kEcnMask = 0x3;

// Verifies a non-zero UDP checksum over the IPv4/IPv6 pseudo-header and the datagram, or
// accepts one the sender's kernel left for checksum offload: the folded pseudo-header sum alone
// (CHECKSUM_PARTIAL, `~csum_tcpudp_magic(...)` in udp_set_csum), which a veth hands to its peer
// unfilled because the peer's kernel trusts it. An XDP reader sees those bytes (a UDP socket
// sending with segmentation offload, engine/net/udp_port.h, on the other end of a veth); the
// ICRC, checked next, covers every byte the checksum would (docs/protocol.md §1.7).
bool udp_checksum_ok(const std::uint8_t* ip, bool v6, const std::uint8_t* udp,
                     std::size_t udp_len) {
  std::uint32_t sum =
      v6 ? ones_complement_sum(Bytes(ip + 8, 32)) : ones_complement_sum(Bytes(ip + 12, 8));
  sum += kIpProtoUdp;
  sum += static_cast<std::uint32_t>(udp_len);
  if (load_be16(udp + 6) == fold_ones_complement(sum)) return true;  // offload pending
  sum = ones_complement_sum(Bytes(udp, udp_len), sum);
  return fold_ones_complement(sum) == 0xFFFF;
}

std::uint8_t pad_for(std::size_t payload_len) {
  return static_cast<std::uint8_t>((4 - (payload_len & 3)) & 3);
}

}  // namespace

std::string to_string(const IpAddr& ip) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ip.is_v4()) {
    inet_ntop(AF_INET, ip.bytes.data() + 12, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, ip.bytes.data(), buf, sizeof buf);
  }
  return buf;
}

const char* to_string(Ecn ecn) {
  switch (ecn) {
    case Ecn::kNotEct:
      return "Not-ECT";
    case Ecn::kEct1:
      return "ECT(1)";
    case Ecn::kEct0:
      return "ECT(0)";
    case Ecn::kCe:
      return "CE";
  }
  return "?";
}

const char* to_string(FrameError e) {
  switch (e) {
    case FrameError::kTruncated:
      return "truncated frame";
    case FrameError::kNotIp:
      return "not IPv4 or IPv6";
    case FrameError::kBadIpHeader:
      return "bad IP header (version, options, checksum or fragment)";
    case FrameError::kNotUdp:
      return "not UDP";
    case FrameError::kNotRoce:
      return "UDP destination port is not 4791";
    case FrameError::kBadUdpLength:
      return "bad UDP length";
    case FrameError::kBadUdpChecksum:
      return "bad UDP checksum";
    case FrameError::kBadHeaders:
      return "bad transport headers";
    case FrameError::kBadPad:
      return "bad pad count";
    case FrameError::kBufferTooSmall:
      return "output buffer too small";
    case FrameError::kBadAddress:
      return "source and destination are not both IPv4 or both IPv6";
  }
  return "unknown frame error";
}

std::size_t frame_bytes(const FrameAddress& addr, const TransportHeaders& hdr,
                        std::size_t payload_len) {
  return envelope_bytes(addr) + hdr.info().header_bytes() + payload_len + pad_for(payload_len) +
         kIcrcBytes;
}

Result<std::size_t, FrameError> encode_frame(const FrameAddress& addr, const TransportHeaders& hdr,
                                             Bytes payload, MutableBytes out) {
  if (addr.src_ip.is_v4() != addr.dst_ip.is_v4()) return Err{FrameError::kBadAddress};
  const OpcodeInfo* info = find_opcode(static_cast<std::uint8_t>(hdr.bth.opcode));
  if (info == nullptr) return Err{FrameError::kBadHeaders};
  if (!info->has_payload && !payload.empty()) return Err{FrameError::kBadUdpLength};
  const std::uint8_t pad = pad_for(payload.size());
  const std::size_t udp_len =
      kUdpHeaderBytes + info->header_bytes() + payload.size() + pad + kIcrcBytes;
  const std::size_t ip_payload_limit = kMaxUdpLength - (addr.src_ip.is_v4() ? kIpv4HeaderBytes : 0);
  if (udp_len > ip_payload_limit) return Err{FrameError::kBadUdpLength};
  const std::size_t header_bytes = envelope_bytes(addr);  // through the UDP header
  const std::size_t total = header_bytes - kUdpHeaderBytes + udp_len;
  if (out.size() < total) return Err{FrameError::kBufferTooSmall};

  // No UDP checksum, as rxe sends (rxe_net.c prepare_udp_hdr).
  write_envelope(addr, UdpFields{kRoceV2Port, 0}, udp_len - kUdpHeaderBytes, out.data());
  std::uint8_t* p = out.data() + header_bytes;
  std::uint8_t* const ip =
      p - kUdpHeaderBytes - (addr.src_ip.is_v4() ? kIpv4HeaderBytes : kIpv6HeaderBytes);

  TransportHeaders padded = hdr;
  padded.bth.pad_count = pad;
  auto n = encode_transport_headers(padded, MutableBytes(p, info->header_bytes()));
  if (!n) return Err{FrameError::kBadHeaders};
  p += *n;
  // A payload already where the frame has it (written in place by the caller) stays.
  if (!payload.empty() && payload.data() != p) std::memcpy(p, payload.data(), payload.size());
  p += payload.size();
  std::memset(p, 0, pad);
  p += pad;
  store_icrc(p, icrc_compute(Bytes(ip, static_cast<std::size_t>(p - ip))));
  return total;
}

namespace {

// Each step of decode_fresh takes the bytes from its header onwards and the frame so far.
struct Cursor {
  const std::uint8_t* p;
  std::size_t left;
};

// The addresses as far as the walk got: MACs and tags always, IP fields once the IP header is
// there.
void fill_address(Bytes frame, const FrameLayout& l, DecodedFrame& f) {
  if (l.has_ip()) {
    f.addr = address_of(frame, l);
    return;
  }
  std::copy_n(frame.begin(), kMacBytes, f.addr.dst_mac.begin());
  std::copy_n(frame.begin() + kMacBytes, kMacBytes, f.addr.src_mac.begin());
  if (const auto inner = l.inner_vlan()) {
    f.addr.vlan_tci = inner->tci;
    f.addr.vlan_tpid = inner->tpid;
  }
  f.addr.outer_vlan = l.outer_vlan();
}

// What the walk says about the frame before its IP header is judged: whether it is ours at all.
std::optional<FrameError> judge_walk(const FrameLayout& l) {
  switch (l.stop) {
    case WalkStop::kTruncatedL2:
      return FrameError::kTruncated;
    case WalkStop::kNotIp:
      return FrameError::kNotIp;
    case WalkStop::kBadIpVersion:
      return FrameError::kBadIpHeader;
    case WalkStop::kNotUdp:
      return FrameError::kNotUdp;
    case WalkStop::kTruncatedIp:
      // IPv4 options are refused before the frame is found short of them.
      return l.has_ip() && l.ip_header_bytes != kIpv4HeaderBytes ? FrameError::kBadIpHeader
                                                                 : FrameError::kTruncated;
    case WalkStop::kTruncatedUdp:
    case WalkStop::kUdp:
      return std::nullopt;
  }
  return FrameError::kTruncated;
}

// The IP header's own rules; on return c.left is the IP payload length the header announces.
std::optional<FrameError> judge_ipv4(const FrameLayout& l, Cursor& c) {
  const std::uint8_t* ip = c.p;
  if (l.ip_header_bytes != kIpv4HeaderBytes) return FrameError::kBadIpHeader;  // no options
  const std::size_t total = l.ip_datagram_bytes;
  if (total < kIpv4HeaderBytes) return FrameError::kBadIpHeader;
  if (total > c.left) return FrameError::kTruncated;
  if (l.ipv4_fragment) return FrameError::kBadIpHeader;
  if (!ipv4_header_checksum_ok(Bytes(ip, kIpv4HeaderBytes))) return FrameError::kBadIpHeader;
  c.p += kIpv4HeaderBytes;
  c.left = total - kIpv4HeaderBytes;
  return std::nullopt;
}

std::optional<FrameError> judge_ipv6(const FrameLayout& l, Cursor& c, const DecodedFrame& f) {
  // IPv4-mapped addresses never appear in IPv6 headers (RFC 4291 2.5.5.2); FrameAddress uses
  // that form for IPv4, so accepting one would make the frame read as IPv4.
  if (f.addr.src_ip.is_v4() || f.addr.dst_ip.is_v4()) return FrameError::kBadIpHeader;
  const std::size_t payload_len = l.ip_datagram_bytes - kIpv6HeaderBytes;
  if (payload_len > c.left - kIpv6HeaderBytes) return FrameError::kTruncated;
  c.p += kIpv6HeaderBytes;
  c.left = payload_len;
  return std::nullopt;
}

// Decodes UDP; on return c.left is the UDP payload length less the ICRC.
std::optional<FrameError> decode_udp(Cursor& c, const std::uint8_t* ip, bool v6, DecodedFrame& f) {
  if (c.left < kUdpHeaderBytes) return FrameError::kTruncated;
  if (load_be16(c.p + 2) != kRoceV2Port) return FrameError::kNotRoce;
  f.udp_length = load_be16(c.p + 4);
  f.udp_checksum = load_be16(c.p + 6);
  // The UDP length, not the IP or Ethernet length, says where the ICRC is.
  if (f.udp_length > c.left) return FrameError::kBadUdpLength;
  if (f.udp_length < kUdpHeaderBytes + kBthBytes + kIcrcBytes) return FrameError::kBadUdpLength;
  if (f.udp_checksum != 0 && !udp_checksum_ok(ip, v6, c.p, f.udp_length)) {
    return FrameError::kBadUdpChecksum;
  }
  c.p += kUdpHeaderBytes;
  c.left = f.udp_length - kUdpHeaderBytes - kIcrcBytes;
  return std::nullopt;
}

std::optional<FrameError> decode_transport(Cursor& c, DecodedFrame& f) {
  if (auto e = decode_transport_headers_into(Bytes(c.p, c.left), f.hdr)) {
    f.hdr = TransportHeaders{};
    f.header_error = *e;
    return FrameError::kBadHeaders;
  }
  const OpcodeInfo& info = f.hdr.info();
  const std::size_t data_len = c.left - info.header_bytes();
  if (f.hdr.bth.pad_count > data_len) return FrameError::kBadPad;
  if (!info.has_payload && data_len != 0) {
    // Opcodes without payload carry neither payload nor pad.
    return f.hdr.bth.pad_count != 0 ? FrameError::kBadPad : FrameError::kBadUdpLength;
  }
  f.payload = Bytes(c.p + info.header_bytes(), data_len - f.hdr.bth.pad_count);
  c.p += c.left;
  c.left = 0;
  return std::nullopt;
}

// decode_frame_into on a freshly constructed DecodedFrame. Frames that are not ours are told
// apart (not IP, not UDP, not 4791) before anything is judged broken.
std::optional<FrameError> decode_fresh(Bytes frame, DecodedFrame& f, bool icrc_verified) {
  const FrameLayout l = walk_frame(frame);
  if (l.stop == WalkStop::kTruncatedL2 && frame.size() < kEthHeaderBytes) {
    return FrameError::kTruncated;
  }
  fill_address(frame, l, f);
  if (auto e = judge_walk(l)) return e;
  f.ip_offset = static_cast<std::uint16_t>(l.ip_offset);
  const bool v6 = l.ip == IpVersion::kV6;
  if (!v6) f.ipv4_checksum = load_be16(&frame[l.ip_offset + 10]);
  Cursor c{frame.data() + l.ip_offset, frame.size() - l.ip_offset};
  const std::uint8_t* const ip = c.p;
  if (auto e = v6 ? judge_ipv6(l, c, f) : judge_ipv4(l, c)) return e;
  f.ecn = static_cast<Ecn>(f.addr.traffic_class & kEcnMask);
  if (auto e = decode_udp(c, ip, v6, f)) return e;
  const std::uint8_t* const icrc = c.p + c.left;
  f.icrc_wire = load_icrc(icrc);
  if (auto e = decode_transport(c, f)) return e;
  f.icrc_ok =
      icrc_verified || icrc_compute(Bytes(ip, static_cast<std::size_t>(icrc - ip))) == f.icrc_wire;
  return std::nullopt;
}

}  // namespace

std::array<std::uint8_t, 40> grh_area(Bytes frame, const DecodedFrame& decoded) {
  std::array<std::uint8_t, 40> grh{};
  const auto ip = frame.begin() + decoded.ip_offset;
  if (decoded.addr.src_ip.is_v4()) {
    std::copy_n(ip, kIpv4HeaderBytes, grh.begin() + (grh.size() - kIpv4HeaderBytes));
  } else {
    std::copy_n(ip, kIpv6HeaderBytes, grh.begin());
  }
  return grh;
}

std::optional<FrameError> decode_frame_into(Bytes frame, DecodedFrame& f, bool icrc_verified) {
  f = DecodedFrame{};
  return decode_fresh(frame, f, icrc_verified);
}

Result<DecodedFrame, FrameError> decode_frame(Bytes frame) {
  // Decoded in place in the result (one return object, so no copy of the ~270-byte frame).
  Result<DecodedFrame, FrameError> r{DecodedFrame{}};
  if (auto e = decode_fresh(frame, *r, false)) r = Err{*e};
  return r;
}

}  // namespace xroce::wire
