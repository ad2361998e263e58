// Feeding and publishing the device counters (counters.h).
//
// Feeding, on the owning worker: the transport keeps per-QP counters (transport::QpCounters) and
// produces completions; a worker turns them into device counter events with
// feed_qp_counters() after draining a QP (only the growth since the last call is added, so
// counters of destroyed QPs are never lost) and feed_completion() for each completion. Packet
// and frame counters (sent_pkts, rcvd_pkts, rx_icrc_errors, ...) the worker adds itself where it
// sends and classifies frames (engine/daemon/worker.cc does all of this).
//
// What maps to what (where rxe's meaning is only approximated, it says so):
//   duplicate_request   <- QpCounters::duplicate_requests
//   out_of_seq_request  <- QpCounters::out_of_sequence
//   rcvd_rnr_err        <- QpCounters::rnr_naks_received
//   send_rnr_err        <- QpCounters::rnr_naks_sent
//   rcvd_seq_err        <- QpCounters::naks_received - rnr_naks_received (every non-RNR NAK;
//                          rxe counts PSN-sequence NAKs only)
//   completer_retry_err <- QpCounters::timeouts (retransmission rounds started by a timeout)
//   adaptive_retransmits <- QpCounters::adaptive_retransmits (rounds the adaptive timer started)
//   resend_timeouts     <- QpCounters::resend_timeouts (of both, those after a resend went
//                          unanswered)
//   cnp_rcvd, np_ecn_marked_roce_packets <- cnps_received, ecn_ce_received
//   np_cnp_sent, rp_cnp_handled, rp_cnp_ignored: the worker, from the CNPs it sends and the
//                          QPs' DCQCN counters (engine/daemon/worker.h)
//   sent_pkts, rcvd_pkts, tx_bytes, rx_bytes, rx_*, send_err, neighbour_failures,
//   neighbour_changes, loopback_pkts: the worker (a looped-back packet counts in the sender's
//                          sent_pkts and tx_bytes and in the receiver's rcvd_pkts and rx_bytes)
//   ack_deferred        <- responses received on one worker for a QP of another (handed over:
//                          rxe counts responses its completer had to defer to a task)
//   retry_exceeded_err, retry_rnr_exceeded_err <- completions with those statuses
//   rdma_sends          <- successful send completions of SEND opcodes
//   rdma_recvs          <- successful receive completions
//
// Publishing: counters_json() for `xroce stat --json` and the control socket;
// write_hw_counters() for the sysfs-shaped tree, one file per counter plus `lifespan`, as
// /sys/class/infiniband/<dev>/ports/1/hw_counters/ holds them for rxe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "device/counters.h"
#include "transport/qp.h"
#include "transport/work.h"

namespace xroce::device {

// Owning worker only (writes `block`).
void feed_qp_counters(CounterBlock& block, const transport::QpCounters& now,
                      transport::QpCounters& reported);
void feed_completion(CounterBlock& block, const transport::Completion& completion);

// {"sent_pkts": N, ...} in counter order.
std::string counters_json(const CounterValues& values);

// Writes <port_dir>/hw_counters/<name> ("N\n") for every counter and hw_counters/lifespan,
// each through a temporary file and rename() so a reader never sees a partial value.
// 0 or an errno.
int write_hw_counters(const std::string& port_dir, const CounterValues& values);

// What the device model knows about a QP that its transport core does not.
struct QpShowContext {
  std::uint32_t worker = 0;  // the owning worker's index
  int pid = 0;               // the owning process
  std::string peer;          // the destination address ("198.18.0.2"), empty if none yet
};

// One QP as `xroce qp show --json` prints it: qpn, type, state, sq_psn (next to send),
// unacked_psn, rq_psn (next expected), dest_qpn, peer, worker, pid, send_queue_depth,
// retransmits (packets sent again), timeouts, adaptive_retransmits, resend_timeouts,
// tail_probes, replay_gap_retries, read_responses_ahead, read_ranges_asked, naks_received,
// rnr_naks_received, packets sent and received, payload_bytes_sent/received, naks_sent,
// rnr_naks_sent, duplicate_requests, replays_reordered, out_of_sequence, cnps_received,
// ecn_ce_received (CE-marked packets seen), and the round-trip estimate rtt_us (smoothed),
// rtt_min_us, rtt_latest_us, rtt_peak_us (the longest of the last 1-2 s, transport/rtt.h),
// rtt_samples (0: none measured yet), and the requester's loss window: loss_window_psns (the PSNs
// it may have unacknowledged now) and loss_window_reductions (its decreases on NAKs and timers,
// transport/loss_window.h). Call where reading `qp` is safe: on its owning worker.
nlohmann::ordered_json qp_show_json(const transport::Qp& qp, const QpShowContext& context);

}  // namespace xroce::device
