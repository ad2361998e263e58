#include "transport/responder.h"

#include <algorithm>
#include <bit>

namespace xroce::transport {

namespace {

using wire::Operation;
using wire::Position;

// IBA limit on a message (C9-94): RETH DMA lengths above it are invalid requests.
constexpr std::uint64_t kMaxDmaLength = 1ull << 31;
constexpr std::uint32_t kMsnMask = 0xFFFFFF;
// FETH placement-type bits the IBA 1.5 annex defines; the others are reserved.
constexpr std::uint8_t kKnownPlacements =
    wire::flush_placement::kGlobal | wire::flush_placement::kPersistent;

bool is_send_or_write(Operation op) {
  return op == Operation::kSend || op == Operation::kWrite;
}

// Answered by a response of its own and kept in a responder resource for duplicates.
bool takes_resource(Operation op) {
  return op == Operation::kReadRequest || op == Operation::kCompareSwap ||
         op == Operation::kFetchAdd || op == Operation::kAtomicWrite || op == Operation::kFlush;
}

// The region access flags a FLUSH of `placement` needs (rxe check_rkey: IB_ACCESS_FLUSH_*).
std::uint32_t flush_access(std::uint8_t placement) {
  std::uint32_t need = 0;
  if (placement & wire::flush_placement::kGlobal) need |= access::kFlushGlobal;
  if (placement & wire::flush_placement::kPersistent) need |= access::kFlushPersistent;
  return need;
}

std::uint32_t packets_for(std::uint32_t length, std::uint32_t mtu) {
  return std::max<std::uint32_t>(1, (length + mtu - 1) / mtu);
}

// The GRH area holds the IPv6 header, or the IPv4 header in its last 20 bytes (RxMeta): the
// IP version nibble of the first byte says which.
constexpr std::uint8_t kIpv6Version = 6;
std::uint8_t roce_network_type(const std::array<std::uint8_t, 40>& grh) {
  return (grh[0] >> 4) == kIpv6Version ? roce_sl::kUdpIpv6 : roce_sl::kUdpIpv4;
}

}  // namespace

void Responder::reset(wire::Psn rq_psn, std::uint8_t max_dest_rd_atomic) {
  epsn_ = rq_psn;
  ack_psn_ = rq_psn;
  msn_ = 0;
  nak_sent_ = false;
  drop_msg_ = false;
  in_message_ = InMessage::kNone;
  recv_.reset();
  jobs_.clear();
  final_nak_.reset();
  resources_.assign(std::bit_ceil(std::max<std::size_t>(1, max_dest_rd_atomic)), {});
  next_resource_ = 0;
}

void Responder::handle_request(std::uint64_t now_ns, const wire::TransportHeaders& hdr,
                               wire::Bytes payload) {
  (void)now_ns;
  const Request r{hdr, payload, hdr.info(), hdr.bth.psn};
  mrs_ = ctx_.mrs;
  srq_ = ctx_.srq;
  if (ctx_.config.type == QpType::kXrcRecv && !resolve_xrc_target(r)) return;
  ResponderState s = ResponderState::kCheckPsn;
  while (s != ResponderState::kDone)
    s = step(s, r);
}

// XRC (IBA 9.9 / C9-..): the XRCETH names an XRC SRQ, which must belong to the target QP's
// XRC domain; its PD is the one the request's keys are checked against. A packet naming any
// other SRQ is an invalid request: NAK, and the target QP goes to ERR.
bool Responder::resolve_xrc_target(const Request& r) {
  std::optional<XrcSrqTarget> t;
  if (ctx_.config.xrc != nullptr) t = ctx_.config.xrc->find_srq(*r.hdr.xrc_srqn);
  if (!t || t->srq == nullptr || t->mrs == nullptr) {
    ++ctx_.counters.xrc_domain_violations;
    fatal(r, wire::NakCode::kInvalidRequest, WcStatus::kLocQpOpErr);
    return false;
  }
  mrs_ = t->mrs;
  srq_ = t->srq;
  xrc_srqn_ = *r.hdr.xrc_srqn;
  return true;
}

// The dispatch: every state's handler returns the next state.
ResponderState Responder::step(ResponderState s, const Request& r) {
  switch (s) {
    case ResponderState::kCheckPsn:
      return check_psn(r);
    case ResponderState::kCheckOpSeq:
      return check_op_seq(r);
    case ResponderState::kCheckOpValid:
      return check_op_valid(r);
    case ResponderState::kCheckResource:
      return check_resource(r);
    case ResponderState::kCheckLength:
      return check_length(r);
    case ResponderState::kCheckRkey:
      return check_rkey(r);
    case ResponderState::kExecute:
      return execute(r);
    case ResponderState::kComplete:
      return complete(r);
    case ResponderState::kAcknowledge:
      return acknowledge(r);
    case ResponderState::kDuplicate:
      return duplicate(r);
    case ResponderState::kNakPsnSeq:
      return nak_psn_sequence();
    case ResponderState::kRnrNak:
      return uc() ? drop_message(r) : rnr_nak(r);
    case ResponderState::kErrInvalidRequest:
      if (uc()) return uc_error(r, WcStatus::kRemInvReqErr);
      return fatal(r, wire::NakCode::kInvalidRequest, WcStatus::kLocQpOpErr);
    case ResponderState::kErrRemoteAccess:
      if (uc()) return uc_error(r, WcStatus::kRemAccessErr);
      return fatal(r, wire::NakCode::kRemoteAccessError, WcStatus::kLocAccessErr);
    case ResponderState::kErrRemoteOp:
      return fatal(r, wire::NakCode::kRemoteOperationalError, WcStatus::kLocProtErr);
    case ResponderState::kErrInvalidateRkey:
      return fatal(r, wire::NakCode::kInvalidRequest, WcStatus::kRemInvReqErr);
    case ResponderState::kDropMessage:
      return drop_message(r);
    case ResponderState::kDrop:
    case ResponderState::kDone:
      break;
  }
  return ResponderState::kDone;
}

ResponderState Responder::acknowledge(const Request& r) {
  // ACK only what asked for it (docs/protocol.md §3.3); queue_ack coalesces. UC answers nothing.
  if (!uc() && r.hdr.bth.ack_req && is_send_or_write(r.info.operation)) {
    queue_ack(r.psn, wire::Aeth::ack(msn_));
  }
  return ResponderState::kDone;
}

ResponderState Responder::nak_psn_sequence() {
  ++ctx_.counters.out_of_sequence;
  if (!nak_sent_) {  // one NAK per gap (rxe_resp.c check_psn)
    queue_nak(epsn_, wire::NakCode::kPsnSequenceError);
    nak_sent_ = true;
  }
  return ResponderState::kDone;
}

ResponderState Responder::rnr_nak(const Request& r) {
  // The refused packet's PSN and our min_rnr_timer; the QP stays RTS (docs/protocol.md §3.5).
  jobs_.push_back(
      Job{Job::Kind::kAck, r.psn, wire::Aeth::rnr_nak(msn_, ctx_.attr.min_rnr_timer), 0, {}, {}});
  ++ctx_.counters.naks_sent;
  ++ctx_.counters.rnr_naks_sent;
  nak_sent_ = true;  // what follows the refused packet is dropped silently
  return ResponderState::kDone;
}

// UC (IBA 9.7.5.1, class D1): the message in progress is lost. Its receive WQE, if one was
// taken, stays with the responder for the next message; the next FIRST or ONLY starts afresh.
ResponderState Responder::drop_message(const Request& r) {
  (void)r;
  if (!drop_msg_ || in_message_ != InMessage::kNone) ++ctx_.counters.uc_dropped_messages;
  drop_msg_ = true;
  in_message_ = InMessage::kNone;
  recv_bytes_ = 0;
  return ResponderState::kDone;
}

// UC errors (rxe_responder: class D without an SRQ, class E with one): the message is dropped;
// a WQE taken from an SRQ cannot go back, so it completes in error. The QP stays RTS.
ResponderState Responder::uc_error(const Request& r, WcStatus srq_status) {
  if (srq_ != nullptr && recv_) {
    Completion c;
    c.wr_id = recv_->wr_id;
    c.status = recv_too_long_ ? WcStatus::kLocLenErr : srq_status;
    c.opcode = WcOpcode::kRecv;
    c.qp_num = ctx_.config.qpn;
    push_recv_completion(c);
    recv_.reset();
  }
  recv_too_long_ = false;
  return drop_message(r);
}

ResponderState Responder::check_psn(const Request& r) {
  const std::int32_t d = r.psn.distance_from(epsn_);
  if (uc()) {
    // A PSN behind the expected one (within 2^23) is a duplicate or a straggler overtaken by
    // later packets: dropped, so a message is never delivered twice or written over a newer
    // one. (rxe accepts any FIRST/ONLY here.)
    if (d < 0) {
      ++ctx_.counters.duplicate_requests;
      return ResponderState::kDrop;
    }
    // rxe check_psn (UC): after a gap, or inside a dropped message, only a FIRST/ONLY
    // resynchronises; everything else belongs to a lost message.
    if (drop_msg_ || d != 0) {
      if (!r.info.starts_message()) return drop_message(r);
      drop_msg_ = false;
    }
    if (r.info.starts_message() && in_message_ != InMessage::kNone) {
      // Class D1: a new message while one was in progress; the old one is lost, its WQE
      // serves the new one.
      ++ctx_.counters.uc_dropped_messages;
      in_message_ = InMessage::kNone;
      recv_bytes_ = 0;
    }
    return ResponderState::kCheckOpSeq;
  }
  if (d > 0) return ResponderState::kNakPsnSeq;
  if (d < 0) {
    ++ctx_.counters.duplicate_requests;
    return ResponderState::kDuplicate;
  }
  nak_sent_ = false;
  return ResponderState::kCheckOpSeq;
}

ResponderState Responder::check_op_seq(const Request& r) const {
  const Operation op = r.info.operation;
  const bool continues = r.info.position == Position::kMiddle || r.info.position == Position::kLast;
  // UC (class D1): a sequence error drops the message; a FIRST/ONLY then starts a new one.
  const ResponderState bad_continuation =
      uc() ? ResponderState::kDropMessage : ResponderState::kErrInvalidRequest;
  switch (in_message_) {
    case InMessage::kSend:
      return op == Operation::kSend && continues ? ResponderState::kCheckOpValid : bad_continuation;
    case InMessage::kWrite:
      return op == Operation::kWrite && continues ? ResponderState::kCheckOpValid
                                                  : bad_continuation;
    case InMessage::kNone:
      break;
  }
  return r.info.starts_message() ? ResponderState::kCheckOpValid : bad_continuation;
}

ResponderState Responder::check_op_valid(const Request& r) const {
  std::uint32_t need = 0;
  switch (r.info.operation) {
    case Operation::kWrite:
    case Operation::kAtomicWrite:  // rxe check_qp_attr_access: ATOMIC WRITE needs REMOTE_WRITE
      need = access::kRemoteWrite;
      break;
    case Operation::kReadRequest:
      need = access::kRemoteRead;
      break;
    case Operation::kCompareSwap:
    case Operation::kFetchAdd:
      need = access::kRemoteAtomic;
      break;
    case Operation::kFlush: {
      // oA19-*: the placement type asks for what the QP must allow; reserved bits, no
      // placement at all, or a reserved selectivity make the request invalid.
      const wire::Feth& f = *r.hdr.feth;
      if ((f.placement & ~kKnownPlacements) != 0 || f.placement == 0 ||
          f.selectivity > static_cast<std::uint8_t>(wire::FlushSelectivity::kMemoryRegion)) {
        return ResponderState::kErrInvalidRequest;
      }
      need = flush_access(f.placement);
      break;
    }
    default:
      break;
  }
  // The QP's own access flags gate remote operations (rxe_resp.c check_op_valid; docs/protocol.md
  // §3.5 step 3).
  if ((ctx_.attr.qp_access_flags & need) != need) {
    return uc() ? ResponderState::kDropMessage : ResponderState::kErrInvalidRequest;
  }
  return ResponderState::kCheckResource;
}

ResponderState Responder::check_resource(const Request& r) {
  const Operation op = r.info.operation;
  const bool takes_recv = (op == Operation::kSend && r.info.starts_message()) ||
                          (op == Operation::kWrite && r.info.with_imm);
  if (takes_recv && !recv_) {
    recv_ = take_recv();
    if (!recv_) return ResponderState::kRnrNak;
    recv_bytes_ = 0;
    if (!recv_sges_ok(*recv_)) return ResponderState::kErrRemoteOp;
  }
  if (takes_resource(op) && ctx_.attr.max_dest_rd_atomic == 0) {
    return ResponderState::kErrInvalidRequest;
  }
  return ResponderState::kCheckLength;
}

ResponderState Responder::check_length(const Request& r) {
  const std::uint32_t mtu = ctx_.mtu();
  const std::size_t n = r.payload.size();
  bool ok = true;
  switch (r.info.position) {
    case Position::kFirst:
    case Position::kMiddle:
      ok = n == mtu;
      break;
    case Position::kLast:
      ok = n >= 1 && n <= mtu;
      break;
    case Position::kOnly:
      ok = n <= mtu;
      break;
  }
  if (!ok) return ResponderState::kErrInvalidRequest;
  const Operation op = r.info.operation;
  if (r.hdr.reth && r.hdr.reth->dma_length > kMaxDmaLength) {
    return ResponderState::kErrInvalidRequest;
  }
  if (op == Operation::kSend && recv_bytes_ + n > sge_bytes(recv_->sg_list)) {
    recv_too_long_ = true;  // the receive WQE completes LOC_LEN_ERR (fatal, uc_error)
    return ResponderState::kErrInvalidRequest;
  }
  if (op == Operation::kWrite) {
    const Position pos = r.info.position;
    if (pos == Position::kOnly && n != r.hdr.reth->dma_length)
      return ResponderState::kErrInvalidRequest;
    if (pos == Position::kFirst && r.hdr.reth->dma_length <= mtu)
      return ResponderState::kErrInvalidRequest;
    if (pos == Position::kMiddle && write_remaining_ <= mtu)
      return ResponderState::kErrInvalidRequest;
    if (pos == Position::kLast && n != write_remaining_) return ResponderState::kErrInvalidRequest;
  }
  // ATOMIC WRITE: exactly one 64-bit word, and the RETH says so (rxe check_rkey: pktlen ==
  // resid); FLUSH carries nothing (oA19-2).
  if (op == Operation::kAtomicWrite &&
      (n != wire::kAtomicWriteBytes || r.hdr.reth->dma_length != wire::kAtomicWriteBytes)) {
    return ResponderState::kErrInvalidRequest;
  }
  if (op == Operation::kFlush && n != 0) return ResponderState::kErrInvalidRequest;
  return ResponderState::kCheckRkey;
}

ResponderState Responder::rkey_violation() {
  ++ctx_.counters.rkey_violations;
  return ResponderState::kErrRemoteAccess;
}

ResponderState Responder::check_rkey(const Request& r) {
  const Operation op = r.info.operation;
  const wire::Qpn qpn = ctx_.config.qpn;
  if (op == Operation::kWrite && r.hdr.reth) {
    const wire::Reth& reth = *r.hdr.reth;
    write_addr_ = 0;
    // A zero-length WRITE needs no valid VA or R_Key (IBA C9-88).
    if (reth.dma_length > 0) {
      const auto addr =
          mrs_->check_remote(reth.rkey, reth.va, reth.dma_length, access::kRemoteWrite, qpn);
      if (!addr) return rkey_violation();
      write_addr_ = *addr;
    }
    write_remaining_ = reth.dma_length;
    write_length_ = reth.dma_length;
    write_rkey_ = reth.rkey;
  } else if (op == Operation::kReadRequest) {
    const wire::Reth& reth = *r.hdr.reth;
    if (reth.dma_length > 0 &&
        !mrs_->check_remote(reth.rkey, reth.va, reth.dma_length, access::kRemoteRead, qpn)) {
      return rkey_violation();
    }
  } else if (op == Operation::kCompareSwap || op == Operation::kFetchAdd ||
             op == Operation::kAtomicWrite) {
    const bool write = op == Operation::kAtomicWrite;
    const std::uint64_t va = write ? r.hdr.reth->va : r.hdr.atomic_eth->va;
    const wire::Rkey rkey = write ? r.hdr.reth->rkey : r.hdr.atomic_eth->rkey;
    const auto addr =
        mrs_->check_remote(rkey, va, 8, write ? access::kRemoteWrite : access::kRemoteAtomic, qpn);
    if (!addr) return rkey_violation();
    // 8-byte alignment where the word lives (rxe: RESPST_ERR_MISALIGNED_ATOMIC; oA19-28).
    if (*addr % 8 != 0) return ResponderState::kErrInvalidRequest;
    write_addr_ = *addr;
  } else if (op == Operation::kFlush) {
    return check_rkey_flush(r);
  }
  return ResponderState::kExecute;
}

// rxe check_rkey (FLUSH): the region (or window) needs the flush access of the placement type;
// selectivity "memory region" flushes the whole region and checks no range.
ResponderState Responder::check_rkey_flush(const Request& r) {
  const wire::Reth& reth = *r.hdr.reth;
  const std::uint32_t need = flush_access(r.hdr.feth->placement);
  const bool whole =
      r.hdr.feth->selectivity == static_cast<std::uint8_t>(wire::FlushSelectivity::kMemoryRegion);
  const bool ok =
      whole ? mrs_->remote_region(reth.rkey, need, ctx_.config.qpn).ok()
            : mrs_->check_remote(reth.rkey, reth.va, reth.dma_length, need, ctx_.config.qpn).ok();
  return ok ? ResponderState::kExecute : rkey_violation();
}

ResponderState Responder::execute(const Request& r) {
  const Operation op = r.info.operation;
  const auto n = static_cast<std::uint32_t>(r.payload.size());
  if (op == Operation::kReadRequest) return execute_read(r);
  if (op == Operation::kCompareSwap || op == Operation::kFetchAdd) return execute_atomic(r);
  if (op == Operation::kAtomicWrite) return execute_atomic_write(r);
  if (op == Operation::kFlush) return execute_flush(r);
  if (op == Operation::kSend) {
    if (!scatter(*mrs_, recv_->sg_list, recv_bytes_, r.payload)) {
      return ResponderState::kErrRemoteOp;
    }
    recv_bytes_ += n;
    in_message_ = r.info.ends_message() ? InMessage::kNone : InMessage::kSend;
  } else {
    if (n > 0 && !mrs_->memory().write(write_addr_, r.payload)) {
      return rkey_violation();
    }
    write_addr_ += n;
    write_remaining_ -= n;
    in_message_ = r.info.ends_message() ? InMessage::kNone : InMessage::kWrite;
  }
  // Remote invalidation (o10-37.2.x): before the PSN moves on, as rxe's execute does.
  if (r.hdr.ieth && !mrs_->invalidate(*r.hdr.ieth)) return ResponderState::kErrInvalidateRkey;
  epsn_ = r.psn + 1;
  ack_psn_ = epsn_;
  if (r.info.ends_message()) msn_ = (msn_ + 1) & kMsnMask;
  return ResponderState::kComplete;
}

ResponderState Responder::execute_read(const Request& r) {
  const wire::Reth& reth = *r.hdr.reth;
  const std::uint32_t n = packets_for(reth.dma_length, ctx_.mtu());
  msn_ = (msn_ + 1) & kMsnMask;  // counted when the READ is accepted (C9-148)
  ResponderResource& res = new_resource();
  res = ResponderResource{ResponderResource::Kind::kRead,
                          mrs_,
                          r.psn,
                          r.psn + (n - 1),
                          reth.va,
                          reth.rkey,
                          reth.dma_length,
                          0,
                          msn_};
  epsn_ = r.psn + n;
  jobs_.push_back(
      Job{Job::Kind::kRead, r.psn, wire::Aeth::ack(msn_), 0, res, r.psn, res.last_psn, res.length});
  return ResponderState::kDone;
}

ResponderState Responder::execute_atomic(const Request& r) {
  const wire::AtomicEth& a = *r.hdr.atomic_eth;
  std::uint64_t original = 0;
  MemoryAccess& mem = mrs_->memory();
  const bool ok = r.info.operation == wire::Operation::kCompareSwap
                      ? mem.atomic_cmp_swap(write_addr_, a.compare, a.swap_add, &original)
                      : mem.atomic_fetch_add(write_addr_, a.swap_add, &original);
  if (!ok) return ResponderState::kErrRemoteOp;
  msn_ = (msn_ + 1) & kMsnMask;
  ResponderResource& res = new_resource();
  res = ResponderResource{
      ResponderResource::Kind::kAtomic, mrs_, r.psn, r.psn, a.va, a.rkey, 8, original, msn_};
  epsn_ = r.psn + 1;
  ack_psn_ = epsn_;
  jobs_.push_back(Job{Job::Kind::kAtomicAck, r.psn, wire::Aeth::ack(msn_), original, {}, {}});
  return ResponderState::kDone;
}

// rxe atomic_write_reply: the word is stored at once, the answer is a READ RESPONSE ONLY of no
// payload, and a duplicate is answered from the resource without storing again.
ResponderState Responder::execute_atomic_write(const Request& r) {
  std::span<const std::uint8_t, 8> value(r.payload.data(), 8);
  if (!mrs_->memory().atomic_write64(write_addr_, value)) return ResponderState::kErrRemoteOp;
  msn_ = (msn_ + 1) & kMsnMask;
  ResponderResource& res = new_resource();
  res = ResponderResource{ResponderResource::Kind::kAtomicWrite,
                          mrs_,
                          r.psn,
                          r.psn,
                          r.hdr.reth->va,
                          r.hdr.reth->rkey,
                          8,
                          0,
                          msn_};
  epsn_ = r.psn + 1;
  ack_psn_ = epsn_;
  jobs_.push_back(Job{Job::Kind::kEmptyRead, r.psn, wire::Aeth::ack(msn_), 0, {}, {}});
  return ResponderState::kDone;
}

// rxe process_flush: everything executed before this request already reached the process's
// memory through MemoryAccess (each write returns once stored), so global visibility holds
// when the FLUSH executes; persistence is only ever granted to regions the device lets carry
// IBV_ACCESS_FLUSH_PERSISTENT. Answered like ATOMIC WRITE (oA19-14, oA19-15).
ResponderState Responder::execute_flush(const Request& r) {
  msn_ = (msn_ + 1) & kMsnMask;
  ResponderResource& res = new_resource();
  res = ResponderResource{
      ResponderResource::Kind::kFlush, mrs_, r.psn, r.psn, r.hdr.reth->va, r.hdr.reth->rkey,
      r.hdr.reth->dma_length,          0,    msn_};
  epsn_ = r.psn + 1;
  ack_psn_ = epsn_;
  jobs_.push_back(Job{Job::Kind::kEmptyRead, r.psn, wire::Aeth::ack(msn_), 0, {}, {}});
  return ResponderState::kDone;
}

void Responder::push_recv_completion(Completion c) {
  c.xrc_srqn = xrc_srqn_;
  ctx_.push_completion(c);
}

ResponderState Responder::complete(const Request& r) {
  // Only a message that consumes a receive WQE completes one (a UC responder may hold a WQE
  // across a plain WRITE, left over from a dropped SEND).
  const bool consumes = r.info.operation == Operation::kSend || r.info.with_imm;
  if (!r.info.ends_message() || !recv_ || !consumes) return ResponderState::kAcknowledge;
  Completion c;
  c.wr_id = recv_->wr_id;
  c.qp_num = ctx_.config.qpn;
  c.src_qp = ctx_.attr.dest_qp_num;
  c.solicited = r.hdr.bth.solicited;
  if (r.info.operation == Operation::kSend) {
    c.opcode = WcOpcode::kRecv;
    c.byte_len = recv_bytes_;
  } else {
    c.opcode = WcOpcode::kRecvRdmaWithImm;
    c.byte_len = write_length_;
  }
  if (r.hdr.imm) {
    c.wc_flags |= wc_flags::kWithImm;
    c.imm_data = *r.hdr.imm;
  }
  if (r.hdr.ieth) {
    c.wc_flags |= wc_flags::kWithInv;
    c.invalidated_rkey = *r.hdr.ieth;
  }
  push_recv_completion(c);
  recv_.reset();
  return ResponderState::kAcknowledge;
}

ResponderState Responder::duplicate(const Request& r) {
  const Operation op = r.info.operation;
  if (is_send_or_write(op)) {
    // Re-ACK everything executed so far, not the duplicate's PSN (rxe_resp.c duplicate_request).
    queue_ack(ack_psn_ - 1, wire::Aeth::ack(msn_));
    return ResponderState::kDone;
  }
  for (const ResponderResource& res : resources_) {
    if (res.kind == ResponderResource::Kind::kNone ||
        !wire::psn_in_range(r.psn, res.first_psn, res.last_psn)) {
      continue;
    }
    if (op == Operation::kReadRequest && res.kind == ResponderResource::Kind::kRead) {
      const wire::Reth& reth = *r.hdr.reth;
      const std::uint64_t offset =
          std::uint64_t{static_cast<std::uint32_t>(r.psn.distance_from(res.first_psn))} *
          ctx_.mtu();
      // The replayed range must be the tail of the original, under the same R_Key.
      if (reth.rkey != res.rkey || reth.va != res.va + offset ||
          std::uint64_t{reth.dma_length} + offset > res.length) {
        return ResponderState::kDrop;
      }
      // The duplicate may name a sub-range of what is left (IBA 9.4.4; rxe_resp.c
      // duplicate_request replays exactly it): a requester that keeps the responses it had after
      // a gap asks only for those it lacks (transport/read_repair.h). The reply ends where the
      // range does, with LAST (ONLY at the READ's first PSN), as rxe's read_reply ends it.
      const std::uint64_t end_offset = offset + reth.dma_length;
      const wire::Psn end_psn =
          end_offset >= res.length
              ? res.last_psn
              : r.psn + static_cast<std::uint32_t>(
                            (std::max<std::uint64_t>(reth.dma_length, 1) + ctx_.mtu() - 1) /
                                ctx_.mtu() -
                            1);
      Job replay{Job::Kind::kRead, r.psn,     wire::Aeth::ack(res.msn), 0, res, r.psn,
                 end_psn,          end_offset};
      if (end_psn != res.last_psn) {
        queue_replay(std::move(replay), false);
        return ResponderState::kDone;
      }
      for (Job& j : jobs_) {  // already replaying this READ to its end: restart it from here
        if (j.kind == Job::Kind::kRead && j.res.first_psn == res.first_psn &&
            j.end_psn == res.last_psn) {
          j.psn = r.psn;
          j.start_psn = r.psn;
          return ResponderState::kDone;
        }
      }
      queue_replay(std::move(replay), true);
      return ResponderState::kDone;
    }
    if ((op == Operation::kCompareSwap || op == Operation::kFetchAdd) &&
        res.kind == ResponderResource::Kind::kAtomic) {
      // The atomic replay cache: answer without executing again.
      queue_replay(
          Job{Job::Kind::kAtomicAck, r.psn, wire::Aeth::ack(res.msn), res.atomic_original, {}, {}},
          true);
      return ResponderState::kDone;
    }
    // ATOMIC WRITE and FLUSH (oA19-14/15): answered again, never executed twice.
    if ((op == Operation::kAtomicWrite && res.kind == ResponderResource::Kind::kAtomicWrite) ||
        (op == Operation::kFlush && res.kind == ResponderResource::Kind::kFlush)) {
      queue_replay(Job{Job::Kind::kEmptyRead, r.psn, wire::Aeth::ack(res.msn), 0, {}, {}}, true);
      return ResponderState::kDone;
    }
  }
  return ResponderState::kDrop;  // recycled or never seen
}

// Responses leave in PSN order, as the requester takes them: one after a gap is an implied NAK
// and dropped (rxe_comp.c check_psn). A duplicate READ or ATOMIC means the requester went back to
// that PSN (a go-back-N retry, or its probe of the READ), so the replay goes ahead of every
// response queued for a later request instead of behind them: behind, it would wait for up to
// max_dest_rd_atomic READs the requester drops and asks for again. A later READ's reply already
// under way starts over, since what it sent came after the gap. (rxe instead finishes the READ
// reply in progress before it reads the next request: rxe_resp.c get_req.)
void Responder::queue_replay(Job job, bool restart_later) {
  const wire::Psn from = job.order_psn();
  // A sub-range goes ahead of the reply under way too, which has already sent past it (the
  // requester saw a later response): where that reply stands, not where it began, orders it.
  auto at = std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& j) {
    return (restart_later || j.kind != Job::Kind::kRead ? j.order_psn() : j.psn).after(from);
  });
  if (at != jobs_.end()) ++ctx_.counters.replays_reordered;
  if (restart_later && at == jobs_.begin() && at != jobs_.end() && at->kind == Job::Kind::kRead) {
    at->psn = at->start_psn;
  }
  jobs_.insert(at, std::move(job));
}

