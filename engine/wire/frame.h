// Whole RoCEv2 frames: Ethernet II (optional 802.1Q tag), IPv4 or IPv6, UDP 4791, the
// transport headers, payload, pad and ICRC (docs/protocol.md §1). This is the contract between the
// transport (which speaks TransportHeaders + payload) and the ports (which move bytes).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "wire/byteorder.h"
#include "wire/headers.h"
#include "wire/result.h"

namespace xroce::wire {

using MacAddr = std::array<std::uint8_t, 6>;

// An IP address in GID form: IPv6, or IPv4 as the IPv4-mapped ::ffff:a.b.c.d that RoCE v2
// GIDs use.
struct IpAddr {
  std::array<std::uint8_t, 16> bytes{};

  static IpAddr v4(std::uint32_t host_order);
  static IpAddr v6(const std::array<std::uint8_t, 16>& b) { return IpAddr{b}; }
  bool is_v4() const;
  std::uint32_t v4_host_order() const;  // valid when is_v4()
  bool operator==(const IpAddr&) const = default;
};

// What a QP's address vector puts around its packets.
struct FrameAddress {
  MacAddr src_mac{};
  MacAddr dst_mac{};
  std::optional<std::uint16_t> vlan_tci;  // PCP/DEI/VID as on the wire
  IpAddr src_ip;
  IpAddr dst_ip;                        // both v4 or both v6
  std::uint8_t traffic_class = 0;       // IPv4 TOS / IPv6 traffic class: DSCP << 2 | ECN
  std::uint8_t hop_limit = 64;          // IPv4 TTL / IPv6 hop limit
  std::uint32_t flow_label = 0;         // IPv6 only, 20 bits
  std::uint16_t udp_src_port = 0xC000;  // per-QP entropy (docs/protocol.md §1.3)
  std::uint16_t ipv4_id = 0;            // IPv4 identification
  bool ipv4_dont_fragment = true;       // IPv4 DF flag; rxe always sets it
  bool operator==(const FrameAddress&) const = default;
};

// ECN codepoints in the low two bits of the traffic class.
enum class Ecn : std::uint8_t { kNotEct = 0, kEct1 = 1, kEct0 = 2, kCe = 3 };

enum class FrameError : std::uint8_t {
  kTruncated,       // shorter than the headers it announces
  kNotIp,           // EtherType is neither IPv4 nor IPv6 (after an optional VLAN tag)
  kBadIpHeader,     // IPv4 with options, bad version, bad header checksum, or fragments;
                    // IPv6 with an IPv4-mapped address
  kNotUdp,          // IP protocol / next header is not UDP
  kNotRoce,         // UDP destination port is not 4791
  kBadUdpLength,    // UDP length disagrees with the IP length, is too short, is over 65535,
                    // or leaves payload bytes on an opcode that carries none
  kBadUdpChecksum,  // a non-zero UDP checksum that does not verify
  kBadHeaders,      // the transport headers did not decode (see HeaderError)
  kBadPad,          // PadCnt larger than the payload
  kBufferTooSmall,  // encode: output buffer too small
  kBadAddress,      // encode: mixed IPv4 and IPv6 addresses
};
const char* to_string(FrameError e);

struct DecodedFrame {
  FrameAddress addr;
  Ecn ecn = Ecn::kNotEct;
  TransportHeaders hdr;
  HeaderError header_error{};   // set when decode fails with kBadHeaders
  Bytes payload;                // without pad
  std::uint32_t icrc_wire = 0;  // as read from the wire, little-endian (docs/protocol.md §1.7)
  bool icrc_ok = false;
  std::uint16_t ipv4_checksum = 0;  // as on the wire (verified); 0 for IPv6
  std::uint16_t udp_checksum = 0;   // as on the wire; 0 = not used, else verified
  std::uint16_t udp_length = 0;     // UDP header to ICRC inclusive
};

// Bytes a frame with these headers and this payload takes on the wire (without FCS).
std::size_t frame_bytes(const FrameAddress& addr, const TransportHeaders& hdr,
                        std::size_t payload_len);

// Encodes a complete frame into `out`: Ethernet, IP, UDP (checksum 0), the headers, payload,
// pad (hdr.bth.pad_count is set from the payload length), ICRC. Returns the frame length.
Result<std::size_t, FrameError> encode_frame(const FrameAddress& addr, const TransportHeaders& hdr,
                                             Bytes payload, MutableBytes out);

// Decodes and validates a frame. Lengths come from UDP (never from the Ethernet length). A
// frame whose ICRC does not verify still decodes, with icrc_ok = false: the caller counts and
// drops it.
Result<DecodedFrame, FrameError> decode_frame(Bytes frame);

// decode_frame for tools that report bad frames: fills `out` as far as decoding got (addresses,
// header_error, ...) and returns the error, or nullopt when the frame decoded completely.
std::optional<FrameError> decode_frame_into(Bytes frame, DecodedFrame& out);

std::string to_string(const IpAddr& ip);  // dotted quad for IPv4-mapped, RFC 5952 for IPv6
const char* to_string(Ecn ecn);           // "Not-ECT", "ECT(1)", "ECT(0)", "CE"

}  // namespace xroce::wire
