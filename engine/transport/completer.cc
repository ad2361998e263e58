#include "transport/completer.h"

#include <algorithm>
#include <cstring>

namespace xroce::transport {

namespace {

using wire::Position;

WcStatus nak_status(wire::NakCode code) {
  switch (code) {
    case wire::NakCode::kInvalidRequest:
      return WcStatus::kRemInvReqErr;
    case wire::NakCode::kRemoteAccessError:
      return WcStatus::kRemAccessErr;
    default:
      // Remote operational error, and every reserved code (rxe_comp.c check_ack).
      return WcStatus::kRemOpErr;
  }
}

std::uint64_t psn_offset_bytes(wire::Psn psn, wire::Psn first, std::uint32_t mtu) {
  return std::uint64_t{static_cast<std::uint32_t>(psn.distance_from(first))} * mtu;
}

}  // namespace

void Completer::handle_response(std::uint64_t now_ns, const wire::TransportHeaders& hdr,
                                wire::Bytes payload) {
  now_ns_ = now_ns;
  const Response r{hdr, payload, hdr.info(), hdr.bth.psn};
  CompleterState s = CompleterState::kGetWqe;
  while (s != CompleterState::kDone)
    s = step(s, r);
  if (selective()) take_placed();
  probe_answered(r);
}

// A tail probe resent tail_probe_psn, asking for an ACK, and what it asked about is not all
// acknowledged yet (ctx_.tail_probe, which only a timer sets). While the loss window is reduced
// (losses seen), an ACK of exactly that PSN that leaves what followed it unacknowledged is taken
// for the probe's own answer, and the rest for lost: the responder, which NAKs a gap once and
// drops what follows it silently (rxe_resp.c check_psn), took the probe in sequence, so its NAK
// of that gap was what went missing; or it had everything up to the probe and re-ACKed it as a
// duplicate (docs/protocol.md §3.6), so what followed was lost. Go back now, as a NAK would have
// made it, rather than after the resend probe's timer. Only for a SEND or WRITE at the head (a
// READ's probe is answered by READ responses, whose gaps response_gap finds).
// An ACK past the probe's PSN that still leaves PSNs before tail_probe_end unacknowledged counts
// as its answer too: the responder re-ACKs a duplicate up to what it has executed (rxe_resp.c
// duplicate_request), which is past the probe when it had taken more than the probe's PSN before
// it went silent behind a NAK that was lost.
// Either ACK could also be an ordinary one the responder sent before the probe reached it, held
// on the path (a relay or a host descheduled) longer than the probe's timer: one QP's packets
// keep their order, but an ACK already on its way when the probe left can come after it. On a
// path that is losing packets a lost NAK is far more likely, and a needless go-back-N costs one
// reduced window where waiting costs the resend probe's timer (500 us at the daemon's floor) on
// every lost NAK. On a clean path (the loss window at its top) the stall is the likely one, and
// a go-back-N there would resend a whole window of duplicates and reduce the window, which makes
// the next stall's probe go back too: there the answer only arms the resend probe, which waits at
// least the tail probe's floor (QpContext::restart_adaptive_timer) for the rest of the held ACKs.
void Completer::probe_answered(const Response& r) {
  if (!ctx_.tail_probe || ctx_.fatal_pending || r.info.operation != wire::Operation::kAck ||
      !r.hdr.aeth->is_ack() || ctx_.sq_head == ctx_.sq_tail)
    return;
  if (!ctx_.loss_window.reduced()) return;  // a clean path: the resend probe's timer decides
  const bool own_answer = r.psn == ctx_.tail_probe_psn && ctx_.comp_psn == ctx_.tail_probe_psn + 1;
  const bool past_probe =
      ctx_.comp_psn.after(ctx_.tail_probe_psn) && ctx_.comp_psn.before(ctx_.tail_probe_end);
  if (!own_answer && !past_probe) return;
  const SendWqe& w = ctx_.wqe(ctx_.sq_head);
  if (w.stage != WqeStage::kStarted || w.is_read_or_atomic()) return;
  ++ctx_.counters.probe_gaps;
  start_retry(now_ns_, false);
}

// The dispatch: every state's handler returns the next state. The WQE examined is always the
// oldest incomplete one (sq_head), fetched again after each completion.
CompleterState Completer::step(CompleterState s, const Response& r) {
  SendWqe& w = ctx_.wqe(ctx_.sq_head);
  switch (s) {
    case CompleterState::kGetWqe:
      return get_wqe();
    case CompleterState::kCheckPsn:
      return check_psn(r, w);
    case CompleterState::kCheckAck:
      return check_ack(r, w);
    case CompleterState::kRead:
      return do_read(r, w);
    case CompleterState::kAtomic:
      return do_atomic(r, w);
    case CompleterState::kWriteSend:
      return r.psn == w.last_psn ? CompleterState::kCompAck : CompleterState::kUpdateComp;
    case CompleterState::kCompAck:
      advance_comp_psn(now_ns_, r.psn + 1);
      complete_head(WcStatus::kSuccess);
      return CompleterState::kDone;
    case CompleterState::kUpdateComp:
      advance_comp_psn(now_ns_, r.psn + 1);
      return CompleterState::kDone;
    case CompleterState::kRetry:
      return retry_once();
    case CompleterState::kRnrRetry:
      return rnr_retry(r);
    case CompleterState::kFatalError:
      fail(fatal_status_);
      return CompleterState::kDone;
    case CompleterState::kDrop:
    case CompleterState::kDone:
      break;
  }
  return CompleterState::kDone;
}

CompleterState Completer::get_wqe() {
  ctx_.retire_executed();  // local operations the requester finished meanwhile
  if (ctx_.sq_head == ctx_.sq_tail || ctx_.wqe(ctx_.sq_head).stage != WqeStage::kStarted) {
    ++ctx_.counters.ghost_acks;  // nothing outstanding this could answer
    return CompleterState::kDone;
  }
  return CompleterState::kCheckPsn;
}

CompleterState Completer::retry_once() {
  // One retry at a time: a NAK for the PSN a retry already restarted from is stale, and while
  // an RNR timer runs the RNR retry owns the restart; unless the responses show that the
  // replay the retry asked for came without that PSN (response_gap).
  const bool replay_lost = replay_lost_;
  replay_lost_ = false;
  if (ctx_.rnr_deadline_ns == 0 &&
      (!(retry_started_ && retry_psn_ == ctx_.comp_psn) || replay_lost)) {
    if (replay_lost) ++ctx_.counters.replay_gap_retries;
    start_retry(now_ns_, false);
  }
  return CompleterState::kDone;
}

// A response after the oldest unacknowledged PSN while a READ or ATOMIC waits there: its
// response was lost. A responder sends its responses in PSN order, so while one retry from
// comp_psn runs, a response to that same READ (`in_head`) before the newest gapped response
// means the responses went back: the replay the retry asked for (rxe_resp.c duplicate_request
// replays a READ from the retried PSN) has begun, and without comp_psn, which was lost again.
// That is a new loss, found now rather than by the resend probe's timer, and asks again. A
// later READ's replay going back (not `in_head`, a READ response) shows it too: the retry sent
// the head's request first and a responder takes requests in order (rxe_resp.c), so a later
// READ's replay arriving while the head still waits means the head's request, or its whole
// replay, was lost. The same PSN again is not enough (a responder re-ACKs a duplicate request
// with the PSN it acknowledged before).
CompleterState Completer::response_gap(const Response& r, bool in_head) {
  replay_lost_ = (in_head || r.info.operation == wire::Operation::kReadResponse) &&
                 retry_started_ && retry_psn_ == ctx_.comp_psn && gap_seen_ &&
                 r.psn.before(last_gap_psn_);
  gap_seen_ = true;
  last_gap_psn_ = r.psn;
  return CompleterState::kRetry;
}

CompleterState Completer::rnr_retry(const Response& r) {
  ++ctx_.counters.naks_received;  // every NAK kind, as naks_sent (work.h)
  ++ctx_.counters.rnr_naks_received;
  if (ctx_.rnr_deadline_ns != 0) return CompleterState::kDone;  // already waiting
  if (r.psn.after(ctx_.comp_psn)) advance_comp_psn(now_ns_, r.psn);
  ctx_.rtt.on_retry();
  if (ctx_.rnr_retry_left == 0) {
    fail(WcStatus::kRnrRetryExcErr);
    return CompleterState::kDone;
  }
  if (ctx_.attr.rnr_retry != 7) --ctx_.rnr_retry_left;  // 7 = infinite (docs/protocol.md §3.9)
  ctx_.rnr_deadline_ns = now_ns_ + std::uint64_t{wire::rnr_timer_us(r.hdr.aeth->value())} * 1000;
  ctx_.retransmit_deadline_ns = 0;  // the RNR timer owns the restart
  ctx_.disarm_adaptive_timer();
  return CompleterState::kDone;
}

CompleterState Completer::check_psn(const Response& r, SendWqe& w) {
  if (!r.psn.before(ctx_.psn_high)) {
    ++ctx_.counters.ghost_acks;  // answers a PSN never sent
    return CompleterState::kDrop;
  }
  if (r.psn.before(ctx_.comp_psn)) return CompleterState::kDrop;  // late duplicate
  if (r.psn.after(w.last_psn)) {
    // A response beyond this WQE acknowledges a SEND/WRITE implicitly (a coalesced ACK) but
    // means a READ/ATOMIC's response was lost: implied NAK (rxe_comp.c check_psn).
    if (w.is_read_or_atomic()) return read_ahead(r, false);
    advance_comp_psn(now_ns_, w.last_psn + 1);
    complete_head(WcStatus::kSuccess);
    return CompleterState::kGetWqe;
  }
  if (r.psn.after(ctx_.comp_psn) && w.is_read_or_atomic()) {
    // A gap in READ responses is an implied NAK: ask again from the first missing PSN now,
    // once per gap, rather than wait for the ACK timeout (rxe_comp.c check_psn).
    return read_ahead(r, true);
  }
  return CompleterState::kCheckAck;
}

// A response after a gap while a READ or ATOMIC waits at comp_psn. Without selective repair, or
// when it is not a READ response the record can take, a retry from comp_psn (response_gap). Else
// it is placed in its READ's buffer now and only the ranges it shows lost are asked for again.
// A response that does not fit its READ (position, length, key) is dropped, as rxe drops any
// response out of sequence: its PSN stays missing and is asked for again.
CompleterState Completer::read_ahead(const Response& r, bool in_head) {
  if (!selective() || r.info.operation != wire::Operation::kReadResponse ||
      !ReadRepair::covers(ctx_.comp_psn, r.psn)) {
    return response_gap(r, in_head);
  }
  if (ctx_.read_repair.received(r.psn)) return CompleterState::kDrop;  // a duplicate
  const std::uint64_t i = started_wqe_reaching(r.psn, ctx_.sq_head);   // the READ it answers
  if (i == ctx_.sq_tail) return CompleterState::kDrop;
  SendWqe& w = ctx_.wqe(i);
  if (w.stage != WqeStage::kStarted || !w.is_read() ||
      !wire::psn_in_range(r.psn, w.first_psn, w.last_psn)) {
    return response_gap(r, in_head);
  }
  if (r.hdr.aeth && !r.hdr.aeth->is_ack()) return CompleterState::kDrop;
  const bool last = r.psn == w.last_psn;
  if (r.info.ends_message() != last && !ctx_.read_repair.asked_range_ends_at(r.psn))
    return CompleterState::kDrop;
  const std::uint32_t mtu = ctx_.mtu();
  const std::uint64_t offset = psn_offset_bytes(r.psn, w.first_psn, mtu);
  if (r.payload.size() != (last ? w.length - offset : mtu)) return CompleterState::kDrop;
  if (!scatter(*ctx_.mrs, w.wr.sg_list, offset, r.payload)) return CompleterState::kDrop;
  ++ctx_.counters.read_responses_ahead;
  lost_.clear();
  ctx_.read_repair.on_response(ctx_.comp_psn, r.psn, lost_);
  if (!lost_.empty() && !ask_again(lost_)) {
    ctx_.read_repair.restart();
    return response_gap(r, in_head);
  }
  return CompleterState::kDone;
}

std::uint64_t Completer::started_wqe_reaching(wire::Psn psn, std::uint64_t from) const {
  std::uint64_t i = from;
  while (i != ctx_.sq_tail && ctx_.wqe(i).stage == WqeStage::kStarted &&
         ctx_.wqe(i).last_psn.before(psn)) {
    ++i;
  }
  return i;
}

// rxe's responder moves a READ's resource to the start of each duplicate it answers
// (rxe_resp.c duplicate_request sets res->read.va_org to the duplicate's VA) and drops, silently,
// a later duplicate that starts before it. So a range asked for after a later one of the same
// READ would never be answered, nor would a go-back-N from before it, and the QP would end in
// IBV_WC_RETRY_EXC_ERR. Every ask for a READ therefore starts at that READ's first PSN still
// missing, which only moves forward; it may bring again responses already placed between two
// losses, which are dropped as duplicates. IBA 9.4.4 allows any sub-range; this is what rxe
// answers.
bool Completer::queue_read_asks(std::vector<ReadRepair::Range>& lost) {
  std::sort(lost.begin(), lost.end(), [&](const ReadRepair::Range& a, const ReadRepair::Range& b) {
    return a.first.distance_from(ctx_.comp_psn) < b.first.distance_from(ctx_.comp_psn);
  });
  const std::size_t queued = ctx_.read_asks.size();
  std::uint64_t i = ctx_.sq_head;
  for (const ReadRepair::Range& range : lost) {
    wire::Psn first = range.first;
    while (first.at_or_before(range.last)) {
      i = started_wqe_reaching(first, i);
      if (i == ctx_.sq_tail) break;
      const SendWqe& w = ctx_.wqe(i);
      if (w.stage != WqeStage::kStarted || !w.is_read() || first.before(w.first_psn)) {
        ctx_.read_asks.resize(queued);
        return false;
      }
      const wire::Psn last = range.last.before(w.last_psn) ? range.last : w.last_psn;
      if (ctx_.read_asks.size() > queued && ctx_.read_asks.back().wqe == i) {
        ctx_.read_asks.back().range.last = last;
      } else {
        const wire::Psn from = w.first_psn.after(ctx_.comp_psn) ? w.first_psn : ctx_.comp_psn;
        ctx_.read_asks.push_back(
            QpContext::ReadAsk{i, {ctx_.read_repair.first_missing(from, first), last}});
      }
      first = last + 1;
    }
  }
  for (std::size_t k = queued; k < ctx_.read_asks.size(); ++k)
    ctx_.read_repair.asked(ctx_.read_asks[k].range);
  return true;
}

bool Completer::ask_again(std::vector<ReadRepair::Range>& lost) {
  if (!queue_read_asks(lost)) return false;
  // A loss, as a NAK's: the window halves once per round trip of losses, timings are void, and
  // the resend probe's timer watches the ranges, at their own floor (QpConfig::
  // read_repair_floor_ns).
  ctx_.loss_window.on_loss(ctx_.psn_high);
  ctx_.rtt.on_retry();
  ctx_.resend_probe = true;
  ctx_.tail_probe = false;
  ctx_.restart_adaptive_timer(now_ns_);
  return true;
}

void Completer::take_placed() {
  while (ctx_.sq_head != ctx_.sq_tail && ctx_.read_repair.received(ctx_.comp_psn)) {
    SendWqe& w = ctx_.wqe(ctx_.sq_head);
    if (w.stage != WqeStage::kStarted || !w.is_read() ||
        !wire::psn_in_range(ctx_.comp_psn, w.first_psn, w.last_psn)) {
      return;
    }
    wire::Psn end = ctx_.comp_psn;
    while (end != w.last_psn && ctx_.read_repair.received(end + 1))
      ++end;
    advance_comp_psn(now_ns_, end + 1);
    if (end != w.last_psn) return;
    complete_head(WcStatus::kSuccess);
  }
}

CompleterState Completer::check_ack(const Response& r, SendWqe& w) {
  switch (r.info.operation) {
    case wire::Operation::kReadResponse:
      return check_read_response(r, w);
    case wire::Operation::kAtomicAck:
      if (!w.is_atomic() || r.psn != w.first_psn || !r.hdr.aeth->is_ack())
        return CompleterState::kDrop;
      return CompleterState::kAtomic;
    case wire::Operation::kAck:
      if (r.hdr.aeth->is_ack()) {
        // A plain ACK cannot answer a READ or ATOMIC.
        return w.is_read_or_atomic() ? CompleterState::kDrop : CompleterState::kWriteSend;
      }
      if (r.hdr.aeth->is_rnr_nak()) return CompleterState::kRnrRetry;
      if (r.hdr.aeth->is_nak()) return check_nak(r, w);
      return CompleterState::kDrop;
    default:
      return CompleterState::kDrop;
  }
}

CompleterState Completer::check_read_response(const Response& r, SendWqe& w) {
  if (r.hdr.aeth && !r.hdr.aeth->is_ack()) return CompleterState::kDrop;
  if (w.is_atomic_write() || w.is_flush()) {
    // Both are answered by a READ RESPONSE ONLY without payload at the request's PSN (rxe's
    // send_read_response_ack; oA19-15 for FLUSH).
    if (r.info.position != Position::kOnly || r.psn != w.first_psn) return CompleterState::kDrop;
    if (!r.payload.empty()) {
      fatal_status_ = WcStatus::kBadRespErr;
      return CompleterState::kFatalError;
    }
    return CompleterState::kCompAck;
  }
  if (!w.is_read()) return CompleterState::kDrop;
  const bool last = r.psn == w.last_psn;
  const bool ends = r.info.ends_message();
  // A replay after a partial-read retry may start with FIRST or MIDDLE (rxe_comp.c check_ack;
  // docs/protocol.md §3.6); the replay of a sub-range ends where the range does.
  if (ends != last && !(ends && selective() && ctx_.read_repair.asked_range_ends_at(r.psn)))
    return CompleterState::kDrop;
  const std::uint32_t mtu = ctx_.mtu();
  const std::uint64_t offset = psn_offset_bytes(r.psn, w.first_psn, mtu);
  const std::uint64_t expect = last ? w.length - offset : mtu;
  if (r.payload.size() != expect) {
    fatal_status_ = WcStatus::kBadRespErr;
    return CompleterState::kFatalError;
  }
  return CompleterState::kRead;
}

CompleterState Completer::check_nak(const Response& r, SendWqe& w) {
  ++ctx_.counters.naks_received;
  const wire::NakCode code = r.hdr.aeth->nak_code();
  if (code == wire::NakCode::kPsnSequenceError) {
    // Everything before the NAK's PSN arrived: complete up to it, then go back.
    if (r.psn.after(ctx_.comp_psn) && !w.is_read_or_atomic()) advance_comp_psn(now_ns_, r.psn);
    return CompleterState::kRetry;
  }
  fatal_status_ = nak_status(code);
  return CompleterState::kFatalError;
}

CompleterState Completer::do_read(const Response& r, SendWqe& w) {
  const std::uint64_t offset = psn_offset_bytes(r.psn, w.first_psn, ctx_.mtu());
  if (!scatter(*ctx_.mrs, w.wr.sg_list, offset, r.payload)) {
    fatal_status_ = WcStatus::kLocProtErr;
    return CompleterState::kFatalError;
  }
  if (selective()) {
    lost_.clear();  // in order: it can only move a range's replay on
    ctx_.read_repair.on_response(ctx_.comp_psn, r.psn, lost_);
  }
  return r.psn == w.last_psn ? CompleterState::kCompAck : CompleterState::kUpdateComp;
}

CompleterState Completer::do_atomic(const Response& r, SendWqe& w) {
  std::uint8_t bytes[8];
  const std::uint64_t orig = *r.hdr.atomic_ack_orig;
  std::memcpy(bytes, &orig, sizeof bytes);  // host order, as the CPU would have read it
  if (!scatter(*ctx_.mrs, w.wr.sg_list, 0, bytes)) {
    fatal_status_ = WcStatus::kLocProtErr;
    return CompleterState::kFatalError;
  }
  return CompleterState::kCompAck;
}

void Completer::complete_head(WcStatus status) {
  SendWqe& w = ctx_.wqe(ctx_.sq_head);
  w.stage = WqeStage::kDone;
  if (w.is_read_or_atomic()) --ctx_.outstanding_rd_atomic;
  ctx_.push_send_completion(w, status);
  ++ctx_.sq_head;
  if (ctx_.sq_next < ctx_.sq_head) ctx_.sq_next = ctx_.sq_head;
  if (ctx_.req_psn.before(ctx_.comp_psn)) ctx_.req_psn = ctx_.comp_psn;
}

void Completer::advance_comp_psn(std::uint64_t now_ns, wire::Psn psn) {
  if (psn.after(ctx_.comp_psn)) {
    const auto acked = static_cast<std::uint32_t>(psn.distance_from(ctx_.comp_psn));
    ctx_.read_repair.on_advance(ctx_.comp_psn, psn);
    ctx_.comp_psn = psn;
    ctx_.loss_window.on_acknowledged(acked, ctx_.comp_psn);
  }
  ctx_.rtt.on_acknowledged(now_ns, ctx_.comp_psn);
  // Forward progress resets the retry budgets (rxe's reset_retry_counters).
  ctx_.retry_left = ctx_.attr.retry_cnt;
  ctx_.rnr_retry_left = ctx_.attr.rnr_retry;
  retry_started_ = false;
  resent_unanswered_ = false;
  gap_seen_ = false;
  // Ranges still asked for keep the resend probe's timer (ReadRepair::expired).
  ctx_.resend_probe = ctx_.read_repair.repairing();
  if (ctx_.tail_probe) {
    // The probe's answer, or what it overtook, left PSNs sent before it unacknowledged: they
    // were lost unless acknowledged within the resend probe's timer (QpConfig::
    // tail_probe_floor_ns).
    ctx_.resend_probe = ctx_.comp_psn.before(ctx_.tail_probe_end);
    ctx_.tail_probe = ctx_.resend_probe;
  }
  req_.end_probe();
  if (ctx_.req_psn.before(ctx_.comp_psn)) ctx_.req_psn = ctx_.comp_psn;
  ctx_.restart_retransmit_timer(now_ns);
}

void Completer::start_retry(std::uint64_t now_ns, bool from_timeout) {
  (void)now_ns;
  if (ctx_.retry_left == 0) {
    fail(WcStatus::kRetryExcErr);
    return;
  }
  --ctx_.retry_left;
  ctx_.rtt.on_retry();
  ctx_.loss_window.on_loss(ctx_.psn_high);
  if (!from_timeout) {
    retry_started_ = true;
    retry_psn_ = ctx_.comp_psn;
  }
  ctx_.resend_probe = !from_timeout;
  ctx_.tail_probe = false;
  ctx_.read_repair.restart();
  ctx_.read_asks.clear();
  req_.retry(!from_timeout);
  resent_unanswered_ = true;
  ctx_.retransmit_deadline_ns = 0;  // both re-armed by the first retransmitted packet
  ctx_.disarm_adaptive_timer();
}

// The adaptive retransmission timer expired: nothing was heard for RTO (transport/rtt.h) while
// PSNs are unacknowledged, so the tail of what was sent, the NAK naming a gap, or the first
// packet resent after a NAK was lost (the responder NAKs a gap once and then drops what is out
// of sequence silently, rxe_resp.c check_psn). Resend from the oldest unacknowledged PSN, as
// the Local ACK Timeout would (go-back-N, IBA 9.7; docs/protocol.md §3.8; rxe_comp.c's
// rxe_retransmit_timer and rxe_req.c's req_retry), but sooner and without using retry_cnt: the
// Local ACK Timeout still runs from the last progress and alone decides IBV_WC_RETRY_EXC_ERR. A
// READ resumes from its first missing response (Requester::build_connected). The RTO doubles until
// the next sample.
void Completer::adaptive_retransmit(std::uint64_t now_ns) {
  const bool started =
      ctx_.sq_head != ctx_.sq_tail && ctx_.wqe(ctx_.sq_head).stage == WqeStage::kStarted;
  if (!ctx_.outstanding() || !started || ctx_.rnr_deadline_ns != 0) return;
  if (!ctx_.resend_probe && !ctx_.tail_probe && ctx_.config.tail_probe_floor_ns != 0 &&
      ctx_.tail_probe_is_cheap()) {
    // Silence with no NAK to go on: one packet asks what the responder has (tail_probe_floor_ns).
    ++ctx_.counters.tail_probes;
    ctx_.tail_probe = true;
    ctx_.tail_probe_psn = ctx_.comp_psn;
    ctx_.tail_probe_end = ctx_.psn_high;
    ctx_.tail_probe_expires_early = ctx_.loss_window.reduced() && !resent_unanswered_;
    ctx_.rtt.on_retry();
    req_.probe();
    ctx_.restart_adaptive_timer(now_ns);
    return;
  }
  ++ctx_.counters.adaptive_retransmits;
  if (resent_unanswered_) ++ctx_.counters.resend_timeouts;
  resent_unanswered_ = true;
  if (ctx_.read_repair.repairing()) {
    // Ranges asked for again are still missing: the request or its replay was lost. Ask for
    // what is missing of them again, rather than go back over what arrived.
    lost_.clear();
    ctx_.read_repair.expired(ctx_.comp_psn, lost_);
    ctx_.read_asks.clear();
    if (!lost_.empty() && queue_read_asks(lost_)) {
      ctx_.rtt.on_rto_expired();
      ctx_.rtt.on_retry();
      ctx_.restart_adaptive_timer(now_ns);
      return;
    }
    ctx_.read_repair.restart();  // what follows replays everything from comp_psn
  }
  ctx_.resend_probe = false;  // one probe per NAK; then the RTO, doubling
  ctx_.tail_probe = false;
  ctx_.rtt.on_rto_expired();
  ctx_.rtt.on_retry();
  ctx_.loss_window.on_loss(ctx_.psn_high);
  // A PSN-sequence NAK for this PSN still on its way answers the loss this resend repairs.
  retry_started_ = true;
  retry_psn_ = ctx_.comp_psn;
  req_.retry(true);
  ctx_.restart_adaptive_timer(now_ns);
}

void Completer::fail(WcStatus status) {
  if (ctx_.sq_head != ctx_.sq_tail && ctx_.wqe(ctx_.sq_head).stage == WqeStage::kStarted) {
    complete_head(status);
  }
  ctx_.fatal_pending = true;
}

void Completer::handle_timeout(std::uint64_t now_ns) {
  if (ctx_.rnr_deadline_ns != 0 && now_ns >= ctx_.rnr_deadline_ns) {
    ctx_.rnr_deadline_ns = 0;
    // The restart is a started retry, as in rxe's completer (started_retry): rxe answers the
    // SEND queued behind an RNR-NAKed one with a NAK-PSN for the same PSN, and when that NAK
    // arrives after this short timer it must not start a second go-back-N.
    retry_started_ = true;
    retry_psn_ = ctx_.comp_psn;
    req_.retry();
    ctx_.retransmit_deadline_ns = 0;
  }
  if (ctx_.retransmit_deadline_ns != 0 && now_ns >= ctx_.retransmit_deadline_ns) {
    ctx_.retransmit_deadline_ns = 0;
    const bool started =
        ctx_.sq_head != ctx_.sq_tail && ctx_.wqe(ctx_.sq_head).stage == WqeStage::kStarted;
    if (!ctx_.outstanding() || !started) return;
    ++ctx_.counters.timeouts;
    if (resent_unanswered_) ++ctx_.counters.resend_timeouts;
    start_retry(now_ns, true);
  }
  if (const std::uint64_t d = ctx_.adaptive_deadline(); d != 0 && now_ns >= d) {
    ctx_.disarm_adaptive_timer();
    adaptive_retransmit(now_ns);
  }
}

}  // namespace xroce::transport
