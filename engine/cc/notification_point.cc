#include "cc/notification_point.h"

#include <cassert>

namespace xroce::cc {

bool NotificationPoint::on_ce_marked(const DcqcnParams& params, int priority,
                                     std::uint64_t now_ns) {
  assert(!sent_any_ || now_ns >= last_cnp_ns_);
  // Marked packets are counted whether or not CNPs are enabled: the counter describes what
  // arrived.
  ++counters_.np_ecn_marked_roce_packets;
  if (!params.np_enabled(priority)) return false;
  const std::uint64_t spacing_ns = std::uint64_t{params.min_time_between_cnps} * 1000;
  if (sent_any_ && now_ns - last_cnp_ns_ < spacing_ns) return false;
  sent_any_ = true;
  last_cnp_ns_ = now_ns;
  ++counters_.np_cnp_sent;
  return true;
}

}  // namespace xroce::cc
