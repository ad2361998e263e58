// The devices one xroced serves (docs/ARCHITECTURE.md decisions 1 and 2): each device's model, data
// path, congestion-control settings and client memory, its sysfs-shaped tree and device node,
// and the events that keep the model in step with the netdevs; with them the namespace's
// rdma_cm service (cm_service.h) and the loopback registry that joins their data paths.
//
// Threading: the control thread only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/cm_service.h"
#include "daemon/datapath_runner.h"
#include "daemon/loopback.h"
#include "daemon/rx_impairment.h"
#include "daemon/sysfs_tree.h"
#include "device/device.h"
#include "device/dma.h"
#include "xroce/control.h"
#include "xroce/run_dir.h"

namespace xroce::daemon {

struct ServedDevice {
  // Before the model, which holds views of it: client processes' memory (decision 5).
  std::shared_ptr<device::ProcessMemoryDirectory> memory;
  std::unique_ptr<device::Device> model;
  std::string uverbs;
  control::PortKind port = control::PortKind::afxdp;
  uint32_t queues = 0;
  std::vector<std::uint32_t> cpus;  // `link add ... cpus`: where the workers run; empty: anywhere
  // Congestion control as `xroce cc` set it; every worker holds a copy (control_cc.cc).
  cc::CcDevice cc = daemon_cc_defaults();
  std::string cc_profile = "connectx";
  // The receive impairment `xroce impair` set; every worker holds a copy (control_impair.cc).
  RxImpairment impairment;
  // Last, so it is destroyed first: the workers stop before the model's objects go.
  std::unique_ptr<DatapathRunner> runner;
};

// An asynchronous event for every context of a device (ibv_event_type).
struct DeviceEvent {
  std::string device;
  uint64_t element;
  uint32_t event_type;
};

class Devices {
 public:
  explicit Devices(const control::RunPaths& paths);
  ~Devices() { remove_all(); }
  Devices(const Devices&) = delete;
  Devices& operator=(const Devices&) = delete;

  SysfsTree& tree() { return tree_; }
  CmService& cm() { return cm_; }
  std::map<std::string, ServedDevice>& all() { return devices_; }
  ServedDevice* find(const std::string& name);
  // The position of a device among all (HelloReply::device_index).
  uint32_t index_of(const std::string& name) const;
  bool empty() const { return devices_.empty(); }
  // True once any device was added: the daemon exits when the last one goes.
  bool served_any() const { return served_any_; }

  // `xroce link add`: the model, data path, sysfs tree and device node. 0 or errno.
  int add(const control::LinkAddRequest& request);
  // `xroce link del`: the caller has released every client's objects first.
  void remove(const std::string& name);
  void remove_all();

  // Re-reads every device's netdev and addresses; returns the events to send.
  std::vector<DeviceEvent> refresh_netdevs();
  // Rewrites each device's ports/1/hw_counters from its workers' counters, at most once per
  // kCounterRefreshMs (the loop wakes that often while devices exist), so readers of the files
  // see counts no older than that without running `xroce stat`.
  void refresh_hw_counters();
  static constexpr int kCounterRefreshMs = 1000;
  // Writes `served`'s ports/1/hw_counters now from its workers' counters (zeros without a data
  // path); returns the values written.
  device::CounterValues write_hw_counters(const std::string& name, ServedDevice& served);

 private:
  SysfsTree tree_;
  std::string control_socket_;
  // Which GIDs the devices serve, for loopback between them; outlives every device's data path.
  LoopbackRegistry loopback_;
  CmService cm_;  // holds pointers into the devices' models and runners: told before they go
  std::map<std::string, ServedDevice> devices_;
  bool served_any_ = false;
  std::uint64_t counters_written_ns_ = 0;
};

// Every worker's device counters, summed (control_stat.cc).
device::CounterValues worker_counters(Datapath& datapath);
// Gives every worker of the device its congestion-control settings (blocks until each has).
void push_cc(ServedDevice& served);
// The netdev's speed from sysfs, or 100 Gb/s where it has none (veth): the rate a QP starts
// at and recovers to.
double line_rate_mbps(const std::string& netdev);

}  // namespace xroce::daemon
