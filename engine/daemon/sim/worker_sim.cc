#include "daemon/sim/worker_sim.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <sstream>
#include <vector>

#include "daemon/worker.h"
#include "net/sim/network.h"
#include "net/sim/rng.h"
#include "transport/memory.h"
#include "transport/sim/driver.h"
#include "wire/frame.h"

namespace xroce::daemon::sim {
namespace {

namespace ns = xroce::net::sim;
using ns::TimeNs;

constexpr TimeNs kNever = std::numeric_limits<TimeNs>::max();
constexpr std::uint32_t kQpnBase = 0x100;
constexpr std::uint32_t kAvId = 1;
constexpr std::uint16_t kUdpPortBase = 0xC000;
constexpr int kDoorbellFdBase = 1000;        // the simulator's doorbells are numbers, not fds
constexpr int kContextDoorbellFdBase = 900;  // + device: the doorbell its ready-bit QPs ring
constexpr std::uint32_t kAllAccess =
    transport::access::kLocalWrite | transport::access::kRemoteWrite |
    transport::access::kRemoteRead | transport::access::kRemoteAtomic;

// Deterministic message contents: the transport simulator's (byte i a function of (pattern, i)).
using transport::sim::fill_pattern;
using transport::sim::matches_pattern;

class Simulation;
class SimPort;

// The virtual clock every worker reads: the simulation's now, constant during a turn.
class SimClock final : public Clock {
 public:
  explicit SimClock(const TimeNs& now) : now_(now) {}
  std::uint64_t now_ns() override { return now_; }

 private:
  const TimeNs& now_;
};

// One worker as the scheduler sees it.
struct Endpoint;
struct Agent {
  Worker* worker = nullptr;
  SimPort* port = nullptr;
  class SimSleeper* sleeper = nullptr;
  std::vector<Endpoint*> endpoints;  // the QPs placed on it
  TimeNs next_turn = 0;
};

// A worker's sleep in the simulator: wait() suspends the worker (the scheduler gives it no turn)
// until wake(): a frame on its queue, a watched doorbell, notify(), or the deadline, each after
// the wakeup latency. What arrives while it is awake makes its next wait() return at once, as a
// readable eventfd or port fd would.
class SimSleeper final : public Sleeper {
 public:
  SimSleeper(Simulation& sim, Agent& agent, bool spin_allowed)
      : sim_(sim), agent_(agent), spin_allowed_(spin_allowed) {}

  void notify() override { signal(); }
  bool spin_allowed(std::uint64_t) override { return spin_allowed_; }
  void watch_doorbell(int fd) override { ++doorbells_[fd]; }
  void unwatch_doorbell(int fd) override {
    const auto it = doorbells_.find(fd);
    if (it == doorbells_.end()) {
      unbalanced_ = true;
      return;
    }
    if (--it->second == 0) doorbells_.erase(it);
  }
  std::optional<Wakeup> wait(const WaitSet& set, std::uint64_t wait_ns) override;
  Wakeup resume() override {
    asleep_ = false;
    return Wakeup{true, false};
  }

  // The simulator's side.
  void frame_arrived() { signal(); }
  // False when the worker does not watch `fd` (the ring would be lost).
  bool ring(int fd) {
    if (!doorbells_.contains(fd)) return false;
    signal();
    return true;
  }
  bool asleep() const { return asleep_; }
  // Every watch was undone by an unwatch, and no unwatch came without its watch.
  bool balanced() const { return doorbells_.empty() && !unbalanced_; }

 private:
  void signal();

  Simulation& sim_;
  Agent& agent_;
  bool spin_allowed_;
  bool asleep_ = false;
  bool pending_ = false;  // something arrived while awake: the next wait() returns at once
  std::map<int, std::uint32_t> doorbells_;
  bool unbalanced_ = false;
};

// One worker's queue of a simulated device's port. Receives what the device's RSS steers to it;
// transmits into the device's host port at the current virtual time.
class SimPort final : public net::Port {
 public:
  SimPort(ns::Network& net, ns::NodeId host, const TimeNs& now)
      : net_(net), host_(host), now_(now) {}

  void deliver(ns::Frame&& frame, SimSleeper& sleeper) {
    rx_.push_back(std::move(frame));
    ++stats_.rx_packets;
    sleeper.frame_arrived();
  }
  bool readable() const { return rx_.size() > handed_out_; }
  std::uint64_t moved() const { return moved_; }
  std::uint64_t refusals() const { return refusals_; }

  net::Result<std::size_t, net::PortError> receive(std::span<net::RxFrame> frames) override {
    std::size_t n = 0;
    while (n < frames.size() && handed_out_ < rx_.size()) {
      frames[n] = net::RxFrame{rx_[handed_out_], handed_out_};
      ++n;
      ++handed_out_;
    }
    moved_ += n;
    return n;
  }
  // The worker gives back every frame of a receive() at once, oldest first.
  void release(std::span<const net::RxFrame> frames) override {
    for (std::size_t i = 0; i < frames.size(); ++i)
      rx_.pop_front();
    handed_out_ -= frames.size();
  }
  net::Result<std::size_t, net::PortError> transmit(std::span<const net::TxFrame> frames) override {
    std::size_t taken = 0;
    for (const net::TxFrame& f : frames) {
      const auto r = net_.send(now_, host_, ns::Frame(f.begin(), f.end()));
      if (r == ns::SendResult::kRefused) {
        ++refusals_;
        break;  // back-pressure: the rest stays with the worker
      }
      ++stats_.tx_packets;
      ++taken;
    }
    moved_ += taken;
    return taken;
  }
  net::Result<std::size_t, net::PortError> flush() override { return std::size_t{0}; }
  int wait_fd() const override { return -1; }  // readiness is readable(), seen by SimSleeper
  net::PortStats stats() const override { return stats_; }
  net::PortMode mode() const override { return net::PortMode::kUdpSocket; }
  std::size_t max_frame_bytes() const override { return 9014; }

 private:
  ns::Network& net_;
  ns::NodeId host_;
  const TimeNs& now_;
  std::deque<ns::Frame> rx_;  // [0, handed_out_) are held by the worker
  std::size_t handed_out_ = 0;
  std::uint64_t moved_ = 0;
  std::uint64_t refusals_ = 0;
  net::PortStats stats_;
};

enum class OpKind : std::uint8_t { kSend, kWrite, kWriteImm, kRead, kFetchAdd };
constexpr std::size_t kOpKinds = 5;
const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::kSend:
      return "SEND";
    case OpKind::kWrite:
      return "WRITE";
    case OpKind::kWriteImm:
      return "WRITE_WITH_IMM";
    case OpKind::kRead:
      return "READ";
    case OpKind::kFetchAdd:
      return "FETCH_AND_ADD";
  }
  return "?";
}

