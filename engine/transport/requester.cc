#include "transport/requester.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace xroce::transport {

namespace {

using wire::Opcode;

Opcode send_write_opcode(WrOpcode op, bool first, bool last) {
  if (op == WrOpcode::kRdmaWrite || op == WrOpcode::kRdmaWriteWithImm) {
    const bool imm = op == WrOpcode::kRdmaWriteWithImm;
    if (first && last) return imm ? Opcode::kRcWriteOnlyImm : Opcode::kRcWriteOnly;
    if (first) return Opcode::kRcWriteFirst;
    if (!last) return Opcode::kRcWriteMiddle;
    return imm ? Opcode::kRcWriteLastImm : Opcode::kRcWriteLast;
  }
  const bool imm = op == WrOpcode::kSendWithImm;
  const bool inv = op == WrOpcode::kSendWithInv;
  if (first && last) {
    return imm ? Opcode::kRcSendOnlyImm : inv ? Opcode::kRcSendOnlyInv : Opcode::kRcSendOnly;
  }
  if (first) return Opcode::kRcSendFirst;
  if (!last) return Opcode::kRcSendMiddle;
  return imm ? Opcode::kRcSendLastImm : inv ? Opcode::kRcSendLastInv : Opcode::kRcSendLast;
}

std::uint32_t packets_for(std::uint32_t length, std::uint32_t mtu) {
  return std::max<std::uint32_t>(1, (length + mtu - 1) / mtu);
}

// Verbs (ibv_post_send on UD): a WR Q_Key with the high-order bit set means "use the
// QP's own Q_Key".
constexpr std::uint32_t kQkeyUseQpBit = 0x80000000;

}  // namespace

WcStatus Requester::local_check(const SendWqe& w) const {
  if (w.length > ctx_.config.max_msg_bytes) return WcStatus::kLocLenErr;
  if (w.is_atomic() && w.length != 8) return WcStatus::kLocLenErr;
  if (w.is_inline || w.without_sges()) return WcStatus::kSuccess;
  // READ and ATOMIC results are written into the local buffers: they need LOCAL_WRITE.
  const std::uint32_t need = w.writes_local() ? access::kLocalWrite : 0;
  if (!sges_valid(*ctx_.mrs, w.wr.sg_list, need)) return WcStatus::kLocProtErr;
  return WcStatus::kSuccess;
}

RequesterState Requester::next_state(std::uint64_t now_ns) {
  ctx_.budget_waiting = false;
  if (ctx_.state != QpState::kRts && ctx_.state != QpState::kSqd) return RequesterState::kStopped;
  if (halted_) return RequesterState::kHalted;
  if (ctx_.rnr_deadline_ns != 0) return RequesterState::kWaitRnrTimer;
  // A go-back-N restart walks past what already executed (binds are never executed twice).
  while (ctx_.sq_next != ctx_.sq_tail && ctx_.wqe(ctx_.sq_next).stage == WqeStage::kExecuted)
    ++ctx_.sq_next;
  if (ctx_.sq_next == ctx_.sq_tail) return RequesterState::kIdle;
  SendWqe& w = ctx_.wqe(ctx_.sq_next);
  if (w.stage == WqeStage::kPosted) {
    if (ctx_.state == QpState::kSqd) return RequesterState::kDrained;
    if ((w.wr.send_flags & send_flags::kFence) && ctx_.outstanding_rd_atomic > 0)
      return RequesterState::kWaitFence;
    if (w.is_local()) return RequesterState::kLocalOp;
    if (w.is_read_or_atomic() && ctx_.outstanding_rd_atomic >= ctx_.attr.max_rd_atomic)
      return RequesterState::kWaitRdAtomic;
    pending_local_error_ = local_check(w);
    if (pending_local_error_ != WcStatus::kSuccess) {
      // Completions stay in order: the failing WQE waits until all before it completed.
      return ctx_.sq_head == ctx_.sq_next ? RequesterState::kLocalError
                                          : RequesterState::kWaitWindow;
    }
  }
  if (ctx_.reliable() && ctx_.outstanding() &&
      static_cast<std::uint32_t>(ctx_.req_psn.distance_from(ctx_.comp_psn)) >=
          ctx_.loss_window.psns())
    return RequesterState::kWaitWindow;
  if (!budget_allows()) {
    ctx_.budget_waiting = true;
    return RequesterState::kWaitBudget;
  }
  if (ctx_.cc != nullptr) {
    const std::uint64_t earliest_ns = ctx_.cc->earliest_send_ns(now_ns);
    if (earliest_ns > now_ns) {
      ctx_.pacer_deadline_ns = earliest_ns;
      return RequesterState::kWaitPacer;
    }
  }
  return RequesterState::kSend;
}

