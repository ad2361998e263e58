#include "daemon/rx_impairment.h"

#include <algorithm>
#include <cmath>

namespace xroce::daemon {

void RxImpairer::set(const RxImpairment& impairment, std::uint32_t worker_index) {
  const double loss = std::clamp(impairment.loss, 0.0, 1.0);
  // 2^64 itself does not fit: a loss of 1 drops all but one packet in 2^64.
  threshold_ = loss >= 1.0 ? ~std::uint64_t{0} : static_cast<std::uint64_t>(std::ldexp(loss, 64));
  rng_.seed(impairment.seed + worker_index);
}

}  // namespace xroce::daemon
