// The data path of one device: its port queues and the workers that own them
// (ARCHITECTURE.md decisions 7 and 8). `xroce link add NAME netdev IF port afxdp|udp queues N`
// makes one: AF_XDP opens the steering program on the netdev and one AF_XDP socket per queue
// (queue i for worker i); UDP opens one socket port, so it has exactly one queue.
//
// QP placement: worker owner_worker(qpn) owns a QP (datapath_frames.h), so every worker routes
// a received packet without a shared table.
//
// Threading: a Datapath is made, used and destroyed on the control thread; it reaches its
// workers only through Worker::call/post_command.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/worker.h"
#include "net/xdp_steering.h"
#include "wire/frame.h"

namespace xroce::daemon {

enum class DatapathPort : std::uint8_t { kAfXdp, kUdp };

struct DatapathConfig {
  std::string ifname;
  int ifindex = 0;
  wire::MacAddr mac{};
  DatapathPort port = DatapathPort::kAfXdp;
  std::uint32_t queues = 0;  // 0: one per online CPU (AF_XDP; UDP has one)
  std::vector<wire::IpAddr> local_ips;
  std::uint32_t mtu = 1500;
};

struct DatapathStatus {
  std::string port_mode;  // net::to_string(PortMode) of the first queue
  std::uint32_t workers = 0;
  std::size_t qps = 0;
  DatapathCounters counters;
  net::PortStats port;  // summed over the queues
};

class Datapath {
 public:
  // Opens the ports and starts the workers; the error says what failed.
  static wire::Result<std::unique_ptr<Datapath>, std::string> open(const DatapathConfig& config);
  // Workers over ports the caller made (tests); ports[i] goes to worker i.
  static std::unique_ptr<Datapath> over_ports(std::vector<std::unique_ptr<net::Port>> ports,
                                              int ifindex, bool resolve_macs);
  ~Datapath();
  Datapath(const Datapath&) = delete;
  Datapath& operator=(const Datapath&) = delete;

  std::uint32_t worker_count() const { return static_cast<std::uint32_t>(workers_.size()); }
  Worker& worker_for(wire::Qpn qpn) { return *workers_[owner_worker(qpn, worker_count())]; }
  Worker& worker(std::uint32_t index) { return *workers_[index]; }

  // Places a QP on its owning worker (blocks until it is there).
  void add_qp(HostedQp hosted);
  bool remove_qp(wire::Qpn qpn);
  // Frames to this address are ours from now on (AF_XDP steering; the UDP port takes all).
  void add_local_ip(const wire::IpAddr& ip);
  DatapathStatus status();

 private:
  Datapath() = default;
  void start_workers(std::vector<std::unique_ptr<net::Port>> ports, int ifindex, bool resolve_macs);

  std::shared_ptr<net::XdpSteering> steering_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

}  // namespace xroce::daemon
