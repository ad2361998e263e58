#include "device/objects.h"

#include <endian.h>

#include <cerrno>
#include <cstring>

namespace xroce::device {

namespace {

// ibv_wr_opcode values the device executes (transport::WrOpcode mirrors them one for one):
// RDMA_WRITE..SEND_WITH_INV, and FLUSH and ATOMIC_WRITE (rdma-core v45 numbering); TSO and the
// driver opcodes are not offered.
bool wr_opcode_known(uint32_t opcode) {
  using transport::WrOpcode;
  return opcode <= static_cast<uint32_t>(WrOpcode::kSendWithInv) ||
         opcode == static_cast<uint32_t>(WrOpcode::kFlush) ||
         opcode == static_cast<uint32_t>(WrOpcode::kAtomicWrite);
}
constexpr uint32_t kSendInline = 1u << 3;  // IBV_SEND_INLINE
// ibv_send_flags the device understands: FENCE, SIGNALED, SOLICITED, INLINE.
constexpr uint32_t kSendFlagsKnown = 0xf;

bool takes_qualifying_arm(uint32_t arm, const queues::Cqe& cqe) {
  if (arm == queues::kArmNext) return true;
  // IBA 11.4.2.2: solicited-only notification also fires for completions in error.
  return arm == queues::kArmSolicited &&
         ((cqe.flags & queues::kCqeSolicited) != 0 || cqe.status != 0);
}

// The fields of BIND_MW, ATOMIC_WRITE, FLUSH and XRC (include/xroce/queues.h SendWqe).
void decode_extended_ops(const queues::SendWqe& w, transport::WorkRequest& wr) {
  wr.bind = transport::WindowBind{wire::Rkey(w.invalidate_rkey),
                                  wire::Rkey(w.rkey),
                                  wire::Lkey(w.mw_lkey),
                                  w.remote_addr,
                                  w.compare_add,
                                  w.mw_access};
  std::memcpy(wr.atomic_write.data(), &w.compare_add, sizeof(w.compare_add));
  wr.flush = transport::FlushRequest{w.flush_length, w.flush_type, w.flush_level};
  wr.xrc_remote_srqn = w.xrc_remote_srqn;
}

}  // namespace

CompletionQueue::Push CompletionQueue::push(const queues::Cqe& cqe) {
  if (ring.free_slots(producer) == 0) {
    ring.header().overflow.store(1, std::memory_order_release);
    return Push::overflow;
  }
  std::memcpy(ring.slot(producer), &cqe, sizeof(cqe));
  ++producer;
  ring.header().producer.store(producer, std::memory_order_seq_cst);
  uint32_t arm = ring.header().arm.load(std::memory_order_seq_cst);
  while (takes_qualifying_arm(arm, cqe)) {
    if (ring.header().arm.compare_exchange_weak(arm, queues::kArmNone, std::memory_order_seq_cst)) {
      return Push::written_notify;
    }
  }
  return Push::written;
}

std::optional<transport::XrcSrqTarget> XrcDomainObject::find_srq(std::uint32_t srqn) {
  std::lock_guard guard(lock_);
  auto it = srqs_.find(srqn);
  if (it == srqs_.end()) return std::nullopt;
  return transport::XrcSrqTarget{it->second->srq.get(), it->second->regions};
}

void XrcDomainObject::for_each_srq(const std::function<void(SharedReceiveQueue&)>& fn) {
  std::lock_guard guard(lock_);
  for (auto& [srqn, srq] : srqs_)
    fn(*srq);
}

SharedReceiveQueue* XrcDomainObject::srq(std::uint32_t srqn) {
  std::lock_guard guard(lock_);
  auto it = srqs_.find(srqn);
  return it == srqs_.end() ? nullptr : it->second;
}

void XrcDomainObject::add(std::uint32_t srqn, SharedReceiveQueue* srq) {
  std::lock_guard guard(lock_);
  srqs_[srqn] = srq;
}

void XrcDomainObject::remove(std::uint32_t srqn) {
  std::lock_guard guard(lock_);
  srqs_.erase(srqn);
}

bool XrcDomainObject::has_srqs() {
  std::lock_guard guard(lock_);
  return !srqs_.empty();
}

wire::Result<DecodedSend, int> decode_send_wqe(const uint8_t* slot, uint32_t slot_bytes,
                                               uint32_t max_sge, uint32_t max_inline) {
  queues::SendWqe w;
  std::memcpy(&w, slot, sizeof(w));
  if (!wr_opcode_known(w.opcode) || (w.send_flags & ~kSendFlagsKnown) != 0) {
    return wire::Err{EINVAL};
  }
  const uint8_t* payload = slot + sizeof(w);
  const uint32_t room = slot_bytes - static_cast<uint32_t>(sizeof(w));
  DecodedSend out;
  transport::WorkRequest& wr = out.wr;
  wr.wr_id = w.wr_id;
  wr.opcode = static_cast<transport::WrOpcode>(w.opcode);
  wr.send_flags = w.send_flags;
  wr.imm_data = be32toh(w.imm_data);  // the ring holds it as ibv_send_wr does
  wr.invalidate_rkey = wire::Rkey(w.invalidate_rkey);
  wr.remote_addr = w.remote_addr;
  wr.rkey = wire::Rkey(w.rkey);
  wr.compare_add = w.compare_add;
  wr.swap = w.swap;
  wr.ud.av_id = w.ah_handle;
  wr.ud.remote_qpn = wire::Qpn(w.remote_qpn);
  wr.ud.remote_qkey = wire::Qkey(w.remote_qkey);
  decode_extended_ops(w, wr);
  if ((w.send_flags & kSendInline) != 0) {
    if (w.inline_bytes > max_inline || w.inline_bytes > room) return wire::Err{EINVAL};
    out.inline_data.assign(payload, payload + w.inline_bytes);
    return out;
  }
  if (w.num_sge > max_sge || w.num_sge * sizeof(queues::Sge) > room) return wire::Err{EINVAL};
  wr.sg_list.resize(w.num_sge);
  for (uint32_t i = 0; i < w.num_sge; ++i) {
    queues::Sge s;
    std::memcpy(&s, payload + i * sizeof(s), sizeof(s));
    wr.sg_list[i] = transport::Sge{s.addr, s.length, wire::Lkey(s.lkey)};
  }
  return out;
}

wire::Result<transport::RecvRequest, int> decode_recv_wqe(const uint8_t* slot, uint32_t slot_bytes,
                                                          uint32_t max_sge) {
  queues::RecvWqe w;
  std::memcpy(&w, slot, sizeof(w));
  const uint32_t room = slot_bytes - static_cast<uint32_t>(sizeof(w));
  if (w.num_sge > max_sge || w.num_sge * sizeof(queues::Sge) > room) return wire::Err{EINVAL};
  transport::RecvRequest out;
  out.wr_id = w.wr_id;
  out.sg_list.resize(w.num_sge);
  for (uint32_t i = 0; i < w.num_sge; ++i) {
    queues::Sge s;
    std::memcpy(&s, slot + sizeof(w) + i * sizeof(s), sizeof(s));
    out.sg_list[i] = transport::Sge{s.addr, s.length, wire::Lkey(s.lkey)};
  }
  return out;
}

uint64_t take_wqe(const queues::WrIdShadow& shadow, uint32_t index, const uint8_t* slot) {
  uint64_t wr_id;
  std::memcpy(&wr_id, slot, sizeof wr_id);  // wr_id leads every WQE
  shadow.at(index) = wr_id;
  return index;
}

uint64_t retire_wqe(const queues::Ring& ring, const queues::WrIdShadow& shadow,
                    uint64_t transport_wr_id) {
  const auto index = static_cast<uint32_t>(transport_wr_id);
  // Completions come in queue order; never move `completed` back (a wrapping comparison).
  const uint32_t done = ring.header().completed.load(std::memory_order_relaxed);
  if (static_cast<int32_t>(index + 1 - done) > 0) ring.complete(index + 1);
  return shadow.at(index);
}

void sync_receive_doorbell(QueuePair& qp, transport::QpState state) {
  if (!qp.rq.valid()) return;
  using transport::QpState;
  const bool waits_for_request = state == QpState::kInit || state == QpState::kRtr ||
                                 state == QpState::kRts || state == QpState::kSqd ||
                                 state == QpState::kSqe;
  const uint32_t want =
      qp.hosted && waits_for_request ? queues::kReceiveDoorbellSkip : queues::kReceiveDoorbellRing;
  std::atomic<uint32_t>& word = qp.rq.header().receive_doorbell;
  if (word.load(std::memory_order_relaxed) != want) word.store(want, std::memory_order_seq_cst);
}

queues::Cqe encode_cqe(const transport::Completion& c) {
  queues::Cqe e{};
  e.wr_id = c.wr_id;
  e.status = static_cast<uint32_t>(c.status);
  e.opcode = static_cast<uint32_t>(c.opcode);
  e.byte_len = c.byte_len;
  e.wc_flags = c.wc_flags;
  e.imm_data = (c.wc_flags & transport::wc_flags::kWithInv) != 0 ? c.invalidated_rkey.value()
                                                                 : htobe32(c.imm_data);
  e.qp_num = c.qp_num.value();
  e.src_qp = c.src_qp.value();
  e.sl = c.sl;
  e.flags = c.solicited ? queues::kCqeSolicited : 0;
  e.timestamp_ns = c.timestamp_ns;
  return e;
}

}  // namespace xroce::device
