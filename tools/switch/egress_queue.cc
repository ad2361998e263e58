#include "egress_queue.h"

#include <algorithm>

namespace xroce::sw {

namespace {

constexpr std::uint64_t kDepthBins = 4096;
// The rate limiter lets the head go this early, so a switch woken late by the scheduler
// catches up instead of losing rate.
constexpr std::uint64_t kBurstToleranceNs = 100'000;

std::uint64_t transmit_ns(std::uint64_t bytes, std::uint64_t rate_mbit) {
  return bytes * 8 * 1000 / rate_mbit;  // bits / (Mbit/s) = microseconds; * 1000 = ns
}

}  // namespace

EgressQueue::EgressQueue(const EgressConfig& config) : config_(config), rng_(config.seed) {
  bin_bytes_ = std::max<std::uint64_t>(64, (config.buffer_bytes + kDepthBins - 1) / kDepthBins);
  depth_bins_.assign(config.buffer_bytes / bin_bytes_ + 2, 0);
  if (config.rate_mbit != 0) burst_ns_ = kBurstToleranceNs;
}

bool EgressQueue::should_mark() {
  const EcnThresholds& t = *config_.ecn;
  const std::uint64_t q = depth_bytes_;
  if (q <= t.kmin_bytes) return false;
  if (q > t.kmax_bytes) return true;
  const double p = t.pmax * static_cast<double>(q - t.kmin_bytes) /
                   static_cast<double>(t.kmax_bytes - t.kmin_bytes);
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < p;
}

void EgressQueue::record_depth(std::uint64_t bytes) {
  const std::uint64_t bin = std::min<std::uint64_t>(bytes / bin_bytes_, depth_bins_.size() - 1);
  ++depth_bins_[bin];
  ++depth_samples_;
}

EgressQueue::Admission EgressQueue::admit(std::size_t bytes, bool ect) {
  record_depth(depth_bytes_);
  if (depth_bytes_ + bytes > config_.buffer_bytes) {
    ++counters_.dropped_full;
    return Admission::kDroppedFull;
  }
  if (ect && config_.ecn && should_mark()) return Admission::kQueuedMarkCe;
  return Admission::kQueued;
}

void EgressQueue::push(std::vector<std::uint8_t> buffer, std::size_t wire_bytes, bool marked) {
  if (marked) ++counters_.marked;
  depth_bytes_ += wire_bytes;
  counters_.queue_max_bytes = std::max(counters_.queue_max_bytes, depth_bytes_);
  frames_.push_back({std::move(buffer), wire_bytes});
}

std::optional<std::uint64_t> EgressQueue::head_ready_ns() const {
  if (frames_.empty()) return std::nullopt;
  if (config_.rate_mbit == 0 || link_free_ns_ <= burst_ns_) return 0;
  return link_free_ns_ - burst_ns_;
}

const std::vector<std::uint8_t>* EgressQueue::head_if_ready(std::uint64_t now_ns) const {
  const auto ready = head_ready_ns();
  if (!ready || *ready > now_ns) return nullptr;
  return &frames_.front().buffer;
}

void EgressQueue::pop(std::uint64_t now_ns, bool sent) {
  const std::uint64_t bytes = frames_.front().wire_bytes;
  depth_bytes_ -= bytes;
  frames_.pop_front();
  if (!sent) return;
  ++counters_.tx;
  counters_.tx_bytes += bytes;
  if (config_.rate_mbit != 0) {
    link_free_ns_ = std::max(link_free_ns_, now_ns) + transmit_ns(bytes, config_.rate_mbit);
  }
}

std::uint64_t EgressQueue::depth_p99_bytes() const {
  if (depth_samples_ == 0) return 0;
  // The smallest bin edge with at least 99 % of the samples at or below it.
  const std::uint64_t wanted = (depth_samples_ * 99 + 99) / 100;
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < depth_bins_.size(); ++i) {
    seen += depth_bins_[i];
    if (seen >= wanted)
      return std::min<std::uint64_t>((i + 1) * bin_bytes_ - 1, counters_.queue_max_bytes);
  }
  return counters_.queue_max_bytes;
}

}  // namespace xroce::sw
