#include "transport/qp_context.h"

#include <algorithm>

namespace xroce::transport {

namespace {

WcOpcode wc_opcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
      return WcOpcode::kRdmaWrite;
    case WrOpcode::kRdmaRead:
      return WcOpcode::kRdmaRead;
    case WrOpcode::kAtomicCmpAndSwp:
      return WcOpcode::kCompSwap;
    case WrOpcode::kAtomicFetchAndAdd:
      return WcOpcode::kFetchAdd;
    case WrOpcode::kLocalInv:
      return WcOpcode::kLocalInv;
    case WrOpcode::kBindMw:
      return WcOpcode::kBindMw;
    case WrOpcode::kAtomicWrite:
      return WcOpcode::kAtomicWrite;
    case WrOpcode::kFlush:
      return WcOpcode::kFlush;
    default:
      return WcOpcode::kSend;
  }
}

// Walks the SGEs covering [offset, offset + len) of the message, calling fn(sge, va, pos, n).
template <typename Fn>
bool for_each_segment(std::span<const Sge> sges, std::uint64_t offset, std::size_t len, Fn fn) {
  std::size_t done = 0;
  for (const Sge& sge : sges) {
    if (done == len) break;
    if (offset >= sge.length) {
      offset -= sge.length;
      continue;
    }
    const std::size_t n =
        static_cast<std::size_t>(std::min<std::uint64_t>(sge.length - offset, len - done));
    if (!fn(sge, sge.addr + offset, done, n)) return false;
    done += n;
    offset = 0;
  }
  return done == len;
}

}  // namespace

bool gather(MemoryRegionTable& mrs, std::span<const Sge> sges, std::uint64_t offset,
            std::span<std::uint8_t> out) {
  return for_each_segment(sges, offset, out.size(),
                          [&](const Sge& sge, std::uint64_t va, std::size_t pos, std::size_t n) {
                            const auto addr = mrs.check_local(sge.lkey, va, n, 0);
                            return addr && mrs.memory().read(*addr, out.subspan(pos, n));
                          });
}

bool scatter(MemoryRegionTable& mrs, std::span<const Sge> sges, std::uint64_t offset,
             std::span<const std::uint8_t> in) {
  return for_each_segment(sges, offset, in.size(),
                          [&](const Sge& sge, std::uint64_t va, std::size_t pos, std::size_t n) {
                            const auto addr = mrs.check_local(sge.lkey, va, n, access::kLocalWrite);
                            return addr && mrs.memory().write(*addr, in.subspan(pos, n));
                          });
}

std::uint64_t sge_bytes(std::span<const Sge> sges) {
  std::uint64_t n = 0;
  for (const Sge& s : sges)
    n += s.length;
  return n;
}

bool sges_valid(const MemoryRegionTable& mrs, std::span<const Sge> sges, std::uint32_t need) {
  for (const Sge& s : sges) {
    if (s.length == 0) continue;
    if (!mrs.check_local(s.lkey, s.addr, s.length, need)) return false;
  }
  return true;
}

wire::Transport QpContext::transport() const {
  switch (config.type) {
    case QpType::kUc:
      return wire::Transport::kUc;
    case QpType::kUd:
      return wire::Transport::kUd;
    case QpType::kXrcSend:
    case QpType::kXrcRecv:
      return wire::Transport::kXrc;
    default:
      return wire::Transport::kRc;
  }
}

void QpContext::push_completion(Completion c) {
  c.timestamp_ns = now_ns;
  completions.push_back(c);
}

void QpContext::retire_executed() {
  while (sq_head != sq_tail && wqe(sq_head).stage == WqeStage::kExecuted) {
    SendWqe& w = wqe(sq_head);
    w.stage = WqeStage::kDone;
    push_send_completion(w, w.status);
    ++sq_head;
    if (w.status != WcStatus::kSuccess) send_queue_error();
  }
  if (sq_next < sq_head) sq_next = sq_head;
}

void QpContext::send_queue_error() {
  if (config.type == QpType::kUd || config.type == QpType::kUc) {
    state = QpState::kSqe;
    attr.qp_state = QpState::kSqe;
  } else {
    fatal_pending = true;
  }
}

void QpContext::push_send_completion(const SendWqe& w, WcStatus status) {
  // Unsignaled WQEs complete silently unless they fail (ibv_post_send: IBV_SEND_SIGNALED,
  // sq_sig_all).
  if (status == WcStatus::kSuccess && !config.sq_sig_all &&
      !(w.wr.send_flags & send_flags::kSignaled)) {
    return;
  }
  Completion c;
  c.wr_id = w.wr.wr_id;
  c.status = status;
  c.opcode = wc_opcode(w.wr.opcode);
  c.byte_len = w.length;
  c.qp_num = config.qpn;
  push_completion(c);
}

void QpContext::restart_retransmit_timer(std::uint64_t now_ns) {
  const std::uint64_t timeout_ns = ack_timeout_ns(attr.timeout);
  retransmit_deadline_ns = (timeout_ns != 0 && outstanding()) ? now_ns + timeout_ns : 0;
  restart_adaptive_timer(now_ns);
}

