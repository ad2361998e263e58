#include "daemon/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstring>
#include <utility>

#include "cm/mad.h"
#include "device/counters_report.h"

namespace xroce::daemon {
namespace {

constexpr std::uint64_t kTagPort = 1;
constexpr std::uint64_t kTagWake = 2;
constexpr std::uint64_t kTagResolver = 4;
constexpr std::uint64_t kTagDoorbell = 3ull << 32;  // | fd: a multishot poll on a doorbell
constexpr std::uint64_t kTagMask = ~0ull << 32;
constexpr unsigned kRingEntries = 8;
constexpr std::size_t kPayloadBufBytes = 4096;  // the largest path MTU
constexpr std::size_t kFrameBufBytes = 4096 + 256;
constexpr std::uint64_t kMaxSleepNs = 100'000'000;  // bounds a sleep with nothing armed

constexpr std::uint16_t kVlanPcpShift = 13;
constexpr std::uint16_t kVlanPcpMask = 0x7 << kVlanPcpShift;

// Asks for a short EEVDF slice for the calling thread (WorkerConfig::slice_ns); false when the
// kernel refuses (before 6.12 SCHED_OTHER ignores or rejects sched_runtime).
// struct sched_attr of <linux/sched/types.h> (its sched_param clashes with glibc's),
// SCHED_ATTR_SIZE_VER0.
struct SchedAttr {
  std::uint32_t size;
  std::uint32_t sched_policy;
  std::uint64_t sched_flags;
  std::int32_t sched_nice;
  std::uint32_t sched_priority;
  std::uint64_t sched_runtime;
  std::uint64_t sched_deadline;
  std::uint64_t sched_period;
};
static_assert(sizeof(SchedAttr) == 48);

bool set_thread_slice(std::uint64_t slice_ns) {
  if (slice_ns == 0) return false;
  SchedAttr attr{};
  attr.size = sizeof(attr);
  attr.sched_policy = SCHED_OTHER;
  attr.sched_runtime = slice_ns;
  return syscall(SYS_sched_setattr, 0, &attr, 0) == 0;
}

bool is_zero(const wire::MacAddr& mac) {
  return std::all_of(mac.begin(), mac.end(), [](std::uint8_t b) { return b == 0; });
}

// A notification point answers CE marks on data, never on ACKs or CNPs (docs/protocol.md §5.2).
bool cnp_worthy(wire::Operation op) {
  return op != wire::Operation::kAck && op != wire::Operation::kAtomicAck &&
         op != wire::Operation::kCnp;
}

bool connected(transport::QpState s) {
  using transport::QpState;
  return s == QpState::kRtr || s == QpState::kRts || s == QpState::kSqd || s == QpState::kSqe;
}

void add_growth(device::CounterBlock& block, device::Counter c, std::uint64_t now,
                std::uint64_t& reported) {
  if (now > reported) block.add(c, now - reported);
  reported = now;
}

}  // namespace

cc::CcDevice daemon_cc_defaults() {
  cc::CcDevice d;
  d.params.np_enable_mask = 0;
  d.pace_unlimited = false;
  return d;
}

std::uint64_t monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

Worker::Worker(WorkerConfig config)
    : index_(config.index),
      routes_(config.routes),
      port_(std::move(config.port)),
      port_mode_(port_->mode()),
      ifindex_(config.ifindex),
      resolve_macs_(config.resolve_macs),
      spin_ns_(config.spin_ns),
      slice_ns_(config.slice_ns),
      cc_(config.cc),
      payload_buf_(kPayloadBufBytes),
      tx_batch_bufs_(kTxBatch, std::vector<std::uint8_t>(kFrameBufBytes)) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  loadavg_fd_ = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  cpus_ = cpus > 0 ? static_cast<unsigned long>(cpus) : 1;
  ring_ok_ = io_uring_queue_init(kRingEntries, &ring_, 0) == 0;
  if (resolve_macs_) {
    int error = 0;
    auto resolver = net::NeighbourResolver::open({}, error);
    if (!resolver) {
      std::fprintf(stderr, "xroce worker %u: no neighbour resolver (%s): frames cannot leave\n",
                   index_, std::strerror(error));
    }
    neighbours_ = std::make_unique<WorkerNeighbours>(ifindex_, std::move(resolver));
  }
}

