// The driver's posting side: which operation an endpoint posts next, with what bytes, and the
// memory-window operations that span both ends of a QP pair.
#include <algorithm>
#include <cstring>

#include "transport/sim/driver.h"

namespace xroce::transport::sim {

namespace {

constexpr std::uint32_t kRemoteWindowAccess = access::kRemoteWrite;

std::uint32_t packets_for(std::uint32_t length, std::uint32_t mtu) {
  return std::max<std::uint32_t>(1, (length + mtu - 1) / mtu);
}

wire::Rkey next_key(wire::Rkey k) {  // ibv_inc_rkey
  return wire::Rkey((k.value() & ~0xFFu) | ((k.value() + 1) & 0xFF));
}

}  // namespace

void Driver::post_recv(Endpoint& e, std::uint32_t slot) {
  RecvRequest r;
  r.wr_id = slot;
  const std::uint64_t addr = slot_addr(e.recv, slot);
  // Two SGEs, so receives scatter across buffers too.
  const std::uint32_t first = slot_bytes_ / 3;
  r.sg_list = {Sge{addr, first, e.mr.lkey}, Sge{addr + first, slot_bytes_ - first, e.mr.lkey}};
  if (e.qp->post_recv(r) != 0) fail("post_recv refused");
}

// A kind the endpoint's QP type carries, by the mix's weights; nullopt if the mix has none.
std::optional<OpKind> Driver::pick_kind(const Endpoint& e) {
  const bool uc = e.type == QpType::kUc;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < kOpKinds; ++i)
    if (is_uc(static_cast<OpKind>(i)) == uc) total += cfg_.mix.weight[i];
  if (total == 0) return std::nullopt;
  std::uint64_t x = rng_.below(total);
  for (std::size_t i = 0; i < kOpKinds; ++i) {
    if (is_uc(static_cast<OpKind>(i)) != uc) continue;
    if (x < cfg_.mix.weight[i]) return static_cast<OpKind>(i);
    x -= cfg_.mix.weight[i];
  }
  return std::nullopt;
}

std::uint32_t Driver::pick_length(OpKind k) {
  if (k == OpKind::kCmpSwap || k == OpKind::kFetchAdd || k == OpKind::kAtomicWrite) return 8;
  const std::uint32_t mtu = mtu_bytes(cfg_.mtu);
  const std::uint64_t r = rng_.below(100);
  std::uint64_t hi = 0;
  if (r < 45) {
    hi = std::min<std::uint64_t>(64, cfg_.max_msg_bytes);  // small, often inline
  } else if (r < 80) {
    hi = std::min<std::uint64_t>(2 * mtu, cfg_.max_msg_bytes);
  } else {
    hi = cfg_.max_msg_bytes;
  }
  // Exact multiples of the MTU are the edge of segmentation: make them common.
  if (rng_.below(8) == 0 && hi >= mtu)
    return mtu * static_cast<std::uint32_t>(rng_.between(1, hi / mtu));
  return static_cast<std::uint32_t>(rng_.below(hi + 1));
}

std::vector<Sge> Driver::split_sges(const Endpoint& e, std::uint64_t addr, std::uint32_t len) {
  std::vector<Sge> sges;
  const std::uint64_t n = len < 2 ? 1 : rng_.between(1, std::min<std::uint64_t>(3, len));
  std::uint32_t left = len;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint32_t part =
        i + 1 == n ? left : static_cast<std::uint32_t>(rng_.between(1, left - (n - 1 - i)));
    sges.push_back(Sge{addr, part, e.mr.lkey});
    addr += part;
    left -= part;
  }
  return sges;
}

bool Driver::post(Endpoint& e, const WorkRequest& wr, const PendingOp& op) {
  if (e.qp->post_send(wr) != 0) {
    fail(std::string("post_send refused for ") + to_string(op.kind));
    return false;
  }
  e.outstanding.push_back(op);
  return true;
}

