// The Ethernet/IP/UDP envelope of a RoCEv2 frame, as far as a port needs it: the UDP port
// strips it on send and synthesizes it on receive, the benchmark and the integration tests
// wrap payloads in it. This is deliberately not the wire codec (wire/frame.h): it does not look
// past the UDP header and knows nothing of the transport. The layout itself (tags, IP, UDP,
// the IPv4 checksum) is wire/frame_layout.h's; this file adds the port's policy and types.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "wire/frame_layout.h"

namespace xroce::net {

using Mac = std::array<std::uint8_t, 6>;
// IPv6, or IPv4 in the IPv4-mapped form ::ffff:a.b.c.d (as RoCE v2 GIDs write it).
using Ip16 = std::array<std::uint8_t, 16>;

using wire::kEthHeaderBytes;
using wire::kIpv4HeaderBytes;
using wire::kIpv6HeaderBytes;
using wire::kUdpHeaderBytes;
using wire::kVlanTagBytes;
inline constexpr std::uint16_t kRoceUdpPort = 4791;  // IANA "RoCEv2"
// The most header bytes a port ever puts in front of a UDP payload (no VLAN tag: a UDP
// socket cannot send or report one).
inline constexpr std::size_t kMaxEnvelopeBytes =
    kEthHeaderBytes + kIpv6HeaderBytes + kUdpHeaderBytes;

bool is_v4_mapped(const Ip16& a);
Ip16 v4_mapped(std::uint32_t host_order);

struct UdpEnvelope {
  Mac dst_mac{};
  Mac src_mac{};
  std::optional<std::uint16_t> vlan_tci;
  Ip16 src_ip{};
  Ip16 dst_ip{};                   // both v4-mapped or both v6
  std::uint8_t traffic_class = 0;  // IPv4 TOS / IPv6 traffic class (DSCP << 2 | ECN)
  std::uint8_t hop_limit = 64;     // IPv4 TTL / IPv6 hop limit
  std::uint32_t flow_label = 0;    // IPv6 only
  std::uint16_t ipv4_id = 0;
  bool ipv4_dont_fragment = true;
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = kRoceUdpPort;
  std::uint16_t udp_checksum = 0;  // 0: none (RoCEv2 senders such as rxe send 0)
};

// Bytes the envelope takes in front of the UDP payload.
std::size_t envelope_bytes(const UdpEnvelope& env);

// Writes the envelope for a payload of payload_len bytes into the envelope_bytes(env) bytes
// before `payload_begin` (so a receive path can build it in headroom without copying the
// payload). The IPv4 header checksum is computed.
void write_envelope(const UdpEnvelope& env, std::size_t payload_len, std::uint8_t* payload_begin);

// A socket reader does not see the IPv4 identification, which the ICRC covers (rxe_icrc.c
// rxe_icrc_hdr masks it). Our own port sends ID 0 (DF, unconnected socket), but other senders (rxe)
// set it: when the envelope written for a received RoCE datagram does not verify with ID 0, this
// finds the ID that makes the ICRC verify (wire::icrc_solve_ipv4_id), writes it and fixes the
// header checksum. A datagram no ID explains is left as it was, for the decoder to count as an
// ICRC error. `payload_begin` and `payload_len` as given to write_envelope; the payload ends with
// the ICRC. Says what it found: the ICRC verifies (as written, or with the ID it wrote), no ID
// makes it verify, or nothing was checked (IPv6, too short to be RoCE).
enum class IcrcCheck { kNotChecked, kVerified, kNoIdVerifies };
IcrcCheck recover_ipv4_id(const UdpEnvelope& env, std::size_t payload_len,
                          std::uint8_t* payload_begin);

struct ParsedUdpFrame {
  UdpEnvelope env;
  std::span<const std::uint8_t> payload;  // the UDP payload, by the UDP length
};

// Parses Ethernet (+ up to two VLAN tags, 802.1Q or 802.1ad; env.vlan_tci is the inner one),
// IPv4 (no options, no fragments) or IPv6 (UDP next), and UDP, with bounds checks; nullopt
// when the frame is not that or the lengths disagree.
std::optional<ParsedUdpFrame> parse_udp_frame(std::span<const std::uint8_t> frame);

// The IPv4 header checksum of a 20-byte header, its checksum field taken as zero.
inline std::uint16_t ipv4_header_checksum(const std::uint8_t* header20) {
  return wire::ipv4_header_checksum(wire::Bytes(header20, kIpv4HeaderBytes));
}

}  // namespace xroce::net
