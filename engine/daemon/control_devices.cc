#include "daemon/control_devices.h"

#include <infiniband/verbs.h>
#include <sys/random.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>

#include "daemon/netdev.h"
#include "device/counters_report.h"
#include "xroce/control_message.h"
#include "xroce/cpu_list.h"

namespace xroce::daemon {

namespace {

bool valid_device_name(const std::string& name) {
  if (name.empty() || name.size() >= control::kNameBytes) return false;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '_' && c != '-') return false;
  }
  return true;
}

uint32_t random_bits() {
  uint32_t bits = 0;
  while (getrandom(&bits, sizeof bits, 0) != sizeof bits) {
  }
  return bits;
}

}  // namespace

Devices::Devices(const control::RunPaths& paths)
    : tree_(paths.sysfs_root), control_socket_(paths.control_socket) {}

ServedDevice* Devices::find(const std::string& name) {
  const auto it = devices_.find(name);
  return it == devices_.end() ? nullptr : &it->second;
}

uint32_t Devices::index_of(const std::string& name) const {
  return static_cast<uint32_t>(std::distance(devices_.begin(), devices_.find(name)));
}

int Devices::add(const control::LinkAddRequest& request) {
  const std::string name = control::bounded_name(request.name, sizeof(request.name));
  const std::string netdev_name = control::bounded_name(request.netdev, sizeof(request.netdev));
  if (!valid_device_name(name)) return EINVAL;
  if (devices_.count(name) != 0) return EEXIST;
  for (const auto& [other, served] : devices_) {
    if (served.model->netdev().name == netdev_name) return EBUSY;
  }
  // The CLI checked the list against its own CPUs; the daemon may have been started with others.
  std::vector<std::uint32_t> cpus;
  if (const std::string list = control::bounded_name(request.cpus, sizeof(request.cpus));
      !list.empty()) {
    std::string error;
    cpus = parse_cpu_list(list, error);
    if (cpus.empty() || first_cpu_not_allowed(cpus) >= 0) return EINVAL;
  }
  auto state = read_netdev(netdev_name);
  if (!state) return state.error();

  ServedDevice served;
  served.memory = std::make_shared<device::ProcessMemoryDirectory>();
  // Random first QPN and random memory keys (the kernel's random source): nothing a peer sees of
  // one QP or region tells it another's.
  served.model = std::make_unique<device::Device>(
      name, *state, random_bits(),
      [directory = served.memory](device::ClientId owner)
          -> std::unique_ptr<transport::MemoryAccess> { return directory->view(owner); },
      random_bits);
  served.model->update_addresses(read_addresses(netdev_name));
  served.port = request.port;
  served.queues = request.queues;
  served.cpus = cpus;
  auto runner = start_datapath(
      *served.model,
      request.port == control::PortKind::udp ? DatapathPort::kUdp : DatapathPort::kAfXdp,
      request.queues, cpus, &loopback_);
  if (!runner) {
    std::fprintf(stderr, "xroced: %s: cannot start the data path: %s\n", name.c_str(),
                 runner.error().c_str());
    return EOPNOTSUPP;
  }
  served.runner = std::move(*runner);
  served.model->set_runner(served.runner.get());
  served.cc.line_rate_mbps = line_rate_mbps(netdev_name);
  push_cc(served);  // before any QP: a QP's reaction point takes the line rate when it connects
  served.uverbs = create_device_node();
  if (served.uverbs.empty()) return errno != 0 ? errno : EIO;
  if (int err = tree_.write_device(*served.model, served.uverbs, control_socket_)) {
    tree_.remove_device(name, served.uverbs);
    remove_device_node(served.uverbs);
    return err;
  }
  // Its hw_counters exist as soon as the device does, as in sysfs: a reader before the next
  // refresh finds zeros, not no file.
  write_hw_counters(name, served);
  ServedDevice& added = devices_.emplace(name, std::move(served)).first->second;
  cm_.add_device(name, *added.model, *added.runner);
  served_any_ = true;
  return 0;
}

void Devices::remove(const std::string& name) {
  const auto it = devices_.find(name);
  if (it == devices_.end()) return;
  cm_.remove_device(name);  // its ids get DEVICE_REMOVAL
  tree_.remove_device(name, it->second.uverbs);
  remove_device_node(it->second.uverbs);
  devices_.erase(it);
}

void Devices::remove_all() {
  while (!devices_.empty())
    remove(devices_.begin()->first);
}

std::vector<DeviceEvent> Devices::refresh_netdevs() {
  std::vector<DeviceEvent> events;
  for (auto& [name, served] : devices_) {
    auto& dev = *served.model;
    const uint32_t old_state = device::port_state(dev.netdev());
    auto state = read_netdev(dev.netdev().name);
    device::NetdevState now = dev.netdev();
    if (state) {
      now = *state;
    } else {
      now.up = now.carrier = false;  // the netdev is gone
    }
    const bool port_changed = dev.update_netdev(now);
    const bool gids_changed =
        dev.update_addresses(state ? read_addresses(now.name) : std::vector<device::IpAddress>{});
    if (!port_changed && !gids_changed) continue;
    // New addresses are steered to our sockets from now on, removed ones no longer.
    if (gids_changed && served.runner) served.runner->datapath().set_local_ips(local_ips_of(dev));
    tree_.write_port(dev);
    const uint32_t new_state = device::port_state(now);
    if (new_state != old_state) {
      events.push_back(
          {name, 1, new_state == device::kPortActive ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR});
    }
    if (gids_changed) events.push_back({name, 1, IBV_EVENT_GID_CHANGE});
  }
  return events;
}

void Devices::refresh_hw_counters() {
  const std::uint64_t now = monotonic_now_ns();
  if (now - counters_written_ns_ < kCounterRefreshMs * 1'000'000ull) return;
  counters_written_ns_ = now;
  for (auto& [name, served] : devices_)
    if (served.runner) write_hw_counters(name, served);
}

device::CounterValues Devices::write_hw_counters(const std::string& name, ServedDevice& served) {
  device::CounterValues values{};
  if (served.runner) values = worker_counters(served.runner->datapath());
  device::write_hw_counters(tree_.root() + "/class/infiniband/" + name + "/ports/1", values);
  return values;
}

}  // namespace xroce::daemon