// Only new PSNs count against the device's budget: a retransmission resends PSNs it holds.
bool Requester::budget_allows() {
  force_ackreq_ = false;
  const InflightBudget* budget = ctx_.config.inflight_budget.get();
  if (budget == nullptr || !ctx_.reliable() || ctx_.req_psn.before(ctx_.psn_high)) return true;
  const std::uint32_t held = ctx_.unacked_psns();
  if (budget->may_take(held)) return true;
  // Over its share (which shrinks as other QPs start sending) while nothing it sent asked for
  // an ACK: one more packet, asking for one, so that an ACK frees the budget rather than the
  // local ACK timeout. A QP holding nothing waits for nothing but the budget.
  if (ctx_.last_sent_ackreq || held == 0) return false;
  force_ackreq_ = true;
  return true;
}

// Whether the device's budget will stop this QP once the packet being built left, the newest
// PSN it holds (a new one, or the last of a go-back-N resend): that packet then asks for the ACK
// that lets the QP go on.
bool Requester::budget_full_after_this() const {
  const InflightBudget* budget = ctx_.config.inflight_budget.get();
  const wire::Psn next = ctx_.req_psn + 1;
  if (budget == nullptr || next.before(ctx_.psn_high)) return false;
  // The device has not been told of this new PSN yet: it counts as one more in flight.
  return !budget->may_take(static_cast<std::uint32_t>(next.distance_from(ctx_.comp_psn)), 1);
}

// Whether the QP's own window (its loss window, at most max_unacked_psns) is full once the packet
// being built left: that packet then asks for the ACK that opens it again, or the QP would wait for
// a timer.
bool Requester::window_full_after_this() const {
  const wire::Psn next = ctx_.req_psn + 1;
  return static_cast<std::uint32_t>(next.distance_from(ctx_.comp_psn)) >= ctx_.loss_window.psns();
}

std::optional<Transmit> Requester::poll(std::uint64_t now_ns, wire::MutableBytes payload) {
  if (!ctx_.read_asks.empty()) {
    if (std::optional<Transmit> t = build_read_ask()) {
      on_transmit(now_ns, *t);
      return t;
    }
  }
  RequesterState s = next_state(now_ns);
  // Local operations (binds, LOCAL_INV) execute here in send-queue order. C10-93.1.1 (quoted in
  // rxe_req.c rxe_requester): a UD message longer than the port's MTU emits no packet, and the
  // CI generates no error for it: it completes successfully unsent.
  for (;;) {
    if (s == RequesterState::kLocalOp) {
      execute_local(ctx_.wqe(ctx_.sq_next));
    } else if (s == RequesterState::kSend && ctx_.config.type == QpType::kUd &&
               ctx_.wqe(ctx_.sq_next).length > ctx_.mtu()) {
      complete_datagram(ctx_.wqe(ctx_.sq_next));
    } else {
      break;
    }
    s = next_state(now_ns);
  }
  if (s == RequesterState::kLocalError) {
    finish_local_error(ctx_.wqe(ctx_.sq_next), pending_local_error_);
    return std::nullopt;
  }
  if (s != RequesterState::kSend) return std::nullopt;
  assert(payload.size() >= ctx_.mtu());

  SendWqe& w = ctx_.wqe(ctx_.sq_next);
  if (w.stage == WqeStage::kPosted) start_wqe(w);
  // The first packet of a go-back-N resend goes twice (retry()): the requester stands on it
  // again once it is built.
  const bool repeat = std::exchange(repeat_next_, false) && ctx_.reliable() && !probing_ &&
                      !w.is_read_or_atomic() && ctx_.req_psn == ctx_.comp_psn;
  const std::uint64_t repeat_sq_next = ctx_.sq_next;
  const wire::Psn repeat_psn = ctx_.req_psn;
  Transmit t = ctx_.config.type == QpType::kUd ? build_ud(w, payload) : build_connected(w, payload);
  end_probe();  // the probe left: back to where the requester stood
  if (repeat) {
    ctx_.sq_next = repeat_sq_next;
    ctx_.req_psn = repeat_psn;
    ++ctx_.counters.resend_repeats;
  }
  on_transmit(now_ns, t);
  return t;
}

