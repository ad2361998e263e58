#include "wire/frame_layout.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace xroce::wire {
namespace {

constexpr std::size_t kEtherTypeOffset = 2 * kMacBytes;
constexpr std::size_t kIpv4ChecksumOffset = 10;
constexpr std::uint8_t kEcnMask = 0x03;
constexpr std::uint8_t kIpv6EcnMaskByte1 = 0x30;  // the ECN bits of the traffic class, byte 1
constexpr std::array<std::uint8_t, 12> kV4MappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};

bool is_tag(std::uint16_t type) {
  return type == kEtherTypeVlan || type == kEtherTypeQinQ;
}

// Tags and the EtherType after them; sets ip_offset.
bool walk_l2(Bytes f, FrameLayout& l) {
  if (f.size() < kEthHeaderBytes) return false;
  std::size_t type_at = kEtherTypeOffset;
  std::uint16_t type = load_be16(&f[type_at]);
  while (is_tag(type) && l.vlan_count < kMaxVlanTags) {
    if (f.size() < type_at + kVlanTagBytes + 2) return false;
    l.vlan[l.vlan_count++] = VlanTag{type, load_be16(&f[type_at + 2])};
    type_at += kVlanTagBytes;
    type = load_be16(&f[type_at]);
  }
  l.ether_type = type;
  l.ip_offset = type_at + 2;
  return true;
}

WalkStop walk_ipv4(Bytes f, FrameLayout& l) {
  const std::size_t at = l.ip_offset;
  if (f.size() < at + kIpv4HeaderBytes) return WalkStop::kTruncatedIp;
  const std::uint8_t* ip = &f[at];
  const std::size_t ihl_bytes = std::size_t{ip[0] & 0x0Fu} * 4;
  if ((ip[0] >> 4) != 4 || ihl_bytes < kIpv4HeaderBytes) return WalkStop::kBadIpVersion;
  l.ip = IpVersion::kV4;
  l.ip_header_bytes = ihl_bytes;
  l.ip_protocol = ip[9];
  l.ip_datagram_bytes = load_be16(ip + 2);
  l.ipv4_fragment = (load_be16(ip + 6) & (kIpv4FlagMf | kIpv4FragOffsetMask)) != 0;
  if (l.ip_protocol != kIpProtoUdp) return WalkStop::kNotUdp;
  if (f.size() < at + ihl_bytes) return WalkStop::kTruncatedIp;
  return WalkStop::kUdp;
}

