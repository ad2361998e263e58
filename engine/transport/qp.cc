#include "transport/qp.h"

#include <algorithm>
#include <cerrno>

namespace xroce::transport {

namespace {

// Which work requests each QP type carries (rxe_opcode.c rxe_wr_opcode_info; IBA 9.2: UC has no
// READ, atomics or SEND_WITH_INV; ATOMIC WRITE and FLUSH are RC's, as in rxe). An XRC_RECV QP
// has no send queue.
bool opcode_allowed(QpType type, WrOpcode op) {
  const bool rc = type == QpType::kRc || type == QpType::kXrcSend;
  const bool connected = rc || type == QpType::kUc;
  switch (op) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
      return connected || type == QpType::kUd;
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
    case WrOpcode::kLocalInv:
    case WrOpcode::kBindMw:
      return connected;
    case WrOpcode::kSendWithInv:
    case WrOpcode::kRdmaRead:
    case WrOpcode::kAtomicCmpAndSwp:
    case WrOpcode::kAtomicFetchAndAdd:
      return rc;
    case WrOpcode::kAtomicWrite:
    case WrOpcode::kFlush:
      return type == QpType::kRc;
  }
  return false;
}

// The default partition: low 15 bits all ones (rxe_recv.c check_keys; docs/protocol.md §6 item 4).
constexpr std::uint16_t kPkeyBaseMask = 0x7FFF;

}  // namespace

Qp::Qp(const QpConfig& config, MemoryRegionTable& mrs, Srq* srq)
    : req_(ctx_), comp_(ctx_, req_), resp_(ctx_) {
  ctx_.config = config;
  ctx_.mrs = &mrs;
  ctx_.srq = srq;
  ctx_.sq.resize(std::max<std::uint32_t>(1, config.max_send_wr));
  ctx_.loss_window = LossWindow(config.max_unacked_psns, config.loss_window_min_psns);
  resp_.reset(wire::Psn(0), 0);
}

Qp::~Qp() {
  // What this QP held goes back to the device's budget.
  if (ctx_.config.inflight_budget != nullptr)
    ctx_.config.inflight_budget->update(ctx_.budget_told, BudgetHolding{});
}

int Qp::modify(const QpAttr& attr, std::uint32_t mask) {
  const int rc = check_modify_qp(ctx_.config.type, ctx_.state, attr, mask, ctx_.config.limits);
  if (rc != 0) return rc;
  apply_attributes(attr, mask);
  if (mask & qp_attr::kState) enter_state(attr.qp_state);
  ctx_.sync_inflight_budget();
  return 0;
}

void Qp::apply_attributes(const QpAttr& a, std::uint32_t mask) {
  QpAttr& q = ctx_.attr;
  using namespace qp_attr;
  if (mask & kPathMtu) q.path_mtu = a.path_mtu;
  if (mask & kQkey) q.qkey = a.qkey;
  if (mask & kRqPsn) q.rq_psn = a.rq_psn;
  if (mask & kSqPsn) q.sq_psn = a.sq_psn;
  if (mask & kDestQpn) q.dest_qp_num = a.dest_qp_num;
  if (mask & kAccessFlags) q.qp_access_flags = a.qp_access_flags;
  if (mask & kPkeyIndex) q.pkey_index = a.pkey_index;
  if (mask & kEnSqdAsyncNotify) q.en_sqd_async_notify = a.en_sqd_async_notify;
  if (mask & kMaxQpRdAtomic) q.max_rd_atomic = a.max_rd_atomic;
  if (mask & kMaxDestRdAtomic) q.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & kMinRnrTimer) q.min_rnr_timer = a.min_rnr_timer;
  if (mask & kPort) q.port_num = a.port_num;
  if (mask & kTimeout) q.timeout = a.timeout;
  if (mask & kRetryCnt) {
    q.retry_cnt = a.retry_cnt;
    ctx_.retry_left = a.retry_cnt;
  }
  if (mask & kRnrRetry) {
    q.rnr_retry = a.rnr_retry;
    ctx_.rnr_retry_left = a.rnr_retry;
  }
  if (mask & kAv) q.av_id = a.av_id;
}

void Qp::enter_state(QpState next) {
  const QpState prev = ctx_.state;
  ctx_.state = next;
  ctx_.attr.qp_state = next;
  switch (next) {
    case QpState::kReset:
      reset_queues();
      break;
    case QpState::kRtr:
      if (prev == QpState::kInit) resp_.reset(ctx_.attr.rq_psn, ctx_.attr.max_dest_rd_atomic);
      break;
    case QpState::kRts:
      if (prev == QpState::kRtr) {
        ctx_.req_psn = ctx_.attr.sq_psn;
        ctx_.comp_psn = ctx_.attr.sq_psn;
        ctx_.psn_high = ctx_.attr.sq_psn;
      }
      if (prev == QpState::kSqe) req_.reset();  // the application cleared the send queue error
      break;
    case QpState::kSqd:
      ctx_.sq_drained_reported = false;
      break;
    case QpState::kErr:
      enter_error();
      break;
    default:
      break;
  }
  settle();
}