void Requester::on_transmit(std::uint64_t now_ns, Transmit& t) {
  ++ctx_.counters.packets_sent;
  ctx_.counters.payload_bytes_sent += t.payload_len;
  if (t.retransmission) ++ctx_.counters.retransmitted_packets;
  ctx_.last_sent_ackreq = t.hdr.bth.ack_req;
  if (ctx_.reliable())
    ctx_.rtt.on_request_sent(now_ns, t.hdr.bth.psn, t.hdr.bth.ack_req, t.retransmission);
  if (ctx_.cc != nullptr) t.ect = ctx_.cc->on_transmit(now_ns, t.payload_len);
  if (ctx_.reliable() && ctx_.retransmit_deadline_ns == 0) {
    const std::uint64_t timeout_ns = ack_timeout_ns(ctx_.attr.timeout);
    if (timeout_ns != 0) ctx_.retransmit_deadline_ns = now_ns + timeout_ns;
  }
  // The adaptive timer measures silence: RTO after the newest packet sent or the newest
  // progress, whichever is later (a response to what just left cannot come sooner).
  if (ctx_.reliable()) ctx_.restart_adaptive_timer(now_ns);
}

// A duplicate READ request for a sub-range of the original (IBA 9.4.4; rxe_resp.c
// duplicate_request accepts any sub-range under the same R_Key and replays exactly it): its PSN is
// the range's first, its RETH the range's bytes. It needs no responder resource of its own (the
// responder answers from the original's) and no new PSN, so neither max_rd_atomic, the window nor
// the device's budget holds it back; the RNR timer does, as it holds every resend.
std::optional<Transmit> Requester::build_read_ask() {
  if (ctx_.state != QpState::kRts && ctx_.state != QpState::kSqd) return std::nullopt;
  if (halted_ || ctx_.rnr_deadline_ns != 0) return std::nullopt;
  const std::uint32_t mtu = ctx_.mtu();
  while (!ctx_.read_asks.empty()) {
    const QpContext::ReadAsk ask = ctx_.read_asks.front();
    ctx_.read_asks.pop_front();
    const SendWqe& w = ctx_.wqe(ask.wqe);
    // Made good meanwhile (a go-back-N's replay, or the READ completed): nothing to ask.
    if (ask.wqe < ctx_.sq_head || ask.wqe >= ctx_.sq_tail || w.stage != WqeStage::kStarted ||
        !w.is_read() || ask.range.last.before(ctx_.comp_psn) ||
        !wire::psn_in_range(ask.range.last, w.first_psn, w.last_psn)) {
      continue;
    }
    const wire::Psn first = ask.range.first.before(ctx_.comp_psn) ? ctx_.comp_psn : ask.range.first;
    const std::uint64_t offset =
        std::uint64_t{static_cast<std::uint32_t>(first.distance_from(w.first_psn))} * mtu;
    const std::uint64_t packets =
        static_cast<std::uint32_t>(ask.range.last.distance_from(first)) + 1;
    Transmit t;
    t.av_id = ctx_.attr.av_id;
    t.retransmission = true;
    wire::TransportHeaders& h = t.hdr;
    h.bth.dest_qp = ctx_.attr.dest_qp_num;
    h.bth.psn = first;
    h.bth.opcode = wire::in_transport(Opcode::kRcReadRequest, ctx_.transport());
    h.bth.ack_req = true;
    h.reth = wire::Reth{w.wr.remote_addr + offset, w.wr.rkey,
                        static_cast<std::uint32_t>(std::min(w.length - offset, packets * mtu))};
    if (h.info().headers.has(wire::Header::kXrcEth)) h.xrc_srqn = w.wr.xrc_remote_srqn;
    ++ctx_.counters.read_ranges_asked;
    return t;
  }
  return std::nullopt;
}