// The Local ACK Timeout (the QP's 5-bit timeout, C9-140; docs/protocol.md §3.9) stays what
// decides retry_cnt and IBV_WC_RETRY_EXC_ERR: an adaptive retransmission is an early go-back-N
// resend that uses no retry budget, as ConnectX's adaptive retransmission resends before the
// QP's timeout. Timeout 0 means the IBA timer is off (the requester waits forever): then nothing
// is resent by time at all.
void QpContext::resolve_adaptive_timer() const {
  const std::uint64_t now_ns = adaptive_restart_ns;
  adaptive_restart_pending = false;
  adaptive_deadline_ns = 0;
  const std::uint64_t cap_ns = ack_timeout_ns(attr.timeout);
  if (config.adaptive_rto_floor_ns == 0 || cap_ns == 0 || !reliable() || !outstanding()) return;
  std::uint64_t rto_ns = rtt.rto_ns(config.adaptive_rto_floor_ns, cap_ns);
  // A probe's timer where one is due: after a NAK's go-back-N the path is empty and its answer
  // takes a base round trip (QpConfig::resend_probe_floor_ns); a tail probe waits at least two
  // smoothed round trips too (RFC 8985 7.2's PTO) and the longest recent one, as the ACKs it
  // waits for may be queued behind other QPs' work (QpConfig::tail_probe_floor_ns): half the
  // RTO's peak rule, which a needless probe, one packet, can afford. While the path is losing
  // packets (the loss window is below its top), silence is far more likely a loss than a stall:
  // then the probe waits for its lossy floor and two smoothed round trips, without the peak
  // (QpConfig::lossy_tail_probe_floor_ns). Not while other QPs of the device wait for its
  // InflightBudget: then the silence is the queue of a device that has more to send than it
  // lets out, and the RTO (whose expiry still probes first) is the timer.
  // The resend probe that follows a tail probe's partial answer on a clean link (the loss window
  // at its top: no loss seen) waits at least the tail probe's floor: there the silence was most
  // likely a stall whose ACKs are still draining, not a loss. A tail probe still unanswered on a
  // lossy path waits the resend probe's timer too, not the RTO (tail_probe_expires_early): the
  // probe or its answer was most likely lost (each at the path's loss rate), and the RTO's floor
  // is sized for a stalled host, far longer than the go-back-N its expiry then starts. While the
  // resend probe watches only READ ranges asked for again, its expiry asks for them again, a
  // packet each, so it takes their own floor (QpConfig::read_repair_floor_ns).
  const bool lossy_probe_unanswered = tail_probe && !resend_probe && tail_probe_expires_early;
  if (rtt.samples() != 0) {
    if ((resend_probe || lossy_probe_unanswered) && config.resend_probe_floor_ns != 0) {
      std::uint64_t floor_ns =
          tail_probe && !loss_window.reduced()
              ? std::max(config.resend_probe_floor_ns, config.tail_probe_floor_ns)
              : config.resend_probe_floor_ns;
      if (resend_probe && !tail_probe && config.read_repair_floor_ns != 0 &&
          read_repair.repairing())
        floor_ns = config.read_repair_floor_ns;
      rto_ns = std::min(rto_ns, std::max(floor_ns, 4 * rtt.min_ns()));
    } else if (!resend_probe && !tail_probe && config.tail_probe_floor_ns != 0 &&
               last_sent_ackreq && !budget_contended() && tail_probe_is_cheap()) {
      const bool lossy = config.lossy_tail_probe_floor_ns != 0 && loss_window.reduced();
      rto_ns = std::min(rto_ns, lossy ? std::max({lossy_tail_probe_floor_ns(), 4 * rtt.min_ns(),
                                                  2 * rtt.smoothed_ns()})
                                      : std::max({config.tail_probe_floor_ns, 4 * rtt.min_ns(),
                                                  2 * rtt.smoothed_ns(), rtt.peak_ns()}));
    }
  }
  if (rto_ns < cap_ns) adaptive_deadline_ns = now_ns + rto_ns;
}

bool QpContext::tail_probe_is_cheap() const {
  if (sq_head == sq_tail) return true;
  const SendWqe& w = wqe(sq_head);
  // Signed: the timer restarts as a READ's last response arrives, before the READ leaves the
  // head, so comp_psn may already be past it.
  return !w.is_read() ||
         w.last_psn.distance_from(comp_psn) < static_cast<std::int32_t>(config.max_unacked_psns);
}

std::uint64_t QpContext::lossy_tail_probe_floor_ns() const {
  if (sq_head == sq_tail) return config.lossy_tail_probe_floor_ns;
  const SendWqe& w = wqe(sq_head);
  // A READ whose last response came (still at the head: tail_probe_is_cheap) is not replayed.
  const bool replays_a_read = w.is_read() && w.last_psn.distance_from(comp_psn) >= 0;
  return replays_a_read && config.lossy_read_tail_probe_floor_ns != 0
             ? config.lossy_read_tail_probe_floor_ns
             : config.lossy_tail_probe_floor_ns;
}

std::uint32_t QpContext::unacked_psns() const {
  if (!reliable() || (state != QpState::kRts && state != QpState::kSqd)) return 0;
  return static_cast<std::uint32_t>(psn_high.distance_from(comp_psn));
}

void QpContext::sync_inflight_budget() {
  if (config.inflight_budget == nullptr) return;
  const bool sending = state == QpState::kRts || state == QpState::kSqd;
  const BudgetHolding now{unacked_psns(), budget_waiting && sending};
  config.inflight_budget->update(budget_told, now);
  budget_told = now;
}

}  // namespace xroce::transport