void Driver::post_one(Endpoint& e) {
  const std::optional<OpKind> kind = pick_kind(e);
  if (!kind) return;
  PendingOp op;
  op.kind = *kind;
  op.length = pick_length(op.kind);
  op.slot = e.free_slots.back();
  op.pattern = rng_.next_u64();
  op.wr_id = next_wr_id_++;
  e.free_slots.pop_back();
  ++summary_.posted;
  ++summary_.posted_by_kind[static_cast<std::size_t>(op.kind)];
  if (op.kind == OpKind::kSendInv || op.kind == OpKind::kMwWrite) {
    start_window_flow(e, op);
    return;
  }
  // Some work is unsignaled: it completes silently, retired by a later signaled completion.
  // The newest WQE of an endpoint, and everything near the end of the run, stays signaled so
  // every unsignaled WQE has a signaled one behind it.
  const std::uint64_t pairs = std::uint64_t{cfg_.qps + cfg_.uc_qps} * cfg_.nodes * (cfg_.nodes - 1);
  const bool may_skip = e.free_slots.size() > 1 && summary_.posted + 2 * pairs < cfg_.ops;
  op.signaled = !(may_skip && rng_.below(4) == 0);
  if (!op.signaled) ++summary_.posted_unsignaled;
  WorkRequest wr;
  wr.wr_id = op.wr_id;
  wr.send_flags = op.signaled ? send_flags::kSignaled : 0;
  switch (op.kind) {
    case OpKind::kRead:
      prepare_read(e, op, wr);
      break;
    case OpKind::kCmpSwap:
    case OpKind::kFetchAdd:
      prepare_atomic(e, op, wr);
      break;
    case OpKind::kAtomicWrite:
      prepare_atomic_write(e, op, wr);
      break;
    case OpKind::kFlush:
      prepare_flush(e, op, wr);
      break;
    default:
      prepare_send_write(e, op, wr);
      break;
  }
  post(e, wr, op);
}

// SEND / SEND_WITH_IMM / WRITE / WRITE_WITH_IMM and their UC forms: pattern bytes from our
// source slot; what the peer must receive goes into its expected-receive queue, in posting
// order.
void Driver::prepare_send_write(Endpoint& e, PendingOp& op, WorkRequest& wr) {
  Endpoint& p = *e.peer;
  const std::uint64_t src = slot_addr(e.src, op.slot);
  fill_pattern(e.node->mem.view(src, op.length), op.pattern);
  wr.sg_list = split_sges(e, src, op.length);
  if (op.length <= kMaxInlineBytes && rng_.below(4) == 0) wr.send_flags |= send_flags::kInline;
  bool imm =
      op.kind == OpKind::kSendImm || op.kind == OpKind::kWriteImm || op.kind == OpKind::kUcWriteImm;
  if (op.kind == OpKind::kUcSend) imm = rng_.below(2) == 0;
  const bool send =
      op.kind == OpKind::kSend || op.kind == OpKind::kSendImm || op.kind == OpKind::kUcSend;
  wr.opcode = send ? (imm ? WrOpcode::kSendWithImm : WrOpcode::kSend)
                   : (imm ? WrOpcode::kRdmaWriteWithImm : WrOpcode::kRdmaWrite);
  if (!send) {
    wr.remote_addr = slot_addr(p.target, op.slot);
    wr.rkey = p.mr.rkey;
  }
  ExpectedRecv expect{op.kind, op.length, op.pattern, 0, imm, !send && imm, {}};
  if (imm) {
    wr.imm_data = static_cast<std::uint32_t>(op.pattern >> 32);
    expect.imm = wr.imm_data;
  }
  if (send || imm) p.expected_recvs.push_back(expect);
  if (e.type == QpType::kUc) {
    // UC PSNs follow posting order exactly (no retries): the receiver passing this message's
    // last PSN frees the slot.
    const std::uint32_t n = packets_for(op.length, mtu_bytes(cfg_.mtu));
    e.uc_next_psn = e.uc_next_psn + n;
    e.uc_in_flight.push_back(
        UcInFlight{e.uc_next_psn - 1, op.wr_id, op.kind, op.slot, op.length, op.pattern});
  }
}

