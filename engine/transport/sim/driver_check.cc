// The driver's checking side: every completion against what was posted (order, status, bytes),
// the steps of memory-window operations, and UC's one allowed deviation, a lost message.
#include <cstring>

#include "transport/sim/driver.h"

namespace xroce::transport::sim {

bool Driver::poll_completions() {
  bool any = false;
  for (auto& np : nodes_) {
    for (auto& e : np->eps) {
      while (auto c = e->qp->poll_completion()) {
        any = true;
        if (!summary_.failure.empty()) return any;  // report the first failure, not its fallout
        if (c->is_recv()) {
          on_recv_completion(*e, *c);
        } else {
          on_send_completion(*e, *c);
        }
      }
      if (e->qp->state() != QpState::kRts) fail("a QP left RTS");
    }
  }
  for (auto& np : nodes_)
    for (auto& e : np->eps)
      if (e->type == QpType::kUc) check_uc_progress(*e);
  return any;
}

void Driver::on_send_completion(Endpoint& e, const Completion& c) {
  // Unsignaled WQEs before this one completed silently (completions are in order).
  while (!e.outstanding.empty() && e.outstanding.front().wr_id != c.wr_id &&
         !e.outstanding.front().signaled) {
    const PendingOp op = e.outstanding.front();
    e.outstanding.pop_front();
    retire(e, op);
  }
  if (e.outstanding.empty() || e.outstanding.front().wr_id != c.wr_id) {
    ++summary_.completion_errors;
    fail("send completion out of order, duplicated or unknown: wr_id " + std::to_string(c.wr_id));
    return;
  }
  const PendingOp op = e.outstanding.front();
  e.outstanding.pop_front();
  if (c.status != WcStatus::kSuccess) {
    ++summary_.completion_errors;
    fail(std::string("completion status ") + to_string(c.status) + " for " + to_string(op.kind));
    return;
  }
  if (op.role != PendingOp::Role::kOp || !op.ends_op) {
    on_flow_step(e, op, c);
  } else {
    retire(e, op);
  }
}

// A step of a window operation completed: `e` is the endpoint whose WQE it was (the peer of
// the flow's owner for a bind or LOCAL_INV).
void Driver::on_flow_step(Endpoint& e, const PendingOp& op, const Completion& c) {
  const bool peer_side = op.role != PendingOp::Role::kOp;
  Endpoint& owner = peer_side ? *e.peer : e;
  auto it = owner.flows.find(op.slot);
  if (it == owner.flows.end()) {
    fail("window step with no window operation in progress");
    return;
  }
  WindowFlow& flow = it->second;
  const WcOpcode want = op.role == PendingOp::Role::kBind       ? WcOpcode::kBindMw
                        : op.role == PendingOp::Role::kLocalInv ? WcOpcode::kLocalInv
                                                                : WcOpcode::kRdmaWrite;
  if (c.opcode != want) {
    ++summary_.completion_errors;
    fail("window step completed with the wrong opcode");
    return;
  }
  switch (op.role) {
    case PendingOp::Role::kBind:
      ++summary_.window_binds;
      flow_write(owner, op.slot);
      return;
    case PendingOp::Role::kLocalInv:
      check_window_gone(e, flow.rkey);
      owner.flows.erase(it);
      owner.free_slots.push_back(op.slot);
      ++summary_.completed;
      return;
    case PendingOp::Role::kOp: {
      // The WRITE through the window: its bytes are where the window put them.
      const std::uint64_t at = slot_addr(owner.peer->target, op.slot) + flow.offset;
      if (!matches_pattern(owner.peer->node->mem.view(at, flow.length), flow.pattern)) {
        ++summary_.data_errors;
        fail(std::string("data mismatch through a window for ") + to_string(flow.kind));
        return;
      }
      summary_.bytes_verified += flow.length;
      flow_invalidate(owner, op.slot);
      return;
    }
  }
}

// An invalidated window must refuse access, whoever asks.
void Driver::check_window_gone(const Endpoint& owner, wire::Rkey rkey) {
  ++summary_.invalidations;
  if (owner.node->mrs.check_remote(rkey, 0, 1, access::kRemoteWrite, owner.qp->qpn()) ||
      owner.node->mrs.check_remote(rkey, owner.target, 1, access::kRemoteWrite, owner.qp->qpn())) {
    ++summary_.data_errors;
    fail("an invalidated window still grants access");
  }
}

// Checks the effect of a completed operation and frees its slot.
void Driver::retire(Endpoint& e, const PendingOp& op) {
  ++summary_.completed;
  if (op.kind == OpKind::kSendInv) {
    e.flows.erase(op.slot);  // the receiver checks the invalidation
  }
  if (e.type == QpType::kUc) {
    for (UcInFlight& m : e.uc_in_flight)
      if (m.wr_id == op.wr_id) m.sent = true;
    return;  // the slot is freed by check_uc_progress
  }
  e.free_slots.push_back(op.slot);
  Node& en = *e.node;
  const std::uint64_t src = slot_addr(e.src, op.slot);
  const std::uint64_t target = slot_addr(e.peer->target, op.slot);
  bool good = true;
  switch (op.kind) {
    case OpKind::kWrite:
    case OpKind::kWriteImm:
      good = matches_pattern(e.peer->node->mem.view(target, op.length), op.pattern);
      summary_.bytes_verified += op.length;
      break;
    case OpKind::kRead:
      good = matches_pattern(en.mem.view(src, op.length), op.pattern);
      summary_.bytes_verified += op.length;
      break;
    case OpKind::kCmpSwap:
    case OpKind::kFetchAdd: {
      std::uint64_t v = 0;
      std::memcpy(&v, en.mem.view(src, 8).data(), 8);
      good = v == op.expected_original;
      summary_.bytes_verified += 8;
      break;
    }
    case OpKind::kAtomicWrite:
      good = std::memcmp(e.peer->node->mem.view(target, 8).data(), &op.pattern, 8) == 0;
      summary_.bytes_verified += 8;
      break;
    default:
      break;  // SEND data is checked at the receiver; FLUSH only has to succeed
  }
  if (!good) {
    ++summary_.data_errors;
    fail(std::string("data mismatch for ") + to_string(op.kind) + " wr_id " +
         std::to_string(op.wr_id));
  }
}

namespace {

// Does this receive completion carry the message `x` (opcode, length, immediate, invalidated
// R_Key, bytes)? `bytes` is where its data is; empty to leave the data unchecked.
bool recv_matches(const ExpectedRecv& x, const Completion& c, std::span<const std::uint8_t> bytes) {
  const bool has_inv = x.kind == OpKind::kSendInv;
  if (c.status != WcStatus::kSuccess || c.byte_len != x.length) return false;
  if (c.opcode != (x.write_imm ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv)) return false;
  if (((c.wc_flags & wc_flags::kWithImm) != 0) != x.has_imm) return false;
  if (x.has_imm && c.imm_data != x.imm) return false;
  if (((c.wc_flags & wc_flags::kWithInv) != 0) != has_inv) return false;
  if (has_inv && c.invalidated_rkey != x.inv_rkey) return false;
  return (x.write_imm && bytes.empty()) || matches_pattern(bytes, x.pattern);
}

}  // namespace

// Where the bytes of message `x` are at the receiver `e`: its receive buffer, or for a UC
// WRITE_WITH_IMM the target slot (an RC WRITE's bytes were checked when it completed).
std::span<const std::uint8_t> Driver::recv_bytes(Endpoint& e, const ExpectedRecv& x,
                                                 const Completion& c) {
  if (!x.write_imm) {
    const std::uint64_t buf = slot_addr(e.recv, static_cast<std::uint32_t>(c.wr_id));
    return e.node->mem.view(buf, std::min<std::uint32_t>(x.length, slot_bytes_));
  }
  if (e.type == QpType::kRc) return {};
  for (const UcInFlight& m : e.peer->uc_in_flight)
    if (m.pattern == x.pattern) return e.node->mem.view(slot_addr(e.target, m.slot), x.length);
  return {};
}

void Driver::on_recv_completion(Endpoint& e, const Completion& c) {
  ++summary_.received;
  // RC: the next message expected; UC: the next one the network did not lose.
  std::size_t skipped = 0;
  for (; skipped < e.expected_recvs.size(); ++skipped) {
    const ExpectedRecv& x = e.expected_recvs[skipped];
    if (recv_matches(x, c, recv_bytes(e, x, c))) break;
    if (e.type == QpType::kRc) {
      ++summary_.completion_errors;
      fail(std::string("receive completion does not match the ") + to_string(x.kind) + " sent");
      return;
    }
  }
  if (skipped == e.expected_recvs.size()) {
    ++summary_.completion_errors;
    fail(std::string("receive completion matches no message sent: ") +
         (e.type == QpType::kUc ? "UC" : "RC") + " qpn " + std::to_string(e.qp->qpn().value()) +
         " status " + to_string(c.status) + " byte_len " + std::to_string(c.byte_len) + " opcode " +
         std::to_string(static_cast<int>(c.opcode)) + ", " +
         std::to_string(e.expected_recvs.size()) + " expected");
    return;
  }
  const ExpectedRecv x = e.expected_recvs[skipped];
  summary_.uc_lost += skipped;  // UC: the messages before it never arrived
  e.expected_recvs.erase(e.expected_recvs.begin(),
                         e.expected_recvs.begin() + static_cast<std::ptrdiff_t>(skipped + 1));
  summary_.bytes_verified += x.length;
  if (x.kind == OpKind::kSendInv) check_window_gone(e, x.inv_rkey);
  post_recv(e, static_cast<std::uint32_t>(c.wr_id));
}

// UC: a message the receiver has moved past executed or was dropped; once the sender has
// completed it too, its slot is free. A WRITE without immediate is checked then, where the
// network loses nothing.
void Driver::check_uc_progress(Endpoint& e) {
  const wire::Psn expected = e.peer->qp->expected_psn();
  while (!e.uc_in_flight.empty()) {
    const UcInFlight& m = e.uc_in_flight.front();
    if (!m.sent || !m.last_psn.before(expected)) break;
    if (m.kind == OpKind::kUcWrite && !faulty()) {
      const auto at = e.peer->node->mem.view(slot_addr(e.peer->target, m.slot), m.length);
      if (!matches_pattern(at, m.pattern)) {
        ++summary_.data_errors;
        fail("UC WRITE bytes missing on a network without faults");
      }
      summary_.bytes_verified += m.length;
    }
    e.free_slots.push_back(m.slot);
    e.uc_in_flight.pop_front();
  }
}

}  // namespace xroce::transport::sim
