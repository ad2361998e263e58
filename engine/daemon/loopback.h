// Loopback inside the daemon: a frame for a GID this daemon serves (a QP of the same device, or
// of another xroce device of this namespace on another netdev) never reaches a port or the
// neighbour table. The sending worker encodes it as for the wire and hands it to the worker
// that owns the destination QP, which takes it in as if it had arrived from its port: the same
// ingress checks (decode, ICRC), the same transport (PSNs, ACKs, retransmission) and the same
// counters (sent_pkts at the sender, rcvd_pkts at the receiver), as rxe loops a packet back
// in the kernel (rxe_net.c, rxe_loopback) instead of transmitting it.
//
// LoopbackRegistry (control thread) knows every device's data path and GIDs. On each change it
// publishes an immutable LoopbackTable to every worker of every device; a worker looks each
// frame's destination IP up in the table it holds (no lock, no shared write). The handover
// itself goes through the receiving worker's loopback inbox, a bounded lock-free queue any
// worker may push to (Worker::push_loopback, worker_ingress.h); a full inbox drops the frame, as a
// full receive ring would (RC retransmits it, UD loses it).
//
// Lifetime: a table names workers and QP routes of live data paths only. A data path leaves
// the registry (remove) before its workers stop, and remove() returns only once every other
// worker has taken the table without it, so no worker hands a frame to a worker that is gone.
//
// Threading: LoopbackRegistry is control-thread only. LoopbackTable is immutable once published
// and read by workers.
//
// Files: loopback.cc holds the table (part of the worker loop, pure), loopback_registry.cc the
// registry (it knows the daemon's data paths).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "wire/frame.h"
#include "wire/types.h"

namespace xroce::daemon {

class Datapath;
class QpRoutes;
class Worker;

// Where frames for one served GID go.
struct LoopbackTarget {
  const QpRoutes* routes = nullptr;  // the receiving device's QPN -> worker table
  std::vector<Worker*> workers;      // its workers, by index
  wire::MacAddr mac{};               // its netdev's MAC: the destination MAC the frame carries
  // The worker that owns `qpn`, or worker 0 when none does (it counts the frame as no-QP, as
  // a port-received frame for an unknown QPN is counted).
  Worker& worker_for(wire::Qpn qpn) const;
};

class LoopbackTable {
 public:
  // While the table is being built, before it is published: frames to `ips` go to `target`.
  // An address already in the table keeps its first target (two devices may share an IPv6
  // link-local address on two links).
  void add(const std::vector<wire::IpAddr>& ips, LoopbackTarget target);
  // The device serving `ip`, or nullptr.
  const LoopbackTarget* find(const wire::IpAddr& ip) const {
    const auto it = by_ip_.find(ip.bytes);
    return it == by_ip_.end() ? nullptr : &targets_[it->second];
  }
  bool empty() const { return by_ip_.empty(); }

 private:
  struct IpHash {
    std::size_t operator()(const std::array<std::uint8_t, 16>& b) const;
  };
  std::vector<LoopbackTarget> targets_;
  std::unordered_map<std::array<std::uint8_t, 16>, std::size_t, IpHash> by_ip_;
};

class LoopbackRegistry {
 public:
  LoopbackRegistry() = default;
  LoopbackRegistry(const LoopbackRegistry&) = delete;
  LoopbackRegistry& operator=(const LoopbackRegistry&) = delete;

  // Adds `datapath` or replaces what it serves: frames to `ips` go to its workers, carrying
  // `mac` as their destination MAC. Publishes to every worker (blocks until each has it).
  void set(Datapath& datapath, const std::vector<wire::IpAddr>& ips, const wire::MacAddr& mac);
  // Takes `datapath` out; when this returns no worker of another data path refers to it.
  void remove(Datapath& datapath);
  // Whether a device of this daemon serves `ip` (for the control thread: rdma_cm's "this
  // address is one of ours").
  bool serves(const wire::IpAddr& ip) const;

 private:
  struct Device {
    Datapath* datapath;
    std::vector<wire::IpAddr> ips;
    wire::MacAddr mac;
  };
  void publish();

  std::vector<Device> devices_;
  std::shared_ptr<const LoopbackTable> table_ = std::make_shared<LoopbackTable>();
};

}  // namespace xroce::daemon