struct PendingOp {
  std::uint64_t wr_id = 0;
  OpKind kind = OpKind::kSend;
  std::uint32_t length = 0;
  std::uint32_t slot = 0;
  std::uint64_t pattern = 0;
  std::uint64_t expected_original = 0;
};

struct ExpectedRecv {
  OpKind kind = OpKind::kSend;
  std::uint32_t length = 0;
  std::uint32_t slot = 0;  // WRITE_WITH_IMM: the target slot its data went to
  std::uint64_t pattern = 0;
  std::uint32_t imm = 0;
};

struct Device;

// One QP and the application's side of it. Its buffer: [src slots][target slots][recv slots]
// [atomic word]; the target slots and the atomic word are written by the peer's operations.
struct Endpoint {
  std::size_t index = 0;
  Device* device = nullptr;
  Endpoint* peer = nullptr;
  Agent* agent = nullptr;
  wire::Qpn qpn;
  wire::FrameAddress av;
  int doorbell_fd = -1;
  transport::Qp* qp = nullptr;  // owned by its worker once placed
  std::uint64_t src = 0, target = 0, recv = 0, atomic_word = 0;
  transport::MemoryRegion mr;
  std::vector<std::uint32_t> free_slots;
  std::deque<PendingOp> outstanding;
  std::deque<ExpectedRecv> expected_recvs;
  std::uint64_t atomic_model = 0;  // the peer's atomic word after our posts
  // The mailbox the worker pulls from, and the worker's published sleep state.
  std::deque<transport::WorkRequest> sends;
  std::deque<transport::RecvRequest> recvs;
  bool worker_asleep = false;
  // Half the QPs (even index) say they have work through a ready bit of their device's page,
  // as the daemon's QPs with rings of their own do; the others through `worker_asleep`, as
  // its QPs on an SRQ (include/xroce/queues.h "Ready bits").
  std::uint32_t ready_bit = queues::kNoReadyBit;
};

struct Device {
  ns::NodeId host = 0;
  wire::MacAddr mac{};
  wire::IpAddr ip;
  std::uint64_t rss_salt = 0;
  QpRoutes routes;
  transport::LocalMemory mem;
  transport::MemoryRegionTable mrs{mem};
  std::vector<Agent*> agents;
  std::uint32_t next_qpn = kQpnBase;
  std::shared_ptr<transport::InflightBudget> budget;  // WorkerScenario::inflight_budget_psns
  // The page of ready bits the device's QPs share (one context, as one application's), and the
  // context's doorbell, which every worker hosting one of them watches.
  std::unique_ptr<queues::ContextPage> page = std::make_unique<queues::ContextPage>();
  std::uint32_t next_ready_bit = 0;
  int context_doorbell_fd = -1;
};

class SimBinding;

class Simulation {
 public:
  explicit Simulation(const WorkerScenario& s) : cfg_(s), rng_(s.seed), net_(s.seed ^ 0x5EED) {
    summary_.seed = s.seed;
  }
  ~Simulation();
  WorkerSummary run();

  TimeNs now() const { return now_; }
  // A sleeping worker's next turn: after the wakeup latency, unless it runs sooner anyway.
  void wake(Agent& agent) { agent.next_turn = std::min(agent.next_turn, now_ + cfg_.wake_ns); }
  void sleep_until(Agent& agent, TimeNs deadline) { agent.next_turn = deadline + cfg_.wake_ns; }

  // The application (SimBinding calls these from the owning worker's turn).
  void on_completion(Endpoint& e, const transport::Completion& c);
  // The worker is about to say it sleeps (`asleep`) or that it is awake again.
  void on_sleep_flag(Endpoint& e, bool asleep);
  // The worker suspends: a correct one leaves no work behind without a wakeup pending.
  void check_no_lost_wakeup(const Agent& agent);
  // After a worker's turn: no other worker of its device sleeps, not woken, with a QP waiting
  // for a grant of the device's budget that is free (the turn's ACKs may have freed it).
  void check_budget_wakeups(const Agent& agent);
  void fail(const std::string& why) {
    if (summary_.failure.empty()) summary_.failure = why;
  }

 private:
  void build_network();
  void build_devices();
  void start_workers(Device& d);
  Endpoint& make_endpoint(Device& d);
  void connect_pair(Endpoint& a, Endpoint& b);
  void connect_qp(transport::Qp& qp, wire::Qpn peer, wire::Psn sq_psn, wire::Psn rq_psn);
  void place(Endpoint& e);
  void push_strangers(Endpoint& e);
  void rss(Device& d, ns::Delivery&& delivery);
  std::uint8_t pick_timeout_exp() const;

  void post_one(Endpoint& e);
  void prepare_send_write(Endpoint& e, PendingOp& op, transport::WorkRequest& wr);
  void prepare_read(Endpoint& e, PendingOp& op, transport::WorkRequest& wr);
  void prepare_fetch_add(Endpoint& e, PendingOp& op, transport::WorkRequest& wr);
  std::vector<transport::Sge> split_sges(const Endpoint& e, std::uint64_t addr, std::uint32_t len);
  std::uint32_t pick_length(OpKind k);
  void post_recv(Endpoint& e, std::uint32_t slot);
  void post_to_mailbox(Endpoint& e, transport::WorkRequest wr);
  // `receive`: for a posted receive, which rings only with WorkerScenario::receive_doorbells.
  void ring_if_asleep(Endpoint& e, bool receive = false);
  void on_send_completion(Endpoint& e, const transport::Completion& c);
  void on_recv_completion(Endpoint& e, const transport::Completion& c);
  void retire(Endpoint& e, const PendingOp& op);

  void turn(Agent& agent);
  bool done() const;
  void finish();
  void check_balances();
  std::uint64_t slot_addr(std::uint64_t area, std::uint32_t slot) const {
    return area + std::uint64_t{slot} * slot_bytes_;
  }

