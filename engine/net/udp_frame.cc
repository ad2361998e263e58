#include "net/udp_frame.h"

#include <cstring>

#include "wire/byteorder.h"
#include "wire/icrc.h"
#include "wire/opcode.h"

namespace xroce::net {
namespace {

constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
constexpr std::uint16_t kEtherTypeIpv6 = 0x86DD;
constexpr std::uint16_t kEtherTypeVlan = 0x8100;
constexpr std::uint16_t kEtherTypeQinQ = 0x88A8;
constexpr std::uint8_t kIpProtoUdp = 17;
constexpr int kMaxVlanTags = 2;

using wire::load_be16;
using wire::load_be32;
using wire::store_be16;
using wire::store_be32;

}  // namespace

bool is_v4_mapped(const Ip16& a) {
  static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  return std::memcmp(a.data(), kPrefix, sizeof(kPrefix)) == 0;
}

Ip16 v4_mapped(std::uint32_t host_order) {
  Ip16 a{};
  a[10] = 0xFF;
  a[11] = 0xFF;
  store_be32(a.data() + 12, host_order);
  return a;
}

std::size_t envelope_bytes(const UdpEnvelope& env) {
  return kEthHeaderBytes + (env.vlan_tci ? kVlanTagBytes : 0) +
         (is_v4_mapped(env.dst_ip) ? kIpv4HeaderBytes : kIpv6HeaderBytes) + kUdpHeaderBytes;
}

std::uint16_t ipv4_header_checksum(const std::uint8_t* h) {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i < kIpv4HeaderBytes; i += 2) {
    if (i != 10) sum += load_be16(h + i);  // the checksum field itself counts as zero
  }
  while (sum >> 16)
    sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

void write_envelope(const UdpEnvelope& env, std::size_t payload_len, std::uint8_t* payload_begin) {
  std::uint8_t* p = payload_begin - envelope_bytes(env);
  std::memcpy(p, env.dst_mac.data(), 6);
  std::memcpy(p + 6, env.src_mac.data(), 6);
  p += 12;
  if (env.vlan_tci) {
    store_be16(p, kEtherTypeVlan);
    store_be16(p + 2, *env.vlan_tci);
    p += kVlanTagBytes;
  }
  const auto udp_len = static_cast<std::uint16_t>(kUdpHeaderBytes + payload_len);
  if (is_v4_mapped(env.dst_ip)) {
    store_be16(p, kEtherTypeIpv4);
    p += 2;
    p[0] = 0x45;  // version 4, 5 words, no options
    p[1] = env.traffic_class;
    store_be16(p + 2, static_cast<std::uint16_t>(kIpv4HeaderBytes + udp_len));
    store_be16(p + 4, env.ipv4_id);
    store_be16(p + 6, env.ipv4_dont_fragment ? 0x4000 : 0);
    p[8] = env.hop_limit;
    p[9] = kIpProtoUdp;
    std::memcpy(p + 12, env.src_ip.data() + 12, 4);
    std::memcpy(p + 16, env.dst_ip.data() + 12, 4);
    store_be16(p + 10, ipv4_header_checksum(p));
    p += kIpv4HeaderBytes;
  } else {
    store_be16(p, kEtherTypeIpv6);
    p += 2;
    store_be32(p, 6u << 28 | std::uint32_t{env.traffic_class} << 20 | (env.flow_label & 0xFFFFF));
    store_be16(p + 4, udp_len);
    p[6] = kIpProtoUdp;
    p[7] = env.hop_limit;
    std::memcpy(p + 8, env.src_ip.data(), 16);
    std::memcpy(p + 24, env.dst_ip.data(), 16);
    p += kIpv6HeaderBytes;
  }
  store_be16(p, env.src_port);
  store_be16(p + 2, env.dst_port);
  store_be16(p + 4, udp_len);
  store_be16(p + 6, env.udp_checksum);
}

bool recover_ipv4_id(const UdpEnvelope& env, std::size_t payload_len, std::uint8_t* payload_begin) {
  if (!is_v4_mapped(env.dst_ip) || payload_len < wire::kBthBytes + wire::kIcrcBytes) return false;
  std::uint8_t* ip = payload_begin - kUdpHeaderBytes - kIpv4HeaderBytes;
  const std::size_t datagram = kIpv4HeaderBytes + kUdpHeaderBytes + payload_len - wire::kIcrcBytes;
  const std::uint32_t wire_icrc = wire::load_icrc(ip + datagram);
  const wire::Bytes covered(ip, datagram);
  if (wire::icrc_compute(covered) == wire_icrc) return false;
  const std::optional<std::uint16_t> id = wire::icrc_solve_ipv4_id(covered, wire_icrc);
  if (!id) return false;
  store_be16(ip + 4, *id);
  store_be16(ip + 10, ipv4_header_checksum(ip));
  return true;
}

std::optional<ParsedUdpFrame> parse_udp_frame(std::span<const std::uint8_t> f) {
  ParsedUdpFrame out;
  UdpEnvelope& env = out.env;
  if (f.size() < kEthHeaderBytes) return std::nullopt;
  std::memcpy(env.dst_mac.data(), f.data(), 6);
  std::memcpy(env.src_mac.data(), f.data() + 6, 6);
  std::size_t off = 12;
  std::uint16_t type = load_be16(f.data() + off);
  for (int i = 0; i < kMaxVlanTags && (type == kEtherTypeVlan || type == kEtherTypeQinQ); ++i) {
    if (f.size() < off + 2 + kVlanTagBytes) return std::nullopt;
    if (!env.vlan_tci) env.vlan_tci = load_be16(f.data() + off + 2);
    off += kVlanTagBytes;
    type = load_be16(f.data() + off);
  }
  off += 2;
  std::size_t l4_limit = 0;  // end of the IP datagram
  if (type == kEtherTypeIpv4) {
    if (f.size() < off + kIpv4HeaderBytes) return std::nullopt;
    const std::uint8_t* ip = f.data() + off;
    if (ip[0] != 0x45 || ip[9] != kIpProtoUdp) return std::nullopt;
    const std::uint16_t frag = load_be16(ip + 6);
    if (frag & 0x3FFF) return std::nullopt;  // fragments are not RoCE
    env.traffic_class = ip[1];
    env.ipv4_id = load_be16(ip + 4);
    env.ipv4_dont_fragment = (frag & 0x4000) != 0;
    env.hop_limit = ip[8];
    env.src_ip = v4_mapped(load_be32(ip + 12));
    env.dst_ip = v4_mapped(load_be32(ip + 16));
    l4_limit = off + load_be16(ip + 2);
    off += kIpv4HeaderBytes;
  } else if (type == kEtherTypeIpv6) {
    if (f.size() < off + kIpv6HeaderBytes) return std::nullopt;
    const std::uint8_t* ip = f.data() + off;
    const std::uint32_t w0 = load_be32(ip);
    if (w0 >> 28 != 6 || ip[6] != kIpProtoUdp) return std::nullopt;
    env.traffic_class = static_cast<std::uint8_t>(w0 >> 20);
    env.flow_label = w0 & 0xFFFFF;
    env.hop_limit = ip[7];
    std::memcpy(env.src_ip.data(), ip + 8, 16);
    std::memcpy(env.dst_ip.data(), ip + 24, 16);
    l4_limit = off + kIpv6HeaderBytes + load_be16(ip + 4);
    off += kIpv6HeaderBytes;
  } else {
    return std::nullopt;
  }
  if (l4_limit > f.size() || l4_limit < off + kUdpHeaderBytes) return std::nullopt;
  const std::uint8_t* udp = f.data() + off;
  env.src_port = load_be16(udp);
  env.dst_port = load_be16(udp + 2);
  const std::uint16_t udp_len = load_be16(udp + 4);
  env.udp_checksum = load_be16(udp + 6);
  if (udp_len < kUdpHeaderBytes || off + udp_len > l4_limit) return std::nullopt;
  out.payload = f.subspan(off + kUdpHeaderBytes, udp_len - kUdpHeaderBytes);
  return out;
}

}  // namespace xroce::net
