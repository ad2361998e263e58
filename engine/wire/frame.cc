#include "wire/frame.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "wire/icrc.h"

namespace xroce::wire {
namespace {

constexpr std::size_t kEthBytes = 14;
constexpr std::size_t kVlanTagBytes = 4;
constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
constexpr std::uint16_t kEtherTypeIpv6 = 0x86DD;
constexpr std::uint16_t kEtherTypeVlan = 0x8100;
constexpr std::uint8_t kIpProtoUdp = 17;
constexpr std::uint16_t kIpv4FlagDf = 0x4000;
constexpr std::uint16_t kIpv4FlagMf = 0x2000;
constexpr std::uint16_t kIpv4FragOffsetMask = 0x1FFF;
constexpr std::size_t kMaxUdpLength = 0xFFFF;
constexpr std::array<std::uint8_t, 12> kV4MappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};

// One's-complement sum of big-endian 16-bit words (RFC 1071), not yet folded or inverted.
std::uint32_t ones_sum(const std::uint8_t* p, std::size_t n, std::uint32_t sum = 0) {
  for (; n >= 2; p += 2, n -= 2)
    sum += load_be16(p);
  if (n == 1) sum += std::uint32_t{p[0]} << 8;
  return sum;
}

std::uint16_t fold(std::uint32_t sum) {
  while (sum >> 16)
    sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(sum);
}

std::uint16_t ipv4_header_checksum(const std::uint8_t* ip) {
  // The checksum field itself counts as zero.
  std::uint32_t sum = ones_sum(ip, 10);
  sum = ones_sum(ip + 12, kIpv4HeaderBytes - 12, sum);
  return static_cast<std::uint16_t>(~fold(sum));
}

// Verifies a non-zero UDP checksum over the IPv4/IPv6 pseudo-header and the datagram.
bool udp_checksum_ok(const std::uint8_t* ip, bool v6, const std::uint8_t* udp,
                     std::size_t udp_len) {
  std::uint32_t sum = v6 ? ones_sum(ip + 8, 32) : ones_sum(ip + 12, 8);
  sum += kIpProtoUdp;
  sum += static_cast<std::uint32_t>(udp_len);
  sum = ones_sum(udp, udp_len, sum);
  return fold(sum) == 0xFFFF;
}

std::size_t l2_bytes(const FrameAddress& addr) {
  return kEthBytes + (addr.vlan_tci ? kVlanTagBytes : 0);
}

std::size_t ip_bytes(const FrameAddress& addr) {
  return addr.src_ip.is_v4() ? kIpv4HeaderBytes : kIpv6HeaderBytes;
}

std::uint8_t pad_for(std::size_t payload_len) {
  return static_cast<std::uint8_t>((4 - (payload_len & 3)) & 3);
}

std::uint8_t* encode_ethernet(const FrameAddress& addr, std::uint8_t* p) {
  std::memcpy(p, addr.dst_mac.data(), 6);
  std::memcpy(p + 6, addr.src_mac.data(), 6);
  p += 12;
  if (addr.vlan_tci) {
    store_be16(p, kEtherTypeVlan);
    store_be16(p + 2, *addr.vlan_tci);
    p += kVlanTagBytes;
  }
  store_be16(p, addr.src_ip.is_v4() ? kEtherTypeIpv4 : kEtherTypeIpv6);
  return p + 2;
}

std::uint8_t* encode_ip(const FrameAddress& addr, std::size_t udp_len, std::uint8_t* p) {
  if (addr.src_ip.is_v4()) {
    p[0] = 0x45;  // version 4, IHL 5: never options
    p[1] = addr.traffic_class;
    store_be16(p + 2, static_cast<std::uint16_t>(kIpv4HeaderBytes + udp_len));
    store_be16(p + 4, addr.ipv4_id);
    store_be16(p + 6, addr.ipv4_dont_fragment ? kIpv4FlagDf : 0);
    p[8] = addr.hop_limit;
    p[9] = kIpProtoUdp;
    std::memcpy(p + 12, addr.src_ip.bytes.data() + 12, 4);
    std::memcpy(p + 16, addr.dst_ip.bytes.data() + 12, 4);
    store_be16(p + 10, ipv4_header_checksum(p));
    return p + kIpv4HeaderBytes;
  }
  store_be32(p, 6u << 28 | std::uint32_t{addr.traffic_class} << 20 | (addr.flow_label & 0xFFFFF));
  store_be16(p + 4, static_cast<std::uint16_t>(udp_len));
  p[6] = kIpProtoUdp;
  p[7] = addr.hop_limit;
  std::memcpy(p + 8, addr.src_ip.bytes.data(), 16);
  std::memcpy(p + 24, addr.dst_ip.bytes.data(), 16);
  return p + kIpv6HeaderBytes;
}

}  // namespace