  WorkerScenario cfg_;
  ns::Rng rng_;
  ns::Network net_;
  TimeNs now_ = 0;
  std::uint8_t timeout_exp_ = 0;
  std::uint32_t slot_bytes_ = 0;
  std::uint32_t recv_slots_ = 0;
  std::uint64_t next_wr_id_ = 1;
  std::vector<std::unique_ptr<Device>> devices_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<SimPort*> ports_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  // The application's timed posts: (time, sequence) -> what it posts where.
  struct AppEvent {
    Endpoint* e = nullptr;
    std::optional<std::uint32_t> recv_slot;  // repost this receive; none: the next operation
  };
  void run_app_event(const AppEvent& a) {
    if (a.recv_slot) {
      post_recv(*a.e, *a.recv_slot);
    } else {
      post_one(*a.e);
    }
  }
  std::map<std::pair<TimeNs, std::uint64_t>, AppEvent> app_events_;
  std::uint64_t app_sequence_ = 0;
  WorkerSummary summary_;
  std::uint64_t sent_pkts_ = 0, rcvd_pkts_ = 0;  // every worker's device counters at the end
};

std::optional<Wakeup> SimSleeper::wait(const WaitSet&, std::uint64_t wait_ns) {
  if (wait_ns == 0) return Wakeup{};
  if (pending_ || agent_.port->readable()) {
    pending_ = false;
    return Wakeup{true, false};
  }
  sim_.check_no_lost_wakeup(agent_);
  asleep_ = true;
  sim_.sleep_until(agent_, sim_.now() + wait_ns);
  return std::nullopt;
}

void SimSleeper::signal() {
  if (asleep_) {
    sim_.wake(agent_);
  } else {
    pending_ = true;
  }
}

// The device side of an endpoint's QP: its work from the mailbox, its results to the checker.
class SimBinding final : public QpBinding {
 public:
  SimBinding(Simulation& sim, Endpoint& e) : sim_(sim), e_(e) {}
  bool pull_work_on_worker(transport::Qp& qp) override {
    const bool any = !e_.sends.empty() || !e_.recvs.empty();
    for (; !e_.recvs.empty(); e_.recvs.pop_front())
      if (qp.post_recv(e_.recvs.front()) != 0) sim_.fail("post_recv refused");
    for (; !e_.sends.empty(); e_.sends.pop_front())
      if (qp.post_send(e_.sends.front()) != 0) sim_.fail("post_send refused");
    return any;
  }
  void pull_receives_on_worker(transport::Qp& qp) override {
    for (; !e_.recvs.empty(); e_.recvs.pop_front())
      if (qp.post_recv(e_.recvs.front()) != 0) sim_.fail("post_recv refused");
  }
  bool work_pending_on_worker() const override { return !e_.sends.empty() || !e_.recvs.empty(); }
  void complete_on_worker(const transport::Completion& c) override { sim_.on_completion(e_, c); }
  void event_on_worker(const transport::AsyncEvent& ev) override {
    sim_.fail("async event " + std::to_string(static_cast<int>(ev.type)) + " on QP " +
              std::to_string(e_.qpn.value()));
  }
  std::vector<int> doorbell_fds_on_worker() const override { return {e_.doorbell_fd}; }
  void set_asleep_on_worker(bool asleep) override { sim_.on_sleep_flag(e_, asleep); }
  ReadyBit ready_bit_on_worker() const override {
    if (e_.ready_bit == queues::kNoReadyBit) return {};
    return {e_.device->page.get(), e_.ready_bit};
  }
  const wire::FrameAddress* address_on_worker(std::uint32_t av_id) override {
    return av_id == kAvId ? &e_.av : nullptr;
  }
  // As the daemon's binding (rxe's check_addr): only from the peer's address to ours.
  bool accepts_from_on_worker(const wire::FrameAddress& addr) const override {
    return addr.src_ip == e_.av.dst_ip && addr.dst_ip == e_.av.src_ip;
  }

 private:
  Simulation& sim_;
  Endpoint& e_;
};

Simulation::~Simulation() {
  // The workers' QPs give their PSNs back as they go: no hook may wake a worker already gone.
  for (auto& d : devices_)
    if (d->budget) d->budget->set_release_hook({});
  workers_.clear();  // before the devices whose routes and memory their QPs use
}

std::uint8_t Simulation::pick_timeout_exp() const {
  // Longer than the worst round trip the scenario can build: every QP's window queued at the
  // bottleneck, propagation both ways, and the workers' wakeups and think times on the way.
  const double rate_bps = cfg_.rate_gbps > 0 ? cfg_.rate_gbps * 1e9 : 1e15;
  const double window_bytes = 128.0 * (transport::mtu_bytes(cfg_.mtu) + 80);
  const double flows = 2.0 * (cfg_.qps + cfg_.loopback_qps);
  const double queued_ns = flows * window_bytes * 8 / rate_bps * 1e9;
  const double rtt_ns = queued_ns + 4.0 * static_cast<double>(cfg_.delay_ns) +
                        8.0 * static_cast<double>(cfg_.wake_ns) + 100'000;
  return transport::sim::timeout_exp_covering(rtt_ns);
}

void Simulation::build_network() {
  ns::PortConfig host_egress;
  host_egress.link.rate_bps = static_cast<std::uint64_t>(cfg_.rate_gbps * 1e9);
  host_egress.link.propagation_ns = cfg_.delay_ns;
  host_egress.link.impair.loss = cfg_.loss;
  host_egress.link.impair.duplicate = cfg_.dup;
  host_egress.link.impair.corrupt = cfg_.corrupt;
  host_egress.link.impair.reorder = cfg_.reorder;
  if (cfg_.host_queue_bytes > 0) {
    host_egress.queue.capacity_bytes = cfg_.host_queue_bytes;
    host_egress.queue.overflow = ns::Overflow::kLossless;
  }
  ns::PortConfig switch_egress;
  switch_egress.link.rate_bps = host_egress.link.rate_bps;
  switch_egress.link.propagation_ns = 0;
  if (cfg_.ecn) {
    // A switch port slower than the hosts' links: its queue builds, and it marks.
    switch_egress.link.rate_bps /= 2;
    switch_egress.queue.ecn.enabled = true;
    switch_egress.queue.ecn.kmin_bytes = 2'000;
    switch_egress.queue.ecn.kmax_bytes = 40'000;
    switch_egress.queue.ecn.pmax = 0.2;
  }
  const ns::NodeId sw = net_.add_switch("sw");
  for (std::uint8_t i = 0; i < 2; ++i) {
    auto d = std::make_unique<Device>();
    d->mac = {0x02, 0, 0, 0, 0x0d, static_cast<std::uint8_t>(i + 1)};
    d->ip = wire::IpAddr::v4(0xC6120001 + i);  // 198.18.0.(i + 1)
    d->rss_salt = rng_.next_u64();
    d->context_doorbell_fd = kContextDoorbellFdBase + i;
    if (cfg_.inflight_budget_psns > 0)
      d->budget = std::make_shared<transport::InflightBudget>(cfg_.inflight_budget_psns);
    ns::HostConfig h;
    h.name = "dev" + std::to_string(i);
    h.mac = d->mac;
    h.ips = {d->ip};
    d->host = net_.add_host(h);
    net_.connect(d->host, sw, host_egress, switch_egress);
    Device* dev = d.get();
    net_.set_receiver(d->host, [this, dev](ns::NodeId, ns::Delivery&& delivery) {
      rss(*dev, std::move(delivery));
    });
    devices_.push_back(std::move(d));
  }
}