void Responder::queue_ack(wire::Psn psn, wire::Aeth aeth) {
  // ACK coalescing: an ACK for PSN p acknowledges everything up to p, so a queued ACK that
  // has not left yet is replaced by the newer one.
  if (!jobs_.empty() && jobs_.back().kind == Job::Kind::kAck && jobs_.back().aeth.is_ack() &&
      !psn.before(jobs_.back().psn)) {
    jobs_.back().psn = psn;
    jobs_.back().aeth = aeth;
    return;
  }
  jobs_.push_back(Job{Job::Kind::kAck, psn, aeth, 0, {}, {}});
}

void Responder::queue_nak(wire::Psn psn, wire::NakCode code) {
  jobs_.push_back(Job{Job::Kind::kAck, psn, wire::Aeth::nak(msn_, code), 0, {}, {}});
  ++ctx_.counters.naks_sent;
}

ResponderState Responder::fatal(const Request& r, wire::NakCode code, WcStatus recv_status) {
  // Class C errors: NAK the packet's PSN, then the QP goes to ERR (docs/protocol.md §3.5), and the
  // consumer hears of it as an affiliated asynchronous error (IBA 11.6.3; mlx5 raises the same
  // from its WQ access / invalid request / catastrophic error events).
  final_nak_ = Job{Job::Kind::kAck, r.psn, wire::Aeth::nak(msn_, code), 0, {}, {}};
  ++ctx_.counters.naks_sent;
  if (code == wire::NakCode::kInvalidRequest) ++ctx_.counters.invalid_requests;
  raise_fatal_event(code);
  if (recv_) {
    Completion c;
    c.wr_id = recv_->wr_id;
    c.qp_num = ctx_.config.qpn;
    c.src_qp = ctx_.attr.dest_qp_num;
    c.opcode = WcOpcode::kRecv;
    c.status = recv_too_long_ ? WcStatus::kLocLenErr : recv_status;
    push_recv_completion(c);
    recv_.reset();
  }
  recv_too_long_ = false;
  ctx_.fatal_pending = true;
  return ResponderState::kDone;
}

