// The loss window of one RC/XRC requester: how many request PSNs it may have unacknowledged,
// within its fixed QpConfig::max_unacked_psns, sized by the losses its path shows.
//
// Why: RC repairs a loss by going back N (docs/protocol.md 3.5, 3.8: the responder NAKs the
// first missing PSN once and drops every request after it until the resend arrives, rxe_resp.c
// check_psn), so one loss costs every packet in flight behind it. With W PSNs in flight and a loss
// rate p the goodput is about 1 / (1 + p * W) of the rate: at 2 % loss a window of 128 (rxe's
// RXE_MAX_UNACKED_PSNS) keeps under a third. A smaller fixed window would cost the clean link
// the rate a long or loaded path needs, so the window shrinks only when losses happen.
//
// The rule is TCP's additive increase, multiplicative decrease (RFC 5681, counted in PSNs). A
// loss halves the window: one a NAK names (a PSN-sequence NAK, or a gap in READ responses) or
// one a retransmission timer finds (the Local ACK Timeout, the adaptive timer). Losses of PSNs
// sent before that decrease belong to the same event and change nothing (NewReno's recovery, RFC
// 6582 3.2: until what was in flight then is acknowledged). A timer halves it too, where TCP
// would fall to one segment (RFC 5681 3.1): here a timer finds a lost tail or a lost first
// resend far more often than a collapsed path (in the simulator's 2 % loss runs, six seeds,
// halving kept WRITE at 1,142 MB/s where falling to the floor gave 1,131). Acknowledged PSNs
// open it again by one PSN per window acknowledged. It never drops below `min_psns` nor grows
// past `max_psns`; a clean link never reduces it, so it stays at max_psns there.
//
// min_psns == 0 turns it off (the window is always max_psns). The floor bounds how slow a lossy
// path gets: measured on the wire (bench/README.md "Loss"), a fixed window of 16 PSNs (one 64
// KiB message at a 4096-byte MTU) lost a quarter of the clean rate, 32 did not.
#pragma once

#include <algorithm>
#include <cstdint>

#include "wire/psn.h"

namespace xroce::transport {

class LossWindow {
 public:
  LossWindow() = default;
  LossWindow(std::uint32_t max_psns, std::uint32_t min_psns)
      : max_psns_(std::max(1u, max_psns)),
        min_psns_(std::min(min_psns, max_psns_)),
        psns_(max_psns_) {}

  // The PSNs the requester may have unacknowledged now.
  std::uint32_t psns() const { return psns_; }
  bool enabled() const { return min_psns_ != 0; }
  // Below max_psns: losses were seen and a window's worth of ACKs per PSN has not yet made them
  // good.
  bool reduced() const { return psns_ < max_psns_; }
  // Decreases so far.
  std::uint64_t reductions() const { return reductions_; }

  // `acked_psns` PSNs were newly acknowledged; `comp_psn` is the oldest unacknowledged one now.
  void on_acknowledged(std::uint32_t acked_psns, wire::Psn comp_psn) {
    if (!enabled() || acked_psns == 0) return;
    if (recovering_) {
      if (comp_psn.before(recovery_end_)) return;  // still what was in flight at the loss
      recovering_ = false;
    }
    if (psns_ >= max_psns_) return;
    acked_credit_ += acked_psns;
    while (acked_credit_ >= psns_ && psns_ < max_psns_) {
      acked_credit_ -= psns_;
      ++psns_;
    }
  }

  // A loss was found (a NAK, a READ response gap, an expired retransmission timer);
  // `psn_high` is one past the highest PSN sent.
  void on_loss(wire::Psn psn_high) {
    if (!enabled() || recovering_) return;
    psns_ = std::max(min_psns_, psns_ / 2);
    recovering_ = true;
    recovery_end_ = psn_high;
    acked_credit_ = 0;
    ++reductions_;
  }

 private:
  std::uint32_t max_psns_ = 128;
  std::uint32_t min_psns_ = 0;
  std::uint32_t psns_ = 128;
  std::uint32_t acked_credit_ = 0;  // PSNs acknowledged toward the next +1
  bool recovering_ = false;
  wire::Psn recovery_end_;  // psn_high at the last decrease
  std::uint64_t reductions_ = 0;
};

}  // namespace xroce::transport
