// Whole RoCEv2 frames: Ethernet II (up to two VLAN tags, 802.1Q or 802.1ad, as frame_layout.h
// walks them), IPv4 or IPv6, UDP 4791, the transport headers, payload, pad and ICRC (IBA Annex
// A17). This is the contract between the transport (which speaks TransportHeaders + payload)
// and the ports (which move bytes).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "wire/byteorder.h"
#include "wire/frame_layout.h"
#include "wire/headers.h"
#include "wire/result.h"

namespace xroce::wire {

enum class FrameError : std::uint8_t {
  kTruncated,       // shorter than the headers it announces
  kNotIp,           // EtherType is neither IPv4 nor IPv6 (after up to two VLAN tags)
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
  std::uint16_t udp_checksum = 0;   // as on the wire; 0 = not used, else verified or partial
  std::uint16_t udp_length = 0;     // UDP header to ICRC inclusive
  std::uint16_t ip_offset = 0;      // where the IP header starts (after any VLAN tags)
};

// Bytes a frame with these headers and this payload takes on the wire (without FCS).
std::size_t frame_bytes(const FrameAddress& addr, const TransportHeaders& hdr,
                        std::size_t payload_len);

// Encodes a complete frame into `out`: Ethernet, IP, UDP (checksum 0), the headers, payload,
// pad (hdr.bth.pad_count is set from the payload length), ICRC. Returns the frame length.
// `payload` may already lie in `out` exactly where the frame has it (after the headers): it
// is then not copied. Any other overlap is not allowed.
Result<std::size_t, FrameError> encode_frame(const FrameAddress& addr, const TransportHeaders& hdr,
                                             Bytes payload, MutableBytes out);

// Decodes and validates a frame. Lengths come from UDP (never from the Ethernet length). A
// frame whose ICRC does not verify still decodes, with icrc_ok = false: the caller counts and
// drops it.
Result<DecodedFrame, FrameError> decode_frame(Bytes frame);

// decode_frame for tools that report bad frames: fills `out` as far as decoding got (addresses,
// header_error, ...) and returns the error, or nullopt when the frame decoded completely.
// `icrc_verified`: the caller computed the ICRC over exactly these bytes and it matched (a port
// that had to, net::RxFrame::icrc_verified), so it is not computed again.
std::optional<FrameError> decode_frame_into(Bytes frame, DecodedFrame& out,
                                            bool icrc_verified = false);

// The 40-byte GRH area a UD receive gets for a RoCEv2 packet (ibv_grh): the IPv6 header, or
// the IPv4 header in its last 20 bytes, as rxe fills it (rxe_resp.c execute).
// `decoded` is `frame` decoded without error.
std::array<std::uint8_t, 40> grh_area(Bytes frame, const DecodedFrame& decoded);

std::string to_string(const IpAddr& ip);  // dotted quad for IPv4-mapped, RFC 5952 for IPv6
const char* to_string(Ecn ecn);           // "Not-ECT", "ECT(1)", "ECT(0)", "CE"

}  // namespace xroce::wire