Worker::~Worker() {
  stop();
  Command* c = nullptr;
  while (commands_.pop(c))
    delete c;
  for (auto& ring : inbox_) {
    Handover* h = nullptr;
    while (ring->pop(h))
      delete h;
  }
  LoopbackFrame* f = nullptr;
  while (loopback_inbox_.pop(f))
    delete f;
  if (ring_ok_) io_uring_queue_exit(&ring_);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (loadavg_fd_ >= 0) close(loadavg_fd_);
}

void Worker::connect(std::span<Worker* const> workers) {
  assert(!thread_.joinable());
  peers_.assign(workers.begin(), workers.end());
  inbox_.clear();
  for (std::size_t i = 0; i < peers_.size(); ++i)
    inbox_.push_back(std::make_unique<HandoverRing>());
}

void Worker::start() {
  assert(!thread_.joinable());
  if (peers_.empty()) {
    Worker* self = this;
    connect(std::span<Worker* const>(&self, 1));
  }
  thread_ = std::thread([this] { run(); });
}

void Worker::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  sleeping_.store(true);  // make wake() write the eventfd whatever the worker's state
  wake();
  thread_.join();
}

bool Worker::post_command(Command command) {
  auto* c = new Command(std::move(command));
  if (!commands_.push(c)) {
    delete c;
    return false;
  }
  wake();
  return true;
}

