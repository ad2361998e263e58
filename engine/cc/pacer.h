// Per-QP pacer: releases a QP's packets no faster than its current rate (a next-send-time
// pacer with an optional burst allowance). Pure: given now, a packet size and the rate, it says
// when the packet may go. The rate may change between packets (DCQCN does so at every event);
// each packet is spaced by its own size at the rate in force when it was sent.
#pragma once

#include <cstdint>

namespace xroce::cc {

class Pacer {
 public:
  // `burst_bytes`: how far an idle QP may run ahead of its rate when it resumes (0 = strict
  // spacing, every packet waits its full serialisation time at the paced rate).
  explicit Pacer(std::uint32_t burst_bytes = 0) : burst_bytes_(burst_bytes) {}

  // True if a packet may leave at `now_ns`.
  bool may_send(std::uint64_t now_ns) const { return next_send_ps_ <= now_ns * kPsPerNs; }
  // Earliest time the next packet may leave (rounded up to whole nanoseconds).
  std::uint64_t next_send_ns() const { return (next_send_ps_ + kPsPerNs - 1) / kPsPerNs; }

  // Records that a packet of `bytes` left at `now_ns` (which must satisfy may_send) while the
  // QP's rate was `rate_mbps` (> 0). Returns next_send_ns().
  std::uint64_t on_sent(std::uint64_t now_ns, std::uint32_t bytes, double rate_mbps);

  // The QP's rate changed at `now_ns` from `old_rate_mbps` (the rate the pending spacing was
  // computed at) to `new_rate_mbps` (both > 0). The part of the spacing not yet elapsed is
  // rescaled to the new rate, as a hardware limiter that refills at the rate in force would:
  // without this, a packet sent at the floor rate (1 Mb/s: 33 ms for 4 KB) would hold the QP
  // long after its rate recovered. Returns next_send_ns().
  std::uint64_t on_rate_change(std::uint64_t now_ns, double old_rate_mbps, double new_rate_mbps);

 private:
  // Picoseconds keep the spacing exact enough at 400 Gb/s (20 ps per byte); 2^64 ps is 213 days.
  static constexpr std::uint64_t kPsPerNs = 1000;

  std::uint32_t burst_bytes_;
  std::uint64_t next_send_ps_ = 0;
};

}  // namespace xroce::cc
