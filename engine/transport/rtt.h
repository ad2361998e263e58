// The round-trip time of one RC QP as its requester sees it: from sending a request packet that
// asks for an acknowledgement (AckReq) to the first response that acknowledges it (an ACK, a
// READ response or an ATOMIC ACK moving the completer's oldest unacknowledged PSN past it).
//
// One packet is timed at a time. Retransmitted packets are never timed, and a retry (ACK
// timeout, PSN-sequence NAK, RNR NAK) voids the running timing, because an acknowledgement
// after a retry cannot tell which transmission it answers (Karn's algorithm). The smoothed
// estimate is RFC 6298's SRTT (gain 1/8). Sans-I/O: time comes in as a parameter.
#pragma once

#include <algorithm>
#include <cstdint>

#include "wire/psn.h"

namespace xroce::transport {

class RttEstimator {
 public:
  // The requester sent request packet `psn` at now_ns.
  void on_request_sent(std::uint64_t now_ns, wire::Psn psn, bool ack_req, bool retransmission) {
    if (timing_ || !ack_req || retransmission) return;
    timing_ = true;
    timed_psn_ = psn;
    sent_ns_ = now_ns;
  }
  // The completer moved its oldest unacknowledged PSN to `comp_psn` at now_ns.
  void on_acknowledged(std::uint64_t now_ns, wire::Psn comp_psn) {
    if (!timing_ || !comp_psn.after(timed_psn_)) return;
    timing_ = false;
    add_sample(now_ns >= sent_ns_ ? now_ns - sent_ns_ : 0);
  }
  // A go-back-N or RNR retry started: the running timing is void.
  void on_retry() { timing_ = false; }

  std::uint64_t smoothed_ns() const { return smoothed_ns_; }
  std::uint64_t latest_ns() const { return latest_ns_; }
  std::uint64_t min_ns() const { return min_ns_; }
  std::uint64_t samples() const { return samples_; }

 private:
  static constexpr std::uint64_t kGainShift = 3;  // RFC 6298 alpha = 1/8

  void add_sample(std::uint64_t rtt_ns) {
    latest_ns_ = rtt_ns;
    if (samples_ == 0) {
      smoothed_ns_ = rtt_ns;
      min_ns_ = rtt_ns;
    } else {
      // SRTT += (R' - SRTT) / 8, in integers without going below zero.
      smoothed_ns_ = smoothed_ns_ - (smoothed_ns_ >> kGainShift) + (rtt_ns >> kGainShift);
      min_ns_ = std::min(min_ns_, rtt_ns);
    }
    ++samples_;
  }

  bool timing_ = false;
  wire::Psn timed_psn_;
  std::uint64_t sent_ns_ = 0;
  std::uint64_t smoothed_ns_ = 0;
  std::uint64_t latest_ns_ = 0;
  std::uint64_t min_ns_ = 0;
  std::uint64_t samples_ = 0;
};

}  // namespace xroce::transport
