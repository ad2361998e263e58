// State shared by the three roles of one QP (requester, responder, completer), as rxe_qp holds
// it for rxe_req.c, rxe_resp.c and rxe_comp.c. Internal to engine/transport.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "transport/inflight_budget.h"
#include "transport/loss_window.h"
#include "transport/memory.h"
#include "transport/qp_state.h"
#include "transport/read_repair.h"
#include "transport/rtt.h"
#include "transport/srq.h"
#include "transport/work.h"
#include "wire/psn.h"

namespace xroce::transport {

// Hooks the congestion-control engine (engine/cc) attaches to a QP's transmit path. The
// transport calls them; it implements no rate control itself.
class CongestionHooks {
 public:
  virtual ~CongestionHooks() = default;
  // Earliest time the next request packet may leave; <= now_ns means now.
  virtual std::uint64_t earliest_send_ns(std::uint64_t now_ns) = 0;
  // A request packet of `bytes` payload left at now_ns; returns whether to mark it ECT.
  virtual bool on_transmit(std::uint64_t now_ns, std::uint32_t bytes) = 0;
  virtual void on_cnp(std::uint64_t now_ns) = 0;        // reaction point input
  virtual void on_ce_marked(std::uint64_t now_ns) = 0;  // notification point input
};

// Where a responder that finds no receive WQE looks once more before it answers RNR NAK (or,
// for UD, drops the datagram): the owner's rings may hold WQEs posted since it last moved them
// into the QP. An RNIC reads its receive queue when the SEND arrives, so a WQE whose
// ibv_post_recv returned before the SEND reached the device is used (IBA 9.7.5.2.8: RNR only
// when no WQE is "available"); a worker preempted between its pull and its receive must not
// make it look missing. The daemon implements it (worker_qps.h).
class ReceiveSource {
 public:
  virtual ~ReceiveSource() = default;
  // Posts to the QP (Qp::post_recv) or to its SRQs the receive WQEs that appeared since the
  // last pull. Must not post sends or deliver packets: the responder is mid-request.
  virtual void pull_receives() = 0;
};

// The XRC SRQs an XRC_RECV QP may deliver to: those of its XRC domain (IBA 11.2.x, o9-xx's
// "XRC domain" check). The device implements it; the core asks once per request packet.
struct XrcSrqTarget {
  Srq* srq = nullptr;
  MemoryRegionTable* mrs = nullptr;  // the SRQ's PD: what the request's keys are checked against
};
class XrcDomain {
 public:
  virtual ~XrcDomain() = default;
  // The SRQ numbered `srqn` if it belongs to this domain, else nullopt.
  virtual std::optional<XrcSrqTarget> find_srq(std::uint32_t srqn) = 0;
};

// The adaptive retransmission timer's floor where round trips are steady (the simulator and the
// unit tests): far below the Local ACK Timeouts in use (2 ms at exponent 9, 67 ms at perftest's
// 14).
inline constexpr std::uint64_t kAdaptiveRtoFloorNs = 200'000;
// The daemon's floor. Through xroced on a shared host a clean link's round trip jumps from a few
// milliseconds to tens whenever a worker or an application is descheduled; the RTO follows those
// peaks (twice the longest round trip of the last seconds, transport/rtt.h), and this floor
// covers the stalls before the first peak is measured (a QP's start). Still 6.7 times shorter
// than perftest's 67 ms Local ACK Timeout (bench/README.md, "Loss").
inline constexpr std::uint64_t kDaemonAdaptiveRtoFloorNs = 10'000'000;
// The daemon's floor of the tail probe (QpConfig::tail_probe_floor_ns) on a clean link. Above one
// scheduler tick (4 ms at Debian's HZ=250): on a host with fewer cores than busy threads a woken
// worker can wait a whole tick behind a process that only yields (bench/README.md "The tail
// probe above a tick"), and at 2 ms each such wait cost a probe: 27 in twenty clean 5 s runs of
// `ib_write_bw`/`ib_read_bw` against 1 at 5 ms. The cost falls on a tail loss on a clean link
// alone: a loss a NAK reports needs no probe, and once the loss window is reduced the lossy
// floor below applies.
inline constexpr std::uint64_t kDaemonTailProbeFloorNs = 5'000'000;
// The daemon's floor of the resend probe (QpConfig::resend_probe_floor_ns). It runs only after a
// NAK, on a path that has just lost a packet; a clean link never starts it. Its expiry goes back
// N once more, so a stall longer than this costs one needless go-back-N on a lossy path. At 2 ms
// a READ at 2 % loss spent 0.8-0.9 s of every 5 s in it (380-460 expiries: a lost re-request or
// a replay's last response); at 500 us the simulator's READ at 2 % loss with stalls moves 18 %
// more (bench/README.md "Loss";
// SimWorkload.AtTheDaemonsTimersTheResendProbeWaitsForTheLossyFloor). Below 500 us it fires
// needlessly on the wire: at 100 us, 384-578 expiries in a 5 s WRITE at 2 % loss against 71-121.
inline constexpr std::uint64_t kDaemonResendProbeFloorNs = 500'000;
// The daemon's tail probe floor while a QP's path loses packets (QpConfig::
// lossy_tail_probe_floor_ns), for a probe of one packet (a SEND's or WRITE's). At 2 % loss on the
// device's own rate (bench/README.md "Loss") about one NAK in fifty is lost, the responder then
// drops what follows silently, and only this probe finds it: at the peak-sized timer (4-5 ms on
// this host) that was a quarter of the time, at 500 us still 8-10 % of a udp WRITE's. A needless
// probe costs one packet and its ACK. At 150 us a WRITE at 2 % loss moved more than at 500 in 15
// of 21 alternated rounds on the two ports (bench/README.md "A one-packet probe sooner"); below
// it the timer's other terms (4 least, 2 smoothed round trips) rule on this host.
inline constexpr std::uint64_t kDaemonLossyTailProbeFloorNs = 150'000;
// The same floor for a probe that replays a READ (QpConfig::lossy_read_tail_probe_floor_ns): its
// answer is every response of the READ still due, up to a window, so a needless one costs what a
// go-back-N does and it keeps the resend probe's floor. At 150 us the READs at 2 % loss moved no
// more than at 500 (above or below their pair, round by round).
inline constexpr std::uint64_t kDaemonLossyReadTailProbeFloorNs = kDaemonResendProbeFloorNs;
// The daemon's floor of the timer that watches READ ranges asked for again (QpConfig::
// read_repair_floor_ns). Most ranges are one response; when the duplicate request or its replay
// is lost (about 4 % of them at 2 % loss) nothing after it shows the loss, and the QP's window
// stands full until the timer asks again. Its expiry costs a packet per range, not a window, so
// it need not wait the resend probe's 500 us: at 100 us a READ at 2 % loss moved more in
// alternated rounds on both ports; at 50 us the expiries doubled, most of them needless, for no
// more (bench/README.md "A timer of its own for READ ranges").
inline constexpr std::uint64_t kDaemonReadRepairFloorNs = 100'000;

// The daemon's floor of the loss window (QpConfig::loss_window_min_psns): 32 PSNs, 128 KiB at a
// 4096-byte MTU. On the wire at 2 % loss (bench/README.md "Loss") a fixed window of 32 kept the
// clean rate and doubled the lossy one against 128; 16 lost a quarter of the clean rate.
inline constexpr std::uint32_t kDaemonLossWindowMinPsns = 32;

struct QpConfig {
  QpType type = QpType::kRc;
  wire::Qpn qpn;
  std::uint32_t max_send_wr = 256;
  std::uint32_t max_recv_wr = 256;
  std::uint32_t max_send_sge = 8;
  std::uint32_t max_recv_sge = 8;
  std::uint32_t max_inline_data = 256;
  PathMtu port_mtu = PathMtu::k4096;       // bounds UD messages
  std::uint32_t max_msg_bytes = 1u << 31;  // IBA C9-94
  std::uint32_t max_unacked_psns = 128;    // rxe's RXE_MAX_UNACKED_PSNS
  // The floor of an RC/XRC requester's loss window (transport/loss_window.h): losses shrink the
  // PSNs it keeps unacknowledged from max_unacked_psns down to this. 0 turns it off.
  std::uint32_t loss_window_min_psns = 0;
  std::uint32_t max_packets_per_ackreq = 64;  // rxe's RXE_MAX_PKT_PER_ACK
  // Adaptive retransmission: an RC/XRC requester that heard nothing for its RTO (transport/rtt.h:
  // SRTT + 4 * RTTVAR, at least this floor and twice the recent peak round trip, capped by the
  // Local ACK Timeout) resends from its oldest unacknowledged PSN without waiting for the Local
  // ACK Timeout. 0 turns it off.
  std::uint64_t adaptive_rto_floor_ns = 0;
  // The resend probe: after a PSN-sequence NAK (or a READ response gap) started a go-back-N, and
  // until something of it is acknowledged, the adaptive timer runs for min(RTO, max(this floor,
  // 4 * the least round trip measured)). The resend leaves on a path the responder has emptied
  // (it drops what followed the gap, rxe_resp.c check_psn), so its answer takes a base round
  // trip, not the queued one the RTO is sized for; when its first packet is lost, the responder,
  // which NAKs a gap only once, stays silent, and only this timer finds it. 0: no probe.
  std::uint64_t resend_probe_floor_ns = 0;
  // The tail probe: when the QP has heard nothing for min(RTO, max(this floor, 4 * the least
  // round trip, 2 * the smoothed one, the recent peak)) with PSNs unacknowledged and no NAK to go
  // on, it resends one packet, the oldest unacknowledged, asking for an ACK, rather than the
  // whole window (in the spirit of TCP's tail loss probe, RFC 8985 7). Its answer tells lost
  // ACKs (the responder has everything: a duplicate is re-ACKed up to what it executed,
  // rxe_resp.c duplicate_request) from lost requests (what is acknowledged stops short of what
  // was in flight: then the resend probe's timer runs, at least this floor while the loss window
  // is at its top, and a go-back-N follows unless the rest is acknowledged meanwhile; while it is
  // reduced, the go-back-N starts at once, Completer::probe_answered). Silence after the probe
  // waits for the RTO, or while the loss window is reduced for the resend probe's timer. It costs
  // one packet where the RTO's go-back-N resends the window, so its timer can be half the RTO's
  // (one peak, not two): the RTO must stay long enough for a stalled host never to resend a window
  // needlessly. 0: no probe.
  std::uint64_t tail_probe_floor_ns = 0;
  // The tail probe's floor while the QP's loss window is below its top (losses seen and not yet
  // made good by a window's worth of ACKs, transport/loss_window.h): min(RTO, max(this floor, 4 *
  // the least round trip, 2 * the smoothed one)), without the peak term. On a lossy path most
  // silences are a lost NAK, which only this probe finds; a clean link's window stays at the top,
  // so its probes keep tail_probe_floor_ns and the peak. 0: the same timer as tail_probe_floor_ns.
  std::uint64_t lossy_tail_probe_floor_ns = 0;
  // The lossy floor above when the probe would replay a READ (the oldest unacknowledged request
  // is a READ's: its answer is the READ's responses still due, not one packet,
  // tail_probe_is_cheap). 0: lossy_tail_probe_floor_ns for every probe.
  std::uint64_t lossy_read_tail_probe_floor_ns = 0;
  // Selective READ repair (transport/read_repair.h): READ responses after a gap are placed as
  // they come, and only the missing ranges are asked for again, by a duplicate READ request
  // naming the sub-range; false: a gap asks for the READ again from the gap to its end and
  // resends every later request (rxe's go-back-N, docs/protocol.md 3.9).
  bool selective_read_repair = false;
  // The resend probe's floor while it watches only ranges asked for again (selective READ
  // repair, no go-back-N under way): min(RTO, max(this floor, 4 * the least round trip)). Its
  // expiry asks for the ranges still missing again, one request each that only that range
  // answers, not a window. 0: the resend probe's floor.
  std::uint64_t read_repair_floor_ns = 0;
  bool sq_sig_all = false;  // every send WQE completes signaled
  DeviceLimits limits;
  XrcDomain* xrc = nullptr;  // XRC_RECV: the QP's XRC domain (not owned)
  // The device-wide bound on unacknowledged request PSNs this RC/XRC requester shares with the
  // device's other QPs (shared: a QP may outlive its device on a worker; nullptr = only
  // max_unacked_psns bounds it).
  std::shared_ptr<InflightBudget> inflight_budget;
};

// The timers and windows of the daemon's RC QPs (the kDaemon* values above), set on `config`:
// engine/device creates every QP with them, and the in-process benchmark uses them so that its
// figures are the daemon's (bench/datapath_bench.cc).
inline void use_daemon_timers_and_windows(QpConfig& config) {
  config.adaptive_rto_floor_ns = kDaemonAdaptiveRtoFloorNs;
  config.resend_probe_floor_ns = kDaemonResendProbeFloorNs;
  config.loss_window_min_psns = kDaemonLossWindowMinPsns;
  config.tail_probe_floor_ns = kDaemonTailProbeFloorNs;
  config.lossy_tail_probe_floor_ns = kDaemonLossyTailProbeFloorNs;
  config.lossy_read_tail_probe_floor_ns = kDaemonLossyReadTailProbeFloorNs;
  config.selective_read_repair = true;
  config.read_repair_floor_ns = kDaemonReadRepairFloorNs;
}

// kExecuted: the WQE did all it does without a response (a local operation, a UC message sent);
// it completes with `status` once every WQE before it has completed.
enum class WqeStage : std::uint8_t { kPosted, kStarted, kExecuted, kDone };

struct SendWqe {
  WorkRequest wr;
  std::vector<std::uint8_t> inline_data;  // copied at post time when send_flags::kInline
  bool is_inline = false;
  WqeStage stage = WqeStage::kPosted;
  WcStatus status = WcStatus::kSuccess;  // of an executed WQE
  wire::Psn first_psn;
  wire::Psn last_psn;
  std::uint32_t length = 0;