WalkStop walk_ipv6(Bytes f, FrameLayout& l) {
  const std::size_t at = l.ip_offset;
  if (f.size() < at + kIpv6HeaderBytes) return WalkStop::kTruncatedIp;
  const std::uint8_t* ip = &f[at];
  if ((ip[0] >> 4) != 6) return WalkStop::kBadIpVersion;
  l.ip = IpVersion::kV6;
  l.ip_header_bytes = kIpv6HeaderBytes;
  l.ip_protocol = ip[6];  // RoCEv2 carries no extension headers: UDP follows directly
  l.ip_datagram_bytes = kIpv6HeaderBytes + load_be16(ip + 4);
  if (l.ip_protocol != kIpProtoUdp) return WalkStop::kNotUdp;
  return WalkStop::kUdp;
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

bool IpAddr::is_link_local_v6() const {
  return !is_v4() && bytes[0] == 0xfe && (bytes[1] & 0xc0) == 0x80;
}

std::uint32_t IpAddr::v4_host_order() const {
  return load_be32(bytes.data() + 12);
}

std::optional<VlanTag> FrameLayout::inner_vlan() const {
  if (vlan_count == 0) return std::nullopt;
  return vlan[vlan_count - 1];
}

std::optional<VlanTag> FrameLayout::outer_vlan() const {
  if (vlan_count < 2) return std::nullopt;
  return vlan[0];
}

FrameLayout walk_frame(Bytes frame) {
  FrameLayout l;
  if (!walk_l2(frame, l)) {
    l.stop = WalkStop::kTruncatedL2;
    return l;
  }
  if (l.ether_type == kEtherTypeIpv4) {
    l.stop = walk_ipv4(frame, l);
  } else if (l.ether_type == kEtherTypeIpv6) {
    l.stop = walk_ipv6(frame, l);
  } else {
    l.stop = WalkStop::kNotIp;
    return l;
  }
  if (l.stop != WalkStop::kUdp) return l;
  l.udp_offset = l.ip_offset + l.ip_header_bytes;
  if (frame.size() < l.udp_offset + kUdpHeaderBytes) l.stop = WalkStop::kTruncatedUdp;
  return l;
}

std::uint32_t ones_complement_sum(Bytes bytes, std::uint32_t sum) {
  std::size_t i = 0;
  for (; i + 1 < bytes.size(); i += 2)
    sum += load_be16(&bytes[i]);
  if (i < bytes.size()) sum += std::uint32_t{bytes[i]} << 8;
  return sum;
}

std::uint16_t fold_ones_complement(std::uint32_t sum) {
  while (sum >> 16)
    sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<std::uint16_t>(sum);
}

std::uint16_t ipv4_header_checksum(Bytes header) {
  std::uint32_t sum = ones_complement_sum(header.first(kIpv4ChecksumOffset));
  sum = ones_complement_sum(header.subspan(kIpv4ChecksumOffset + 2), sum);
  return static_cast<std::uint16_t>(~fold_ones_complement(sum));
}

bool ipv4_header_checksum_ok(Bytes header) {
  return fold_ones_complement(ones_complement_sum(header)) == 0xFFFF;
}

Ecn ecn_of(Bytes frame, const FrameLayout& layout) {
  const std::uint8_t* ip = &frame[layout.ip_offset];
  const std::uint8_t bits =
      layout.ip == IpVersion::kV6 ? (ip[1] >> 4) & kEcnMask : ip[1] & kEcnMask;
  return static_cast<Ecn>(bits);
}

void set_ecn_ce(MutableBytes frame, const FrameLayout& layout) {
  set_ecn(frame, layout, Ecn::kCe);
}

void set_ecn(MutableBytes frame, const FrameLayout& layout, Ecn ecn) {
  std::uint8_t* ip = &frame[layout.ip_offset];
  const auto bits = static_cast<std::uint8_t>(ecn);
  if (layout.ip == IpVersion::kV6) {
    ip[1] = static_cast<std::uint8_t>((ip[1] & ~kIpv6EcnMaskByte1) | (bits << 4));
    return;
  }
  // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), m the 16-bit word holding the TOS byte.
  const std::uint16_t old_word = load_be16(ip);
  ip[1] = static_cast<std::uint8_t>((ip[1] & ~kEcnMask) | bits);
  const std::uint16_t new_word = load_be16(ip);
  const std::uint16_t old_sum = load_be16(ip + kIpv4ChecksumOffset);
  const std::uint32_t sum = static_cast<std::uint16_t>(~old_sum) +
                            static_cast<std::uint16_t>(~old_word) + std::uint32_t{new_word};
  store_be16(ip + kIpv4ChecksumOffset, static_cast<std::uint16_t>(~fold_ones_complement(sum)));
}

std::size_t envelope_bytes(const FrameAddress& addr) {
  const std::size_t tags = (addr.vlan_tci ? 1 : 0) + (addr.vlan_tci && addr.outer_vlan ? 1 : 0);
  return kEthHeaderBytes + tags * kVlanTagBytes +
         (addr.src_ip.is_v4() ? kIpv4HeaderBytes : kIpv6HeaderBytes) + kUdpHeaderBytes;
}

namespace {

std::uint8_t* write_ethernet(const FrameAddress& addr, std::uint8_t* p) {
  std::memcpy(p, addr.dst_mac.data(), kMacBytes);
  std::memcpy(p + kMacBytes, addr.src_mac.data(), kMacBytes);
  p += 2 * kMacBytes;
  if (addr.vlan_tci && addr.outer_vlan) {
    store_be16(p, addr.outer_vlan->tpid);
    store_be16(p + 2, addr.outer_vlan->tci);
    p += kVlanTagBytes;
  }
  if (addr.vlan_tci) {
    store_be16(p, addr.vlan_tpid);
    store_be16(p + 2, *addr.vlan_tci);
    p += kVlanTagBytes;
  }
  store_be16(p, addr.src_ip.is_v4() ? kEtherTypeIpv4 : kEtherTypeIpv6);
  return p + 2;
}

std::uint8_t* write_ip(const FrameAddress& addr, std::size_t udp_len, std::uint8_t* p) {
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
    store_be16(p + kIpv4ChecksumOffset, ipv4_header_checksum(Bytes(p, kIpv4HeaderBytes)));
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

void write_envelope(const FrameAddress& addr, UdpFields udp, std::size_t udp_payload_bytes,
                    std::uint8_t* out) {
  const std::size_t udp_len = kUdpHeaderBytes + udp_payload_bytes;
  std::uint8_t* p = write_ip(addr, udp_len, write_ethernet(addr, out));
  store_be16(p, addr.udp_src_port);
  store_be16(p + 2, udp.dst_port);
  store_be16(p + 4, static_cast<std::uint16_t>(udp_len));
  store_be16(p + 6, udp.checksum);
}

FrameAddress address_of(Bytes frame, const FrameLayout& l) {
  FrameAddress a;
  std::memcpy(a.dst_mac.data(), frame.data(), kMacBytes);
  std::memcpy(a.src_mac.data(), frame.data() + kMacBytes, kMacBytes);
  if (const auto inner = l.inner_vlan()) {
    a.vlan_tci = inner->tci;
    a.vlan_tpid = inner->tpid;
  }
  a.outer_vlan = l.outer_vlan();
  const std::uint8_t* ip = &frame[l.ip_offset];
  if (l.ip == IpVersion::kV4) {
    a.traffic_class = ip[1];
    a.ipv4_id = load_be16(ip + 4);
    a.ipv4_dont_fragment = (load_be16(ip + 6) & kIpv4FlagDf) != 0;
    a.hop_limit = ip[8];
    a.src_ip = IpAddr::v4(load_be32(ip + 12));
    a.dst_ip = IpAddr::v4(load_be32(ip + 16));
  } else {
    const std::uint32_t word0 = load_be32(ip);
    a.traffic_class = static_cast<std::uint8_t>(word0 >> 20);
    a.flow_label = word0 & 0xFFFFF;
    a.hop_limit = ip[7];
    std::copy_n(ip + 8, 16, a.src_ip.bytes.begin());
    std::copy_n(ip + 24, 16, a.dst_ip.bytes.begin());
  }
  if (l.has_udp()) a.udp_src_port = load_be16(&frame[l.udp_offset]);
  return a;
}

std::uint16_t vnet_udp_segment_bytes(std::span<const std::uint8_t> vnet_header) {
  constexpr std::uint8_t kGsoUdpL4 = 5;   // VIRTIO_NET_HDR_GSO_UDP_L4
  constexpr std::uint8_t kGsoEcn = 0x80;  // VIRTIO_NET_HDR_GSO_ECN
  if (vnet_header.size() < kVnetHeaderBytes) return 0;
  if ((vnet_header[1] & ~kGsoEcn) != kGsoUdpL4) return 0;
  std::uint16_t gso_size = 0;  // host order, as packet sockets write it
  std::memcpy(&gso_size, vnet_header.data() + 4, sizeof gso_size);
  return gso_size;
}

std::vector<std::vector<std::uint8_t>> split_udp_superframe(std::span<const std::uint8_t> frame,
                                                            std::uint16_t segment_bytes) {
  std::vector<std::vector<std::uint8_t>> out;
  if (segment_bytes == 0) return out;
  const FrameLayout l = walk_frame(Bytes(frame.data(), frame.size()));
  if (!l.has_udp() || l.ipv4_fragment) return out;
  const std::size_t headers = l.udp_payload_offset();
  if (frame.size() <= headers) return out;
  const bool v4 = l.ip == IpVersion::kV4;
  const std::uint16_t first_id = v4 ? load_be16(&frame[l.ip_offset + 4]) : 0;
  const bool checksummed = load_be16(&frame[l.udp_offset + 6]) != 0;
  const std::size_t payload = frame.size() - headers;
  for (std::size_t at = 0, k = 0; at < payload; at += segment_bytes, ++k) {
    const std::size_t chunk = std::min<std::size_t>(segment_bytes, payload - at);
    std::vector<std::uint8_t> f(frame.begin(),
                                frame.begin() + static_cast<std::ptrdiff_t>(headers));
    f.insert(f.end(), frame.begin() + static_cast<std::ptrdiff_t>(headers + at),
             frame.begin() + static_cast<std::ptrdiff_t>(headers + at + chunk));
    std::uint8_t* ip = &f[l.ip_offset];
    const auto udp_len = static_cast<std::uint16_t>(kUdpHeaderBytes + chunk);
    if (v4) {
      store_be16(ip + 2, static_cast<std::uint16_t>(l.ip_header_bytes + udp_len));
      store_be16(ip + 4, static_cast<std::uint16_t>(first_id + k));
      store_be16(ip + 10, ipv4_header_checksum(Bytes(ip, l.ip_header_bytes)));
    } else {
      // The payload length counts any extension headers before UDP.
      const std::size_t extensions = l.udp_offset - l.ip_offset - kIpv6HeaderBytes;
      store_be16(ip + 4, static_cast<std::uint16_t>(extensions + udp_len));
    }
    std::uint8_t* udp = &f[l.udp_offset];
    store_be16(udp + 4, udp_len);
    store_be16(udp + 6, 0);
    if (checksummed) {
      std::uint32_t sum =
          v4 ? ones_complement_sum(Bytes(ip + 12, 8)) : ones_complement_sum(Bytes(ip + 8, 32));
      sum += kIpProtoUdp;
      sum += udp_len;
      sum = ones_complement_sum(Bytes(udp, udp_len), sum);
      const auto check = static_cast<std::uint16_t>(~fold_ones_complement(sum));
      store_be16(udp + 6, check == 0 ? 0xFFFF : check);  // RFC 768: 0 means none
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace xroce::wire
