// The round-trip time of one RC QP as its requester sees it: from sending a request packet that
// asks for an acknowledgement (AckReq) to the first response that acknowledges it (an ACK, a
// READ response or an ATOMIC ACK moving the completer's oldest unacknowledged PSN past it).
//
// One packet is timed at a time. Retransmitted packets are never timed, and a retry (ACK
// timeout, PSN-sequence NAK, RNR NAK) voids the running timing, because an acknowledgement
// after a retry cannot tell which transmission it answers (Karn's algorithm). The smoothed
// estimate is RFC 6298's SRTT (gain 1/8) and RTTVAR (gain 1/4); from them the retransmission
// timeout RTO = SRTT + 4 * RTTVAR (RFC 6298 2.3), at least a floor and at least twice the longest
// round trip measured in the last one to two seconds (the peak), doubled on each adaptive
// retransmission without a new sample in between (RFC 6298 5.5, 5.7), and never more than the
// QP's IBA Local ACK Timeout. The peak is there for hosts whose round trips are not steady: a
// worker or an application descheduled for milliseconds makes a round trip hundreds of times the
// smoothed one, and SRTT + 4 * RTTVAR, which forgets such a spike within a few samples, would
// resend on a clean link at the next one. Sans-I/O: time comes in as a parameter.
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
    add_sample(now_ns, now_ns >= sent_ns_ ? now_ns - sent_ns_ : 0);
  }
  // A go-back-N or RNR retry started: the running timing is void.
  void on_retry() { timing_ = false; }
  // The adaptive retransmission timer expired: the next RTO is twice as long, until a new
  // sample (RFC 6298 5.5; Karn: no sample comes from what is resent).
  void on_rto_expired() {
    if (backoff_shift_ < kMaxBackoffShift) ++backoff_shift_;
  }

  // The adaptive retransmission timeout: RFC 6298's RTO, raised to floor_ns and to
  // kPeakMultiplier * peak_ns(), doubled per expiry since the last sample, capped at cap_ns (the
  // QP's Local ACK Timeout). Without a sample yet there is nothing to adapt from: cap_ns.
  std::uint64_t rto_ns(std::uint64_t floor_ns, std::uint64_t cap_ns) const {
    if (samples_ == 0) return cap_ns;
    const std::uint64_t base_ns =
        std::max({smoothed_ns_ + 4 * rttvar_ns_, floor_ns, kPeakMultiplier * peak_ns()});
    return std::min(base_ns << backoff_shift_, cap_ns);
  }
  // The longest round trip sampled in the current peak window and the one before it: over the
  // last kPeakWindowNs to 2 * kPeakWindowNs (the windows are the samples' own, so a QP that went
  // quiet keeps the peak it last saw).
  std::uint64_t peak_ns() const { return std::max(peak_current_ns_, peak_previous_ns_); }
  static constexpr std::uint64_t kPeakWindowNs = 1'000'000'000;
  static constexpr std::uint64_t kPeakMultiplier = 2;
  std::uint64_t rttvar_ns() const { return rttvar_ns_; }
  std::uint32_t backoff_shift() const { return backoff_shift_; }

  std::uint64_t smoothed_ns() const { return smoothed_ns_; }
  std::uint64_t latest_ns() const { return latest_ns_; }
  std::uint64_t min_ns() const { return min_ns_; }
  std::uint64_t samples() const { return samples_; }

 private:
  static constexpr std::uint64_t kGainShift = 3;     // RFC 6298 alpha = 1/8
  static constexpr std::uint64_t kVarGainShift = 2;  // RFC 6298 beta = 1/4
  // 2^16 times any floor is beyond every Local ACK Timeout (at most 4.096 us * 2^31), so the
  // cap decides long before the shift could overflow.
  static constexpr std::uint32_t kMaxBackoffShift = 16;

  void add_sample(std::uint64_t now_ns, std::uint64_t rtt_ns) {
    note_peak(now_ns, rtt_ns);
    latest_ns_ = rtt_ns;
    backoff_shift_ = 0;
    if (samples_ == 0) {
      smoothed_ns_ = rtt_ns;
      rttvar_ns_ = rtt_ns / 2;  // RFC 6298 2.2
      min_ns_ = rtt_ns;
    } else {
      // RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R'| with the old SRTT, then
      // SRTT += (R' - SRTT) / 8 (RFC 6298 2.3), in integers without going below zero.
      const std::uint64_t deviation_ns =
          smoothed_ns_ > rtt_ns ? smoothed_ns_ - rtt_ns : rtt_ns - smoothed_ns_;
      rttvar_ns_ = rttvar_ns_ - (rttvar_ns_ >> kVarGainShift) + (deviation_ns >> kVarGainShift);
      smoothed_ns_ = smoothed_ns_ - (smoothed_ns_ >> kGainShift) + (rtt_ns >> kGainShift);
      min_ns_ = std::min(min_ns_, rtt_ns);
    }
    ++samples_;
  }

  void note_peak(std::uint64_t now_ns, std::uint64_t rtt_ns) {
    const std::uint64_t since_ns = now_ns - std::min(now_ns, peak_window_start_ns_);
    if (samples_ == 0 || since_ns >= kPeakWindowNs) {
      // A window with no sample in it leaves nothing to remember from before it.
      peak_previous_ns_ = samples_ != 0 && since_ns < 2 * kPeakWindowNs ? peak_current_ns_ : 0;
      peak_current_ns_ = 0;
      peak_window_start_ns_ = now_ns;
    }
    peak_current_ns_ = std::max(peak_current_ns_, rtt_ns);
  }

  bool timing_ = false;
  wire::Psn timed_psn_;
  std::uint64_t sent_ns_ = 0;
  std::uint64_t smoothed_ns_ = 0;
  std::uint64_t rttvar_ns_ = 0;
  std::uint32_t backoff_shift_ = 0;
  std::uint64_t latest_ns_ = 0;
  std::uint64_t min_ns_ = 0;
  std::uint64_t samples_ = 0;
  std::uint64_t peak_window_start_ns_ = 0;
  std::uint64_t peak_current_ns_ = 0;
  std::uint64_t peak_previous_ns_ = 0;
};

}  // namespace xroce::transport