void Responder::raise_fatal_event(wire::NakCode code) {
  AsyncEventType event = AsyncEventType::kQpFatal;
  if (code == wire::NakCode::kRemoteAccessError) {
    event = AsyncEventType::kQpAccessErr;
  } else if (code == wire::NakCode::kInvalidRequest) {
    event = AsyncEventType::kQpReqErr;
  }
  ctx_.events.push_back(AsyncEvent{event, ctx_.config.qpn});
}

ResponderResource& Responder::new_resource() {
  ResponderResource& res = resources_[next_resource_ % resources_.size()];
  ++next_resource_;
  return res;
}

// From srq_ (the QP's SRQ, or the XRC SRQ the request names) or the QP's own queue; when empty,
// once more after the owner pulled what was posted since (ReceiveSource).
std::optional<RecvRequest> Responder::take_recv() {
  auto take = [&]() -> std::optional<RecvRequest> {
    if (srq_ != nullptr) return srq_->take();
    if (ctx_.rq.empty()) return std::nullopt;
    RecvRequest wr = std::move(ctx_.rq.front());
    ctx_.rq.pop_front();
    return wr;
  };
  std::optional<RecvRequest> wr = take();
  if (wr || ctx_.receives == nullptr) return wr;
  ctx_.receives->pull_receives();
  wr = take();
  if (wr) ++ctx_.counters.receives_pulled_late;
  return wr;
}

