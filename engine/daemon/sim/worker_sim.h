// The worker loop in the deterministic simulator: the daemon's own Worker (engine/daemon/
// worker.h, the same loop code xroced runs) on two simulated devices joined through a switch
// by the simulated network (engine/net/sim), driven by one thread in virtual-time order.
//
// What the simulator supplies is what the daemon takes from the OS (worker_platform.h): a
// virtual clock, a port per worker queue (SimPort, on the network), and a Sleeper that, instead
// of blocking, suspends the worker until a frame reaches its queue, a doorbell it watches is
// rung, another thread notifies it, or its deadline passes (each after a seeded wakeup
// latency). A turn costs seeded virtual CPU time, more for each frame it moves; a spinning
// worker runs empty turns until its spin time is up.
//
// Devices have several workers; each device's frames are spread over its workers' queues by
// a seeded RSS hash of the UDP source port, so QPs placed on another worker are reached by
// handover. Device 0 also runs QP pairs with both ends on itself (loopback inside the daemon).
// The host queues may be bounded and lossless, so that the port refuses frames and the worker's
// backlog holds them; the switch may mark ECN and the QPs send CNPs and cut their rates.
//
// The QPs' work comes from a test binding, the application: it posts random RC operations
// (SEND, WRITE, WRITE_WITH_IMM, READ, FETCH_AND_ADD, several SGEs, random sizes) into a
// mailbox the worker pulls from, rings the QP's doorbell when the worker said it sleeps, and
// posts the next operation a seeded think time after each completion. It checks every byte at
// its destination, every completion's status and order, and that nothing is lost, duplicated
// or completed twice (the run goes on for a settle time after the last completion). At the end
// every QP is removed from its worker and the counters must balance: frames the workers count
// as sent equal those the network took plus those looped back, frames counted in equal those
// the ports received plus those looped back (and the strangers), every frame taken in has one
// fate, and the device counters (sent_pkts, rcvd_pkts, rx_peer_mismatch) agree with the
// workers' own.
//
// Pure and seeded: one scenario, one run, bit for bit.
#pragma once

#include <cstdint>
#include <string>

#include "daemon/datapath_frames.h"
#include "transport/verbs.h"

namespace xroce::daemon::sim {

struct WorkerScenario {
  std::uint64_t seed = 1;
  std::uint64_t ops = 200;            // RC operations posted in total, every QP and direction
  std::uint32_t workers = 2;          // per device
  std::uint32_t qps = 3;              // RC QP pairs between the two devices
  std::uint32_t loopback_qps = 1;     // RC QP pairs with both ends on device 0
  std::uint32_t max_outstanding = 4;  // operations in flight per QP and direction
  std::uint32_t max_msg_bytes = 8192;
  transport::PathMtu mtu = transport::PathMtu::k1024;
  // Faults on each host's egress link.
  double loss = 0, reorder = 0, dup = 0, corrupt = 0;
  std::uint64_t delay_ns = 2'000;  // one-way propagation
  double rate_gbps = 25;
  std::uint64_t host_queue_bytes = 0;  // 0: unbounded; else lossless (the port refuses frames)
  bool ecn = false;                    // the switch marks ECN; the QPs' NPs send CNPs
  // Each device's InflightBudget over its QPs, in PSNs (0 = none), as xroced gives its devices.
  std::uint32_t inflight_budget_psns = 0;
  // Every frame to a device's first queue (a NIC without RSS, or every flow hashing alike): its
  // other workers see no frame, and learn of work only from doorbells and from each other.
  bool one_rx_queue = false;
  // Per QP: well-formed packets for it from an address other than its peer's (a stranger's
  // source, or its peer's source to another of our addresses), pushed through the door. The
  // worker must drop and count each one (rx_peer_mismatch) and lose nothing else.
  std::uint32_t strangers = 1;
  // The workers' CPU and the application's pace, in virtual time.
  std::uint64_t turn_ns = 300;    // one turn of a worker
  std::uint64_t frame_ns = 100;   // added per frame the turn moved
  std::uint64_t wake_ns = 5'000;  // from the event to a sleeping worker's next turn
  std::uint64_t spin_ns = 20'000;
  bool spin_allowed = true;
  // WorkerConfig::lossy_burst_packets (its default); 0: a lossy QP's bursts are not cut.
  std::size_t lossy_burst_packets = 16;
  // WorkerConfig::moderation_ns and moderation_sends (their defaults): a worker with a QP that
  // has that many sends posted and not completed sleeps without asking for doorbells.
  std::uint64_t moderation_ns = 30'000;
  std::size_t moderation_sends = 16;
  // Whether a receive posted to a healthy QP rings the doorbell of a sleeping worker. False, as
  // the daemon (include/xroce/queues.h "Receive doorbells"): the responder pulls it when a request
  // needs one. (The simulated QPs never reach the error state, where the daemon asks for them.)
  bool receive_doorbells = false;
  // The QPs get the daemon's timers and windows (transport::use_daemon_timers_and_windows: the
  // loss window among them), not QpConfig's defaults.
  bool daemon_qp_config = false;
  std::uint64_t think_ns = 10'000;  // the application posts again within this after a completion
  std::uint64_t settle_ns = 2'000'000;           // run on after the last completion
  std::uint64_t time_limit_ns = 60'000'000'000;  // virtual time before declaring a stall
};

struct WorkerSummary {
  std::uint64_t seed = 0;
  std::uint64_t posted = 0;
  std::uint64_t completed = 0;  // send completions matched to their work request
  std::uint64_t received = 0;   // receive completions matched to a SEND / WRITE_WITH_IMM
  std::uint64_t bytes_verified = 0;
  std::uint64_t lost = 0;  // posted work never completed / never received
  std::uint64_t data_errors = 0;
  std::uint64_t completion_errors = 0;  // wrong status, order, duplicate or unexpected
  std::uint64_t retransmitted_packets = 0;
  std::uint64_t timeouts = 0;
  DatapathCounters counters;               // every worker's, summed
  std::uint64_t doorbells = 0;             // rung because the worker had said it sleeps
  std::uint64_t receive_doorbells = 0;     // of those, for a posted receive
  std::uint64_t receives_pulled_late = 0;  // found by a responder's own pull, every QP's
  std::uint64_t port_refusals = 0;         // frames a port refused (back-pressure into the backlog)
  std::uint64_t network_frames = 0;        // frames the network delivered to a host
  std::uint64_t cnps_sent = 0;
  std::uint64_t strangers = 0;        // stranger packets pushed through the door
  std::uint64_t peer_mismatches = 0;  // rx_peer_mismatch, every worker's
  std::uint64_t turns = 0;
  std::uint64_t sim_time_us = 0;
  std::string failure;  // the first problem found; empty when the run is good
  bool ok() const { return failure.empty(); }
};

WorkerSummary run_worker_scenario(const WorkerScenario& scenario);

// The scenario in one line (for failure messages).
std::string describe(const WorkerScenario& scenario);

}  // namespace xroce::daemon::sim