  bool is_read() const { return wr.opcode == WrOpcode::kRdmaRead; }
  bool is_atomic() const {
    return wr.opcode == WrOpcode::kAtomicCmpAndSwp || wr.opcode == WrOpcode::kAtomicFetchAndAdd;
  }
  bool is_atomic_write() const { return wr.opcode == WrOpcode::kAtomicWrite; }
  bool is_flush() const { return wr.opcode == WrOpcode::kFlush; }
  bool is_local() const {
    return wr.opcode == WrOpcode::kBindMw || wr.opcode == WrOpcode::kLocalInv;
  }
  // Answered by a response of its own (READ responses, ATOMIC ACK, or the zero-length READ
  // RESPONSE ONLY of ATOMIC WRITE and FLUSH), never by a plain ACK; each takes a responder
  // resource, so max_rd_atomic bounds how many are outstanding.
  bool is_read_or_atomic() const {
    return is_read() || is_atomic() || is_atomic_write() || is_flush();
  }
  // The HCA writes the local buffers (READ data, the original value of an atomic).
  bool writes_local() const { return is_read() || is_atomic(); }
  // Carries no payload from SGEs (the 8 bytes of ATOMIC WRITE travel in the WQE).
  bool without_sges() const { return is_local() || is_atomic_write() || is_flush(); }
};

// Copies between a message's byte offset and a scatter/gather list, each SGE translated by the
// table (ibv_reg_mr_iova). False if a key no longer translates (the region went away under the
// message) or on an operating failure of the memory.
bool gather(MemoryRegionTable& mrs, std::span<const Sge> sges, std::uint64_t offset,
            std::span<std::uint8_t> out);
bool scatter(MemoryRegionTable& mrs, std::span<const Sge> sges, std::uint64_t offset,
             std::span<const std::uint8_t> in);
// Total bytes an SGE list describes, and whether every SGE passes check_local with `need`.
std::uint64_t sge_bytes(std::span<const Sge> sges);
bool sges_valid(const MemoryRegionTable& mrs, std::span<const Sge> sges, std::uint32_t need);

struct QpContext {
  QpConfig config;
  QpAttr attr;
  QpState state = QpState::kReset;
  MemoryRegionTable* mrs = nullptr;
  Srq* srq = nullptr;
  CongestionHooks* cc = nullptr;
  ReceiveSource* receives = nullptr;  // see ReceiveSource; null: the queues hold all there is

