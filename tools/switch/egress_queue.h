// One egress port of the switch: a drop-tail FIFO with a byte limit, RED-style ECN marking on
// the instantaneous queue depth, a rate limit, and queue-depth statistics. Pure: time comes in
// as a parameter (nanoseconds on any monotonic clock) and randomness from a seeded PRNG.
//
// Marking (docs/protocol.md §5.1), decided when a packet is queued, on the bytes already queued q:
//   q <= kmin: never; kmin < q <= kmax: with probability pmax * (q - kmin) / (kmax - kmin);
//   q > kmax: always.
// Rate limit: a virtual-time (GCRA) bucket. Each frame occupies the link for
// bytes * 8 / rate; the head may leave once the link is free, less a burst tolerance that
// absorbs a late wake-up without losing the configured rate.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <vector>

namespace xroce::sw {

struct EcnThresholds {
  std::uint64_t kmin_bytes = 0;
  std::uint64_t kmax_bytes = 0;
  double pmax = 0;
};

struct EgressConfig {
  std::uint64_t buffer_bytes = 1 << 20;
  std::uint64_t rate_mbit = 0;  // 0: no limit
  std::optional<EcnThresholds> ecn;
  std::uint64_t seed = 1;
};

struct EgressCounters {
  std::uint64_t tx = 0;
  std::uint64_t tx_bytes = 0;
  std::uint64_t marked = 0;
  std::uint64_t dropped_full = 0;
  std::uint64_t queue_max_bytes = 0;
};

class EgressQueue {
 public:
  explicit EgressQueue(const EgressConfig& config);

  enum class Admission : std::uint8_t { kQueued, kQueuedMarkCe, kDroppedFull };
  // Decides the fate of a frame of `bytes` before it is queued: kQueuedMarkCe asks the caller
  // to set CE (when the frame is ECT) before calling push. Counts drops and depth samples.
  Admission admit(std::size_t bytes, bool ect);
  // `buffer` is what the port sends (a frame, maybe behind a metadata header); `wire_bytes`
  // is the frame's length on the wire, which the queue limit and the rate limit count.
  void push(std::vector<std::uint8_t> buffer, std::size_t wire_bytes, bool marked);

  bool empty() const { return frames_.empty(); }
  std::uint64_t depth_bytes() const { return depth_bytes_; }
  // When the head frame may leave (nullopt when the queue is empty).
  std::optional<std::uint64_t> head_ready_ns() const;
  // The head's buffer, when it may leave at `now_ns`.
  const std::vector<std::uint8_t>* head_if_ready(std::uint64_t now_ns) const;
  // Removes the head, charging the link for it from `now_ns` when `sent`.
  void pop(std::uint64_t now_ns, bool sent);

  const EgressCounters& counters() const { return counters_; }
  // The 99th percentile of the depth seen by arriving frames (bin upper edge, at most the max).
  std::uint64_t depth_p99_bytes() const;

 private:
  bool should_mark();
  void record_depth(std::uint64_t bytes);

  EgressConfig config_;
  struct Queued {
    std::vector<std::uint8_t> buffer;
    std::size_t wire_bytes = 0;
  };
  std::deque<Queued> frames_;
  std::uint64_t depth_bytes_ = 0;
  std::uint64_t link_free_ns_ = 0;  // virtual time at which the link has sent all it owes
  std::uint64_t burst_ns_ = 0;
  std::mt19937_64 rng_;
  EgressCounters counters_;
  std::uint64_t bin_bytes_ = 64;
  std::vector<std::uint64_t> depth_bins_;
  std::uint64_t depth_samples_ = 0;
};

}  // namespace xroce::sw