void Worker::wake() {
  if (!sleeping_.load(std::memory_order_seq_cst)) return;
  const std::uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void Worker::add_qp_on_worker(HostedQp hosted) {
  assert(on_worker());
  const std::uint32_t qpn = hosted.qp->qpn().value();
  assert(routes_->owner(hosted.qp->qpn()) == index_);
  watch_doorbells_on_worker(*hosted.binding, true);
  Hosted& h = qps_[qpn];
  h.qp = std::move(hosted.qp);
  h.binding = std::move(hosted.binding);
  // Counters the transport already has (a QP moved between workers) were fed by its old one.
  h.reported = h.qp->counters();
}

// Doorbell eventfds are watched with a multishot poll for as long as a QP using them lives
// here; the poll is removed (and submitted) before the QP goes, so the control thread may close
// the fd as soon as remove_qp_on_worker returns.
void Worker::watch_doorbells_on_worker(const QpBinding& binding, bool watch) {
  if (!ring_ok_) return;
  for (const int fd : binding.doorbell_fds_on_worker()) {
    std::uint32_t& users = doorbell_users_[fd];
    const bool change = watch ? users++ == 0 : --users == 0;
    if (!watch && users == 0) doorbell_users_.erase(fd);
    if (!change) continue;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    const std::uint64_t tag = kTagDoorbell | static_cast<std::uint32_t>(fd);
    if (watch) {
      io_uring_prep_poll_multishot(sqe, fd, POLLIN);
      io_uring_sqe_set_data64(sqe, tag);
    } else {
      io_uring_prep_poll_remove(sqe, tag);
      io_uring_sqe_set_data64(sqe, 0);
    }
    io_uring_submit(&ring_);
  }
}

bool Worker::remove_qp_on_worker(wire::Qpn qpn) {
  assert(on_worker());
  const auto it = qps_.find(qpn.value());
  if (it == qps_.end()) return false;
  watch_doorbells_on_worker(*it->second.binding, false);
  feed_counters_on_worker(it->second);  // its last counts stay in the device's
  it->second.qp->set_congestion_hooks(nullptr);
  qps_.erase(it);
  return true;
}

transport::Qp* Worker::find_qp_on_worker(wire::Qpn qpn) {
  assert(on_worker());
  const auto it = qps_.find(qpn.value());
  return it == qps_.end() ? nullptr : it->second.qp.get();
}

DatapathCounters Worker::counters_on_worker() const {
  assert(on_worker());
  DatapathCounters c = counters_;
  c.sleeps = sleeps_.load(std::memory_order_relaxed);
  return c;
}

void Worker::set_cc_on_worker(const cc::CcDevice& device) {
  assert(on_worker());
  cc_ = device;  // the QPs' QpCongestion objects point at cc_
}

std::optional<QpCcStatus> Worker::qp_cc_on_worker(wire::Qpn qpn) {
  assert(on_worker());
  const auto it = qps_.find(qpn.value());
  if (it == qps_.end()) return std::nullopt;
  QpCcStatus status;
  const WorkerQpCongestion* c = it->second.cc.get();
  if (c == nullptr) {
    status.stage = "none";
    status.rate_mbps = status.target_rate_mbps = cc_.line_rate_mbps;
    return status;
  }
  status.active = c->qp_cc.active();
  status.rate_mbps = c->qp_cc.rate_mbps();
  status.target_rate_mbps = c->qp_cc.target_rate_mbps();
  status.alpha = c->qp_cc.alpha();
  status.stage = cc::stage_name(c->qp_cc.stage());
  status.priority = c->qp_cc.priority();
  status.counters = c->qp_cc.counters();
  return status;
}

net::PortStats Worker::port_stats_on_worker() const {
  assert(on_worker());
  return port_->stats();
}

std::size_t Worker::qp_count_on_worker() const {
  assert(on_worker());
  return qps_.size();
}

void Worker::set_loopback_on_worker(std::shared_ptr<const LoopbackTable> table) {
  assert(on_worker() || !running());
  loopback_ = std::move(table);
}

void Worker::run() {
  thread_id_.store(std::this_thread::get_id());
  (void)set_thread_slice(slice_ns_);
  std::uint64_t idle_since_ns = 0;  // 0: the last turn did work
  while (!stop_.load(std::memory_order_relaxed)) {
    std::uint64_t now = monotonic_now_ns();
    bool busy = run_commands_on_worker();
    // New work before new packets: a receive WQE posted before the peer's send was even made
    // must be there when the send arrives (UD drops a message that finds no receive).
    busy |= pull_work_on_worker();
    busy |= drain_handovers_on_worker(now);
    busy |= drain_loopback_on_worker(now);
    busy |= receive_on_worker(now);
    now = monotonic_now_ns();
    busy |= fire_timers_on_worker(now);
    busy |= drain_outputs_on_worker(now);
    busy |= service_neighbours_on_worker(now);
    busy |= flush_on_worker();
    sample_port_drops_on_worker(now);
    if (busy) {
      idle_since_ns = 0;
    } else if (idle_since_ns == 0) {
      idle_since_ns = now;
    } else if (now - idle_since_ns >= spin_ns_ || !spin_allowed_on_worker(now)) {
      sleep_on_worker(now);
      idle_since_ns = 0;
    }
  }
  run_commands_on_worker();  // a call() waiting on us must not hang
}

// Spinning only pays while every runnable thread has a core. Otherwise the spin takes the core
// from the application that is to poll the completion just written (or post the next request),
// and a runnable worker, unlike a woken one, does not preempt it: it waits for the end of the
// application's slice (a tick). So when the host has more runnable threads than cores, an idle
// worker sleeps at once, and its wakeup (port, doorbell) preempts with its short slice.
// Runnable threads come from /proc/loadavg's fourth field, read at most once a millisecond.
bool Worker::spin_allowed_on_worker(std::uint64_t now_ns) {
  if (now_ns - spin_checked_ns_ < kSpinCheckNs) return spin_allowed_;
  spin_checked_ns_ = now_ns;
  if (loadavg_fd_ < 0) return spin_allowed_;
  char buf[128];
  const ssize_t n = pread(loadavg_fd_, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return spin_allowed_;
  buf[n] = '\0';
  unsigned long running = 0;  // "0.50 0.40 0.30 3/512 1234": 3 runnable, this thread included
  if (std::sscanf(buf, "%*s %*s %*s %lu/", &running) == 1) spin_allowed_ = running <= cpus_;
  return spin_allowed_;
}

void Worker::sample_port_drops_on_worker(std::uint64_t now_ns) {
  if (now_ns - port_drops_sampled_ns_ < kSpinCheckNs) return;
  port_drops_sampled_ns_ = now_ns;
  const std::uint64_t drops = port_->stats().rx_drops;
  if (drops > port_drops_counted_) {
    device_counters_.add(device::Counter::kRxPortDrops, drops - port_drops_counted_);
    port_drops_counted_ = drops;
  }
}

bool Worker::run_commands_on_worker() {
  Command* c = nullptr;
  bool any = false;
  while (commands_.pop(c)) {
    (*c)(*this);
    delete c;
    any = true;
  }
  return any;
}

bool Worker::drain_handovers_on_worker(std::uint64_t now_ns) {
  bool any = false;
  for (auto& ring : inbox_) {
    Handover* h = nullptr;
    while (ring->pop(h)) {
      std::unique_ptr<Handover> owned(h);
      if (classify(h->bytes, decoded_) == Ingress::kPacket)
        deliver_on_worker(now_ns, h->bytes, decoded_);
      any = true;
    }
  }
  return any;
}

// Frames another worker (of this device or another) looped back to us: taken in through the
// same door as the port's.
bool Worker::drain_loopback_on_worker(std::uint64_t now_ns) {
  bool any = false;
  LoopbackFrame* f = nullptr;
  while (loopback_inbox_.pop(f)) {
    std::unique_ptr<LoopbackFrame> owned(f);
    ++counters_.rx_loopback;
    route_on_worker(now_ns, owned->bytes);
    any = true;
  }
  return any;
}

bool Worker::receive_on_worker(std::uint64_t now_ns) {
  std::array<net::RxFrame, kRxBatch> frames;
  const auto got = port_->receive(frames);
  if (!got || *got == 0) return false;
  for (std::size_t i = 0; i < *got; ++i)
    route_on_worker(now_ns, frames[i].bytes);
  port_->release(std::span<const net::RxFrame>(frames.data(), *got));
  return true;
}

// The door, where packets are validated once: count and drop what is not a good RoCEv2 packet, then
// route by the destination QP to its owner.
void Worker::route_on_worker(std::uint64_t now_ns, wire::Bytes frame) {
  ++counters_.rx_frames;
  switch (classify(frame, decoded_)) {
    case Ingress::kMalformed:
      ++counters_.rx_malformed;
      device_counters_.add(device::Counter::kRxMalformed);
      return;
    case Ingress::kBadIcrc:
      ++counters_.rx_icrc_errors;
      device_counters_.add(device::Counter::kRxIcrcErrors);
      return;
    case Ingress::kPacket:
      break;
  }
  const std::uint32_t owner = routes_->owner(decoded_.hdr.bth.dest_qp);
  if (owner == index_ || owner >= peers_.size()) {  // ours, or nobody's: counted as no QP
    deliver_on_worker(now_ns, frame, decoded_);
    return;
  }
  auto* h = new Handover{std::vector<std::uint8_t>(frame.begin(), frame.end())};
  if (!peers_[owner]->inbox_[index_]->push(h)) {
    delete h;
    ++counters_.rx_handover_drops;
    device_counters_.add(device::Counter::kRxHandoffDrops);
    return;
  }
  ++counters_.rx_handed_over;
  // rxe's ack_deferred counts responses its completer could not take at once (the completer
  // scheduled as a task); ours is a response that waits for the owning worker.
  if (!decoded_.hdr.info().is_request && decoded_.hdr.info().operation != wire::Operation::kCnp)
    device_counters_.add(device::Counter::kAckDeferred);
  peers_[owner]->wake();
}

void Worker::deliver_on_worker(std::uint64_t now_ns, wire::Bytes frame,
                               const wire::DecodedFrame& f) {
  if (gsi_sink_ && f.hdr.bth.dest_qp.value() == cm::kGsiQpn) {
    ++counters_.rx_delivered;
    device_counters_.add(device::Counter::kRcvdPkts);
    device_counters_.add(device::Counter::kRxBytes, frame.size());
    gsi_sink_(frame);
    return;
  }
  const auto it = qps_.find(f.hdr.bth.dest_qp.value());
  if (it == qps_.end()) {
    ++counters_.rx_no_qp;
    device_counters_.add(device::Counter::kRxUnknownQp);
    return;  // a CNP for a QP that does not exist is ignored too (docs/protocol.md §5.2)
  }
  Hosted& hosted = it->second;
  if (!hosted.binding->accepts_from_on_worker(f.addr)) {
    device_counters_.add(device::Counter::kRxPeerMismatch);
    return;
  }
  ++counters_.rx_delivered;
  device_counters_.add(device::Counter::kRcvdPkts);
  device_counters_.add(device::Counter::kRxBytes, frame.size());
  attach_cc_on_worker(hosted);
  const transport::RxMeta meta = rx_meta_of(frame, f);
  const wire::Operation op = f.hdr.info().operation;
  if (hosted.cc != nullptr) {
    if (meta.ecn_ce && cnp_worthy(op)) hosted.cc->qp_cc.on_ce_marked(now_ns);
  } else if (op == wire::Operation::kCnp) {
    device_counters_.add(device::Counter::kRpCnpIgnored);  // no reaction point on this QP
  }
  hosted.qp->handle_packet(now_ns, f.hdr, f.payload, meta);
}

// Gives a connected RC QP its congestion-control hooks once its path is known (RTR), and keeps
// the CNP's destination current. A UD QP has none: DCQCN is per connection.
void Worker::attach_cc_on_worker(Hosted& hosted) {
  transport::Qp& qp = *hosted.qp;
  if (qp.type() != transport::QpType::kRc || !connected(qp.state())) {
    if (hosted.cc != nullptr && qp.state() == transport::QpState::kReset) {
      qp.set_congestion_hooks(nullptr);
      hosted.cc.reset();
    }
    return;
  }
  const wire::Qpn peer = qp.attr().dest_qp_num;
  if (hosted.cc != nullptr) {
    if (hosted.cc->qp_cc.peer() != peer) hosted.cc->qp_cc.set_peer(peer);
    return;
  }
  const wire::FrameAddress* addr = hosted.binding->address_on_worker(qp.attr().av_id);
  if (addr == nullptr) return;
  hosted.cc = std::make_unique<WorkerQpCongestion>(cc_, peer, addr->traffic_class);
  qp.set_congestion_hooks(hosted.cc.get());
}

// Adds to the device counters what the QP's transport and DCQCN counters grew by since the
// last call (STYLE: counters never go backwards, and a destroyed QP's counts stay).
void Worker::feed_counters_on_worker(Hosted& hosted) {
  device::feed_qp_counters(device_counters_, hosted.qp->counters(), hosted.reported);
  if (hosted.cc == nullptr) return;
  const cc::CcCounters now = hosted.cc->qp_cc.counters();
  add_growth(device_counters_, device::Counter::kRpCnpHandled, now.rp_cnp_handled,
             hosted.cc_reported.rp_cnp_handled);
  add_growth(device_counters_, device::Counter::kRpCnpIgnored, now.rp_cnp_ignored,
             hosted.cc_reported.rp_cnp_ignored);
}

bool Worker::pull_work_on_worker() {
  bool any = false;
  for (auto& [qpn, hosted] : qps_)
    any |= hosted.binding->pull_work_on_worker(*hosted.qp);
  return any;
}

bool Worker::fire_timers_on_worker(std::uint64_t now_ns) {
  bool any = false;
  for (auto& [qpn, hosted] : qps_) {
    const auto deadline = hosted.qp->next_deadline();
    if (deadline && *deadline <= now_ns) {
      hosted.qp->handle_timeout(now_ns);
      any = true;
    }
    if (hosted.cc == nullptr) continue;
    const auto cc_deadline = hosted.cc->qp_cc.next_deadline();
    if (cc_deadline && *cc_deadline <= now_ns) {
      hosted.cc->qp_cc.on_timer(now_ns);  // may raise the rate: the pacer releases sooner
      any = true;
    }
  }
  return any;
}

bool Worker::drain_outputs_on_worker(std::uint64_t now_ns) {
  bool any = false;
  for (auto& [qpn, hosted] : qps_)
    any |= drain_qp_on_worker(now_ns, hosted);
  transmit_batch_on_worker();
  return any;
}

bool Worker::drain_qp_on_worker(std::uint64_t now_ns, Hosted& hosted) {
  bool any = false;
  attach_cc_on_worker(hosted);
  if (hosted.cc != nullptr) {
    // The pacer stamps each packet with `now`: after other QPs' bursts this turn, the turn's
    // start would be long past and the QP's next packet would leave early by that much.
    now_ns = monotonic_now_ns();
    while (const auto cnp = hosted.cc->qp_cc.poll_cnp()) {
      send_cnp_on_worker(now_ns, *cnp, hosted);
      any = true;
    }
  }
  // Back-pressure: while the port refuses frames, leave packets inside the QP. A QP its pacer
  // holds returns nothing here; its release time is one of its deadlines.
  while (tx_backlog_.size() < kMaxTxBacklog) {
    const auto tx = hosted.qp->poll_transmit(now_ns, payload_buf_);
    if (!tx) break;
    send_frame_on_worker(now_ns, *tx, *hosted.binding);
    any = true;
  }
  while (const auto c = hosted.qp->poll_completion()) {
    device::feed_completion(device_counters_, *c);
    hosted.binding->complete_on_worker(*c);
    any = true;
  }
  while (const auto e = hosted.qp->poll_event()) {
    hosted.binding->event_on_worker(*e);
    any = true;
  }
  feed_counters_on_worker(hosted);
  return any;
}

void Worker::send_frame_on_worker(std::uint64_t now_ns, const transport::Transmit& tx,
                                  QpBinding& binding) {
  const wire::FrameAddress* addr = binding.address_on_worker(tx.av_id);
  if (addr == nullptr) {
    ++counters_.tx_no_address;
    return;
  }
  emit_on_worker(now_ns, tx, *addr, payload_buf_);
}

// A CNP (docs/protocol.md §5.3) to the QP's peer over the QP's own path: cnp_dscp, Not-ECT, and
// cnp_802p_prio on a VLAN.
void Worker::send_cnp_on_worker(std::uint64_t now_ns, const wire::TransportHeaders& cnp,
                                Hosted& hosted) {
  const wire::FrameAddress* path = hosted.binding->address_on_worker(hosted.qp->attr().av_id);
  if (path == nullptr) {
    ++counters_.tx_no_address;
    return;
  }
  wire::FrameAddress addr = *path;
  addr.traffic_class = cc::cnp_tos(cc_.params);
  if (addr.vlan_tci) {
    addr.vlan_tci = static_cast<std::uint16_t>((*addr.vlan_tci & ~kVlanPcpMask) |
                                               (cc_.params.cnp_802p_prio << kVlanPcpShift));
  }
  transport::Transmit tx;
  tx.hdr = cnp;  // no payload; encode_transmit leaves it Not-ECT
  device_counters_.add(device::Counter::kNpCnpSent);
  emit_on_worker(now_ns, tx, addr, wire::Bytes{});
}

// Where a packet goes: to a device of this daemon (loopback), or to the port once its
// destination MAC is known (waiting for it in neighbours_ meanwhile).
void Worker::emit_on_worker(std::uint64_t now_ns, const transport::Transmit& tx,
                            const wire::FrameAddress& a, wire::Bytes payload) {
  if (loopback_) {
    if (const LoopbackTarget* target = loopback_->find(a.dst_ip)) {
      loop_back_on_worker(tx, a, payload, *target);
      return;
    }
  }
  if (neighbours_ == nullptr || !is_zero(a.dst_mac)) {
    encode_to_port_on_worker(tx, a, payload);
    return;
  }
  wire::FrameAddress addr = a;
  switch (neighbours_->route(now_ns, addr)) {
    case WorkerNeighbours::Route::kSend:
      encode_to_port_on_worker(tx, addr, payload);
      return;
    case WorkerNeighbours::Route::kWait:
      count_neighbour_failures_on_worker(neighbours_->wait(now_ns, addr, tx, payload));
      return;
    case WorkerNeighbours::Route::kUnreachable:
      count_neighbour_failures_on_worker(1);
      return;
  }
}

// Encodes the packet as for the wire and hands it to the worker that owns the destination QP.
void Worker::loop_back_on_worker(const transport::Transmit& tx, const wire::FrameAddress& a,
                                 wire::Bytes payload, const LoopbackTarget& target) {
  wire::FrameAddress addr = a;
  addr.dst_mac = target.mac;
  auto frame = std::make_unique<LoopbackFrame>();
  frame->bytes.resize(wire::frame_bytes(addr, tx.hdr, tx.payload_len));
  const auto len = encode_transmit(tx, addr, payload, frame->bytes);
  if (!len) {
    ++counters_.tx_encode_errors;
    device_counters_.add(device::Counter::kSendErr);
    return;
  }
  frame->bytes.resize(*len);
  Worker& to = target.worker_for(tx.hdr.bth.dest_qp);
  if (!to.push_loopback(frame.get())) {
    ++counters_.tx_loopback_drops;  // the receiver's inbox is full: lost, as on a wire
    device_counters_.add(device::Counter::kSendErr);
    return;
  }
  (void)frame.release();
  ++counters_.tx_loopback;
  device_counters_.add(device::Counter::kLoopbackPkts);
  count_sent_on_worker(*len);
  to.wake();
}

void Worker::encode_to_port_on_worker(const transport::Transmit& tx, const wire::FrameAddress& addr,
                                      wire::Bytes payload) {
  std::vector<std::uint8_t>& slot = tx_slot_on_worker();
  const auto len = encode_transmit(tx, addr, payload, slot);
  if (!len) {
    ++counters_.tx_encode_errors;
    device_counters_.add(device::Counter::kSendErr);
    return;
  }
  tx_batch_[tx_batch_count_++] = net::TxFrame(slot.data(), *len);
}

// The next batch slot to encode a frame into (sends the batch first when it is full).
std::vector<std::uint8_t>& Worker::tx_slot_on_worker() {
  if (tx_batch_count_ == kTxBatch) transmit_batch_on_worker();
  return tx_batch_bufs_[tx_batch_count_];
}

// Sends the batch in one port call; what the port refuses (back-pressure) goes to the backlog,
// behind anything already there, so frames leave in order.
void Worker::transmit_batch_on_worker() {
  if (tx_batch_count_ == 0) return;
  std::size_t sent = 0;
  if (tx_backlog_.empty()) {
    const auto r =
        port_->transmit(std::span<const net::TxFrame>(tx_batch_.data(), tx_batch_count_));
    sent = r ? *r : 0;
    for (std::size_t i = 0; i < sent; ++i)
      count_sent_on_worker(tx_batch_[i].size());
  }
  for (std::size_t i = sent; i < tx_batch_count_; ++i) {
    if (tx_backlog_.size() >= kMaxTxBacklog) {
      ++counters_.tx_backlog_drops;
      device_counters_.add(device::Counter::kSendErr);
      continue;
    }
    tx_backlog_.emplace_back(tx_batch_[i].begin(), tx_batch_[i].end());
  }
  tx_batch_count_ = 0;
}

void Worker::set_gsi_sink_on_worker(GsiSink sink) {
  assert(on_worker());
  gsi_sink_ = std::move(sink);
}

void Worker::send_packet_on_worker(const wire::FrameAddress& addr,
                                   const wire::TransportHeaders& hdr, wire::Bytes payload) {
  assert(on_worker());
  transport::Transmit tx;
  tx.hdr = hdr;
  tx.payload_len = static_cast<std::uint32_t>(payload.size());
  emit_on_worker(monotonic_now_ns(), tx, addr, payload);  // loopback and MACs as for QPs
  transmit_batch_on_worker();
}

void Worker::count_sent_on_worker(std::size_t bytes) {
  ++counters_.tx_frames;
  device_counters_.add(device::Counter::kSentPkts);
  device_counters_.add(device::Counter::kTxBytes, bytes);
}

bool Worker::flush_on_worker() {
  bool any = false;
  while (!tx_backlog_.empty()) {
    const net::TxFrame one(tx_backlog_.front());
    const auto sent = port_->transmit(std::span<const net::TxFrame>(&one, 1));
    if (!sent || *sent == 0) break;
    count_sent_on_worker(tx_backlog_.front().size());
    tx_backlog_.pop_front();
    any = true;
  }
  (void)port_->flush();
  return any;
}

// The resolver's socket and timers; frames whose MAC arrived leave in this turn's batch.
bool Worker::service_neighbours_on_worker(std::uint64_t now_ns) {
  if (neighbours_ == nullptr) return false;
  bool sent = false;
  const auto progress = neighbours_->service(now_ns, std::exchange(resolver_readable_, false),
                                             [&](WorkerNeighbours::Waiting& w) {
                                               encode_to_port_on_worker(w.tx, w.addr, w.payload);
                                               sent = true;
                                             });
  transmit_batch_on_worker();
  count_neighbour_failures_on_worker(progress.failed);
  if (progress.mac_changes > 0)
    device_counters_.add(device::Counter::kNeighbourChanges, progress.mac_changes);
  return sent;
}

void Worker::count_neighbour_failures_on_worker(std::size_t frames) {
  if (frames == 0) return;
  counters_.tx_no_neighbour += frames;
  device_counters_.add(device::Counter::kNeighbourFailures, frames);
}

void Worker::set_asleep_on_worker(bool asleep) {
  for (auto& [qpn, hosted] : qps_)
    hosted.binding->set_asleep_on_worker(asleep);
}

bool Worker::work_pending_on_worker() {
  if (!commands_.empty() || !tx_backlog_.empty() || !loopback_inbox_.empty()) return true;
  for (auto& ring : inbox_)
    if (!ring->empty()) return true;
  for (auto& [qpn, hosted] : qps_)
    if (hosted.binding->work_pending_on_worker()) return true;
  return false;
}

std::optional<std::uint64_t> Worker::next_deadline_on_worker(std::uint64_t now_ns) const {
  std::optional<std::uint64_t> earliest;
  for (const auto& [qpn, hosted] : qps_) {
    const auto d = hosted.qp->next_deadline();
    if (d && (!earliest || *d < *earliest)) earliest = d;
    if (hosted.cc == nullptr) continue;
    const auto c = hosted.cc->qp_cc.next_deadline();
    if (c && (!earliest || *c < *earliest)) earliest = c;
  }
  if (neighbours_ != nullptr) {
    const auto n = neighbours_->next_deadline();
    if (n && (!earliest || *n < *earliest)) earliest = std::max(*n, now_ns);
  }
  return earliest;
}

void Worker::arm_poll_on_worker(int fd, std::uint64_t tag) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) return;
  io_uring_prep_poll_add(sqe, fd, POLLIN);
  io_uring_sqe_set_data64(sqe, tag);
  if (tag == kTagPort) port_poll_armed_ = true;
  if (tag == kTagWake) wake_poll_armed_ = true;
  if (tag == kTagResolver) resolver_poll_armed_ = true;
}

