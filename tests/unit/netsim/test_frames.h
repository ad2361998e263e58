// Hand-built RoCEv2 frames for the simulator tests: Ethernet, IPv4 or IPv6, UDP 4791, a BTH,
// payload and a 4-byte trailer in place of the ICRC. The simulator only looks at the
// Ethernet/IP/UDP fields, so these tests do not depend on the wire encoder.
#pragma once

#include <cstdint>
#include <vector>

#include "net/sim/frame_edit.h"
#include "net/sim/network.h"
#include "wire/byteorder.h"

namespace xroce::net::sim::testing {

inline wire::MacAddr mac_of(std::uint8_t n) {
  return {0x02, 0, 0, 0, 0, n};
}

// 198.18.0.n as an IPv4-mapped GID.
inline wire::IpAddr ip4_of(std::uint8_t n) {
  wire::IpAddr ip;
  ip.bytes[10] = 0xFF;
  ip.bytes[11] = 0xFF;
  ip.bytes[12] = 198;
  ip.bytes[13] = 18;
  ip.bytes[14] = 0;
  ip.bytes[15] = n;
  return ip;
}

// 2001:2::n
inline wire::IpAddr ip6_of(std::uint8_t n) {
  wire::IpAddr ip;
  ip.bytes[0] = 0x20;
  ip.bytes[1] = 0x01;
  ip.bytes[3] = 0x02;
  ip.bytes[15] = n;
  return ip;
}

struct FrameSpec {
  std::uint8_t src = 1;  // host numbers: MAC 02:00:00:00:00:n, IP 198.18.0.n / 2001:2::n
  std::uint8_t dst = 2;
  bool ipv6 = false;
  bool vlan = false;
  std::uint8_t traffic_class = 0x02;  // ECT(0)
  std::uint16_t udp_sport = 0xC000;
  std::uint32_t psn = 0;  // written into the BTH: lets tests identify frames
  std::size_t payload = 64;
  bool zero_mac = false;  // destination MAC all zero (forces routing by IP)
};

inline constexpr std::size_t kBthLen = 12;
inline constexpr std::size_t kIcrcLen = 4;

inline Frame make_frame(const FrameSpec& s) {
  Frame f;
  auto put8 = [&](std::uint8_t v) { f.push_back(v); };
  auto put16 = [&](std::uint16_t v) {
    f.resize(f.size() + 2);
    wire::store_be16(&f[f.size() - 2], v);
  };
  const wire::MacAddr dst_mac = s.zero_mac ? wire::MacAddr{} : mac_of(s.dst);
  for (auto b : dst_mac)
    put8(b);
  for (auto b : mac_of(s.src))
    put8(b);
  if (s.vlan) {
    put16(0x8100);
    put16(0x0005);
  }
  const std::size_t udp_len = 8 + kBthLen + s.payload + kIcrcLen;
  if (s.ipv6) {
    put16(0x86DD);
    put8(static_cast<std::uint8_t>(0x60 | s.traffic_class >> 4));
    put8(static_cast<std::uint8_t>((s.traffic_class & 0x0F) << 4));
    put16(0);
    put16(static_cast<std::uint16_t>(udp_len));
    put8(17);
    put8(64);
    for (auto b : ip6_of(s.src).bytes)
      put8(b);
    for (auto b : ip6_of(s.dst).bytes)
      put8(b);
  } else {
    put16(0x0800);
    const std::size_t ip = f.size();
    put8(0x45);
    put8(s.traffic_class);
    put16(static_cast<std::uint16_t>(20 + udp_len));
    put16(0x1234);
    put16(0x4000);
    put8(64);
    put8(17);
    put16(0);
    for (int i = 0; i < 4; ++i)
      put8(ip4_of(s.src).bytes[12 + i]);
    for (int i = 0; i < 4; ++i)
      put8(ip4_of(s.dst).bytes[12 + i]);
    wire::store_be16(&f[ip + 10], ipv4_header_checksum(wire::Bytes(&f[ip], 20)));
  }
  put16(s.udp_sport);
  put16(4791);
  put16(static_cast<std::uint16_t>(udp_len));
  put16(0);
  // BTH: RC SEND_ONLY, P_Key 0xFFFF, DestQP 0x11, PSN.
  put8(0x04);
  put8(0x00);
  put16(0xFFFF);
  put8(0x00);
  put8(0x00);
  put16(0x0011);
  put8(0x00);
  put8(static_cast<std::uint8_t>(s.psn >> 16));
  put16(static_cast<std::uint16_t>(s.psn));
  for (std::size_t i = 0; i < s.payload; ++i)
    put8(static_cast<std::uint8_t>(i));
  for (std::size_t i = 0; i < kIcrcLen; ++i)
    put8(0xA5);
  return f;
}

// The PSN a make_frame() frame carries (IPv4, no VLAN).
inline std::uint32_t psn_of(const Frame& f) {
  const auto layout = parse_layout(f);
  return wire::load_be24(&f[*layout->udp_offset + 8 + 9]);
}

inline HostConfig host_config(std::uint8_t n) {
  return HostConfig{"h" + std::to_string(n), mac_of(n), {ip4_of(n), ip6_of(n)}};
}

}  // namespace xroce::net::sim::testing
