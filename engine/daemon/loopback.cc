#include "daemon/loopback.h"

#include <algorithm>
#include <cstring>

#include "daemon/datapath.h"

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

void LoopbackRegistry::set(Datapath& datapath, const std::vector<wire::IpAddr>& ips,
                           const wire::MacAddr& mac) {
  const auto it = std::find_if(devices_.begin(), devices_.end(),
                               [&](const Device& d) { return d.datapath == &datapath; });
  if (it == devices_.end()) {
    devices_.push_back(Device{&datapath, ips, mac});
  } else {
    it->ips = ips;
    it->mac = mac;
  }
  publish();
}

void LoopbackRegistry::remove(Datapath& datapath) {
  const auto it = std::find_if(devices_.begin(), devices_.end(),
                               [&](const Device& d) { return d.datapath == &datapath; });
  if (it == devices_.end()) return;
  devices_.erase(it);
  // Its own workers are about to stop; the others must let go of them first.
  publish();
  datapath.set_loopback(std::make_shared<LoopbackTable>());
}

bool LoopbackRegistry::serves(const wire::IpAddr& ip) const {
  return table_->find(ip) != nullptr;
}

void LoopbackRegistry::publish() {
  auto table = std::make_shared<LoopbackTable>();
  for (const Device& d : devices_) {
    LoopbackTarget target;
    target.routes = &d.datapath->routes();
    for (std::uint32_t w = 0; w < d.datapath->worker_count(); ++w)
      target.workers.push_back(&d.datapath->worker(w));
    target.mac = d.mac;
    table->targets_.push_back(std::move(target));
    // Two devices with the same address (possible for IPv6 link-local ones on two links):
    // the first keeps it.
    for (const wire::IpAddr& ip : d.ips)
      table->by_ip_.try_emplace(ip.bytes, table->targets_.size() - 1);
  }
  table_ = table;
  for (const Device& d : devices_)
    d.datapath->set_loopback(table_);
}

}  // namespace xroce::daemon
