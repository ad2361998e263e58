// The one Ethernet / VLAN / IP / UDP walker: where a frame's L2 tags, IP header, UDP header and
// UDP payload are, the EtherType and IP constants, the IPv4 header checksum, the ECN field and
// CE marking, and the writer of the same headers. Every part of xroce that looks below the BTH
// uses this file: the wire codec (frame.h), the UDP port's envelope (net/udp_frame.h), the
// simulator's and the switch's frame edits, the data path's RX metadata, the conformance peer.
//
// Tags are taken as bpf/xroce_steer.bpf.c takes them: up to two, each 802.1Q (0x8100) or
// 802.1ad (0x88A8), so that any frame the XDP program steers to a socket is laid out the same
// way here. The walker reads positions and announced lengths and judges nothing else (options,
// fragments, checksums, ports): each caller applies its own policy to the layout.
// Pure code with bounds checks on every read; it includes nothing of the transport headers.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "wire/byteorder.h"

namespace xroce::wire {

// EtherTypes (IEEE 802 numbers) and the IP protocol number RoCEv2 rides on.
inline constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr std::uint16_t kEtherTypeIpv6 = 0x86DD;
inline constexpr std::uint16_t kEtherTypeVlan = 0x8100;  // 802.1Q customer tag (C-tag)
inline constexpr std::uint16_t kEtherTypeQinQ = 0x88A8;  // 802.1ad service tag (S-tag)
inline constexpr std::uint8_t kIpProtoUdp = 17;

inline constexpr std::size_t kMacBytes = 6;
inline constexpr std::size_t kEthHeaderBytes = 14;   // destination, source, EtherType
inline constexpr std::size_t kVlanTagBytes = 4;      // TPID + TCI
inline constexpr std::size_t kMaxVlanTags = 2;       // as the XDP program walks them
inline constexpr std::size_t kIpv4HeaderBytes = 20;  // without options
inline constexpr std::size_t kIpv6HeaderBytes = 40;
inline constexpr std::size_t kUdpHeaderBytes = 8;
inline constexpr std::uint16_t kIpv4FlagDf = 0x4000;
inline constexpr std::uint16_t kIpv4FlagMf = 0x2000;
inline constexpr std::uint16_t kIpv4FragOffsetMask = 0x1FFF;

using MacAddr = std::array<std::uint8_t, kMacBytes>;

// An IP address in GID form: IPv6, or IPv4 as the IPv4-mapped ::ffff:a.b.c.d that RoCE v2
// GIDs use.
struct IpAddr {
  std::array<std::uint8_t, 16> bytes{};

  static IpAddr v4(std::uint32_t host_order);
  static IpAddr v6(const std::array<std::uint8_t, 16>& b) { return IpAddr{b}; }
  bool is_v4() const;
  // fe80::/10: an IPv6 address that means something only on its own link.
  bool is_link_local_v6() const;
  std::uint32_t v4_host_order() const;  // valid when is_v4()
  bool operator==(const IpAddr&) const = default;
};

// ECN codepoints in the low two bits of the traffic class (RFC 3168).
enum class Ecn : std::uint8_t { kNotEct = 0, kEct1 = 1, kEct0 = 2, kCe = 3 };
inline bool is_ect(Ecn e) {
  return e == Ecn::kEct0 || e == Ecn::kEct1;
}

struct VlanTag {
  std::uint16_t tpid = kEtherTypeVlan;  // kEtherTypeVlan or kEtherTypeQinQ
  std::uint16_t tci = 0;                // PCP/DEI/VID as on the wire
  bool operator==(const VlanTag&) const = default;
};

// What a QP's address vector (or a UDP port's envelope) puts around a UDP payload.
struct FrameAddress {
  MacAddr src_mac{};
  MacAddr dst_mac{};
  // The tag next to the IP header, written with vlan_tpid (802.1Q unless a lone 802.1ad tag).
  std::optional<std::uint16_t> vlan_tci;
  std::uint16_t vlan_tpid = kEtherTypeVlan;
  // 802.1ad QinQ: the outer (service) tag in front of vlan_tci; only with vlan_tci.
  std::optional<VlanTag> outer_vlan;
  IpAddr src_ip;
  IpAddr dst_ip;                        // both v4 or both v6
  std::uint8_t traffic_class = 0;       // IPv4 TOS / IPv6 traffic class: DSCP << 2 | ECN
  std::uint8_t hop_limit = 64;          // IPv4 TTL / IPv6 hop limit
  std::uint32_t flow_label = 0;         // IPv6 only, 20 bits
  std::uint16_t udp_src_port = 0xC000;  // per-QP entropy (rxe: rdma_get_udp_sport)
  std::uint16_t ipv4_id = 0;            // IPv4 identification
  bool ipv4_dont_fragment = true;       // IPv4 DF flag; rxe always sets it
  bool operator==(const FrameAddress&) const = default;
};

enum class IpVersion : std::uint8_t { kNone, kV4, kV6 };

// How far walk_frame got. Everything the layout says before the stop is valid.
enum class WalkStop : std::uint8_t {
  kUdp,           // walked through the UDP header: every offset is valid
  kTruncatedL2,   // shorter than the Ethernet header and the tags it announces
  kNotIp,         // the EtherType after the tags is neither IPv4 nor IPv6 (see ether_type)
  kTruncatedIp,   // the IP header (with any IPv4 options) does not fit in the frame
  kBadIpVersion,  // the version nibble disagrees with the EtherType, or IPv4 IHL < 5
  kNotUdp,        // IPv4 protocol / IPv6 next header is not UDP (see ip_protocol)
  kTruncatedUdp,  // the UDP header does not fit in the frame
};

struct FrameLayout {
  WalkStop stop = WalkStop::kTruncatedL2;
  std::uint8_t vlan_count = 0;
  std::array<VlanTag, kMaxVlanTags> vlan{};  // outermost first
  std::uint16_t ether_type = 0;              // after the tags
  std::size_t ip_offset = 0;                 // after the tags, whatever the EtherType
  IpVersion ip = IpVersion::kNone;  // set when the fixed IP header fits with the right version
  std::size_t ip_header_bytes = 0;  // 20 + IPv4 options, or 40; valid when ip is set
  std::uint8_t ip_protocol = 0;     // IPv4 protocol / IPv6 next header; valid when ip is set
  // As the IP header announces (IPv4 total length, 40 + IPv6 payload length), not checked
  // against the frame: valid when ip is set.
  std::size_t ip_datagram_bytes = 0;
  bool ipv4_fragment = false;  // MF set or a non-zero fragment offset
  std::size_t udp_offset = 0;  // valid when stop == kUdp