bool Responder::recv_sges_ok(const RecvRequest& recv) const {
  return sges_valid(*mrs_, recv.sg_list, access::kLocalWrite);
}

wire::Opcode Responder::response_opcode(wire::Opcode rc_opcode) const {
  return wire::in_transport(rc_opcode, ctx_.transport());
}

std::optional<Transmit> Responder::poll(wire::MutableBytes payload) {
  Transmit t;
  t.av_id = ctx_.attr.av_id;
  t.hdr.bth.dest_qp = ctx_.attr.dest_qp_num;
  if (ctx_.state == QpState::kErr || jobs_.empty()) {
    if (!final_nak_) return std::nullopt;
    t.hdr.bth.opcode = response_opcode(wire::Opcode::kRcAck);
    t.hdr.bth.psn = final_nak_->psn;
    t.hdr.aeth = final_nak_->aeth;
    final_nak_.reset();
    return t;
  }
  Job& j = jobs_.front();
  t.hdr.bth.psn = j.psn;
  switch (j.kind) {
    case Job::Kind::kAck:
      t.hdr.bth.opcode = response_opcode(wire::Opcode::kRcAck);
      t.hdr.aeth = j.aeth;
      jobs_.pop_front();
      break;
    case Job::Kind::kAtomicAck:
      t.hdr.bth.opcode = response_opcode(wire::Opcode::kRcAtomicAck);
      t.hdr.aeth = j.aeth;
      t.hdr.atomic_ack_orig = j.atomic_original;
      jobs_.pop_front();
      break;
    case Job::Kind::kEmptyRead:
      t.hdr.bth.opcode = response_opcode(wire::Opcode::kRcReadResponseOnly);
      t.hdr.aeth = j.aeth;
      jobs_.pop_front();
      break;
    case Job::Kind::kRead: {
      bool done = false;
      t = build_read_response(j, payload, &done);
      if (done) jobs_.pop_front();
      break;
    }
  }
  ++ctx_.counters.packets_sent;
  ctx_.counters.payload_bytes_sent += t.payload_len;
  return t;
}

