// The data path's frame steps, pure functions between the ports' bytes and the transport's
// TransportHeaders + payload (ARCHITECTURE.md decision 6: the worker does the I/O, these do
// the translation). Ingress is the one door of STYLE.md §6: a frame that passes classify() is
// a well-formed RoCEv2 packet with a good ICRC, and everything after it may rely on that.
#pragma once

#include <cstdint>
#include <optional>

#include "transport/work.h"
#include "wire/frame.h"

namespace xroce::daemon {

// What the data path counts, named like rxe's hw_counters where they mean the same.
struct DatapathCounters {
  std::uint64_t rx_frames = 0;          // frames taken from the port
  std::uint64_t rx_delivered = 0;       // handed to a QP (rxe: rcvd_pkts)
  std::uint64_t rx_malformed = 0;       // did not decode (rxe counts these nowhere; we do)
  std::uint64_t rx_icrc_errors = 0;     // decoded, ICRC did not verify (rxe: no counter either)
  std::uint64_t rx_no_qp = 0;           // no QP with that number on this device (rxe: ...)
  std::uint64_t rx_handed_over = 0;     // sent to the owning worker's ring
  std::uint64_t rx_handover_drops = 0;  // that ring was full
  std::uint64_t tx_frames = 0;          // rxe: sent_pkts
  std::uint64_t tx_encode_errors = 0;
  std::uint64_t tx_no_address = 0;    // the QP named an address vector we do not know
  std::uint64_t tx_no_neighbour = 0;  // the destination MAC could not be resolved in time
  std::uint64_t tx_backlog_drops = 0;
  std::uint64_t sleeps = 0;  // times a worker went to sleep in io_uring

  DatapathCounters& operator+=(const DatapathCounters& o);
};

enum class Ingress : std::uint8_t {
  kPacket,     // well-formed, ICRC verified: route it
  kMalformed,  // decode_frame refused it
  kBadIcrc,    // decoded, but the ICRC does not verify
};

// Decodes a received frame into `out` and says what to do with it.
Ingress classify(wire::Bytes frame, wire::DecodedFrame& out);

// The per-packet facts the transport takes from below the BTH: ECN CE and, for UD receives,
// the GRH area (the IPv6 header, or the IPv4 header in its last 20 bytes, as rxe fills it).
transport::RxMeta rx_meta_of(wire::Bytes frame, const wire::DecodedFrame& decoded);

// Encodes one packet the transport asked to send, with its address vector; sets ECT(0) when
// congestion control marked it. Returns the frame length.
wire::Result<std::size_t, wire::FrameError> encode_transmit(const transport::Transmit& tx,
                                                            const wire::FrameAddress& addr,
                                                            wire::Bytes payload,
                                                            wire::MutableBytes out);

// The worker that owns a QP: a fixed function of the QP number, so that any worker can route a
// packet without a shared table (the device hands out QPNs; any QPN has exactly one owner).
constexpr std::uint32_t owner_worker(wire::Qpn qpn, std::uint32_t workers) {
  return workers == 0 ? 0 : qpn.value() % workers;
}

}  // namespace xroce::daemon
