// DatapathRunner: the device model's QpRunner (engine/device/objects.h) over a Datapath. It
// places each new QP on a worker and binds the QP's shared-memory rings (include/xroce/
// queues.h) to it: WQEs from the SQ/RQ/SRQ rings into the transport, completions into the CQ
// rings (with a completion-channel event when the CQ is armed), async events to the owner's
// event socket, address vectors from the QP's path or the UD WQE's address handle.
//
// Placement: QPs that share a CQ or an SRQ go to the same worker (a CQ ring has one producer,
// and the transport's Srq is single-threaded), and an XRC target goes where its domain and its
// domain's SRQ CQs are; otherwise the least loaded worker.
//
// Threading: host/run/unhost run on the control thread (the Device's). RingBinding runs on the
// owning worker only.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/datapath.h"
#include "device/device.h"

namespace xroce::daemon {

class DatapathRunner final : public device::QpRunner {
 public:
  DatapathRunner(device::Device& device, std::unique_ptr<Datapath> datapath);
  ~DatapathRunner() override;

  void host(device::QueuePair& qp, std::unique_ptr<transport::Qp> core) override;
  void run(device::QueuePair& qp, const std::function<void(transport::Qp&)>& fn) override;
  void catch_up(device::QueuePair& qp) override;
  void unhost(device::QueuePair& qp) override;

  Datapath& datapath() { return *datapath_; }

 private:
  std::uint32_t choose_worker(const device::QueuePair& qp);
  std::vector<const void*> shared_objects(const device::QueuePair& qp);

  device::Device& device_;
  std::unique_ptr<Datapath> datapath_;
  // Which worker writes each CQ / serves each SRQ, by the object's address, with a use count.
  struct Placement {
    std::uint32_t worker;
    std::uint32_t users;
  };
  std::map<const void*, Placement> shared_;
  // What each hosted QP counted in shared_ (by QPN), to uncount the same at unhost.
  std::map<std::uint32_t, std::vector<const void*>> placed_with_;
};

// The device's local addresses (its GIDs' IPs, each once): what the XDP steering map holds and
// what the device serves in the loopback registry.
std::vector<wire::IpAddr> local_ips_of(const device::Device& device);

// Opens `device`'s data path (ports on its netdev, workers) and the runner over it. `queues` 0
// means one per online CPU, capped by the netdev's receive queues (AF_XDP binds one socket
// per queue); a UDP port always has one. `cpus`: worker i runs on cpus[i % size] (empty:
// anywhere). `loopback`: the daemon's registry (frames between its devices never reach a
// port). The error says what failed.
wire::Result<std::unique_ptr<DatapathRunner>, std::string> start_datapath(
    device::Device& device, DatapathPort port, std::uint32_t queues,
    const std::vector<std::uint32_t>& cpus, LoopbackRegistry* loopback);

}  // namespace xroce::daemon