// The NIC's receive-side scaling: a hash of the UDP source port (one per QP) picks the queue.
// A frame too broken to show one goes to queue 0, whose worker's door drops it.
void Simulation::rss(Device& d, ns::Delivery&& delivery) {
  ++summary_.network_frames;
  wire::DecodedFrame decoded;
  (void)wire::decode_frame_into(delivery.frame, decoded);
  std::uint64_t h = d.rss_salt ^ decoded.addr.udp_src_port;
  const std::size_t queue = cfg_.one_rx_queue ? 0 : ns::splitmix64(h) % d.agents.size();
  Agent& agent = *d.agents[queue];
  agent.port->deliver(std::move(delivery.frame), *agent.sleeper);
}

void Simulation::start_workers(Device& d) {
  auto table = std::make_shared<LoopbackTable>();
  LoopbackTarget self;
  self.routes = &d.routes;
  self.mac = d.mac;
  const std::size_t first = workers_.size();
  for (std::uint32_t i = 0; i < cfg_.workers; ++i) {
    auto agent = std::make_unique<Agent>();
    auto port = std::make_unique<SimPort>(net_, d.host, now_);
    auto sleeper = std::make_unique<SimSleeper>(*this, *agent, cfg_.spin_allowed);
    agent->port = port.get();
    agent->sleeper = sleeper.get();
    ports_.push_back(port.get());
    WorkerConfig wc;
    wc.index = i;
    wc.routes = &d.routes;
    wc.port = std::move(port);
    wc.clock = std::make_unique<SimClock>(now_);
    wc.sleeper = std::move(sleeper);
    wc.spin_ns = cfg_.spin_ns;
    wc.lossy_burst_packets = cfg_.lossy_burst_packets;
    wc.moderation_ns = cfg_.moderation_ns;
    wc.moderation_sends = cfg_.moderation_sends;
    wc.cc.line_rate_mbps = cfg_.rate_gbps * 1000;
    if (cfg_.ecn) wc.cc.params.np_enable_mask = 0xFF;
    workers_.push_back(std::make_unique<Worker>(std::move(wc)));
    agent->worker = workers_.back().get();
    self.workers.push_back(agent->worker);
    d.agents.push_back(agent.get());
    agents_.push_back(std::move(agent));
  }
  std::vector<Worker*> all(self.workers);
  table->add({d.ip}, std::move(self));
  if (d.budget) wake_on_budget_release(*d.budget, all);
  for (std::size_t w = first; w < workers_.size(); ++w) {
    workers_[w]->connect(all);
    workers_[w]->attach_to_this_thread();
    workers_[w]->set_loopback_on_worker(table);
  }
}

Endpoint& Simulation::make_endpoint(Device& d) {
  auto e = std::make_unique<Endpoint>();
  e->index = endpoints_.size();
  e->device = &d;
  e->qpn = wire::Qpn(d.next_qpn++);
  e->doorbell_fd = kDoorbellFdBase + static_cast<int>(e->index);
  if (e->index % 2 == 0 && d.next_ready_bit < queues::kReadyBits) {
    e->ready_bit = d.next_ready_bit++;
    e->doorbell_fd = d.context_doorbell_fd;
  }
  e->agent = d.agents[rng_.below(d.agents.size())];
  e->agent->endpoints.push_back(e.get());
  const std::uint64_t slots = cfg_.max_outstanding;
  const std::uint64_t bytes = (2 * slots + recv_slots_) * slot_bytes_ + 8;
  const std::uint64_t base = d.mem.allocate(bytes);
  e->mr = d.mrs.register_region(base, bytes, kAllAccess);
  e->src = base;
  e->target = e->src + slots * slot_bytes_;
  e->recv = e->target + slots * slot_bytes_;
  e->atomic_word = e->recv + std::uint64_t{recv_slots_} * slot_bytes_;
  for (std::uint64_t s = 0; s < slots; ++s)
    e->free_slots.push_back(static_cast<std::uint32_t>(slots - 1 - s));
  endpoints_.push_back(std::move(e));
  return *endpoints_.back();
}

void Simulation::connect_qp(transport::Qp& qp, wire::Qpn peer, wire::Psn sq_psn, wire::Psn rq_psn) {
  namespace m = transport::qp_attr;
  transport::QpAttr a;
  a.qp_access_flags = kAllAccess;
  a.path_mtu = cfg_.mtu;
  a.dest_qp_num = peer;
  a.rq_psn = rq_psn;
  a.sq_psn = sq_psn;
  a.max_rd_atomic = 4;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.timeout = timeout_exp_;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.av_id = kAvId;
  a.qp_state = transport::QpState::kInit;
  int rc = qp.modify(a, m::kState | m::kPkeyIndex | m::kPort | m::kAccessFlags);
  a.qp_state = transport::QpState::kRtr;
  rc |= qp.modify(a, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn |
                         m::kMaxDestRdAtomic | m::kMinRnrTimer);
  a.qp_state = transport::QpState::kRts;
  rc |= qp.modify(
      a, m::kState | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kSqPsn | m::kMaxQpRdAtomic);
  if (rc != 0) fail("modify_qp failed while connecting");
}

