#include "net/udp_frame.h"

#include <cstring>

#include "wire/byteorder.h"
#include "wire/icrc.h"
#include "wire/opcode.h"

namespace xroce::net {
namespace {

wire::FrameAddress address_of(const UdpEnvelope& env) {
  wire::FrameAddress a;
  a.dst_mac = env.dst_mac;
  a.src_mac = env.src_mac;
  a.vlan_tci = env.vlan_tci;
  a.src_ip.bytes = env.src_ip;
  a.dst_ip.bytes = env.dst_ip;
  a.traffic_class = env.traffic_class;
  a.hop_limit = env.hop_limit;
  a.flow_label = env.flow_label;
  a.udp_src_port = env.src_port;
  a.ipv4_id = env.ipv4_id;
  a.ipv4_dont_fragment = env.ipv4_dont_fragment;
  return a;
}

UdpEnvelope envelope_of(const wire::FrameAddress& a) {
  UdpEnvelope env;
  env.dst_mac = a.dst_mac;
  env.src_mac = a.src_mac;
  env.vlan_tci = a.vlan_tci;
  env.src_ip = a.src_ip.bytes;
  env.dst_ip = a.dst_ip.bytes;
  env.traffic_class = a.traffic_class;
  env.hop_limit = a.hop_limit;
  env.flow_label = a.flow_label;
  env.src_port = a.udp_src_port;
  env.ipv4_id = a.ipv4_id;
  env.ipv4_dont_fragment = a.ipv4_dont_fragment;
  return env;
}

}  // namespace

bool is_v4_mapped(const Ip16& a) {
  return wire::IpAddr{a}.is_v4();
}

Ip16 v4_mapped(std::uint32_t host_order) {
  return wire::IpAddr::v4(host_order).bytes;
}

std::size_t envelope_bytes(const UdpEnvelope& env) {
  return wire::envelope_bytes(address_of(env));
}

void write_envelope(const UdpEnvelope& env, std::size_t payload_len, std::uint8_t* payload_begin) {
  const wire::FrameAddress a = address_of(env);
  wire::write_envelope(a, wire::UdpFields{env.dst_port, env.udp_checksum}, payload_len,
                       payload_begin - wire::envelope_bytes(a));
}

IcrcCheck recover_ipv4_id(const UdpEnvelope& env, std::size_t payload_len,
                          std::uint8_t* payload_begin) {
  if (!is_v4_mapped(env.dst_ip) || payload_len < wire::kBthBytes + wire::kIcrcBytes) {
    return IcrcCheck::kNotChecked;
  }
  std::uint8_t* ip = payload_begin - kUdpHeaderBytes - kIpv4HeaderBytes;
  const std::size_t datagram = kIpv4HeaderBytes + kUdpHeaderBytes + payload_len - wire::kIcrcBytes;
  const std::uint32_t wire_icrc = wire::load_icrc(ip + datagram);
  const wire::Bytes covered(ip, datagram);
  const std::uint32_t icrc_now = wire::icrc_compute(covered);
  if (icrc_now == wire_icrc) return IcrcCheck::kVerified;
  const std::optional<std::uint16_t> id = wire::icrc_solve_ipv4_id(covered, wire_icrc, icrc_now);
  if (!id) return IcrcCheck::kNoIdVerifies;
  wire::store_be16(ip + 4, *id);
  wire::store_be16(ip + 10, ipv4_header_checksum(ip));
  return IcrcCheck::kVerified;
}

std::optional<ParsedUdpFrame> parse_udp_frame(std::span<const std::uint8_t> f) {
  const wire::FrameLayout l = wire::walk_frame(f);
  if (!l.has_udp()) return std::nullopt;
  // Not RoCE: IPv4 options and fragments.
  if (l.ip_header_bytes != (l.ip == wire::IpVersion::kV4 ? kIpv4HeaderBytes : kIpv6HeaderBytes) ||
      l.ipv4_fragment) {
    return std::nullopt;
  }
  const std::size_t l4_limit = l.ip_offset + l.ip_datagram_bytes;  // end of the IP datagram
  if (l4_limit > f.size() || l4_limit < l.udp_payload_offset()) return std::nullopt;
  const std::uint8_t* udp = &f[l.udp_offset];
  const std::uint16_t udp_len = wire::load_be16(udp + 4);
  if (udp_len < kUdpHeaderBytes || l.udp_offset + udp_len > l4_limit) return std::nullopt;
  ParsedUdpFrame out;
  out.env = envelope_of(wire::address_of(f, l));
  out.env.dst_port = wire::load_be16(udp + 2);
  out.env.udp_checksum = wire::load_be16(udp + 6);
  out.payload = f.subspan(l.udp_payload_offset(), udp_len - kUdpHeaderBytes);
  return out;
}

}  // namespace xroce::net