IpAddr IpAddr::v4(std::uint32_t host_order) {
  IpAddr a;
  std::copy(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), a.bytes.begin());
  store_be32(a.bytes.data() + 12, host_order);
  return a;
}

bool IpAddr::is_v4() const {
  return std::equal(kV4MappedPrefix.begin(), kV4MappedPrefix.end(), bytes.begin());
}

std::uint32_t IpAddr::v4_host_order() const {
  return load_be32(bytes.data() + 12);
}

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
  return l2_bytes(addr) + ip_bytes(addr) + kUdpHeaderBytes + hdr.info().header_bytes() +
         payload_len + pad_for(payload_len) + kIcrcBytes;
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
  const std::size_t total = l2_bytes(addr) + ip_bytes(addr) + udp_len;
  if (out.size() < total) return Err{FrameError::kBufferTooSmall};

  std::uint8_t* const ip = encode_ethernet(addr, out.data());
  std::uint8_t* p = encode_ip(addr, udp_len, ip);
  store_be16(p, addr.udp_src_port);
  store_be16(p + 2, kRoceV2Port);
  store_be16(p + 4, static_cast<std::uint16_t>(udp_len));
  store_be16(p + 6, 0);  // no UDP checksum, as rxe (docs/protocol.md §1.3)
  p += kUdpHeaderBytes;

  TransportHeaders padded = hdr;
  padded.bth.pad_count = pad;
  auto n = encode_transport_headers(padded, MutableBytes(p, info->header_bytes()));
  if (!n) return Err{FrameError::kBadHeaders};
  p += *n;
  if (!payload.empty()) std::memcpy(p, payload.data(), payload.size());
  p += payload.size();
  std::memset(p, 0, pad);
  p += pad;
  store_icrc(p, icrc_compute(Bytes(ip, static_cast<std::size_t>(p - ip))));
  return total;
}