void Simulation::connect_pair(Endpoint& a, Endpoint& b) {
  a.peer = &b;
  b.peer = &a;
  for (Endpoint* e : {&a, &b}) {
    const Device& here = *e->device;
    const Device& there = *e->peer->device;
    e->av.src_mac = here.mac;
    e->av.dst_mac = there.mac;
    e->av.src_ip = here.ip;
    e->av.dst_ip = there.ip;
    e->av.udp_src_port = static_cast<std::uint16_t>(kUdpPortBase + e->index);
  }
  // Start just below the 24-bit PSN wrap so every run crosses it.
  const wire::Psn a_to_b(0xFFFFFF - static_cast<std::uint32_t>(rng_.below(512)));
  const wire::Psn b_to_a(0xFFFFFF - static_cast<std::uint32_t>(rng_.below(512)));
  for (auto [e, sq, rq] : {std::tuple(&a, a_to_b, b_to_a), std::tuple(&b, b_to_a, a_to_b)}) {
    transport::QpConfig qc;
    qc.qpn = e->qpn;
    qc.max_send_wr = cfg_.max_outstanding;
    qc.max_recv_wr = recv_slots_;
    qc.port_mtu = cfg_.mtu;
    qc.inflight_budget = e->device->budget;
    if (cfg_.daemon_qp_config) transport::use_daemon_timers_and_windows(qc);
    auto qp = std::make_unique<transport::Qp>(qc, e->device->mrs);
    connect_qp(*qp, e->peer->qpn, sq, rq);
    e->qp = qp.get();
    for (std::uint32_t s = 0; s < recv_slots_; ++s)
      post_recv(*e, s);
    // Placed by a command, as the control thread places it; the worker runs it next turn. A
    // full command ring (hundreds of QPs placed at once) waits for a turn of the worker.
    e->device->routes.set(e->qpn, e->agent->worker->index());
    auto hosted = std::make_shared<HostedQp>(
        HostedQp{std::move(qp), std::make_unique<SimBinding>(*this, *e)});
    while (!e->agent->worker->post_command(
        [hosted](Worker& w) { w.add_qp_on_worker(std::move(*hosted)); }))
      turn(*e->agent);
  }
}

void Simulation::build_devices() {
  slot_bytes_ = std::max<std::uint32_t>(cfg_.max_msg_bytes, 8);
  recv_slots_ = cfg_.max_outstanding * 2;
  for (auto& d : devices_)
    start_workers(*d);
  for (std::uint32_t q = 0; q < cfg_.qps; ++q) {
    Endpoint& a = make_endpoint(*devices_[0]);
    Endpoint& b = make_endpoint(*devices_[1]);
    connect_pair(a, b);
  }
  for (std::uint32_t q = 0; q < cfg_.loopback_qps; ++q) {
    Endpoint& a = make_endpoint(*devices_[0]);
    Endpoint& b = make_endpoint(*devices_[0]);
    connect_pair(a, b);
  }
}

std::uint32_t Simulation::pick_length(OpKind k) {
  if (k == OpKind::kFetchAdd) return 8;
  const std::uint32_t mtu = transport::mtu_bytes(cfg_.mtu);
  const std::uint64_t r = rng_.below(100);
  std::uint64_t hi = cfg_.max_msg_bytes;
  if (r < 40) {
    hi = std::min<std::uint64_t>(64, hi);
  } else if (r < 75) {
    hi = std::min<std::uint64_t>(2 * mtu, hi);
  }
  // Exact multiples of the MTU are the edge of segmentation: make them common.
  if (rng_.below(8) == 0 && hi >= mtu)
    return mtu * static_cast<std::uint32_t>(rng_.between(1, hi / mtu));
  return static_cast<std::uint32_t>(rng_.between(1, hi));
}

std::vector<transport::Sge> Simulation::split_sges(const Endpoint& e, std::uint64_t addr,
                                                   std::uint32_t len) {
  std::vector<transport::Sge> sges;
  const std::uint64_t n = len < 2 ? 1 : rng_.between(1, std::min<std::uint64_t>(3, len));
  std::uint32_t left = len;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint32_t part =
        i + 1 == n ? left : static_cast<std::uint32_t>(rng_.between(1, left - (n - 1 - i)));
    sges.push_back(transport::Sge{addr, part, e.mr.lkey});
    addr += part;
    left -= part;
  }
  return sges;
}

void Simulation::post_recv(Endpoint& e, std::uint32_t slot) {
  transport::RecvRequest r;
  r.wr_id = slot;
  const std::uint64_t addr = slot_addr(e.recv, slot);
  const std::uint32_t first = slot_bytes_ / 3;  // two SGEs: receives scatter too
  r.sg_list = {transport::Sge{addr, first, e.mr.lkey},
               transport::Sge{addr + first, slot_bytes_ - first, e.mr.lkey}};
  e.recvs.push_back(std::move(r));
  ring_if_asleep(e, true);
}

void Simulation::post_to_mailbox(Endpoint& e, transport::WorkRequest wr) {
  e.sends.push_back(std::move(wr));
  ring_if_asleep(e);
}

// The provider's doorbell: rung only when the worker said it sleeps (queues.h `wakeup`, or for
// a QP with a ready bit: the bit set, then the page's count of sleeping workers), and for a
// receive only where the scenario asks (queues.h "Receive doorbells").
void Simulation::ring_if_asleep(Endpoint& e, bool receive) {
  const bool skip = receive && !cfg_.receive_doorbells;
  if (e.ready_bit != queues::kNoReadyBit) {
    queues::ContextPage& page = *e.device->page;
    page.ready[e.ready_bit / 64].fetch_or(std::uint64_t{1} << (e.ready_bit % 64));
    if (page.asleep_workers.load() == 0 || skip) return;
    // The context's eventfd: every worker that watches it is woken.
    ++summary_.doorbells;
    if (receive) ++summary_.receive_doorbells;
    bool watched = false;
    for (Agent* a : e.device->agents)
      watched = a->sleeper->ring(e.doorbell_fd) || watched;
    if (!watched) fail("context doorbell rung while a worker sleeps, but no worker watches it");
    return;
  }
  if (!e.worker_asleep || skip) return;
  ++summary_.doorbells;
  if (receive) ++summary_.receive_doorbells;
  if (!e.agent->sleeper->ring(e.doorbell_fd))
    fail("doorbell " + std::to_string(e.doorbell_fd) + " rung but not watched by its worker");
}