  // Send queue ring; indices grow forever, slot = index % size.
  std::vector<SendWqe> sq;
  std::uint64_t sq_head = 0;  // oldest WQE not yet completed (the completer's)
  std::uint64_t sq_next = 0;  // next WQE the requester transmits from
  std::uint64_t sq_tail = 0;  // next free slot (post_send)
  SendWqe& wqe(std::uint64_t index) { return sq[index % sq.size()]; }
  const SendWqe& wqe(std::uint64_t index) const { return sq[index % sq.size()]; }

  std::deque<RecvRequest> rq;

  // Requester / completer PSN state (docs/protocol.md §3.1, §3.8).
  wire::Psn req_psn;   // next PSN the requester sends
  wire::Psn comp_psn;  // oldest PSN not yet acknowledged
  wire::Psn psn_high;  // one past the highest PSN ever sent
  std::uint32_t outstanding_rd_atomic = 0;
  std::uint8_t retry_left = 0;
  std::uint8_t rnr_retry_left = 0;
  std::uint64_t retransmit_deadline_ns = 0;  // the Local ACK Timeout; 0 = disarmed
  bool resend_probe = false;  // a NAK-started go-back-N not yet answered (resend_probe_floor_ns)
  // A tail probe went out (tail_probe_floor_ns) and not all that was in flight then, up to
  // tail_probe_end, is acknowledged yet: no second probe until it is.
  bool tail_probe = false;
  wire::Psn tail_probe_psn;  // the PSN the probe resent (comp_psn then)
  wire::Psn tail_probe_end;
  // The probe went out with the loss window reduced and no go-back-N before it unanswered: its
  // silence waits the resend probe's timer, not the RTO. Once per loss: after a go-back-N that
  // drew no answer either (a stalled or gone peer) the RTO and its doubling decide again.
  bool tail_probe_expires_early = false;
  // Whether the newest request packet sent asked for an acknowledgement (AckReq). A responder
  // answers nothing else (rxe_resp.c), so silence after a packet that did not ask (the pacer
  // holding the rest of a message) is no sign of loss, and no tail probe is timed from it.
  bool last_sent_ackreq = true;
  std::uint64_t rnr_deadline_ns = 0;    // 0 = not waiting for an RNR timer
  std::uint64_t pacer_deadline_ns = 0;  // 0 = congestion control is not holding packets