void Qp::reset_queues() {
  ctx_.sq_head = ctx_.sq_next = ctx_.sq_tail = 0;
  ctx_.rq.clear();
  ctx_.completions.clear();
  ctx_.events.clear();
  ctx_.outstanding_rd_atomic = 0;
  ctx_.retransmit_deadline_ns = 0;
  ctx_.disarm_adaptive_timer();
  ctx_.resend_probe = false;
  ctx_.tail_probe = false;
  ctx_.rnr_deadline_ns = 0;
  ctx_.pacer_deadline_ns = 0;
  ctx_.fatal_pending = false;
  ctx_.read_repair.clear();
  ctx_.read_asks.clear();
  ctx_.rtt = RttEstimator{};
  ctx_.loss_window = LossWindow(ctx_.config.max_unacked_psns, ctx_.config.loss_window_min_psns);
  resp_.reset(wire::Psn(0), 0);
  req_.reset();
  comp_.reset();
}

int Qp::post_send(const WorkRequest& wr) {
  const QpState s = ctx_.state;
  if (s == QpState::kReset || s == QpState::kInit || s == QpState::kRtr) return EINVAL;
  if (!opcode_allowed(ctx_.config.type, wr.opcode)) return EINVAL;
  if (wr.sg_list.size() > ctx_.config.max_send_sge) return EINVAL;
  if (ctx_.sq_tail - ctx_.sq_head >= ctx_.sq.size()) return ENOMEM;
  SendWqe& w = ctx_.wqe(ctx_.sq_tail);
  w.wr = wr;
  w.stage = WqeStage::kPosted;
  w.status = WcStatus::kSuccess;
  w.length = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(sge_bytes(wr.sg_list), std::uint64_t{0xFFFFFFFF}));
  if (w.without_sges()) {
    // Binds, invalidations, ATOMIC WRITE (its word is in the WQE) and FLUSH gather nothing.
    w.wr.sg_list.clear();
    w.length = w.is_atomic_write() ? static_cast<std::uint32_t>(wire::kAtomicWriteBytes) : 0;
  }
  w.is_inline = (wr.send_flags & send_flags::kInline) != 0 && !w.without_sges();
  if (w.is_inline) {
    // The data is copied now, so the caller may reuse its buffers (IBV_SEND_INLINE).
    if (w.is_read_or_atomic() || w.length > ctx_.config.max_inline_data) return EINVAL;
    // Inline SGEs name the caller's own memory; their lkeys are not checked (ibv_post_send).
    w.inline_data.clear();
    for (const Sge& sge : wr.sg_list) {
      const std::size_t at = w.inline_data.size();
      w.inline_data.resize(at + sge.length);
      if (!ctx_.mrs->memory().read(sge.addr, std::span(w.inline_data).subspan(at))) return EINVAL;
    }
  }
  ++ctx_.sq_tail;
  if (s == QpState::kErr) flush_send_queue();
  return 0;
}

int Qp::post_send_inline(const WorkRequest& wr, std::span<const std::uint8_t> data) {
  if ((wr.send_flags & send_flags::kInline) == 0 || !wr.sg_list.empty()) return EINVAL;
  if (data.size() > ctx_.config.max_inline_data) return EINVAL;
  const std::uint64_t slot = ctx_.sq_tail;
  const bool flushing = ctx_.state == QpState::kErr;
  if (const int err = post_send(wr); err != 0 || flushing) return err;
  SendWqe& w = ctx_.wqe(slot);
  w.inline_data.assign(data.begin(), data.end());
  w.length = static_cast<std::uint32_t>(data.size());
  return 0;
}

int Qp::post_recv(const RecvRequest& wr) {
  // XRC QPs have no receive queue (an XRC target receives through its domain's SRQs).
  const bool xrc = ctx_.config.type == QpType::kXrcSend || ctx_.config.type == QpType::kXrcRecv;
  if (ctx_.srq != nullptr || xrc || ctx_.state == QpState::kReset) return EINVAL;
  if (wr.sg_list.size() > ctx_.config.max_recv_sge) return EINVAL;
  if (ctx_.rq.size() >= ctx_.config.max_recv_wr) return ENOMEM;
  ctx_.rq.push_back(wr);
  if (ctx_.state == QpState::kErr) resp_.flush();
  return 0;
}

