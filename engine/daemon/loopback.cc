#include "daemon/loopback.h"

#include <cstring>

#include "daemon/datapath_frames.h"

namespace xroce::daemon {

Worker& LoopbackTarget::worker_for(wire::Qpn qpn) const {
  const std::uint32_t owner = routes->owner(qpn);
  return *workers[owner < workers.size() ? owner : 0];
}

std::size_t LoopbackTable::IpHash::operator()(const std::array<std::uint8_t, 16>& b) const {
  std::uint64_t hi = 0, lo = 0;
  std::memcpy(&hi, b.data(), 8);
  std::memcpy(&lo, b.data() + 8, 8);
  return std::hash<std::uint64_t>{}(hi * 0x9E3779B97F4A7C15ull ^ lo);
}

void LoopbackTable::add(const std::vector<wire::IpAddr>& ips, LoopbackTarget target) {
  targets_.push_back(std::move(target));
  for (const wire::IpAddr& ip : ips)
    by_ip_.try_emplace(ip.bytes, targets_.size() - 1);
}

}  // namespace xroce::daemon
