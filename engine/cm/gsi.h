// CM MADs as RoCE v2 packets on the GSI QP: a UD SEND_ONLY to QP1 whose DETH carries the
// well-known GSI Q_Key and source QP1 (IBA 13.5.3: general services use QP1 with Q_Key
// 0x80010000 and the default P_Key), the 256-byte MAD as its payload. This is how the kernel's
// ib_mad sends them through rxe (rxe's QP1 is a UD QP with that QPN).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "cm/endpoint.h"
#include "wire/frame.h"

namespace xroce::cm {

// The transport headers of a MAD packet with PSN `psn` (the GSI QP's send PSN, 24 bits).
wire::TransportHeaders gsi_headers(std::uint32_t psn);

// A whole frame for `mad`, addressed by `addr` (its IPs are the MAD's GIDs), or nullopt if the
// addresses are mixed IPv4/IPv6.
std::optional<std::vector<std::uint8_t>> encode_gsi_frame(const wire::FrameAddress& addr,
                                                          std::uint32_t psn,
                                                          std::span<const std::uint8_t> mad);

// Is this decoded packet one for the GSI QP that the CM should see: UD SEND_ONLY to QP1 from
// QP1, GSI Q_Key, a MAD-sized payload? (Anything else to QP1 is counted and dropped.)
bool is_gsi_mad(const wire::DecodedFrame& frame);

// Where a received MAD came from, as the Endpoint takes it: the GIDs are the IP addresses
// (IPv4-mapped for IPv4), the GRH fields those of the packet.
MadPeer peer_of(const wire::DecodedFrame& frame);

}  // namespace xroce::cm
