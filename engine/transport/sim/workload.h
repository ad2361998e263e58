// The workload driver: nodes running the real transport core, joined by the deterministic
// simulated network (engine/net/sim) through the real frame codec (wire/frame.h, so corruption
// is caught by the ICRC). It posts random mixes of every RC opcode and size, ATOMIC WRITE and
// FLUSH, memory-window binds with WRITEs through the windows and their local or remote
// invalidation, and UC SENDs and WRITEs, over several RC and UC QP pairs in both directions.
// It checks every byte at the target, every completion's status and order, that no work is
// lost or completed twice, that invalidated windows refuse access, and for UC that a message
// is either received whole and in order or not at all (a loss, counted). Pure and seeded: one
// seed, one run.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "transport/qp_context.h"
#include "transport/verbs.h"

namespace xroce::transport::sim {

enum class OpKind : std::uint8_t {
  kSend,
  kSendImm,
  kSendInv,  // bind a window at the peer, WRITE through it, SEND_WITH_INV to invalidate it
  kWrite,
  kWriteImm,
  kRead,
  kCmpSwap,
  kFetchAdd,
  kAtomicWrite,
  kFlush,
  kMwWrite,  // bind a window at the peer, WRITE through it, the peer's LOCAL_INV ends it
  kUcSend,   // UC: SEND or SEND_WITH_IMM
  kUcWrite,
  kUcWriteImm,
};
inline constexpr std::size_t kOpKinds = 14;
const char* to_string(OpKind k);
// Whether the kind runs on UC QP pairs (else on RC ones).
constexpr bool is_uc(OpKind k) {
  return k == OpKind::kUcSend || k == OpKind::kUcWrite || k == OpKind::kUcWriteImm;
}

// Relative weights of the operations the driver posts.
struct Mix {
  std::array<std::uint32_t, kOpKinds> weight{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

  // "all", or comma-separated kind[=weight] with kinds send, send_imm, send_inv, write,
  // write_imm, read, cas, faa, atomic_write, flush, mw_write, uc_send, uc_write, uc_write_imm,
  // and the groups "atomic" = cas+faa, "mw" = send_inv+mw_write, "uc" = the three UC kinds.
  // nullopt if malformed.
  static std::optional<Mix> parse(std::string_view text);
  std::string to_string() const;
  bool operator==(const Mix&) const = default;
};

struct ScenarioConfig {
  std::uint64_t seed = 1;
  std::uint64_t ops = 1000;  // operations posted in total, both directions
  std::uint32_t nodes = 2;   // hosts on one switch (2..250)
  std::uint32_t qps = 4;     // RC QP pairs between every two nodes; traffic flows both ways
  std::uint32_t uc_qps = 1;  // UC QP pairs between every two nodes (for the UC kinds)
  Mix mix;
  PathMtu mtu = PathMtu::k1024;
  double loss = 0, reorder = 0, dup = 0, corrupt = 0;  // per frame, on each host's egress
  std::uint64_t delay_us = 1;                          // one-way propagation
  double rate_gbps = 100;                              // link rate; 0 = infinite
  // The switch's port toward each host: a slower rate and a drop-tail queue of queue_bytes
  // model a receiver that takes frames slower than they come, with a bounded receive ring
  // (0 = the link rate, an unbounded queue).
  double bottleneck_gbps = 0;
  std::uint64_t queue_bytes = 0;
  // Each node's InflightBudget over its RC QPs, in PSNs (0 = none).
  std::uint32_t inflight_budget_psns = 0;
  // Bytes a node's NIC lets wait ahead of its transmitter before it takes the next packet from
  // a QP (0 = every packet a QP has is queued at once, however long the queue).
  std::uint64_t nic_queue_bytes = 8192;
  // Every RC QP's adaptive retransmission floor (QpConfig::adaptive_rto_floor_ns; 0 = off).
  std::uint64_t rto_floor_us = kAdaptiveRtoFloorNs / 1000;
  // Every RC QP's resend probe floor (QpConfig::resend_probe_floor_ns; 0 = no probe).
  std::uint64_t resend_probe_floor_us = kAdaptiveRtoFloorNs / 1000;
  // Every RC QP's loss window floor (QpConfig::loss_window_min_psns; 0 = a fixed window).
  std::uint32_t loss_window_min_psns = kDaemonLossWindowMinPsns;
  // Every RC QP's tail probe floor (QpConfig::tail_probe_floor_ns; 0 = no probe). Off by
  // default: at these defaults the RTO's floor is the probes' floor, so a probe would only put a
  // round trip before the go-back-N the RTO starts; the daemon's RTO floor is five times it.
  std::uint64_t tail_probe_floor_us = 0;
  // The tail probe's floor while a QP's loss window is reduced (QpConfig::
  // lossy_tail_probe_floor_ns; 0 = tail_probe_floor_us's timer throughout).
  std::uint64_t lossy_tail_probe_floor_us = 0;
  // The same floor for a probe that would replay a READ (QpConfig::
  // lossy_read_tail_probe_floor_ns; 0 = lossy_tail_probe_floor_us).
  std::uint64_t lossy_read_tail_probe_floor_us = 0;
  // Every RC QP's selective READ repair (QpConfig::selective_read_repair; the daemon's is on).
  bool selective_read_repair = false;
  // The resend probe's floor while it watches only READ ranges asked for again (QpConfig::
  // read_repair_floor_ns; 0 = resend_probe_floor_us).
  std::uint64_t read_repair_floor_us = 0;
  // Round trips that are not steady, as through daemons on a busy host. jitter_us: every frame
  // a host sends takes up to this much longer, uniformly (FIFO kept). stall_every_us: each
  // node's NIC stops at intervals uniform in [0, 2 * stall_every_us] (0 = never) for a time
  // uniform in [0, stall_max_us], as a descheduled daemon worker does: it takes no frame, sends
  // none and fires no timer; frames wait for it, and when it runs again it takes what arrived
  // before it looks at its timers (the daemon's worker turn). The QPs' Local ACK Timeout covers
  // two stalls.
  std::uint64_t jitter_us = 0;
  std::uint64_t stall_every_us = 0;
  std::uint64_t stall_max_us = 0;
  // A path that stops while both NICs run (net::sim::LinkConfig::stall_every_ns), as a relay
  // between them that is descheduled: each host's outgoing link holds what it carries at
  // intervals uniform in [0, 2 * path_stall_every_us] for a time uniform in [0,
  // path_stall_max_us], then delivers it in order. Unlike a NIC's stall, the sender's timers run
  // meanwhile, and what was held arrives after they fired.
  std::uint64_t path_stall_every_us = 0;
  std::uint64_t path_stall_max_us = 0;
  std::uint32_t max_msg_bytes = 16384;
  std::uint32_t max_outstanding = 8;              // per QP and direction
  std::uint64_t time_limit_ns = 600'000'000'000;  // virtual time before declaring a stall
};

struct Summary {
  std::uint64_t seed = 0;
  std::uint64_t posted = 0;
  std::uint64_t posted_unsignaled = 0;  // completed silently, retired by a later CQE
  std::uint64_t completed = 0;          // send-queue completions matched to their work request
  std::uint64_t received = 0;           // receive completions matched to a SEND / WRITE_WITH_IMM
  std::uint64_t bytes_verified = 0;
  std::uint64_t data_errors = 0;
  std::uint64_t completion_errors = 0;  // wrong status, order, duplicate or unexpected
  std::uint64_t lost = 0;               // posted work never completed / never received
  std::uint64_t uc_lost = 0;            // UC messages the network lost (IBA: UC may lose them)
  std::uint64_t window_binds = 0;       // memory-window binds that completed
  std::uint64_t invalidations = 0;      // windows invalidated (LOCAL_INV or SEND_WITH_INV)
  std::uint64_t retransmitted_packets = 0;
  std::uint64_t naks_sent = 0;
  std::uint64_t timeouts = 0;              // Local ACK Timeout expiries (each uses retry_cnt)
  std::uint64_t adaptive_retransmits = 0;  // go-back-N resends the adaptive timer started
  std::uint64_t resend_timeouts =
      0;                          // of both timers' expiries, those after a resend went unanswered
  std::uint64_t tail_probes = 0;  // single packets resent after silence (tail_probe_floor_us)
  std::uint64_t probe_gaps = 0;   // go-back-Ns a tail probe's short answer started
  std::uint64_t resend_repeats = 0;  // first packets of a go-back-N resend sent twice
  std::uint64_t frames_sent = 0;
  std::uint64_t frames_dropped_bad = 0;  // failed decode or ICRC at the receiving node
  std::uint64_t queue_drops = 0;         // frames the switch's queues dropped (queue_bytes)
  std::uint64_t sim_time_us = 0;
  std::uint8_t timeout_exp = 0;  // the local ACK timeout the QPs used
  std::array<std::uint64_t, kOpKinds> posted_by_kind{};
  std::string failure;  // first problem found, empty when ok
  bool ok() const { return failure.empty(); }
};

Summary run_scenario(const ScenarioConfig& config);

// The `xroce sim` command line that reproduces this scenario.
std::string reproduce_command(const ScenarioConfig& config);

}  // namespace xroce::transport::sim
