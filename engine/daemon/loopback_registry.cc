#include <algorithm>

#include "daemon/datapath.h"
#include "daemon/loopback.h"

namespace xroce::daemon {

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
    table->add(d.ips, std::move(target));
  }
  table_ = table;
  for (const Device& d : devices_)
    d.datapath->set_loopback(table_);
}

}  // namespace xroce::daemon