void Simulation::post_one(Endpoint& e) {
  if (summary_.posted >= cfg_.ops || e.free_slots.empty()) return;
  PendingOp op;
  op.kind = static_cast<OpKind>(rng_.below(kOpKinds));
  op.length = pick_length(op.kind);
  op.slot = e.free_slots.back();
  op.pattern = rng_.next_u64();
  op.wr_id = next_wr_id_++;
  transport::WorkRequest wr;
  wr.wr_id = op.wr_id;
  wr.send_flags = transport::send_flags::kSignaled;
  switch (op.kind) {
    case OpKind::kRead:
      prepare_read(e, op, wr);
      break;
    case OpKind::kFetchAdd:
      prepare_fetch_add(e, op, wr);
      break;
    default:
      prepare_send_write(e, op, wr);
      break;
  }
  e.free_slots.pop_back();
  e.outstanding.push_back(op);
  ++summary_.posted;
  post_to_mailbox(e, std::move(wr));
}

// SEND / WRITE / WRITE_WITH_IMM: pattern bytes from our source slot; what the peer must
// receive goes into its expected-receive queue, in posting order.
void Simulation::prepare_send_write(Endpoint& e, PendingOp& op, transport::WorkRequest& wr) {
  const std::uint64_t src = slot_addr(e.src, op.slot);
  fill_pattern(e.device->mem.view(src, op.length), op.pattern);
  wr.sg_list = split_sges(e, src, op.length);
  wr.opcode = op.kind == OpKind::kSend    ? transport::WrOpcode::kSend
              : op.kind == OpKind::kWrite ? transport::WrOpcode::kRdmaWrite
                                          : transport::WrOpcode::kRdmaWriteWithImm;
  if (op.kind != OpKind::kSend) {
    wr.remote_addr = slot_addr(e.peer->target, op.slot);
    wr.rkey = e.peer->mr.rkey;
  }
  if (op.kind == OpKind::kWrite) return;
  ExpectedRecv expect{op.kind, op.length, op.slot, op.pattern, 0};
  if (op.kind == OpKind::kWriteImm) {
    wr.imm_data = static_cast<std::uint32_t>(op.pattern >> 32);
    expect.imm = wr.imm_data;
  }
  e.peer->expected_recvs.push_back(expect);
}

// READ: the peer's target slot holds the pattern; our destination slot is zeroed so missing
// bytes show.
void Simulation::prepare_read(Endpoint& e, PendingOp& op, transport::WorkRequest& wr) {
  const std::uint64_t src = slot_addr(e.src, op.slot);
  const std::uint64_t target = slot_addr(e.peer->target, op.slot);
  fill_pattern(e.peer->device->mem.view(target, op.length), op.pattern);
  auto dst = e.device->mem.view(src, op.length);
  std::fill(dst.begin(), dst.end(), std::uint8_t{0});
  wr.opcode = transport::WrOpcode::kRdmaRead;
  wr.sg_list = split_sges(e, src, op.length);
  wr.remote_addr = target;
  wr.rkey = e.peer->mr.rkey;
}

// Atomics on the peer's word execute in posting order: a model of the word predicts each
// original value.
void Simulation::prepare_fetch_add(Endpoint& e, PendingOp& op, transport::WorkRequest& wr) {
  wr.opcode = transport::WrOpcode::kAtomicFetchAndAdd;
  wr.sg_list = {transport::Sge{slot_addr(e.src, op.slot), 8, e.mr.lkey}};
  wr.remote_addr = e.peer->atomic_word;
  wr.rkey = e.peer->mr.rkey;
  wr.compare_add = op.pattern;
  op.expected_original = e.atomic_model;
  e.atomic_model += op.pattern;
}

void Simulation::on_completion(Endpoint& e, const transport::Completion& c) {
  if (!summary_.failure.empty()) return;  // report the first failure, not its fallout
  if (c.is_recv()) {
    on_recv_completion(e, c);
  } else {
    on_send_completion(e, c);
  }
}

void Simulation::on_send_completion(Endpoint& e, const transport::Completion& c) {
  if (e.outstanding.empty() || e.outstanding.front().wr_id != c.wr_id) {
    ++summary_.completion_errors;
    fail("send completion out of order, duplicated or unknown: wr_id " + std::to_string(c.wr_id) +
         " on QP " + std::to_string(e.qpn.value()));
    return;
  }
  const PendingOp op = e.outstanding.front();
  e.outstanding.pop_front();
  if (c.status != transport::WcStatus::kSuccess) {
    ++summary_.completion_errors;
    fail(std::string("completion status ") + transport::to_string(c.status) + " for " +
         to_string(op.kind));
    return;
  }
  retire(e, op);
  // The application posts its next operation after a think time.
  app_events_.emplace(std::pair(now_ + rng_.below(cfg_.think_ns + 1), app_sequence_++),
                      AppEvent{&e, std::nullopt});
}

// Checks the effect of a completed operation and frees its slot.
void Simulation::retire(Endpoint& e, const PendingOp& op) {
  e.free_slots.push_back(op.slot);
  ++summary_.completed;
  bool good = true;
  switch (op.kind) {
    case OpKind::kWrite:
    case OpKind::kWriteImm:
      good = matches_pattern(
          e.peer->device->mem.view(slot_addr(e.peer->target, op.slot), op.length), op.pattern);
      summary_.bytes_verified += op.length;
      break;
    case OpKind::kRead:
      good = matches_pattern(e.device->mem.view(slot_addr(e.src, op.slot), op.length), op.pattern);
      summary_.bytes_verified += op.length;
      break;
    case OpKind::kFetchAdd: {
      std::uint64_t v = 0;
      std::memcpy(&v, e.device->mem.view(slot_addr(e.src, op.slot), 8).data(), 8);
      good = v == op.expected_original;
      summary_.bytes_verified += 8;
      break;
    }
    case OpKind::kSend:
      break;  // checked at the receiver
  }
  if (!good) {
    ++summary_.data_errors;
    fail(std::string("data mismatch for ") + to_string(op.kind) + " wr_id " +
         std::to_string(op.wr_id));
  }
}

