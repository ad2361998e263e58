// Port attributes derived from the netdev a device is bound to, as rxe derives them.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace xroce::device {

using MacAddress = std::array<uint8_t, 6>;

// What the daemon reads from the netdev (in its own network namespace).
struct NetdevState {
  std::string name;
  int ifindex = 0;
  MacAddress mac{};
  uint32_t mtu = 1500;
  bool up = false;  // IFF_UP
  // Link detected (the driver's carrier, ethtool's "Link detected"). Not IFF_RUNNING: that is
  // the operational state, which the kernel's linkwatch updates up to a second after the
  // carrier comes on (it batches events of a veth whose peer has its own ifindex number).
  bool carrier = false;
  uint32_t speed_mbps = 0;  // 0 when the driver does not say

  bool operator==(const NetdevState&) const = default;
};

// IB MTU enum (ibv_mtu): 1 = 256 ... 5 = 4096 bytes of payload per packet.
inline constexpr uint32_t kIbMtu256 = 1;
inline constexpr uint32_t kIbMtu4096 = 5;
// Room rxe keeps for headers below the netdev MTU (rxe_param.h RXE_MAX_HDR_LENGTH; docs/protocol.md
// §3.10).
inline constexpr uint32_t kMaxHeaderBytes = 80;

uint32_t ib_mtu_bytes(uint32_t ib_mtu);
// The largest IB MTU whose packets fit the netdev MTU: 1500 -> 1024, 4200 -> 4096.
uint32_t active_ib_mtu(uint32_t netdev_mtu);

// Link width and per-lane speed in the IB encodings ibv_port_attr uses.
struct LinkRate {
  uint8_t width = 1;  // 1 = 1X, 2 = 4X
  uint8_t speed = 1;  // 1 SDR, 2 DDR, 4 QDR, 8 FDR10, 16 FDR, 32 EDR
};
// The same table as the kernel's ib_get_eth_speed(); 0 (unknown) counts as 1 Gb/s or less.
LinkRate link_rate_for(uint32_t speed_mbps);
// The text of sysfs ports/1/rate, e.g. "10 Gb/sec (1X FDR10)".
std::string rate_sysfs_text(LinkRate rate);

// Port state as ibv_port_state and IB physical state: ACTIVE/LinkUp when the netdev is up with
// carrier, DOWN/Disabled otherwise, as rxe reports it (ib_get_curr_port_state: netif_running
// and netif_carrier_ok).
inline constexpr uint32_t kPortDown = 1;
inline constexpr uint32_t kPortActive = 4;
inline constexpr uint8_t kPhysDisabled = 3;
inline constexpr uint8_t kPhysLinkUp = 5;
uint32_t port_state(const NetdevState& netdev);
uint8_t phys_state(const NetdevState& netdev);
// sysfs texts: "4: ACTIVE", "5: LinkUp".
std::string port_state_sysfs_text(uint32_t state);
std::string phys_state_sysfs_text(uint8_t state);

// Node GUID from the MAC as an EUI-64 (insert ff:fe, flip the universal/local bit), as rxe does;
// the value is in host order with the first GUID byte most significant.
uint64_t node_guid_from_mac(const MacAddress& mac);
// "0250:56ff:fe00:0001", the sysfs form of a GUID.
std::string guid_sysfs_text(uint64_t guid);

}  // namespace xroce::device
