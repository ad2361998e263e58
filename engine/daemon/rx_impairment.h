// A device's receive impairment (`xroce impair`, control ops impair_show / impair_set): each good
// RoCEv2 packet a worker takes in, from its port or the loopback, is dropped with probability
// `loss` before any QP sees it, and counted (rx_impair_drops). It measures loss recovery at the
// device's own rate where no impairing link exists (this host has no netem); set on both devices,
// each direction loses `loss`. A frame that is not RoCEv2, or is malformed, is counted as such
// first.
//
// Threading: RxImpairment is a value; each worker holds its own RxImpairer.
#pragma once

#include <cstdint>
#include <random>

namespace xroce::daemon {

struct RxImpairment {
  double loss = 0;         // [0, 1)
  std::uint64_t seed = 1;  // each worker draws from seed + its index: runs repeat
};

class RxImpairer {
 public:
  void set(const RxImpairment& impairment, std::uint32_t worker_index);
  // Whether the next packet is dropped: one draw per packet while loss > 0.
  bool drop() { return threshold_ != 0 && rng_() < threshold_; }

 private:
  std::uint64_t threshold_ = 0;  // loss * 2^64
  std::mt19937_64 rng_;
};

}  // namespace xroce::daemon
