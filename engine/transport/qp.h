// A queue pair: the sans-I/O transport core (docs/ARCHITECTURE.md decision 6).
//
// A Qp never reads a clock, never calls the OS and uses no randomness. The caller owns time
// and I/O and drives it in this order:
//
//   1. Inputs, in any order, each stamped with the caller's current time where time matters:
//        modify(attr, mask)                       ibv_modify_qp
//        post_send(wr) / post_recv(wr)            ibv_post_send / ibv_post_recv
//        handle_packet(now_ns, headers, payload)  a decoded packet addressed to this QP
//        handle_timeout(now_ns)                   when now_ns >= next_deadline()
//   2. After any input, drain the outputs until each returns nothing:
//        poll_transmit(now_ns, buffer)  -> a packet: headers + payload_len bytes in `buffer`
//                                          (>= the path MTU) + the address vector to use
//        poll_completion()              -> a CQE, for the send or the receive CQ (is_recv())
//        poll_event()                   -> an async event
//   3. Sleep until next_deadline() (or the next input), then call handle_timeout.
//
// Validation happens once, at the door (handle_packet, post_send, modify): state, opcode
// family, P_Key, work-request shape. Everything after it may assume well-formed input.
// A Qp is owned by one worker; nothing here is thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "transport/completer.h"
#include "transport/qp_context.h"
#include "transport/requester.h"
#include "transport/responder.h"

namespace xroce::transport {

class Qp {
 public:
  Qp(const QpConfig& config, MemoryRegionTable& mrs, Srq* srq = nullptr);
  ~Qp();
  Qp(const Qp&) = delete;
  Qp& operator=(const Qp&) = delete;

  // Returns 0 or EINVAL (ibv_modify_qp).
  int modify(const QpAttr& attr, std::uint32_t mask);
  // Return 0, EINVAL (bad state, opcode or shape) or ENOMEM (queue full), as verbs do.
  int post_send(const WorkRequest& wr);
  int post_recv(const RecvRequest& wr);
  // An IBV_SEND_INLINE send whose data the caller already holds (the provider copies inline
  // data into the WQE itself, so there are no SGEs to gather from): `wr` has kInline and no SGEs.
  int post_send_inline(const WorkRequest& wr, std::span<const std::uint8_t> data);

  void handle_packet(std::uint64_t now_ns, const wire::TransportHeaders& hdr, wire::Bytes payload,
                     const RxMeta& meta = {});
  void handle_timeout(std::uint64_t now_ns);

  std::optional<Transmit> poll_transmit(std::uint64_t now_ns, wire::MutableBytes payload);
  std::optional<Completion> poll_completion();
  std::optional<AsyncEvent> poll_event();
  // The earliest time handle_timeout has work to do; nullopt when no timer is armed.
  std::optional<std::uint64_t> next_deadline() const;

  // Attaches engine/cc's per-QP rate state (nullptr detaches).
  void set_congestion_hooks(CongestionHooks* hooks) { ctx_.cc = hooks; }
  // Attaches where the responder looks for receive WQEs posted late (nullptr detaches).
  void set_receive_source(ReceiveSource* source) { ctx_.receives = source; }

  wire::Qpn qpn() const { return ctx_.config.qpn; }
  QpType type() const { return ctx_.config.type; }
  QpState state() const { return ctx_.state; }
  const QpAttr& attr() const { return ctx_.attr; }
  const QpCounters& counters() const { return ctx_.counters; }
  const RttEstimator& rtt() const { return ctx_.rtt; }
  const LossWindow& loss_window() const { return ctx_.loss_window; }
  RequesterState requester_state(std::uint64_t now_ns) { return req_.state(now_ns); }
  wire::Psn expected_psn() const { return resp_.epsn(); }
  // For `xroce qp show` (read-only): the PSN the requester sends next, and the oldest PSN not
  // yet acknowledged.
  wire::Psn next_send_psn() const { return ctx_.req_psn; }
  wire::Psn oldest_unacked_psn() const { return ctx_.comp_psn; }
  std::size_t send_queue_depth() const { return ctx_.sq_tail - ctx_.sq_head; }
  // The length of the send WQE posted last, if one is not yet completed (0 otherwise).
  std::uint32_t newest_send_length() const {
    return ctx_.sq_tail == ctx_.sq_head ? 0 : ctx_.wqe(ctx_.sq_tail - 1).length;
  }
  // Whether the requester's last look found it stopped by the device's InflightBudget (it goes
  // on once the budget has room: the caller polls it again then).
  bool waiting_for_budget() const { return ctx_.budget_waiting; }
  const InflightBudget* inflight_budget() const { return ctx_.config.inflight_budget.get(); }
  // What it holds of that budget: its unacknowledged request PSNs, as the budget was told.
  std::uint32_t budget_held_psns() const { return ctx_.budget_told.psns; }

 private:
  void apply_attributes(const QpAttr& attr, std::uint32_t mask);
  void enter_state(QpState next);
  void reset_queues();
  void settle();
  void enter_error();
  void flush_send_queue();

  QpContext ctx_;
  Requester req_;
  Completer comp_;
  Responder resp_;
};

}  // namespace xroce::transport