RequesterState Requester::start_wqe(SendWqe& w) {
  const std::uint32_t mtu = ctx_.mtu();
  w.stage = WqeStage::kStarted;
  w.first_psn = ctx_.req_psn;
  const std::uint32_t n = w.is_read() || !w.is_read_or_atomic() ? packets_for(w.length, mtu) : 1;
  w.last_psn = w.first_psn + (n - 1);
  if (w.is_read_or_atomic()) ++ctx_.outstanding_rd_atomic;
  return RequesterState::kSend;
}

bool Requester::copy_payload(const SendWqe& w, std::uint64_t offset, std::span<std::uint8_t> out) {
  if (w.is_inline) {
    std::copy_n(w.inline_data.begin() + static_cast<std::ptrdiff_t>(offset), out.size(),
                out.begin());
    return true;
  }
  return gather(*ctx_.mrs, w.wr.sg_list, offset, out);
}

// BIND_MW and LOCAL_INV take effect now, in send-queue order, so a WQE behind them already
// finds the window bound or invalidated (rxe_do_local_ops). They complete in order with the
// rest; a failure stops the requester and, once reported, moves the QP to ERR.
void Requester::execute_local(SendWqe& w) {
  MemoryRegionTable& mrs = *ctx_.mrs;
  w.stage = WqeStage::kExecuted;
  w.status = WcStatus::kSuccess;
  if (w.wr.opcode == WrOpcode::kBindMw) {
    if (!mrs.bind_window(w.wr.bind, ctx_.config.qpn)) {
      w.status = WcStatus::kMwBindErr;
      ++ctx_.counters.mw_bind_errors;
    }
  } else if (!mrs.invalidate(w.wr.invalidate_rkey)) {
    w.status = WcStatus::kLocQpOpErr;
  }
  if (w.status != WcStatus::kSuccess) halted_ = true;
  ++ctx_.sq_next;
}