// READ: the peer's target slot holds the pattern (as its application would have put it there);
// our destination slot is zeroed so missing bytes show.
void Driver::prepare_read(Endpoint& e, PendingOp& op, WorkRequest& wr) {
  Endpoint& p = *e.peer;
  const std::uint64_t src = slot_addr(e.src, op.slot);
  const std::uint64_t target = slot_addr(p.target, op.slot);
  fill_pattern(p.node->mem.view(target, op.length), op.pattern);
  auto dst = e.node->mem.view(src, op.length);
  std::fill(dst.begin(), dst.end(), std::uint8_t{0});
  wr.opcode = WrOpcode::kRdmaRead;
  wr.sg_list = split_sges(e, src, op.length);
  wr.remote_addr = target;
  wr.rkey = p.mr.rkey;
}

// Atomics on the peer's word execute in posting order, so the original value each returns is
// predicted by a model of the word.
void Driver::prepare_atomic(Endpoint& e, PendingOp& op, WorkRequest& wr) {
  const std::uint64_t src = slot_addr(e.src, op.slot);
  wr.opcode =
      op.kind == OpKind::kCmpSwap ? WrOpcode::kAtomicCmpAndSwp : WrOpcode::kAtomicFetchAndAdd;
  wr.sg_list = {Sge{src, 8, e.mr.lkey}};
  wr.remote_addr = e.peer->atomic_word;
  wr.rkey = e.peer->mr.rkey;
  op.expected_original = e.atomic_model;
  if (op.kind == OpKind::kFetchAdd) {
    wr.compare_add = op.pattern;
    e.atomic_model += op.pattern;
    return;
  }
  const bool hit = rng_.below(2) == 0;
  wr.compare_add = hit ? e.atomic_model : e.atomic_model + 1;
  wr.swap = op.pattern;
  if (hit) e.atomic_model = op.pattern;
}

// ATOMIC WRITE: the pattern as a word at the start of the peer's target slot (8-aligned).
void Driver::prepare_atomic_write(Endpoint& e, PendingOp& op, WorkRequest& wr) {
  wr.opcode = WrOpcode::kAtomicWrite;
  std::memcpy(wr.atomic_write.data(), &op.pattern, 8);
  wr.remote_addr = slot_addr(e.peer->target, op.slot);
  wr.rkey = e.peer->mr.rkey;
}

// FLUSH of the peer's target slot, or of its whole region, to global visibility, persistence
// or both.
void Driver::prepare_flush(Endpoint& e, PendingOp& op, WorkRequest& wr) {
  wr.opcode = WrOpcode::kFlush;
  wr.remote_addr = slot_addr(e.peer->target, op.slot);
  wr.rkey = e.peer->mr.rkey;
  const auto selectivity =
      rng_.below(4) == 0 ? wire::FlushSelectivity::kMemoryRegion : wire::FlushSelectivity::kRange;
  wr.flush = FlushRequest{op.length, static_cast<std::uint8_t>(rng_.between(1, 3)),
                          static_cast<std::uint8_t>(selectivity)};
}

