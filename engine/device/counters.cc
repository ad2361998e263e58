#include "device/counters.h"

#include <cassert>

namespace xroce::device {

std::optional<Counter> counter_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kCounterCount; ++i)
    if (kCounterNames[i] == name) return static_cast<Counter>(i);
  return std::nullopt;
}

DeviceCounters::DeviceCounters(std::size_t workers)
    : writers_(workers + 1), blocks_(std::make_unique<CounterBlock[]>(workers + 1)) {}

CounterBlock& DeviceCounters::worker_block(std::size_t w) {
  assert(w + 1 < writers_);
  return blocks_[w + 1];
}

CounterValues DeviceCounters::read() const {
  CounterValues sum{};
  for (std::size_t b = 0; b < writers_; ++b)
    for (std::size_t i = 0; i < kCounterCount; ++i)
      sum[i] += blocks_[b].load(static_cast<Counter>(i));
  return sum;
}

std::uint64_t DeviceCounters::read(Counter c) const {
  std::uint64_t sum = 0;
  for (std::size_t b = 0; b < writers_; ++b)
    sum += blocks_[b].load(c);
  return sum;
}

}  // namespace xroce::device
