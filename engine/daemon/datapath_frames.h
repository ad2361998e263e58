// The data path's frame steps, pure functions between the ports' bytes and the transport's
// TransportHeaders + payload (docs/ARCHITECTURE.md decision 6: the worker does the I/O, these do
// the translation). classify() is the one door where packets are validated (worker_ingress.h):
// a frame that passes it is a well-formed RoCEv2 packet with a good ICRC, and everything after
// it may rely on that.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

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
  std::uint64_t rx_loopback = 0;        // frames a worker of this daemon looped back to us
  std::uint64_t tx_frames = 0;          // rxe: sent_pkts
  std::uint64_t tx_encode_errors = 0;
  std::uint64_t tx_no_address = 0;    // the QP named an address vector we do not know
  std::uint64_t tx_no_neighbour = 0;  // the destination MAC could not be resolved in time
  std::uint64_t tx_backlog_drops = 0;
  std::uint64_t tx_loopback = 0;        // frames for a GID of this daemon, handed over (loopback)
  std::uint64_t tx_loopback_drops = 0;  // the receiving worker's loopback inbox was full
  std::uint64_t sleeps = 0;             // times a worker went to sleep in io_uring
  std::uint64_t moderated_sleeps = 0;   // of those, without doorbells (WorkerConfig::moderation_ns)

  DatapathCounters& operator+=(const DatapathCounters& o);
};

enum class FrameClass : std::uint8_t {
  kPacket,     // well-formed, ICRC verified: route it
  kMalformed,  // decode_frame refused it
  kBadIcrc,    // decoded, but the ICRC does not verify
};

// Decodes a received frame into `out` and says what to do with it. `icrc_verified` as
// net::RxFrame's: the port checked the ICRC already.
FrameClass classify(wire::Bytes frame, wire::DecodedFrame& out, bool icrc_verified = false);

// A frame copied out of a port's buffer, owned by whoever holds the pointer while it travels
// between workers (a handover ring, a loopback inbox).
struct FrameCopy {
  std::vector<std::uint8_t> bytes;
};

// The per-packet facts the transport takes from below the BTH: ECN CE and, for UD receives,
// the GRH area (the IPv6 header, or the IPv4 header in its last 20 bytes, as rxe fills it).
transport::RxMeta rx_meta_of(wire::Bytes frame, const wire::DecodedFrame& decoded);

// Encodes one packet the transport asked to send, with its address vector; sets ECT(0) when
// congestion control marked it. Returns the frame length.
wire::Result<std::size_t, wire::FrameError> encode_transmit(const transport::Transmit& tx,
                                                            const wire::FrameAddress& addr,
                                                            wire::Bytes payload,
                                                            wire::MutableBytes out);

// Which worker owns each QP number: written by the control thread when it places a QP, read
// by every worker to route a received packet (relaxed loads of single bytes: a packet racing
// with its QP's placement is dropped as "no QP", as a NIC drops one for a QP not yet created).
// One byte per possible QPN (16 MiB of anonymous memory; only pages where QPNs are used are
// ever touched). At most 254 workers.
class QpRoutes {
 public:
  static constexpr std::uint32_t kNone = 0xFFFFFFFF;
  QpRoutes();
  ~QpRoutes();
  QpRoutes(const QpRoutes&) = delete;
  QpRoutes& operator=(const QpRoutes&) = delete;

  std::uint32_t owner(wire::Qpn qpn) const {
    const std::uint8_t v =
        std::atomic_ref<std::uint8_t>(table_[qpn.value()]).load(std::memory_order_relaxed);
    return v == 0 ? kNone : v - 1u;
  }
  void set(wire::Qpn qpn, std::uint32_t worker) {
    std::atomic_ref<std::uint8_t>(table_[qpn.value()])
        .store(static_cast<std::uint8_t>(worker + 1), std::memory_order_release);
  }
  void clear(wire::Qpn qpn) {
    std::atomic_ref<std::uint8_t>(table_[qpn.value()]).store(0, std::memory_order_release);
  }

 private:
  std::uint8_t* table_;  // worker + 1 per QPN, 0 = none; anonymous zero pages
};

}  // namespace xroce::daemon