void Simulation::on_recv_completion(Endpoint& e, const transport::Completion& c) {
  if (e.expected_recvs.empty()) {
    ++summary_.completion_errors;
    fail("receive completion with no message expected on QP " + std::to_string(e.qpn.value()));
    return;
  }
  const ExpectedRecv x = e.expected_recvs.front();
  e.expected_recvs.pop_front();
  ++summary_.received;
  const bool write_imm = x.kind == OpKind::kWriteImm;
  const bool ok = c.status == transport::WcStatus::kSuccess && c.byte_len == x.length &&
                  c.opcode == (write_imm ? transport::WcOpcode::kRecvRdmaWithImm
                                         : transport::WcOpcode::kRecv) &&
                  ((c.wc_flags & transport::wc_flags::kWithImm) != 0) == write_imm &&
                  (!write_imm || c.imm_data == x.imm);
  if (!ok) {
    ++summary_.completion_errors;
    fail(std::string("receive completion does not match the ") + to_string(x.kind) + " sent");
    return;
  }
  const std::uint64_t at = write_imm ? slot_addr(e.target, x.slot) : slot_addr(e.recv, c.wr_id);
  if (!matches_pattern(e.device->mem.view(at, x.length), x.pattern)) {
    ++summary_.data_errors;
    fail(std::string("received data mismatch for ") + to_string(x.kind));
  }
  summary_.bytes_verified += x.length;
  // The application reposts the receive as it polls, beside the worker, not in its turn.
  app_events_.emplace(std::pair(now_ + rng_.below(cfg_.think_ns + 1), app_sequence_++),
                      AppEvent{&e, static_cast<std::uint32_t>(c.wr_id)});
}

// The application runs beside the worker, not between its turns: what it posts while the worker
// decides to sleep lands just before the flag flips (no doorbell: the worker's last look for
// work must see it) or just after (the doorbell rings). Posts due before this turn ends are
// made now, each on a seeded side of the flip.
void Simulation::on_sleep_flag(Endpoint& e, bool asleep) {
  if (!asleep) {
    e.worker_asleep = false;
    return;
  }
  std::vector<AppEvent> after;
  for (auto it = app_events_.begin(); it != app_events_.end();) {
    if (it->first.first >= now_ + cfg_.turn_ns) break;
    if (it->second.e != &e) {
      ++it;
      continue;
    }
    if (rng_.below(2) == 0) {
      run_app_event(it->second);
    } else {
      after.push_back(it->second);
    }
    it = app_events_.erase(it);
  }
  e.worker_asleep = true;
  for (const AppEvent& a : after)
    run_app_event(a);
}

void Simulation::check_no_lost_wakeup(const Agent& agent) {
  for (const Endpoint* e : agent.endpoints) {
    // Receives that rang no doorbell wait for the responder's pull (queues.h "Receive doorbells").
    if (!e->sends.empty() || (cfg_.receive_doorbells && !e->recvs.empty()))
      fail("lost wakeup: worker " + std::to_string(agent.worker->index()) +
           " went to sleep with work posted to QP " + std::to_string(e->qpn.value()) +
           " and no doorbell");
  }
  // Nothing of a QP that waits for the budget holding none of it wakes the worker: with a grant
  // free it must not sleep (only the budget's release hook would have woken it).
  if (agent.worker->budget_grant_for_waiter_on_worker())
    fail("lost wakeup: worker " + std::to_string(agent.worker->index()) +
         " went to sleep with a QP waiting for the InflightBudget and a grant of it free");
}

void Simulation::check_budget_wakeups(const Agent& agent) {
  if (agent.endpoints.empty() || !agent.endpoints.front()->device->budget) return;
  for (const Agent* other : agent.endpoints.front()->device->agents) {
    if (other == &agent || !other->sleeper->asleep()) continue;
    if (other->next_turn <= now_ + cfg_.wake_ns) continue;  // woken (or about to be)
    if (other->worker->budget_grant_for_waiter_on_worker())
      fail("lost wakeup: worker " + std::to_string(other->worker->index()) +
           " sleeps while a grant of the InflightBudget its QPs wait for is free (freed by "
           "worker " +
           std::to_string(agent.worker->index()) + ")");
  }
}

void Simulation::turn(Agent& agent) {
  const std::uint64_t moved = agent.port->moved();
  agent.worker->run_once_on_worker();
  ++summary_.turns;
  check_budget_wakeups(agent);
  if (agent.worker->suspended_on_worker()) return;  // its sleeper set its next turn
  agent.next_turn = now_ + cfg_.turn_ns + cfg_.frame_ns * (agent.port->moved() - moved);
}

// SEND_ONLY packets for `e`'s QP that its binding must refuse, alternately from a stranger's
// address and from the peer's address to another of ours, taken in through the owning worker's
// loopback inbox (the same door as the port's).
void Simulation::push_strangers(Endpoint& e) {
  const std::array<std::uint8_t, 8> payload{1, 2, 3, 4, 5, 6, 7, 8};
  for (std::uint32_t i = 0; i < cfg_.strangers; ++i) {
    wire::FrameAddress addr;
    addr.src_mac = e.av.dst_mac;
    addr.dst_mac = e.av.src_mac;
    addr.src_ip = i % 2 == 0 ? wire::IpAddr::v4(0xC612FE01) : e.av.dst_ip;  // 198.18.254.1
    addr.dst_ip = i % 2 == 0 ? e.av.src_ip : wire::IpAddr::v4(0xC612FE02);
    addr.udp_src_port = e.av.udp_src_port;
    transport::Transmit tx;
    tx.hdr.bth.opcode = wire::Opcode::kRcSendOnly;
    tx.hdr.bth.dest_qp = e.qpn;
    tx.hdr.bth.psn = wire::Psn(static_cast<std::uint32_t>(rng_.below(1u << 24)));
    tx.payload_len = payload.size();
    auto frame = std::make_unique<FrameCopy>();
    frame->bytes.resize(wire::frame_bytes(addr, tx.hdr, tx.payload_len));
    const auto len = encode_transmit(tx, addr, payload, frame->bytes);
    if (!len) {
      fail("a stranger packet did not encode");
      return;
    }
    frame->bytes.resize(*len);
    if (!e.agent->worker->push_loopback(frame.get())) {
      fail("the loopback inbox refused a stranger packet");
      return;
    }
    (void)frame.release();
    e.agent->worker->wake();
    ++summary_.strangers;
  }
}

bool Simulation::done() const {
  if (summary_.posted < cfg_.ops) return false;
  for (const auto& e : endpoints_)
    if (!e->outstanding.empty() || !e->expected_recvs.empty()) return false;
  return true;
}