  bool has_ip() const { return ip != IpVersion::kNone; }
  bool has_udp() const { return stop == WalkStop::kUdp; }
  std::size_t udp_payload_offset() const { return udp_offset + kUdpHeaderBytes; }
  // The tag next to the IP header, if any.
  std::optional<VlanTag> inner_vlan() const;
  std::optional<VlanTag> outer_vlan() const;  // only when there are two tags
};

// Walks a frame's headers as far as they go. Never reads past `frame`.
FrameLayout walk_frame(Bytes frame);

// One's-complement sum of big-endian 16-bit words (RFC 1071), an odd last byte padded with
// zero; not yet folded or inverted.
std::uint32_t ones_complement_sum(Bytes bytes, std::uint32_t sum = 0);
std::uint16_t fold_ones_complement(std::uint32_t sum);

// The IPv4 header checksum for `header` (IHL * 4 bytes), its checksum field taken as zero: the
// value to store at byte 10.
std::uint16_t ipv4_header_checksum(Bytes header);
// Whether the checksum stored in `header` verifies.
bool ipv4_header_checksum_ok(Bytes header);

// Reading and setting the ECN field of an IP frame laid out by walk_frame (has_ip()).
Ecn ecn_of(Bytes frame, const FrameLayout& layout);
// Sets CE and, for IPv4, updates the header checksum incrementally (RFC 1624 eqn. 3), so a
// header that verified still does. The ICRC masks the field (rxe_icrc.c rxe_icrc_hdr), so a RoCE
// frame stays valid. Precondition: layout.has_ip().
void set_ecn_ce(MutableBytes frame, const FrameLayout& layout);
// Writes any codepoint the same way (xroce-switch --bleach-ecn writes Not-ECT).
void set_ecn(MutableBytes frame, const FrameLayout& layout, Ecn ecn);

// Bytes of Ethernet (+ tags), IP and UDP header in front of a UDP payload.
std::size_t envelope_bytes(const FrameAddress& addr);

struct UdpFields {
  std::uint16_t dst_port = 0;
  std::uint16_t checksum = 0;  // 0: none, as RoCEv2 senders (rxe) send
};

// Writes the envelope_bytes(addr) bytes of headers at `out` for a UDP payload of
// udp_payload_bytes: IPv4 (IHL 5, header checksum computed) when addr.src_ip is IPv4-mapped,
// else IPv6; UDP from addr.udp_src_port. The caller has checked the room and the lengths.
void write_envelope(const FrameAddress& addr, UdpFields udp, std::size_t udp_payload_bytes,
                    std::uint8_t* out);

// The address fields of a walked frame (has_ip()): MACs, tags, IP addresses, traffic class,
// hop limit, flow label, IPv4 ID and DF, and the UDP source port when has_udp().
FrameAddress address_of(Bytes frame, const FrameLayout& layout);

// A packet socket with PACKET_VNET_HDR puts a struct virtio_net_hdr (10 bytes, host byte order)
// before each frame it reads; a veth marks a segmentation-offload superframe there.
inline constexpr std::size_t kVnetHeaderBytes = 10;
// The UDP payload bytes per segment of the UDP superframe `vnet_header` marks (gso_type
// VIRTIO_NET_HDR_GSO_UDP_L4, 5, which Debian 12's <linux/virtio_net.h> lacks; the ECN bit
// ignored): split_udp_superframe's `segment_bytes`. 0 for any other frame.
std::uint16_t vnet_udp_segment_bytes(std::span<const std::uint8_t> vnet_header);

// Splits a UDP segmentation-offload superframe (what a veth hands over from a socket that sent
// with UDP_SEGMENT: one Ethernet/IP/UDP header, then segments of `segment_bytes` UDP payload
// bytes, the last one shorter) into the frames the sender's NIC would have put on the wire, as
// Linux's software segmentation makes them (__udp_gso_segment, inet_gso_segment): the headers
// copied, IPv4 total length, identification (the first's + k) and header checksum, IPv6
// payload length, UDP length, and a complete UDP checksum (or 0 where the superframe had none).
// Empty when the frame is not an IPv4/IPv6 UDP frame or `segment_bytes` is 0.
std::vector<std::vector<std::uint8_t>> split_udp_superframe(std::span<const std::uint8_t> frame,
                                                            std::uint16_t segment_bytes);

}  // namespace xroce::wire
