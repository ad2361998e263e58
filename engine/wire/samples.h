// The golden samples: one valid frame of every opcode the project speaks, over IPv4 and IPv6,
// with and without an 802.1Q tag; ACKs with every NAK code, RNR timer and credit code; a CNP;
// and the reference frames of docs/protocol.md §1.8. `xroce wire samples` writes them to a capture
// for dissectors and peers to check; the tests check them against scapy and tshark.
#pragma once

#include <string>
#include <vector>

#include "wire/frame.h"

namespace xroce::wire {

struct Sample {
  std::string name;  // unique, e.g. "RDMA_WRITE_FIRST/ipv6/vlan"
  FrameAddress addr;
  TransportHeaders hdr;  // bth.pad_count as encoded
  std::vector<std::uint8_t> payload;
  std::vector<std::uint8_t> frame;  // the encoded frame
};

// Deterministic: the same list, byte for byte, on every call.
std::vector<Sample> golden_samples();

// Payload bytes a first or middle packet of the samples carries (their path MTU).
inline constexpr std::size_t kSamplePmtu = 256;

}  // namespace xroce::wire