// Sleeps in io_uring until the port has frames, someone rings the eventfd, or the earliest
// deadline. "I sleep" is published before the last look for work, so a producer that pushed
// work after our look sees sleeping_ and writes the eventfd (seq_cst on both sides).
void Worker::sleep_on_worker(std::uint64_t now_ns) {
  if (!ring_ok_) return;
  sleeping_.store(true, std::memory_order_seq_cst);
  set_asleep_on_worker(true);
  if (work_pending_on_worker() || stop_.load()) {
    sleeping_.store(false, std::memory_order_seq_cst);
    set_asleep_on_worker(false);
    return;
  }
  if (!port_poll_armed_) arm_poll_on_worker(port_->wait_fd(), kTagPort);
  if (!wake_poll_armed_) arm_poll_on_worker(wake_fd_, kTagWake);
  if (!resolver_poll_armed_ && neighbours_ != nullptr && neighbours_->fd() >= 0)
    arm_poll_on_worker(neighbours_->fd(), kTagResolver);
  const auto deadline = next_deadline_on_worker(now_ns);
  const std::uint64_t wait_ns =
      deadline ? (*deadline > now_ns ? std::min(*deadline - now_ns, kMaxSleepNs) : 0) : kMaxSleepNs;
  if (wait_ns > 0) {
    __kernel_timespec ts{};
    ts.tv_sec = static_cast<long long>(wait_ns / 1'000'000'000u);
    ts.tv_nsec = static_cast<long long>(wait_ns % 1'000'000'000u);
    io_uring_cqe* cqe = nullptr;
    (void)io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ts, nullptr);
    sleeps_.fetch_add(1, std::memory_order_relaxed);
  }
  sleeping_.store(false, std::memory_order_seq_cst);
  set_asleep_on_worker(false);
  io_uring_cqe* cqe = nullptr;
  while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
    const std::uint64_t tag = io_uring_cqe_get_data64(cqe);
    if ((tag & kTagMask) == kTagDoorbell) {
      const int fd = static_cast<int>(tag & ~kTagMask);
      std::uint64_t count = 0;
      if (cqe->res > 0) (void)!read(fd, &count, sizeof(count));  // the fd is non-blocking
      if ((cqe->flags & IORING_CQE_F_MORE) == 0 && doorbell_users_.contains(fd)) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // the kernel ended the multishot poll
        if (sqe != nullptr) {
          io_uring_prep_poll_multishot(sqe, fd, POLLIN);
          io_uring_sqe_set_data64(sqe, tag);
        }
      }
    }
    if (tag == kTagPort) port_poll_armed_ = false;
    if (tag == kTagResolver) {
      resolver_poll_armed_ = false;
      resolver_readable_ = true;
    }
    if (tag == kTagWake) {
      wake_poll_armed_ = false;
      std::uint64_t count = 0;
      (void)!read(wake_fd_, &count, sizeof(count));
    }
    io_uring_cqe_seen(&ring_, cqe);
  }
}

}  // namespace xroce::daemon
