// The data path of one device: its port queues and the workers that own them
// (docs/ARCHITECTURE.md decisions 7 and 8). `xroce link add NAME netdev IF port afxdp|udp queues N`
// makes one: AF_XDP opens the steering program on the netdev and one AF_XDP socket per queue
// (queue i for worker i); UDP opens one socket port, so it has exactly one queue.
//
// Loopback (loopback.h): a data path opened with the daemon's LoopbackRegistry serves its GIDs
// there; frames any worker of the daemon sends to them go to its workers without a port.
//
// QP placement: the control thread places each QP on one worker and records it in the QpRoutes
// table every worker reads to route a received packet (datapath_frames.h). QPs that share a CQ
// or an SRQ must share a worker (a ring has one producer; the transport's Srq is not shared
// between threads): DatapathRunner chooses accordingly.
//
// Threading: a Datapath is made, used and destroyed on the control thread; it reaches its
// workers only through Worker::call/post_command.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/loopback.h"
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
  // Worker i runs on cpus[i % cpus.size()] (sched_setaffinity); empty: wherever the scheduler
  // puts it. Why a user binds them: engine/daemon/README.md, "Where the workers run".
  std::vector<std::uint32_t> cpus;
  std::vector<wire::IpAddr> local_ips;
  // The daemon's loopback registry: frames to the GIDs of any device registered there never
  // reach a port. Null: every frame goes to the port.
  LoopbackRegistry* loopback = nullptr;
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
  // Workers over ports the caller made (tests); ports[i] goes to worker i. With `loopback`, it
  // serves `local_ips` there, its frames carrying `mac`.
  static std::unique_ptr<Datapath> over_ports(std::vector<std::unique_ptr<net::Port>> ports,
                                              int ifindex, bool resolve_macs,
                                              LoopbackRegistry* loopback = nullptr,
                                              const std::vector<wire::IpAddr>& local_ips = {},
                                              const wire::MacAddr& mac = {});
  ~Datapath();
  // Control thread: stops the workers (their QPs stay until the Datapath goes); idempotent.
  void stop();
  Datapath(const Datapath&) = delete;
  Datapath& operator=(const Datapath&) = delete;

  std::uint32_t worker_count() const { return static_cast<std::uint32_t>(workers_.size()); }
  // The worker a QP was placed on, or nullptr.
  Worker* worker_for(wire::Qpn qpn) {
    const std::uint32_t w = routes_.owner(qpn);
    return w < workers_.size() ? workers_[w].get() : nullptr;
  }
  Worker& worker(std::uint32_t index) { return *workers_[index]; }
  // Which worker owns each QP (read by every worker of the daemon: loopback targets).
  const QpRoutes& routes() const { return routes_; }
  // The worker with the fewest QPs.
  std::uint32_t least_loaded_worker() const;

  // Places a QP on worker `worker` (blocks until it is there).
  void add_qp(HostedQp hosted, std::uint32_t worker);
  // Takes a QP off its worker (blocks until it is gone); false if it was not placed.
  bool remove_qp(wire::Qpn qpn);
  // Control thread, when the netdev's addresses change: frames to exactly these addresses are
  // ours from now on (new ones steered, removed ones passed to the kernel again; the loopback
  // registry told).
  void set_local_ips(const std::vector<wire::IpAddr>& ips);
  // Control thread: every worker takes `table` (LoopbackRegistry::publish calls this).
  void set_loopback(std::shared_ptr<const LoopbackTable> table);
  DatapathStatus status();
  // The largest frame every queue's port carries (net::Port::max_frame_bytes).
  std::size_t max_frame_bytes() const;
  // The fewest of those frames a queue's port holds received (net::Port::receive_frames; 0:
  // not known).
  std::size_t receive_frames() const;

 private:
  Datapath() = default;
  // Worker i on cpus[i % size] (empty: anywhere).
  void start_workers(std::vector<std::unique_ptr<net::Port>> ports, int ifindex, bool resolve_macs,
                     const std::vector<std::uint32_t>& cpus = {});
  void join_loopback(LoopbackRegistry* loopback, const std::vector<wire::IpAddr>& ips,
                     const wire::MacAddr& mac);
  // Frames to this address are ours from now on (AF_XDP steering; the UDP port takes all).
  void steer_ip(const wire::IpAddr& ip);

  QpRoutes routes_;  // before the workers: they read it until they stop
  std::shared_ptr<net::XdpSteering> steering_;
  std::vector<wire::IpAddr> local_ips_;  // what the steering map holds
  LoopbackRegistry* loopback_ = nullptr;
  wire::MacAddr mac_{};
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::size_t> qps_per_worker_;
};

}  // namespace xroce::daemon