WorkerSummary Simulation::run() {
  timeout_exp_ = pick_timeout_exp();
  build_network();
  build_devices();
  for (auto& e : endpoints_)
    push_strangers(*e);
  for (bool progress = true; progress && summary_.posted < cfg_.ops;) {
    progress = false;
    for (auto& e : endpoints_) {
      const std::uint64_t before = summary_.posted;
      post_one(*e);
      progress |= summary_.posted > before;
    }
  }
  TimeNs settle_until = kNever;
  while (summary_.failure.empty()) {
    if (settle_until == kNever && done()) settle_until = now_ + cfg_.settle_ns;
    TimeNs next = settle_until;
    if (const auto t = net_.next_event_time()) next = std::min(next, *t);
    if (!app_events_.empty()) next = std::min(next, app_events_.begin()->first.first);
    for (const auto& a : agents_)
      next = std::min(next, a->next_turn);
    if (next > cfg_.time_limit_ns) {
      fail("stalled: virtual time limit reached");
      break;
    }
    now_ = next;
    if (now_ >= settle_until) break;
    net_.run_until(now_);
    while (!app_events_.empty() && app_events_.begin()->first.first <= now_) {
      const AppEvent a = app_events_.begin()->second;
      app_events_.erase(app_events_.begin());
      run_app_event(a);
    }
    for (auto& a : agents_)
      if (a->next_turn <= now_) turn(*a);
  }
  finish();
  return summary_;
}

// Every QP leaves its worker (its counters stay in the device's); then the counts must
// balance and every doorbell watch must have been undone.
void Simulation::finish() {
  for (const auto& e : endpoints_) {
    summary_.lost += e->outstanding.size() + e->expected_recvs.size();
    const transport::QpCounters& k = e->qp->counters();
    summary_.retransmitted_packets += k.retransmitted_packets;
    summary_.timeouts += k.timeouts;
    summary_.receives_pulled_late += k.receives_pulled_late;
    std::uint64_t v = 0;
    std::memcpy(&v, e->peer->device->mem.view(e->peer->atomic_word, 8).data(), 8);
    if (summary_.failure.empty() && summary_.lost == 0 && v != e->atomic_model) {
      ++summary_.data_errors;
      fail("final atomic value differs from the model");
    }
  }
  if (summary_.lost != 0) fail(std::to_string(summary_.lost) + " operations never completed");
  for (const auto& e : endpoints_) {
    if (!e->agent->worker->remove_qp_on_worker(e->qpn)) fail("a placed QP was not on its worker");
    e->device->routes.clear(e->qpn);
    e->qp = nullptr;
  }
  for (const auto& w : workers_) {
    summary_.counters += w->counters_on_worker();
    summary_.cnps_sent += w->device_counters().load(device::Counter::kNpCnpSent);
    summary_.peer_mismatches += w->device_counters().load(device::Counter::kRxPeerMismatch);
    sent_pkts_ += w->device_counters().load(device::Counter::kSentPkts);
    rcvd_pkts_ += w->device_counters().load(device::Counter::kRcvdPkts);
  }
  for (const SimPort* p : ports_)
    summary_.port_refusals += p->refusals();
  for (const auto& a : agents_)
    if (!a->sleeper->balanced()) fail("doorbell watches and unwatches do not balance");
  check_balances();
  summary_.sim_time_us = now_ / 1000;
}

void Simulation::check_balances() {
  const DatapathCounters& c = summary_.counters;
  std::uint64_t port_rx = 0, port_tx = 0;
  for (const SimPort* p : ports_) {
    port_rx += p->stats().rx_packets;
    port_tx += p->stats().tx_packets;
  }
  if (c.tx_frames != port_tx + c.tx_loopback) {
    fail("sent frames " + std::to_string(c.tx_frames) + " != port " + std::to_string(port_tx) +
         " + looped back " + std::to_string(c.tx_loopback));
  }
  // Frames still on the network when the run ended never reached a port: compare with what
  // the ports received, not with what was sent.
  if (c.rx_frames != port_rx + c.rx_loopback) {
    fail("frames in " + std::to_string(c.rx_frames) + " != port " + std::to_string(port_rx) +
         " + looped back " + std::to_string(c.rx_loopback));
  }
  if (port_rx != summary_.network_frames) fail("the ports lost frames the network delivered");
  if (c.rx_loopback != c.tx_loopback + summary_.strangers)
    fail("looped-back frames in != out + strangers");
  if (summary_.peer_mismatches != summary_.strangers) {
    fail("rx_peer_mismatch " + std::to_string(summary_.peer_mismatches) + " != strangers " +
         std::to_string(summary_.strangers));
  }
  if (sent_pkts_ != c.tx_frames) fail("sent_pkts != the workers' tx_frames");
  if (rcvd_pkts_ != c.rx_delivered) fail("rcvd_pkts != the workers' rx_delivered");
  const std::uint64_t rx_fates = c.rx_delivered + c.rx_malformed + c.rx_icrc_errors + c.rx_no_qp +
                                 c.rx_handed_over + c.rx_handover_drops + summary_.peer_mismatches;
  // A handed-over frame is delivered (or counted as no QP) again by its owner.
  if (rx_fates != c.rx_frames + c.rx_handed_over) {
    fail("frames in " + std::to_string(c.rx_frames) + " + handed over " +
         std::to_string(c.rx_handed_over) + " != their fates " + std::to_string(rx_fates));
  }
}

}  // namespace

WorkerSummary run_worker_scenario(const WorkerScenario& scenario) {
  Simulation sim(scenario);
  return sim.run();
}

std::string describe(const WorkerScenario& s) {
  std::ostringstream o;
  o << "seed " << s.seed << " ops " << s.ops << " workers " << s.workers << " qps " << s.qps
    << " loopback_qps " << s.loopback_qps << " mtu " << transport::mtu_bytes(s.mtu) << " max_msg "
    << s.max_msg_bytes << " loss " << s.loss << " reorder " << s.reorder << " dup " << s.dup
    << " corrupt " << s.corrupt << " rate_gbps " << s.rate_gbps << " host_queue "
    << s.host_queue_bytes << " ecn " << s.ecn << " turn_ns " << s.turn_ns << " wake_ns "
    << s.wake_ns << " spin_ns " << s.spin_ns << " spin_allowed " << s.spin_allowed << " strangers "
    << s.strangers << " inflight_budget " << s.inflight_budget_psns << " lossy_burst_packets "
    << s.lossy_burst_packets << " moderation_ns " << s.moderation_ns << " moderation_sends "
    << s.moderation_sends << (s.daemon_qp_config ? " daemon_qp_config" : "")
    << (s.receive_doorbells ? " receive_doorbells" : "") << (s.one_rx_queue ? " one_rx_queue" : "");
  return o.str();
}

}  // namespace xroce::daemon::sim