Transmit Responder::build_read_response(Job& j, wire::MutableBytes payload, bool* done) {
  const ResponderResource& res = j.res;
  const std::uint32_t mtu = ctx_.mtu();
  const std::uint64_t offset =
      std::uint64_t{static_cast<std::uint32_t>(j.psn.distance_from(res.first_psn))} * mtu;
  const bool first = j.psn == res.first_psn;
  const bool last = j.psn == j.end_psn;
  const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(j.end_offset - offset, mtu));
  Transmit t;
  t.av_id = ctx_.attr.av_id;
  wire::TransportHeaders& h = t.hdr;
  h.bth.dest_qp = ctx_.attr.dest_qp_num;
  h.bth.psn = j.psn;
  // Position comes from the PSN within the original READ: a replay from the middle starts
  // with MIDDLE/LAST, as rxe does (rxe_resp.c duplicate_request; IBA 9.4.4).
  h.bth.opcode = response_opcode(first && last ? wire::Opcode::kRcReadResponseOnly
                                 : first       ? wire::Opcode::kRcReadResponseFirst
                                 : last        ? wire::Opcode::kRcReadResponseLast
                                               : wire::Opcode::kRcReadResponseMiddle);
  if (h.info().headers.has(wire::Header::kAeth)) h.aeth = wire::Aeth::ack(res.msn);
  // rxe_recheck_mr: every packet checks the R_Key again, so a window invalidated or a region
  // deregistered under a READ in progress ends it with a remote access error.
  wire::Result<ProcessAddress, MemError> addr = ProcessAddress{0};
  if (n > 0) {
    addr =
        res.mrs->check_remote(res.rkey, res.va + offset, n, access::kRemoteRead, ctx_.config.qpn);
  }
  const bool readable = addr && (n == 0 || res.mrs->memory().read(*addr, payload.subspan(0, n)));
  if (!readable) {
    const wire::NakCode code =
        addr ? wire::NakCode::kRemoteOperationalError : wire::NakCode::kRemoteAccessError;
    if (!addr) ++ctx_.counters.rkey_violations;
    raise_fatal_event(code);
    h = wire::TransportHeaders{};
    h.bth.opcode = response_opcode(wire::Opcode::kRcAck);
    h.bth.dest_qp = ctx_.attr.dest_qp_num;
    h.bth.psn = j.psn;
    h.aeth = wire::Aeth::nak(msn_, code);
    ctx_.fatal_pending = true;
    *done = true;
    return t;
  }
  t.payload_len = n;
  ++j.psn;
  *done = last;
  return t;
}

