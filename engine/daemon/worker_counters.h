// What a worker counts, in one place: its DatapathCounters (datapath_frames.h, read by the
// control thread with a command) and its device::CounterBlock (counters.h, read by any thread
// at any time), fed as engine/device/counters_report.h describes. Each event the loop can meet
// is one named call here that adds to both, so no step of the loop spells out counter names.
//
// Threading: the owning worker is the one writer; device() may be read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "daemon/datapath_frames.h"
#include "daemon/worker_qps.h"
#include "device/counters.h"
#include "wire/opcode.h"

namespace xroce::daemon {

class WorkerCounters {
 public:
  const DatapathCounters& datapath() const { return datapath_; }
  const device::CounterBlock& device() const { return device_; }

  // Ingress: every frame taken in, then what became of it.
  void frame_in() { ++datapath_.rx_frames; }
  void malformed() {
    ++datapath_.rx_malformed;
    device_.add(device::Counter::kRxMalformed);
  }
  void bad_icrc() {
    ++datapath_.rx_icrc_errors;
    device_.add(device::Counter::kRxIcrcErrors);
  }
  void impair_dropped() { device_.add(device::Counter::kRxImpairDrops); }
  void no_qp() {
    ++datapath_.rx_no_qp;
    device_.add(device::Counter::kRxUnknownQp);
  }
  // A packet for a connected QP from an address other than its peer's (rxe's check_addr).
  void peer_mismatch() { device_.add(device::Counter::kRxPeerMismatch); }
  // Frames the port lost before the worker saw them (its receive ring or socket overflowed).
  void port_drops(std::uint64_t frames) {
    if (frames > 0) device_.add(device::Counter::kRxPortDrops, frames);
  }
  void delivered(std::size_t frame_bytes) {
    ++datapath_.rx_delivered;
    device_.add(device::Counter::kRcvdPkts);
    device_.add(device::Counter::kRxBytes, frame_bytes);
  }
  // rxe's ack_deferred counts responses its completer could not take at once (the completer
  // scheduled as a task); ours is a response that waits for the owning worker.
  void handed_over(const wire::OpcodeInfo& info) {
    ++datapath_.rx_handed_over;
    if (!info.is_request && info.operation != wire::Operation::kCnp)
      device_.add(device::Counter::kAckDeferred);
  }
  void handover_dropped() {
    ++datapath_.rx_handover_drops;
    device_.add(device::Counter::kRxHandoffDrops);
  }
  void looped_back_in() { ++datapath_.rx_loopback; }
  void cnp_without_reaction_point() { device_.add(device::Counter::kRpCnpIgnored); }

  // Egress.
  void sent(std::size_t frame_bytes) {
    ++datapath_.tx_frames;
    device_.add(device::Counter::kSentPkts);
    device_.add(device::Counter::kTxBytes, frame_bytes);
  }
  void encode_failed() {
    ++datapath_.tx_encode_errors;
    device_.add(device::Counter::kSendErr);
  }
  void no_address() { ++datapath_.tx_no_address; }
  void backlog_dropped() {
    ++datapath_.tx_backlog_drops;
    device_.add(device::Counter::kSendErr);
  }
  // A looped-back packet counts as sent too (sent_pkts, tx_bytes).
  void looped_back_out(std::size_t frame_bytes) {
    ++datapath_.tx_loopback;
    device_.add(device::Counter::kLoopbackPkts);
    sent(frame_bytes);
  }
  void loopback_dropped() {  // the receiver's inbox is full: lost, as on a wire
    ++datapath_.tx_loopback_drops;
    device_.add(device::Counter::kSendErr);
  }
  void neighbour_failures(std::size_t frames) {
    if (frames == 0) return;
    datapath_.tx_no_neighbour += frames;
    device_.add(device::Counter::kNeighbourFailures, frames);
  }
  void neighbour_changes(std::size_t changes) {
    if (changes > 0) device_.add(device::Counter::kNeighbourChanges, changes);
  }
  void cnp_sent() { device_.add(device::Counter::kNpCnpSent); }

  // The QPs: each completion, and what the QP's transport and DCQCN counters grew by since the
  // last call (counters never go backwards, and a destroyed QP's counts stay).
  void completion(const transport::Completion& c);
  void qp_growth(Hosted& hosted);

 private:
  DatapathCounters datapath_;
  device::CounterBlock device_;
};

}  // namespace xroce::daemon
