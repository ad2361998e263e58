// UDP source port (flow entropy) as Linux derives it for RoCEv2 (docs/protocol.md §1.3; ib_verbs.h
// rdma_get_udp_sport). The port must stay constant for a QP so the network keeps its packets in
// order; receivers ignore it.
#pragma once

#include <cstdint>

#include "wire/types.h"

namespace xroce::wire {

// Lowest port of the range RoCE entropy uses (IANA ephemeral range 0xC000-0xFFFF).
inline constexpr std::uint16_t kRoceSportMin = 0xC000;
inline constexpr std::uint32_t kFlowLabelMask = 0xFFFFF;

// rxe at QP creation: 0xC000 + hash_32(qpn, 14), the kernel's golden-ratio hash.
constexpr std::uint16_t udp_sport_at_create(Qpn qpn) {
  constexpr std::uint32_t kGoldenRatio32 = 0x61C88647;
  constexpr unsigned kHashBits = 14;
  const std::uint32_t hash = (qpn.value() * kGoldenRatio32) >> (32 - kHashBits);
  return static_cast<std::uint16_t>(kRoceSportMin + (hash & 0x3FFF));
}

// rdma_calc_flow_label: a 20-bit flow label from both QPNs. The product is symmetric, so both
// ends of a QP pair derive the same value.
constexpr std::uint32_t flow_label_from_qpns(Qpn own, Qpn peer) {
  std::uint64_t v = std::uint64_t{own.value()} * peer.value();
  v ^= v >> 20;
  v ^= v >> 40;
  return static_cast<std::uint32_t>(v & kFlowLabelMask);
}

// rdma_flow_label_to_udp_sport: folds the 20-bit flow label into 14 bits above 0xC000.
constexpr std::uint16_t udp_sport_from_flow_label(std::uint32_t flow_label) {
  const std::uint32_t low = flow_label & 0x3FFF;
  const std::uint32_t high = (flow_label & 0xFC000) >> 14;
  return static_cast<std::uint16_t>(kRoceSportMin | (low ^ high));
}

// rdma_get_udp_sport: what rxe uses once the QP has an address vector (INIT->RTR). A zero flow
// label (no rdma_cm, no user label) is replaced by the one computed from the QPNs.
constexpr std::uint16_t rdma_get_udp_sport(std::uint32_t flow_label, Qpn own, Qpn peer) {
  if (flow_label == 0) flow_label = flow_label_from_qpns(own, peer);
  return udp_sport_from_flow_label(flow_label);
}

}  // namespace xroce::wire
