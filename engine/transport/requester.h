// The requester: turns send WQEs into request packets (segmentation, PSN assignment, AckReq,
// fences, the rd/atomic limit, the PSN window), executes local operations (memory window binds
// and LOCAL_INV) in send-queue order, and restarts from the completer's PSN on retry (go-back-N,
// docs/protocol.md §3.8). RC and XRC requesters wait for responses; a UC requester's WQE is done
// once its last packet left (IBA 9.8.2: no acknowledgements). Modelled on rxe_req.c.
#pragma once

#include <cstdint>
#include <optional>

#include "transport/qp_context.h"

namespace xroce::transport {

// Why the requester is or is not sending; next_state() computes it before every packet.
enum class RequesterState : std::uint8_t {
  kIdle,          // nothing posted that can go
  kSend,          // the WQE at sq_next has a packet ready
  kLocalOp,       // the WQE at sq_next is a bind or LOCAL_INV to execute now
  kWaitFence,     // IBV_SEND_FENCE: prior READ/ATOMIC still outstanding
  kWaitRdAtomic,  // max_rd_atomic READ/ATOMIC already outstanding
  kWaitWindow,    // its loss window (at most max_unacked_psns) in flight
  kWaitBudget,    // the QP's share of the device's InflightBudget in flight
  kWaitRnrTimer,  // an RNR NAK's timer is running
  kWaitPacer,     // congestion control holds the next packet
  kDrained,       // SQD: no new WQE may start
  kLocalError,    // the WQE fails a local check (length, protection): complete it in error
  kHalted,        // a local operation failed: nothing more is sent; the QP goes to ERR
  kStopped,       // QP not in a sending state
};

class Requester {
 public:
  explicit Requester(QpContext& ctx) : ctx_(ctx) {}

  // Produces the next request packet, its payload written into `payload` (>= mtu bytes).
  // Local operations reached on the way are executed first.
  std::optional<Transmit> poll(std::uint64_t now_ns, wire::MutableBytes payload);
  // Go-back-N: resend from comp_psn, starting with the oldest incomplete WQE. With
  // `repeat_first` (a resend for a loss the responses showed, or the adaptive timer's) its first
  // packet goes twice when it is a SEND or WRITE packet: the responder NAKs a PSN gap only once
  // and then drops what is out of sequence silently (rxe_resp.c check_psn), so a lost first
  // resend would leave the QP silent until a timer; its copy, in sequence where the first was
  // lost and a duplicate the responder re-ACKs where it was not (docs/protocol.md §3.6), turns
  // that timer's wait into one extra packet. Not a READ or an atomic, whose duplicate the
  // responder answers with a replay; not the Local ACK Timeout's retry, whose packets count
  // against retry_cnt as a peer sees them (IBA 9.7.6.1.3).
  void retry(bool repeat_first = false);
  // The tail probe (QpConfig::tail_probe_floor_ns): the next packet is the one at comp_psn,
  // asking for an ACK; after it the requester goes on where it was (new PSNs, as the window
  // allows), so what the probe's answer leaves unacknowledged waits for a timer, not for an
  // immediate go-back-N. Anything acknowledged first (end_probe) or a retry cancels it.
  void probe();
  void end_probe();
  void reset() {
    packets_since_ackreq_ = 0;
    halted_ = false;
    ctx_.last_sent_ackreq = true;
    probing_ = false;
    repeat_next_ = false;
  }
  RequesterState state(std::uint64_t now_ns) { return next_state(now_ns); }

 private:
  RequesterState next_state(std::uint64_t now_ns);
  bool budget_allows();
  bool budget_full_after_this() const;
  bool window_full_after_this() const;
  RequesterState start_wqe(SendWqe& w);
  WcStatus local_check(const SendWqe& w) const;
  void execute_local(SendWqe& w);
  // The next range selective READ repair asks for again (QpContext::read_asks), if any is still
  // missing and the requester may send.
  std::optional<Transmit> build_read_ask();
  // What every request packet does as it leaves: counters, timers, congestion control.
  void on_transmit(std::uint64_t now_ns, Transmit& t);
  Transmit build_connected(SendWqe& w, wire::MutableBytes payload);
  Transmit build_ud(SendWqe& w, wire::MutableBytes payload);
  void build_send_write(SendWqe& w, Transmit& t, wire::MutableBytes payload);
  void build_atomic_write(SendWqe& w, Transmit& t, wire::MutableBytes payload);
  void build_flush(SendWqe& w, Transmit& t);
  void finish_local_error(SendWqe& w, WcStatus status);
  void complete_datagram(SendWqe& w);
  bool copy_payload(const SendWqe& w, std::uint64_t offset, std::span<std::uint8_t> out);

  QpContext& ctx_;
  std::uint32_t packets_since_ackreq_ = 0;
  WcStatus pending_local_error_ = WcStatus::kSuccess;
  bool halted_ = false;
  // Whether the next packet must ask for an acknowledgement (QpContext::last_sent_ackreq is
  // whether the newest one did).
  bool force_ackreq_ = false;
  // A tail probe is due: the requester stands at comp_psn; it goes back to these after it.
  bool probing_ = false;
  // The next packet is the first of a go-back-N resend (retry): sent twice if SEND or WRITE.
  bool repeat_next_ = false;
  std::uint64_t probe_saved_sq_next_ = 0;
  wire::Psn probe_saved_req_psn_;
};

}  // namespace xroce::transport