void Requester::build_send_write(SendWqe& w, Transmit& t, wire::MutableBytes payload) {
  const std::uint32_t mtu = ctx_.mtu();
  const std::uint64_t offset =
      std::uint64_t{static_cast<std::uint32_t>(ctx_.req_psn.distance_from(w.first_psn))} * mtu;
  const std::uint64_t remaining = w.length - offset;
  const bool first = offset == 0;
  const bool last = remaining <= mtu;
  const auto chunk = static_cast<std::uint32_t>(std::min<std::uint64_t>(mtu, remaining));

  wire::TransportHeaders& h = t.hdr;
  h.bth.opcode = wire::in_transport(send_write_opcode(w.wr.opcode, first, last), ctx_.transport());
  const wire::HeaderSet hs = h.info().headers;
  if (hs.has(wire::Header::kReth)) h.reth = wire::Reth{w.wr.remote_addr, w.wr.rkey, w.length};
  if (hs.has(wire::Header::kImmDt)) h.imm = w.wr.imm_data;
  if (hs.has(wire::Header::kIeth)) h.ieth = w.wr.invalidate_rkey;
  // SE only where a receive completes: SEND and WRITE_WITH_IMM (rxe init_req_packet).
  const bool completes_recv = h.info().operation == wire::Operation::kSend || h.info().with_imm;
  h.bth.solicited = last && completes_recv && (w.wr.send_flags & send_flags::kSolicited);
  // AckReq on every message end, and periodically inside long messages (rxe_req.c
  // init_req_packet; docs/protocol.md §3.3), on a tail probe, and where the QP's window or the
  // device's InflightBudget stops the QP (the BTH's AckReq may be set on any request packet, IBA
  // 9.2); never on UC, which nothing acknowledges (rxe: ack_req stays 0 for UC and UD).
  h.bth.ack_req =
      ctx_.reliable() &&
      (last || ++packets_since_ackreq_ > ctx_.config.max_packets_per_ackreq || force_ackreq_ ||
       probing_ || window_full_after_this() || budget_full_after_this());
  if (h.bth.ack_req) packets_since_ackreq_ = 0;
  if (!copy_payload(w, offset, payload.subspan(0, chunk))) ctx_.fatal_pending = true;
  t.payload_len = chunk;
  ++ctx_.req_psn;
  if (!last) return;
  ++ctx_.sq_next;
  // UC: no acknowledgement will come; the message is done once it left.
  if (!ctx_.reliable()) w.stage = WqeStage::kExecuted;
}

void Requester::build_atomic_write(SendWqe& w, Transmit& t, wire::MutableBytes payload) {
  wire::TransportHeaders& h = t.hdr;
  h.bth.opcode = wire::in_transport(Opcode::kRcAtomicWrite, ctx_.transport());
  h.bth.ack_req = true;
  h.reth =
      wire::Reth{w.wr.remote_addr, w.wr.rkey, static_cast<std::uint32_t>(wire::kAtomicWriteBytes)};
  std::copy(w.wr.atomic_write.begin(), w.wr.atomic_write.end(), payload.begin());
  t.payload_len = static_cast<std::uint32_t>(wire::kAtomicWriteBytes);
  ++ctx_.req_psn;
  ++ctx_.sq_next;
}

// FLUSH carries no payload (oA19-2): the FETH says what to reach, the RETH where.
void Requester::build_flush(SendWqe& w, Transmit& t) {
  wire::TransportHeaders& h = t.hdr;
  h.bth.opcode = wire::in_transport(Opcode::kRcFlush, ctx_.transport());
  h.bth.ack_req = true;
  h.feth = wire::Feth{w.wr.flush.placement, w.wr.flush.selectivity};
  h.reth = wire::Reth{w.wr.remote_addr, w.wr.rkey, w.wr.flush.length};
  ++ctx_.req_psn;
  ++ctx_.sq_next;
}