void Responder::handle_ud(const wire::TransportHeaders& hdr, wire::Bytes payload,
                          const RxMeta& meta) {
  // rxe_recv.c check_keys: a UD packet whose Q_Key differs from the QP's is dropped silently.
  if (hdr.deth->qkey != ctx_.attr.qkey) {
    ++ctx_.counters.dropped;
    return;
  }
  // A UD message is one packet of at most the port's MTU: a longer one is malformed and
  // dropped before it takes a receive (IBA 9.8; rxe_resp.c check_length).
  if (payload.size() > ctx_.mtu()) {
    ++ctx_.counters.dropped;
    return;
  }
  mrs_ = ctx_.mrs;
  srq_ = ctx_.srq;
  std::optional<RecvRequest> recv = take_recv();
  if (!recv) {
    ++ctx_.counters.ud_no_recv_drops;  // UD has no RNR: the datagram is lost
    return;
  }
  Completion c;
  c.wr_id = recv->wr_id;
  c.opcode = WcOpcode::kRecv;
  c.qp_num = ctx_.config.qpn;
  c.src_qp = hdr.deth->src_qp;
  c.solicited = hdr.bth.solicited;
  c.wc_flags = wc_flags::kGrh;
  c.sl = roce_network_type(meta.grh);
  if (hdr.imm) {
    c.wc_flags |= wc_flags::kWithImm;
    c.imm_data = *hdr.imm;
  }
  // Verbs: the first 40 bytes of a UD receive buffer hold the GRH (ibv_grh).
  const std::uint64_t need = meta.grh.size() + payload.size();
  c.byte_len = static_cast<std::uint32_t>(need);
  if (!recv_sges_ok(*recv)) {
    c.status = WcStatus::kLocProtErr;
  } else if (sge_bytes(recv->sg_list) < need) {
    c.status = WcStatus::kLocLenErr;
  } else if (!scatter(*mrs_, recv->sg_list, 0, meta.grh) ||
             !scatter(*mrs_, recv->sg_list, meta.grh.size(), payload)) {
    c.status = WcStatus::kLocProtErr;
  }
  if (c.status != WcStatus::kSuccess) {
    c.byte_len = 0;
    ctx_.fatal_pending = true;
  }
  ctx_.push_completion(c);
}

void Responder::flush() {
  auto flush_one = [&](const RecvRequest& wr) {
    Completion c;
    c.wr_id = wr.wr_id;
    c.status = WcStatus::kWrFlushErr;
    c.opcode = WcOpcode::kRecv;
    c.qp_num = ctx_.config.qpn;
    push_recv_completion(c);
  };
  if (recv_) flush_one(*recv_);
  recv_.reset();
  for (const RecvRequest& wr : ctx_.rq)
    flush_one(wr);
  ctx_.rq.clear();
  jobs_.clear();
  in_message_ = InMessage::kNone;
}

}  // namespace xroce::transport
