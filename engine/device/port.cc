#include "device/port.h"

#include <fmt/core.h>

namespace xroce::device {

uint32_t ib_mtu_bytes(uint32_t ib_mtu) {
  return 128u << ib_mtu;
}

uint32_t active_ib_mtu(uint32_t netdev_mtu) {
  const uint32_t room = netdev_mtu > kMaxHeaderBytes ? netdev_mtu - kMaxHeaderBytes : 0;
  uint32_t mtu = kIbMtu256;
  for (uint32_t m = kIbMtu4096; m > kIbMtu256; --m) {
    if (ib_mtu_bytes(m) <= room) {
      mtu = m;
      break;
    }
  }
  return mtu;
}

namespace {

constexpr uint8_t kWidth1X = 1;
constexpr uint8_t kWidth4X = 2;
constexpr uint8_t kSpeedSdr = 1;
constexpr uint8_t kSpeedDdr = 2;
constexpr uint8_t kSpeedQdr = 4;
constexpr uint8_t kSpeedFdr10 = 8;
constexpr uint8_t kSpeedFdr = 16;
constexpr uint8_t kSpeedEdr = 32;

struct SpeedName {
  uint8_t speed;
  const char* name;
  const char* lane_gbps;  // text, for 2.5
};
constexpr SpeedName kSpeeds[] = {
    {kSpeedSdr, "SDR", "2.5"},    {kSpeedDdr, "DDR", "5"},  {kSpeedQdr, "QDR", "10"},
    {kSpeedFdr10, "FDR10", "10"}, {kSpeedFdr, "FDR", "14"}, {kSpeedEdr, "EDR", "25"},
};

}  // namespace

LinkRate link_rate_for(uint32_t speed_mbps) {
  if (speed_mbps <= 1000) return {kWidth1X, kSpeedSdr};
  if (speed_mbps <= 10000) return {kWidth1X, kSpeedFdr10};
  if (speed_mbps <= 20000) return {kWidth4X, kSpeedDdr};
  if (speed_mbps <= 25000) return {kWidth1X, kSpeedEdr};
  if (speed_mbps <= 40000) return {kWidth4X, kSpeedFdr10};
  return {kWidth4X, kSpeedEdr};
}

std::string rate_sysfs_text(LinkRate rate) {
  const int lanes = rate.width == kWidth4X ? 4 : 1;
  for (const auto& s : kSpeeds) {
    if (s.speed != rate.speed) continue;
    if (rate.speed == kSpeedSdr && lanes == 1) return "2.5 Gb/sec (1X SDR)";
    const double gbps = std::stod(s.lane_gbps) * lanes;
    return fmt::format("{:g} Gb/sec ({}X {})", gbps, lanes, s.name);
  }
  return "0 Gb/sec";
}

uint32_t port_state(const NetdevState& netdev) {
  return netdev.up && netdev.carrier ? kPortActive : kPortDown;
}

uint8_t phys_state(const NetdevState& netdev) {
  return netdev.up && netdev.carrier ? kPhysLinkUp : kPhysDisabled;
}

std::string port_state_sysfs_text(uint32_t state) {
  return state == kPortActive ? "4: ACTIVE" : "1: DOWN";
}

std::string phys_state_sysfs_text(uint8_t state) {
  return state == kPhysLinkUp ? "5: LinkUp" : "3: Disabled";
}

uint64_t node_guid_from_mac(const MacAddress& mac) {
  const uint8_t eui[8] = {
      static_cast<uint8_t>(mac[0] ^ 0x02), mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
  uint64_t guid = 0;
  for (uint8_t b : eui)
    guid = (guid << 8) | b;
  return guid;
}

std::string guid_sysfs_text(uint64_t guid) {
  return fmt::format("{:04x}:{:04x}:{:04x}:{:04x}", (guid >> 48) & 0xffff, (guid >> 32) & 0xffff,
                     (guid >> 16) & 0xffff, guid & 0xffff);
}

}  // namespace xroce::device