Transmit Requester::build_connected(SendWqe& w, wire::MutableBytes payload) {
  Transmit t;
  t.av_id = ctx_.attr.av_id;
  t.retransmission = ctx_.req_psn.before(ctx_.psn_high);
  wire::TransportHeaders& h = t.hdr;
  h.bth.dest_qp = ctx_.attr.dest_qp_num;
  h.bth.psn = ctx_.req_psn;
  if (w.is_atomic_write()) {
    build_atomic_write(w, t, payload);
  } else if (w.is_flush()) {
    build_flush(w, t);
  } else if (w.is_read()) {
    // A retried READ asks only for what is missing (IBA 9.4.4; docs/protocol.md §3.8).
    const std::uint64_t offset =
        std::uint64_t{static_cast<std::uint32_t>(ctx_.req_psn.distance_from(w.first_psn))} *
        ctx_.mtu();
    h.bth.opcode = wire::in_transport(Opcode::kRcReadRequest, ctx_.transport());
    h.bth.ack_req = true;
    h.reth = wire::Reth{w.wr.remote_addr + offset, w.wr.rkey,
                        static_cast<std::uint32_t>(w.length - offset)};
    ctx_.req_psn = w.last_psn + 1;
    ++ctx_.sq_next;
  } else if (w.is_atomic()) {
    const bool cas = w.wr.opcode == WrOpcode::kAtomicCmpAndSwp;
    h.bth.opcode =
        wire::in_transport(cas ? Opcode::kRcCompareSwap : Opcode::kRcFetchAdd, ctx_.transport());
    h.bth.ack_req = true;
    h.atomic_eth = wire::AtomicEth{w.wr.remote_addr, w.wr.rkey, cas ? w.wr.swap : w.wr.compare_add,
                                   cas ? w.wr.compare_add : 0};
    ++ctx_.req_psn;
    ++ctx_.sq_next;
  } else {
    build_send_write(w, t, payload);
  }
  // XRC (IBA 9.2): every request names the target's XRC SRQ.
  if (h.info().headers.has(wire::Header::kXrcEth)) h.xrc_srqn = w.wr.xrc_remote_srqn;
  if (ctx_.req_psn.after(ctx_.psn_high)) ctx_.psn_high = ctx_.req_psn;
  // Nothing answers UC: every PSN sent is as good as acknowledged.
  if (!ctx_.reliable()) ctx_.comp_psn = ctx_.req_psn;
  return t;
}

Transmit Requester::build_ud(SendWqe& w, wire::MutableBytes payload) {
  Transmit t;
  t.av_id = w.wr.ud.av_id;
  wire::TransportHeaders& h = t.hdr;
  const bool imm = w.wr.opcode == WrOpcode::kSendWithImm;
  h.bth.opcode = imm ? Opcode::kUdSendOnlyImm : Opcode::kUdSendOnly;
  h.bth.dest_qp = w.wr.ud.remote_qpn;
  h.bth.psn = ctx_.req_psn;
  h.bth.solicited = (w.wr.send_flags & send_flags::kSolicited) != 0;
  const std::uint32_t wr_qkey = w.wr.ud.remote_qkey.value();
  h.deth =
      wire::Deth{(wr_qkey & kQkeyUseQpBit) ? ctx_.attr.qkey : w.wr.ud.remote_qkey, ctx_.config.qpn};
  if (imm) h.imm = w.wr.imm_data;
  if (!copy_payload(w, 0, payload.subspan(0, w.length))) ctx_.fatal_pending = true;
  t.payload_len = w.length;
  ++ctx_.req_psn;
  ctx_.psn_high = ctx_.req_psn;
  ctx_.comp_psn = ctx_.req_psn;
  complete_datagram(w);
  return t;
}

// UD is unreliable: the WQE completes once its packet is handed to the port.
void Requester::complete_datagram(SendWqe& w) {
  w.stage = WqeStage::kDone;
  ctx_.push_send_completion(w, WcStatus::kSuccess);
  ++ctx_.sq_next;
  ++ctx_.sq_head;
}

void Requester::finish_local_error(SendWqe& w, WcStatus status) {
  w.stage = WqeStage::kDone;
  ctx_.push_send_completion(w, status);
  ++ctx_.sq_next;
  ++ctx_.sq_head;
  ctx_.send_queue_error();
}

void Requester::retry(bool repeat_first) {
  ctx_.sq_next = ctx_.sq_head;
  ctx_.req_psn = ctx_.comp_psn;
  packets_since_ackreq_ = 0;
  probing_ = false;
  repeat_next_ = repeat_first;
}

void Requester::probe() {
  probe_saved_sq_next_ = ctx_.sq_next;
  probe_saved_req_psn_ = ctx_.req_psn;
  ctx_.sq_next = ctx_.sq_head;
  ctx_.req_psn = ctx_.comp_psn;
  probing_ = true;
}

void Requester::end_probe() {
  if (!probing_) return;
  probing_ = false;
  ctx_.sq_next = probe_saved_sq_next_;
  ctx_.req_psn = probe_saved_req_psn_;
}

}  // namespace xroce::transport