namespace {

// Each step of decode_frame_into takes the bytes from its header onwards and the frame so far.
struct Cursor {
  const std::uint8_t* p;
  std::size_t left;
};

std::optional<FrameError> decode_ethernet(Cursor& c, DecodedFrame& f, bool* v6) {
  if (c.left < kEthBytes) return FrameError::kTruncated;
  std::memcpy(f.addr.dst_mac.data(), c.p, 6);
  std::memcpy(f.addr.src_mac.data(), c.p + 6, 6);
  std::uint16_t type = load_be16(c.p + 12);
  std::size_t len = kEthBytes;
  if (type == kEtherTypeVlan) {
    if (c.left < kEthBytes + kVlanTagBytes) return FrameError::kTruncated;
    f.addr.vlan_tci = load_be16(c.p + 14);
    type = load_be16(c.p + 16);
    len += kVlanTagBytes;
  }
  if (type != kEtherTypeIpv4 && type != kEtherTypeIpv6) return FrameError::kNotIp;
  *v6 = type == kEtherTypeIpv6;
  c.p += len;
  c.left -= len;
  return std::nullopt;
}

// Decodes the IP header; on return c.left is the IP payload length the header announces.
std::optional<FrameError> decode_ipv4(Cursor& c, DecodedFrame& f) {
  if (c.left < kIpv4HeaderBytes) return FrameError::kTruncated;
  const std::uint8_t* ip = c.p;
  f.addr.traffic_class = ip[1];
  f.addr.ipv4_id = load_be16(ip + 4);
  f.addr.hop_limit = ip[8];
  f.ipv4_checksum = load_be16(ip + 10);
  f.addr.src_ip = IpAddr::v4(load_be32(ip + 12));
  f.addr.dst_ip = IpAddr::v4(load_be32(ip + 16));
  if ((ip[0] >> 4) != 4) return FrameError::kBadIpHeader;
  // Frames that are not ours are told apart before anything is judged broken.
  if (ip[9] != kIpProtoUdp) return FrameError::kNotUdp;
  if (ip[0] != 0x45) return FrameError::kBadIpHeader;  // options: never in RoCEv2
  const std::uint16_t total = load_be16(ip + 2);
  if (total < kIpv4HeaderBytes) return FrameError::kBadIpHeader;
  if (total > c.left) return FrameError::kTruncated;
  const std::uint16_t flags = load_be16(ip + 6);
  f.addr.ipv4_dont_fragment = flags & kIpv4FlagDf;
  if (flags & (kIpv4FlagMf | kIpv4FragOffsetMask)) return FrameError::kBadIpHeader;
  if (fold(ones_sum(ip, kIpv4HeaderBytes)) != 0xFFFF) return FrameError::kBadIpHeader;
  c.p += kIpv4HeaderBytes;
  c.left = total - kIpv4HeaderBytes;
  return std::nullopt;
}

std::optional<FrameError> decode_ipv6(Cursor& c, DecodedFrame& f) {
  if (c.left < kIpv6HeaderBytes) return FrameError::kTruncated;
  const std::uint8_t* ip = c.p;
  const std::uint32_t word0 = load_be32(ip);
  if ((word0 >> 28) != 6) return FrameError::kBadIpHeader;
  if (ip[6] != kIpProtoUdp) return FrameError::kNotUdp;  // extension headers are not RoCE
  f.addr.traffic_class = static_cast<std::uint8_t>(word0 >> 20);
  f.addr.flow_label = word0 & 0xFFFFF;
  f.addr.hop_limit = ip[7];
  std::copy_n(ip + 8, 16, f.addr.src_ip.bytes.begin());
  std::copy_n(ip + 24, 16, f.addr.dst_ip.bytes.begin());
  // IPv4-mapped addresses never appear in IPv6 headers (RFC 4291 2.5.5.2); FrameAddress uses
  // that form for IPv4, so accepting one would make the frame read as IPv4.
  if (f.addr.src_ip.is_v4() || f.addr.dst_ip.is_v4()) return FrameError::kBadIpHeader;
  const std::uint16_t payload_len = load_be16(ip + 4);
  if (payload_len > c.left - kIpv6HeaderBytes) return FrameError::kTruncated;
  c.p += kIpv6HeaderBytes;
  c.left = payload_len;
  return std::nullopt;
}

// Decodes UDP; on return c.left is the UDP payload length less the ICRC.
std::optional<FrameError> decode_udp(Cursor& c, const std::uint8_t* ip, bool v6, DecodedFrame& f) {
  if (c.left < kUdpHeaderBytes) return FrameError::kTruncated;
  f.addr.udp_src_port = load_be16(c.p);
  if (load_be16(c.p + 2) != kRoceV2Port) return FrameError::kNotRoce;
  f.udp_length = load_be16(c.p + 4);
  f.udp_checksum = load_be16(c.p + 6);
  // The UDP length, not the IP or Ethernet length, says where the ICRC is (docs/protocol.md §1.1).
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

}  // namespace

namespace {

// decode_frame_into on a freshly constructed DecodedFrame.
std::optional<FrameError> decode_fresh(Bytes frame, DecodedFrame& f) {
  Cursor c{frame.data(), frame.size()};
  bool v6 = false;
  if (auto e = decode_ethernet(c, f, &v6)) return e;
  const std::uint8_t* const ip = c.p;
  if (auto e = v6 ? decode_ipv6(c, f) : decode_ipv4(c, f)) return e;
  f.ecn = static_cast<Ecn>(f.addr.traffic_class & 0x3);
  if (auto e = decode_udp(c, ip, v6, f)) return e;
  const std::uint8_t* const icrc = c.p + c.left;
  f.icrc_wire = load_icrc(icrc);
  if (auto e = decode_transport(c, f)) return e;
  f.icrc_ok = icrc_compute(Bytes(ip, static_cast<std::size_t>(icrc - ip))) == f.icrc_wire;
  return std::nullopt;
}

}  // namespace

std::optional<FrameError> decode_frame_into(Bytes frame, DecodedFrame& f) {
  f = DecodedFrame{};
  return decode_fresh(frame, f);
}

Result<DecodedFrame, FrameError> decode_frame(Bytes frame) {
  // Decoded in place in the result (one return object, so no copy of the ~270-byte frame).
  Result<DecodedFrame, FrameError> r{DecodedFrame{}};
  if (auto e = decode_fresh(frame, *r)) r = Err{*e};
  return r;
}

}  // namespace xroce::wire