  std::deque<Completion> completions;
  std::deque<AsyncEvent> events;
  QpCounters counters;
  std::uint64_t now_ns = 0;  // the latest time an input carried; stamps completions
  // Selective READ repair (QpConfig::selective_read_repair): what arrived past comp_psn, which the
  // completer records, and the ranges the requester is to ask for again, oldest first.
  struct ReadAsk {
    std::uint64_t wqe;  // the READ's send-queue index
    ReadRepair::Range range;
  };
  ReadRepair read_repair;
  std::deque<ReadAsk> read_asks;
  RttEstimator rtt;            // the requester times, the completer measures
  LossWindow loss_window;      // the completer sizes it, the requester keeps within it
  bool fatal_pending = false;  // a role found a fatal error; the QP moves to ERR and flushes
  bool sq_drained_reported = false;

  // The payload bytes per packet: the port's MTU for UD; for RC the path MTU, which can never
  // exceed the port's (a larger path_mtu is accepted, as rxe and mlx5 accept it, but packets
  // stay within what the link carries).
  std::uint32_t mtu() const {
    if (config.type == QpType::kUd) return mtu_bytes(config.port_mtu);
    return mtu_bytes(std::min(attr.path_mtu, config.port_mtu));
  }
  // RC and XRC requesters wait for responses; UC and UD requesters do not.
  bool reliable() const { return config.type == QpType::kRc || config.type == QpType::kXrcSend; }
  wire::Transport transport() const;
  bool outstanding() const { return comp_psn != psn_high; }
  void push_completion(Completion c);
  void push_send_completion(const SendWqe& w, WcStatus status);
  // Completes the executed WQEs at the head of the send queue, in order.
  void retire_executed();
  // A send WQE completed in error: UD and UC stop their send queue (SQE, IBA 10.3.1), RC and
  // XRC go to ERR.
  void send_queue_error();
  void restart_retransmit_timer(std::uint64_t now_ns);
  // Whether a tail probe (QpConfig::tail_probe_floor_ns) costs no more than the go-back-N it
  // saves. It resends the oldest unacknowledged request packet, one packet each way for a SEND
  // or WRITE; when that is a READ's, the responder replays the READ from there (rxe_resp.c
  // duplicate_request), so the probe asks for every response still due. Where those are more
  // than a window (max_unacked_psns), a host that stalled the responses a few milliseconds
  // would get them all twice (an 8 MiB READ was asked for again about once per READ, and its
  // responses filled the receive queue twice over): such a READ waits for the RTO.
  bool tail_probe_is_cheap() const;
  // The tail probe's floor while the loss window is reduced: lossy_read_tail_probe_floor_ns when
  // the probe would replay a READ, else lossy_tail_probe_floor_ns.
  std::uint64_t lossy_tail_probe_floor_ns() const;
  // (Re)arms the adaptive retransmission timer for RTO from now_ns while PSNs are unacknowledged
  // (disarms it otherwise, or when the RTO would not come before the Local ACK Timeout). It
  // restarts at every request packet sent and every progress, several times a packet, and only
  // the newest restart before the deadline is read counts: so a restart notes its time, and the
  // timer's length (the RTO or a probe's timer, from the state of the QP then) is worked out
  // once, when adaptive_deadline() is next read. Worked out at every restart it cost 4.3 % of
  // the data path's instructions for 64-byte WRITEs (bench/README.md, "The adaptive timer's
  // length, once per read").
  void restart_adaptive_timer(std::uint64_t now_ns) {
    adaptive_restart_ns = now_ns;
    adaptive_restart_pending = true;
  }
  void disarm_adaptive_timer() {
    adaptive_deadline_ns = 0;
    adaptive_restart_pending = false;
  }
  // The adaptive timer's deadline, 0 when disarmed.
  std::uint64_t adaptive_deadline() const {
    if (adaptive_restart_pending) resolve_adaptive_timer();
    return adaptive_deadline_ns;
  }

  // The request PSNs sent and not yet acknowledged while the requester may send (RTS, SQD);
  // none in any other state, where nothing will be acknowledged any more.
  std::uint32_t unacked_psns() const;
  // Tells the device's InflightBudget what this QP holds now and whether it waits for it (after
  // any input or output).
  void sync_inflight_budget();
  // Whether QPs of the device wait for its InflightBudget (more demand than it lets out).
  bool budget_contended() const {
    return config.inflight_budget != nullptr && config.inflight_budget->waiting_qps() > 0;
  }
  BudgetHolding budget_told;    // what the budget was last told
  bool budget_waiting = false;  // the requester's last look found it stopped by the budget

 private:
  // Sets adaptive_deadline_ns from adaptive_restart_ns and the QP's state now.
  void resolve_adaptive_timer() const;

  // The adaptive retransmission timer, read only through adaptive_deadline(): the stored
  // deadline is 0 when disarmed, and stale while adaptive_restart_pending, when
  // adaptive_restart_ns holds the newest restart, whose length resolve_adaptive_timer works out.
  mutable std::uint64_t adaptive_deadline_ns = 0;
  mutable bool adaptive_restart_pending = false;
  std::uint64_t adaptive_restart_ns = 0;
};

}  // namespace xroce::transport
