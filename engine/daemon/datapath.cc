#include "daemon/datapath.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include <cstring>

#include "daemon/worker_uring.h"
#include "net/afxdp_port.h"
#include "net/neighbour.h"
#include "net/udp_port.h"
#include "wire/frame_layout.h"
#include "wire/opcode.h"
#include "xroce/env_count.h"

namespace xroce::daemon {
namespace {

// The largest frame the device makes or takes, whatever the netdev's MTU: an IB MTU of 4096
// with the most headers a RoCEv2 packet with a payload carries (a VLAN tag, IPv6, and XRC's
// XRCETH, RETH and ImmDt). The ports are sized by this and not by the netdev's MTU when they open:
// the device's active MTU follows the netdev as it changes (ibv_query_port; rxe does the same on
// NETDEV_CHANGEMTU, rxe_set_mtu), so after `ip link set DEV mtu 9000` the QPs send 4 KB packets,
// and a port sized for the MTU it opened with (1500) refused them all. What the link cannot carry
// the kernel refuses (EMSGSIZE, counted as a port drop).
constexpr std::size_t kLargestFrameBytes = wire::kEthHeaderBytes + wire::kVlanTagBytes +
                                           wire::kIpv6HeaderBytes + wire::kUdpHeaderBytes +
                                           wire::kBthBytes + wire::kXrcEthBytes + wire::kRethBytes +
                                           wire::kImmDtBytes + 4096 + wire::kIcrcBytes;

std::uint32_t default_queues() {
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus > 0 ? static_cast<std::uint32_t>(cpus) : 1;
}

wire::Result<std::unique_ptr<net::Port>, std::string> open_udp(const DatapathConfig& c) {
  net::UdpPortConfig pc;
  pc.bind_device = c.ifname;
  pc.local_mac = c.mac;
  pc.max_frame_bytes = kLargestFrameBytes;
  // XROCE_UDP_GSO=0: one send per frame, for a path whose segmentation offload numbers IPv4
  // identifications otherwise than Linux does (engine/net/udp_port.h).
  const char* gso = std::getenv("XROCE_UDP_GSO");
  pc.gso = gso == nullptr || std::strcmp(gso, "0") != 0;
  // XROCE_UDP_GRO=0: one datagram per frame on receive (engine/net/udp_port.h), to compare.
  const char* gro = std::getenv("XROCE_UDP_GRO");
  pc.gro = gro == nullptr || std::strcmp(gro, "0") != 0;
  auto port = net::UdpPort::open(pc);
  if (!port) return wire::Err(port.error().message());
  return std::unique_ptr<net::Port>(std::move(*port));
}

// XROCE_DOORBELL_MODERATION_US in the daemon's environment: how long a worker with a streaming
// QP sleeps without doorbells (WorkerConfig::moderation_ns), in microseconds; 0 turns the
// moderation off, to compare. Unset or not a number: the default.
std::uint64_t moderation_ns() {
  constexpr std::uint32_t kDefaultUs = WorkerConfig::kDefaultModerationNs / 1000;
  return std::uint64_t{env_count("XROCE_DOORBELL_MODERATION_US", kDefaultUs)} * 1000;
}

// A worker's own route and neighbour resolver (its rtnetlink socket); null when it cannot be
// opened (the worker then says so, and no destination resolves).
std::unique_ptr<net::NeighbourResolver> open_resolver(std::uint32_t worker) {
  int error = 0;
  auto resolver = net::NeighbourResolver::open({}, error);
  if (!resolver) {
    std::fprintf(stderr, "xroce worker %u: no neighbour resolver (%s): frames cannot leave\n",
                 worker, std::strerror(error));
  }
  return resolver;
}

}  // namespace

wire::Result<std::unique_ptr<Datapath>, std::string> Datapath::open(const DatapathConfig& config) {
  std::unique_ptr<Datapath> dp(new Datapath());
  std::vector<std::unique_ptr<net::Port>> ports;
  const bool afxdp = config.port == DatapathPort::kAfXdp;
  const std::uint32_t queues = config.queues != 0 ? config.queues : (afxdp ? default_queues() : 1);
  if (!afxdp) {
    if (queues != 1) return wire::Err(std::string("a udp port has exactly one queue"));
    auto port = open_udp(config);
    if (!port) return wire::Err(port.error());
    ports.push_back(std::move(*port));
  } else {
    if (auto r = net::ensure_bpffs_mounted(); !r) return wire::Err(r.error().message());
    auto steering = net::XdpSteering::attach(config.ifname, net::XdpAttachMode::kAuto);
    if (!steering) return wire::Err(steering.error().message());
    dp->steering_ = *steering;
    for (const auto& ip : config.local_ips)
      dp->steer_ip(ip);
    for (std::uint32_t q = 0; q < queues; ++q) {
      net::AfXdpPortConfig pc;
      pc.ifname = config.ifname;
      pc.queue_id = q;
      pc.max_frame_bytes = kLargestFrameBytes;
      auto port = net::AfXdpPort::open(pc, dp->steering_);
      if (!port) return wire::Err(port.error().message());
      ports.push_back(std::move(*port));
    }
  }
  dp->start_workers(std::move(ports), config.ifindex, afxdp, config.cpus);
  dp->join_loopback(config.loopback, config.local_ips, config.mac);
  return dp;
}

std::unique_ptr<Datapath> Datapath::over_ports(std::vector<std::unique_ptr<net::Port>> ports,
                                               int ifindex, bool resolve_macs,
                                               LoopbackRegistry* loopback,
                                               const std::vector<wire::IpAddr>& local_ips,
                                               const wire::MacAddr& mac) {
  std::unique_ptr<Datapath> dp(new Datapath());
  dp->start_workers(std::move(ports), ifindex, resolve_macs);
  dp->join_loopback(loopback, local_ips, mac);
  return dp;
}

void Datapath::join_loopback(LoopbackRegistry* loopback, const std::vector<wire::IpAddr>& ips,
                             const wire::MacAddr& mac) {
  loopback_ = loopback;
  mac_ = mac;
  if (loopback_ != nullptr) loopback_->set(*this, ips, mac_);
}

void Datapath::set_loopback(std::shared_ptr<const LoopbackTable> table) {
  for (auto& w : workers_) {
    if (!w->running()) {
      w->set_loopback_on_worker(table);  // a stopped worker runs no commands
      continue;
    }
    w->call([table](Worker& self) {
      self.set_loopback_on_worker(table);
      return 0;
    });
  }
}

void Datapath::start_workers(std::vector<std::unique_ptr<net::Port>> ports, int ifindex,
                             bool resolve_macs, const std::vector<std::uint32_t>& cpus) {
  for (std::size_t i = 0; i < ports.size(); ++i) {
    WorkerConfig wc;
    wc.index = static_cast<std::uint32_t>(i);
    if (!cpus.empty()) wc.cpu = cpus[i % cpus.size()];
    wc.routes = &routes_;
    wc.port = std::move(ports[i]);
    wc.sleeper = std::make_unique<UringSleeper>();
    wc.moderation_ns = moderation_ns();
    wc.ifindex = ifindex;
    wc.resolve_macs = resolve_macs;
    if (resolve_macs) wc.resolver = open_resolver(wc.index);
    workers_.push_back(std::make_unique<Worker>(std::move(wc)));
  }
  std::vector<Worker*> all;
  for (auto& w : workers_)
    all.push_back(w.get());
  for (auto& w : workers_)
    w->connect(all);
  for (auto& w : workers_)
    w->start();
  qps_per_worker_.assign(workers_.size(), 0);
}

Datapath::~Datapath() {
  stop();
  workers_.clear();  // ports close before the steering program detaches
  steering_.reset();
}

void Datapath::stop() {
  // No worker of another device may hand frames to ours once they stop.
  if (loopback_ != nullptr) loopback_->remove(*this);
  loopback_ = nullptr;
  for (auto& w : workers_)
    w->stop();
}

std::uint32_t Datapath::least_loaded_worker() const {
  std::uint32_t best = 0;
  for (std::uint32_t i = 1; i < qps_per_worker_.size(); ++i)
    if (qps_per_worker_[i] < qps_per_worker_[best]) best = i;
  return best;
}

void Datapath::add_qp(HostedQp hosted, std::uint32_t worker) {
  const wire::Qpn qpn = hosted.qp->qpn();
  routes_.set(qpn, worker);
  ++qps_per_worker_[worker];
  auto shared = std::make_shared<HostedQp>(std::move(hosted));
  workers_[worker]->call([shared](Worker& self) {
    self.add_qp_on_worker(std::move(*shared));
    return 0;
  });
}

bool Datapath::remove_qp(wire::Qpn qpn) {
  Worker* w = worker_for(qpn);
  if (w == nullptr) return false;
  const bool removed = w->call([qpn](Worker& self) { return self.remove_qp_on_worker(qpn); });
  routes_.clear(qpn);
  --qps_per_worker_[w->index()];
  return removed;
}

void Datapath::steer_ip(const wire::IpAddr& ip) {
  if (!steering_) return;
  (void)steering_->add_local_ip(ip.bytes);
  if (std::find(local_ips_.begin(), local_ips_.end(), ip) == local_ips_.end())
    local_ips_.push_back(ip);
}

void Datapath::set_local_ips(const std::vector<wire::IpAddr>& ips) {
  if (loopback_ != nullptr) loopback_->set(*this, ips, mac_);
  if (!steering_) return;
  for (const auto& old : local_ips_) {
    if (std::find(ips.begin(), ips.end(), old) == ips.end()) steering_->remove_local_ip(old.bytes);
  }
  local_ips_.clear();
  for (const auto& ip : ips)
    steer_ip(ip);
}

std::size_t Datapath::max_frame_bytes() const {
  std::size_t bytes = 0;
  for (const auto& w : workers_) {
    const std::size_t b = w->port_max_frame_bytes();
    bytes = bytes == 0 ? b : std::min(bytes, b);
  }
  return bytes;
}

std::size_t Datapath::receive_frames() const {
  std::size_t frames = 0;
  for (const auto& w : workers_) {
    const std::size_t f = w->port_receive_frames();
    if (f != 0) frames = frames == 0 ? f : std::min(frames, f);
  }
  return frames;
}

DatapathStatus Datapath::status() {
  DatapathStatus s;
  s.workers = worker_count();
  if (!workers_.empty()) s.port_mode = net::to_string(workers_.front()->port_mode());
  for (auto& w : workers_) {
    auto [counters, port, qps] = w->call([](Worker& self) {
      return std::tuple(self.counters_on_worker(), self.port_stats_on_worker(),
                        self.qp_count_on_worker());
    });
    s.counters += counters;
    s.qps += qps;
    s.port += port;
  }
  return s;
}

}  // namespace xroce::daemon