void Qp::handle_packet(std::uint64_t now_ns, const wire::TransportHeaders& hdr, wire::Bytes payload,
                       const RxMeta& meta) {
  ctx_.now_ns = now_ns;
  ++ctx_.counters.packets_received;
  ctx_.counters.payload_bytes_received += payload.size();
  if (meta.ecn_ce) {
    ++ctx_.counters.ecn_ce_received;
    if (ctx_.cc != nullptr) ctx_.cc->on_ce_marked(now_ns);
  }
  const wire::OpcodeInfo& info = hdr.info();
  if (info.operation == wire::Operation::kCnp) {
    ++ctx_.counters.cnps_received;
    if (ctx_.cc != nullptr) ctx_.cc->on_cnp(now_ns);
    return;
  }
  const QpState s = ctx_.state;
  // An XRC initiator only takes responses, an XRC target only requests (IBA 9.9).
  const QpType type = ctx_.config.type;
  const bool role_ok = info.is_request ? type != QpType::kXrcSend : type != QpType::kXrcRecv;
  const bool opcode_ok = info.transport() == ctx_.transport() && role_ok;
  const bool pkey_ok = (hdr.bth.pkey & kPkeyBaseMask) == kPkeyBaseMask;
  const bool receiving = s == QpState::kRtr || s == QpState::kRts || s == QpState::kSqd ||
                         (s == QpState::kSqe && ctx_.config.type == QpType::kUd);
  const bool sending = s == QpState::kRts || s == QpState::kSqd;
  if (!opcode_ok || !pkey_ok || !(info.is_request ? receiving : sending)) {
    ++ctx_.counters.dropped;
    return;
  }
  if (ctx_.config.type == QpType::kUd) {
    resp_.handle_ud(hdr, payload, meta);
  } else if (info.is_request) {
    resp_.handle_request(now_ns, hdr, payload);
  } else {
    comp_.handle_response(now_ns, hdr, payload);
  }
  settle();
}

void Qp::handle_timeout(std::uint64_t now_ns) {
  ctx_.now_ns = now_ns;
  if (ctx_.pacer_deadline_ns != 0 && now_ns >= ctx_.pacer_deadline_ns) ctx_.pacer_deadline_ns = 0;
  if (ctx_.state == QpState::kRts || ctx_.state == QpState::kSqd) comp_.handle_timeout(now_ns);
  settle();
}

std::optional<Transmit> Qp::poll_transmit(std::uint64_t now_ns, wire::MutableBytes payload) {
  ctx_.now_ns = now_ns;
  if (ctx_.state == QpState::kReset || ctx_.state == QpState::kInit) return std::nullopt;
  if (ctx_.config.type == QpType::kRc || ctx_.config.type == QpType::kXrcRecv) {
    if (std::optional<Transmit> t = resp_.poll(payload)) {
      settle();
      return t;
    }
  }
  std::optional<Transmit> t = req_.poll(now_ns, payload);
  settle();
  return t;
}

std::optional<Completion> Qp::poll_completion() {
  if (ctx_.completions.empty()) return std::nullopt;
  Completion c = ctx_.completions.front();
  ctx_.completions.pop_front();
  return c;
}

std::optional<AsyncEvent> Qp::poll_event() {
  if (ctx_.events.empty()) return std::nullopt;
  AsyncEvent e = ctx_.events.front();
  ctx_.events.pop_front();
  return e;
}

std::optional<std::uint64_t> Qp::next_deadline() const {
  std::optional<std::uint64_t> d;
  for (std::uint64_t t : {ctx_.retransmit_deadline_ns, ctx_.adaptive_deadline(),
                          ctx_.rnr_deadline_ns, ctx_.pacer_deadline_ns}) {
    if (t != 0 && (!d || t < *d)) d = t;
  }
  return d;
}

void Qp::settle() {
  ctx_.retire_executed();
  if (ctx_.fatal_pending) enter_error();
  if (ctx_.state == QpState::kSqd && !ctx_.sq_drained_reported && !ctx_.outstanding() &&
      (ctx_.sq_head == ctx_.sq_tail || ctx_.wqe(ctx_.sq_head).stage == WqeStage::kPosted)) {
    ctx_.sq_drained_reported = true;
    if (ctx_.attr.en_sqd_async_notify) {
      ctx_.events.push_back(AsyncEvent{AsyncEventType::kSqDrained, ctx_.config.qpn});
    }
  }
  ctx_.sync_inflight_budget();
}

void Qp::flush_send_queue() {
  for (std::uint64_t i = ctx_.sq_head; i != ctx_.sq_tail; ++i) {
    SendWqe& w = ctx_.wqe(i);
    w.stage = WqeStage::kDone;
    ctx_.push_send_completion(w, WcStatus::kWrFlushErr);
  }
  ctx_.sq_head = ctx_.sq_next = ctx_.sq_tail;
  ctx_.outstanding_rd_atomic = 0;
}

void Qp::enter_error() {
  ctx_.fatal_pending = false;
  ctx_.state = QpState::kErr;
  ctx_.attr.qp_state = QpState::kErr;
  flush_send_queue();
  resp_.flush();
  ctx_.read_repair.clear();
  ctx_.read_asks.clear();
  ctx_.retransmit_deadline_ns = 0;
  ctx_.disarm_adaptive_timer();
  ctx_.resend_probe = false;
  ctx_.tail_probe = false;
  ctx_.rnr_deadline_ns = 0;
  ctx_.pacer_deadline_ns = 0;
}

}  // namespace xroce::transport