// A window operation starts at the peer: it binds its window over the target slot (the bind
// is the peer's WQE; it needs no slot there), and on the bind's completion we write through it.
void Driver::start_window_flow(Endpoint& e, const PendingOp& op) {
  Endpoint& p = *e.peer;
  WindowFlow flow;
  flow.op_wr_id = op.wr_id;
  flow.kind = op.kind;
  flow.zero_based = rng_.below(2) == 0;
  flow.length = std::min(op.length, slot_bytes_);
  flow.offset = static_cast<std::uint32_t>(rng_.below(slot_bytes_ - flow.length + 1));
  flow.pattern = op.pattern;
  const wire::Rkey current = p.windows[op.slot];
  flow.rkey = next_key(current);
  p.windows[op.slot] = flow.rkey;
  WorkRequest wr;
  wr.wr_id = next_wr_id_++;
  wr.opcode = WrOpcode::kBindMw;
  wr.send_flags = send_flags::kSignaled;
  wr.bind =
      WindowBind{current,     flow.rkey,
                 p.mr.lkey,   slot_addr(p.target, op.slot),
                 slot_bytes_, kRemoteWindowAccess | (flow.zero_based ? access::kZeroBased : 0u)};
  PendingOp bind{PendingOp::Role::kBind, wr.wr_id, op.kind, 0, op.slot, 0, 0, true, false};
  e.flows[op.slot] = flow;
  post(p, wr, bind);
}

void Driver::flow_write(Endpoint& e, std::uint32_t slot) {
  Endpoint& p = *e.peer;
  WindowFlow& flow = e.flows.at(slot);
  flow.phase = WindowFlow::Phase::kWriting;
  const std::uint64_t src = slot_addr(e.src, slot);
  fill_pattern(e.node->mem.view(src, flow.length), flow.pattern);
  WorkRequest wr;
  wr.wr_id = next_wr_id_++;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.send_flags = send_flags::kSignaled;
  wr.sg_list = split_sges(e, src, flow.length);
  wr.rkey = flow.rkey;
  wr.remote_addr = flow.zero_based ? flow.offset : slot_addr(p.target, slot) + flow.offset;
  post(e, wr,
       PendingOp{PendingOp::Role::kOp, wr.wr_id, flow.kind, flow.length, slot, flow.pattern, 0,
                 true, false});
}

// The window goes away by our SEND_WITH_INV (remote invalidation, checked when the peer
// receives it) or by the peer's LOCAL_INV (checked when it completes).
void Driver::flow_invalidate(Endpoint& e, std::uint32_t slot) {
  Endpoint& p = *e.peer;
  WindowFlow& flow = e.flows.at(slot);
  flow.phase = WindowFlow::Phase::kInvalidating;
  WorkRequest wr;
  wr.wr_id = next_wr_id_++;
  wr.send_flags = send_flags::kSignaled;
  wr.invalidate_rkey = flow.rkey;
  if (flow.kind == OpKind::kMwWrite) {
    wr.opcode = WrOpcode::kLocalInv;
    post(p, wr,
         PendingOp{PendingOp::Role::kLocalInv, wr.wr_id, flow.kind, 0, slot, 0, 0, true, true});
    return;
  }
  const std::uint32_t len = static_cast<std::uint32_t>(rng_.below(65));
  const std::uint64_t pattern = rng_.next_u64();
  const std::uint64_t src = slot_addr(e.src, slot);
  fill_pattern(e.node->mem.view(src, len), pattern);
  wr.opcode = WrOpcode::kSendWithInv;
  wr.sg_list = split_sges(e, src, len);
  p.expected_recvs.push_back(
      ExpectedRecv{OpKind::kSendInv, len, pattern, 0, false, false, flow.rkey});
  post(e, wr,
       PendingOp{PendingOp::Role::kOp, wr.wr_id, flow.kind, len, slot, pattern, 0, true, true});
}

void Driver::post_work() {
  bool progress = true;
  while (progress && summary_.posted < cfg_.ops) {
    progress = false;
    for (auto& np : nodes_) {
      for (auto& e : np->eps) {
        if (summary_.posted >= cfg_.ops) return;
        if (e->free_slots.empty() || e->qp->state() != QpState::kRts) continue;
        const std::uint64_t before = summary_.posted;
        post_one(*e);
        progress = progress || summary_.posted != before;
      }
    }
  }
}

}  // namespace xroce::transport::sim
