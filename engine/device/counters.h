// The device's counters: the hw_counters rxe exposes (named exactly as
// drivers/infiniband/sw/rxe/rxe_hw_counters.c names them, so tools that read rxe's
// /sys/class/infiniband/<dev>/ports/1/hw_counters/<name> read ours the same way) and xroce's own.
//
// Threading contract (no locks on the packet path):
//   - A DeviceCounters holds one CounterBlock per writer: one per worker, plus kControlWriter for
//     the control thread. Each block has exactly one writing thread; it calls add() on it with
//     relaxed atomic load + store (no read-modify-write, no lock prefix), which is correct only
//     because nobody else writes that block.
//   - Any thread may read(): it sums every block with relaxed loads. A total is a sum of values
//     each of which was current at some moment during the read; counters never go backwards.
//   - Blocks are cache-line aligned so writers never share a line.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

namespace xroce::device {

enum class Counter : std::uint8_t {
  // rxe's hw_counters, in rxe's order (enum rxe_counters).
  kSentPkts,             // every packet the device transmitted
  kRcvdPkts,             // every packet accepted for a QP
  kDuplicateRequest,     // responder: a request PSN already executed (rxe_resp.c duplicate_request;
                         // docs/protocol.md §3.6)
  kOutOfSeqRequest,      // responder: a request PSN ahead of the expected one (NAK-PSN sent)
  kRcvdRnrErr,           // requester: RNR NAKs received
  kSendRnrErr,           // responder: RNR NAKs sent
  kRcvdSeqErr,           // requester: PSN sequence error NAKs received
  kAckDeferred,          // completer: an ACK coalesced instead of sent at once
  kRetryExceededErr,     // a WQE completed with IBV_WC_RETRY_EXC_ERR
  kRetryRnrExceededErr,  // a WQE completed with IBV_WC_RNR_RETRY_EXC_ERR
  kCompleterRetryErr,    // retransmissions started (timeout or NAK-PSN)
  kSendErr,              // the port refused a packet
  kLinkDowned,           // the netdev went from up to down
  kRdmaSends,            // SEND messages transmitted
  kRdmaRecvs,            // SEND messages received
  // xroce's own.
  kRxIcrcErrors,    // frames dropped for a bad ICRC
  kRxMalformed,     // frames dropped because they did not decode (headers, lengths)
  kRxUnknownQp,     // frames for a QPN the device does not have
  kRxHandoffDrops,  // frames dropped because the owning worker's handoff ring was full
  kTxBytes,         // RoCEv2 frame bytes transmitted (Ethernet header to ICRC)
  kRxBytes,         // RoCEv2 frame bytes received
  kCnpRcvd,         // congestion notification packets received for a QP of ours
  // DCQCN, under the names ConnectX's hw_counters give them (docs/protocol.md §5.5).
  kNpEcnMarkedRocePackets,  // RoCEv2 packets received for a QP with IP ECN = CE
  kNpCnpSent,               // CNPs sent (notification point)
  kRpCnpHandled,            // CNPs that drove a QP's reaction point
  kRpCnpIgnored,            // CNPs ignored: rp_enable off for the QP's priority, or no RP (UD)
  kDmaErrors,               // registered-memory accesses that failed (the process is gone)
  kNeighbourFailures,       // frames dropped: their destination's MAC could not be resolved
  kNeighbourChanges,        // destinations in use whose next hop's MAC changed, and was followed
  kLoopbackPkts,            // packets sent to a device of this daemon without a port (loopback)
  // Responder: requests refused for a remote access error (a bad rkey, bounds or rights), under
  // ConnectX's hw_counters name.
  kRespRemoteAccessErrors,
  kRxPeerMismatch,  // packets for an RC QP from an address not its peer's (dropped, as rxe's
                    // check_addr drops them)
  // Frames the port lost before the device saw them: the AF_XDP receive ring was full or had no
  // free buffer, or the UDP socket's buffer overflowed (a worker that fell behind its link).
  // RC recovers them by retransmission; UC and UD lose the message, as they do on a real link.
  // Sampled from the port at most once a millisecond of the worker's loop.
  kRxPortDrops,
  // Error completions, under ConnectX's hw_counters names: requester (send queue) and responder
  // (receive queue) completions with an error status other than IBV_WC_WR_FLUSH_ERR (a local
  // bind error, a NAK that ended the WQE, retries exceeded); and of those, the requester's that
  // a remote access error NAK or an invalid request NAK ended.
  kReqCqeError,
  kRespCqeError,
  kReqRemoteAccessErrors,
  kReqRemoteInvalidRequest,
  // Go-back-N resends the adaptive retransmission timer started before the Local ACK Timeout
  // (transport/completer.h; ConnectX counts its own as "adaptive retransmission"); they use no
  // retry_cnt. completer_retry_err counts the Local ACK Timeout's.
  kAdaptiveRetransmits,
  // Of completer_retry_err and adaptive_retransmits, the expiries after a resend from the same
  // PSN went unanswered (transport::QpCounters::resend_timeouts).
  kResendTimeouts,
  // Tail probes: one packet resent after silence with no NAK (transport::QpConfig::
  // tail_probe_floor_ns), counted apart from the go-back-N resends above.
  kTailProbes,
  // Go-back-N resends a tail probe's own short answer started (transport::QpCounters::
  // probe_gaps), each also counted in the retransmitted packets, not in adaptive_retransmits.
  kProbeGaps,
  // First packets of a go-back-N resend sent twice (transport::QpCounters::resend_repeats).
  kResendRepeats,
  // Replays of a duplicate READ or ATOMIC sent ahead of responses queued for later requests
  // (transport::QpCounters::replays_reordered).
  kReplaysReordered,
  // READ retries started at once, not by a timer, because the responses went back without the
  // missing PSN or a later READ's replay came ahead of the head READ's
  // (transport::QpCounters::replay_gap_retries).
  kReplayGapRetries,
  // READ responses placed after a gap, and the missing ranges asked for again by a duplicate
  // READ naming each (transport::QpCounters::read_responses_ahead, read_ranges_asked; selective
  // READ repair, transport/read_repair.h).
  kReadResponsesAhead,
  kReadRangesAsked,
  // Receive WQEs a responder found only by pulling its rings again when a request needed one
  // (transport::QpCounters::receives_pulled_late): each an RNR NAK or UD drop avoided.
  kReceivesPulledLate,
  // Packets the device's receive impairment dropped (`xroce impair`, daemon/rx_impairment.h).
  kRxImpairDrops,
  kCount
};

inline constexpr std::size_t kCounterCount = static_cast<std::size_t>(Counter::kCount);
// The first counter that rxe does not have.
inline constexpr Counter kFirstXroceCounter = Counter::kRxIcrcErrors;

// Names as files in hw_counters/ and keys in `xroce stat --json`.
inline constexpr std::array<std::string_view, kCounterCount> kCounterNames = {
    "sent_pkts",
    "rcvd_pkts",
    "duplicate_request",
    "out_of_seq_request",
    "rcvd_rnr_err",
    "send_rnr_err",
    "rcvd_seq_err",
    "ack_deferred",
    "retry_exceeded_err",
    "retry_rnr_exceeded_err",
    "completer_retry_err",
    "send_err",
    "link_downed",
    "rdma_sends",
    "rdma_recvs",
    "rx_icrc_errors",
    "rx_malformed",
    "rx_unknown_qp",
    "rx_handoff_drops",
    "tx_bytes",
    "rx_bytes",
    "cnp_rcvd",
    "np_ecn_marked_roce_packets",
    "np_cnp_sent",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "dma_errors",
    "neighbour_failures",
    "neighbour_changes",
    "loopback_pkts",
    "resp_remote_access_errors",
    "rx_peer_mismatch",
    "rx_port_drops",
    "req_cqe_error",
    "resp_cqe_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "adaptive_retransmits",
    "resend_timeouts",
    "tail_probes",
    "probe_gaps",
    "resend_repeats",
    "replays_reordered",
    "replay_gap_retries",
    "read_responses_ahead",
    "read_ranges_asked",
    "receives_pulled_late",
    "rx_impair_drops",
};

constexpr std::string_view counter_name(Counter c) {
  return kCounterNames[static_cast<std::size_t>(c)];
}
std::optional<Counter> counter_from_name(std::string_view name);

// hw_counters/lifespan as rxe's sysfs has it: how long, in milliseconds, a reader may cache the
// values (the rdma core's default, RDMA_HW_STATS_DEFAULT_LIFESPAN).
inline constexpr std::uint32_t kCounterLifespanMs = 10;

using CounterValues = std::array<std::uint64_t, kCounterCount>;

// One writer's counters. See the threading contract at the top.
class alignas(64) CounterBlock {
 public:
  // Only the block's owning thread may call this.
  void add(Counter c, std::uint64_t n = 1) {
    std::atomic<std::uint64_t>& v = values_[static_cast<std::size_t>(c)];
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  std::uint64_t load(Counter c) const {
    return values_[static_cast<std::size_t>(c)].load(std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<std::uint64_t>, kCounterCount> values_{};
};

class DeviceCounters {
 public:
  // The control thread's block (link state changes, neighbour failures seen there).
  static constexpr std::size_t kControlWriter = 0;

  // `workers` worker blocks, numbered 1..workers, plus the control block.
  explicit DeviceCounters(std::size_t workers);

  std::size_t writers() const { return writers_; }
  // Worker w (0-based) writes worker_block(w); the control thread writes control_block().
  CounterBlock& worker_block(std::size_t w);
  CounterBlock& control_block() { return blocks_[kControlWriter]; }

  // Sums every block with relaxed loads; callable from any thread.
  CounterValues read() const;
  std::uint64_t read(Counter c) const;

 private:
  std::size_t writers_;
  std::unique_ptr<CounterBlock[]> blocks_;
};

}  // namespace xroce::device
