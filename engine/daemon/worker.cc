#include "daemon/worker.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "transport/memory.h"

namespace xroce::daemon {
namespace {

std::unique_ptr<WorkerNeighbours> make_neighbours(WorkerConfig& config) {
  if (!config.resolve_macs) return nullptr;
  return std::make_unique<WorkerNeighbours>(config.ifindex, std::move(config.resolver));
}

std::unique_ptr<Clock> clock_or_monotonic(std::unique_ptr<Clock> clock) {
  return clock ? std::move(clock) : std::make_unique<MonotonicClock>();
}

}  // namespace

Worker::Worker(WorkerConfig config)
    : index_(config.index),
      cpu_(config.cpu),
      routes_(config.routes),
      port_(std::move(config.port)),
      port_mode_(port_->mode()),
      port_max_frame_bytes_(port_->max_frame_bytes()),
      port_receive_frames_(port_->receive_frames(port_max_frame_bytes_)),
      clock_(clock_or_monotonic(std::move(config.clock))),
      lossy_burst_packets_(config.lossy_burst_packets),
      moderation_ns_(config.moderation_ns),
      moderation_sends_(config.moderation_sends),
      pacing_(config.cc),
      egress_(*port_, counters_, make_neighbours(config)),
      ingress_(index_, *routes_, qps_, work_, pacing_, counters_),
      sleep_(std::move(config.sleeper), config.spin_ns) {}

Worker::~Worker() {
  stop();
  Command* c = nullptr;
  while (commands_.pop(c))
    delete c;
}

void Worker::connect(std::span<Worker* const> workers) {
  assert(!thread_.joinable());
  ingress_.connect(workers);
}

void Worker::start() {
  assert(!thread_.joinable());
  connect_alone();
  thread_ = std::thread([this] { run(); });
}

void Worker::attach_to_this_thread() {
  assert(!thread_.joinable());
  connect_alone();
  thread_id_.store(std::this_thread::get_id());
}

// A worker nobody connected is its device's only one.
void Worker::connect_alone() {
  if (ingress_.connected()) return;
  Worker* self = this;
  connect(std::span<Worker* const>(&self, 1));
}

void Worker::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true);
  sleep_.wake_for_stop();
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

void Worker::add_qp_on_worker(HostedQp hosted) {
  assert(on_worker());
  const std::uint32_t qpn = hosted.qp->qpn().value();
  assert(routes_->owner(hosted.qp->qpn()) == index_);
  // Doorbells are watched for as long as a QP using them lives here; the last unwatch is
  // done before the QP goes, so the control thread may close the fd once remove_qp returns.
  for (const int fd : hosted.binding->doorbell_fds_on_worker())
    sleep_.sleeper().watch_doorbell(fd);
  Hosted& h = qps_[qpn];  // elements of an unordered_map never move
  forget_ready_on_worker(h);
  h.qp = std::move(hosted.qp);
  h.binding = std::move(hosted.binding);
  h.qp->set_receive_source(&h);
  h.ready = h.binding->ready_bit_on_worker();
  if (h.ready.page != nullptr) {
    ready_.add(h.ready, &h);
  } else {
    pull_each_turn_.push_back(&h);
  }
  // Counters the transport already has (a QP moved between workers) were fed by its old one.
  h.reported = h.qp->counters();
  h.timer_key.reset();  // the drain enters its deadlines
  // A QP placed already connected has its reaction point from the moment add_qp returns, so a
  // status query made right after sees it; the drain would attach it only on a later turn.
  pacing_.attach(h);
  work_.mark(h);
}

bool Worker::remove_qp_on_worker(wire::Qpn qpn) {
  assert(on_worker());
  const auto it = qps_.find(qpn.value());
  if (it == qps_.end()) return false;
  for (const int fd : it->second.binding->doorbell_fds_on_worker())
    sleep_.sleeper().unwatch_doorbell(fd);
  counters_.qp_growth(it->second);  // its last counts stay in the device's
  TimersAndPacing::detach(it->second);
  forget_ready_on_worker(it->second);
  work_.forget(it->second);
  if (it->second.budget_listed) std::erase(budget_queue_, &it->second);
  budget_waiters_.store(!budget_queue_.empty(), std::memory_order_relaxed);
  qps_.erase(it);  // its DeadlineQueue entries no longer find it
  return true;
}

// Where the worker looks for `hosted`'s work, undone (before it is replaced or removed).
void Worker::forget_ready_on_worker(Hosted& hosted) {
  if (hosted.binding == nullptr) return;
  if (hosted.ready.page != nullptr) {
    ready_.remove(hosted.ready);
    hosted.ready = {};
  } else {
    std::erase(pull_each_turn_, &hosted);
  }
}

// The caller may change the QP (modify, post): it is drained next.
transport::Qp* Worker::find_qp_on_worker(wire::Qpn qpn) {
  assert(on_worker());
  const auto it = qps_.find(qpn.value());
  if (it == qps_.end()) return nullptr;
  work_.mark(it->second);
  return it->second.qp.get();
}

DatapathCounters Worker::counters_on_worker() const {
  assert(on_worker());
  DatapathCounters c = counters_.datapath();
  c.sleeps = sleep_.sleeps();
  c.moderated_sleeps = sleep_.moderated_sleeps();
  return c;
}

void Worker::set_cc_on_worker(const cc::CcDevice& device) {
  assert(on_worker());
  pacing_.set_cc(device);
}

std::optional<QpCcStatus> Worker::qp_cc_on_worker(wire::Qpn qpn) {
  assert(on_worker());
  const auto it = qps_.find(qpn.value());
  if (it == qps_.end()) return std::nullopt;
  return pacing_.status(it->second);
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
  egress_.set_loopback(std::move(table));
}

void Worker::set_gsi_sink_on_worker(GsiSink sink) {
  assert(on_worker());
  ingress_.set_gsi_sink(std::move(sink));
}

void Worker::send_packet_on_worker(const wire::FrameAddress& addr,
                                   const wire::TransportHeaders& hdr, wire::Bytes payload) {
  assert(on_worker());
  transport::Transmit tx;
  tx.hdr = hdr;
  tx.payload_len = static_cast<std::uint32_t>(payload.size());
  egress_.emit(clock_->now_ns(), tx, addr, payload);  // loopback and MACs as for QPs
  egress_.transmit_batch();
}

void Worker::run() {
  thread_id_.store(std::this_thread::get_id());
  name_and_bind_thread_on_worker();
  sleep_.sleeper().on_thread_start();
  while (!stop_.load(std::memory_order_relaxed))
    run_once_on_worker();
  run_commands_on_worker();  // a call() waiting on us must not hang
}

// "xroced-wN" in ps -L and top -H; then, with a CPU configured, only that CPU. The CPU was
// checked against the daemon's own when the device was added, so a refusal here (a cpuset
// changed since) is logged and the worker runs wherever it may.
void Worker::name_and_bind_thread_on_worker() {
  const std::string name = "xroced-w" + std::to_string(index_);
  (void)pthread_setname_np(pthread_self(), name.c_str());
  if (!cpu_) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(*cpu_, &set);
  if (int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set)) {
    std::fprintf(stderr, "xroce worker %u: cannot run on CPU %u only: %s\n", index_, *cpu_,
                 std::strerror(err));
  }
}

void Worker::run_once_on_worker() {
  assert(on_worker());
  if (sleep_.suspended()) woke_on_worker(sleep_.resume());
  const bool busy = turn_on_worker();
  if (sleep_.should_sleep(busy, turn_now_ns_)) sleep_on_worker(turn_now_ns_);
}

bool Worker::turn_on_worker() {
  // What the QPs' memory accesses look up is kept for the turn (transport::AccessTurn), and let
  // go at its end, before the worker may sleep.
  const transport::AccessTurn memory_turn;
  std::uint64_t now = clock_->now_ns();
  bool busy = run_commands_on_worker();
  // New work before new packets: a receive WQE posted before the peer's send was even made
  // must be there when the send arrives (UD drops a message that finds no receive).
  busy |= pull_work_on_worker(now);
  busy |= ingress_.drain_handovers(now);
  busy |= ingress_.drain_loopback(now);
  busy |= ingress_.receive_waiting(now, *port_, kRxBatchesBeforeTimers);
  now = clock_->now_ns();
  turn_now_ns_ = now;
  busy |= fire_timers_on_worker(now);
  release_budget_queue_on_worker();
  busy |= drain_outputs_on_worker(now);
  busy |= egress_.service_neighbours(now);
  busy |= egress_.flush();
  ingress_.sample_port_drops(now, *port_);
  return busy;
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

void Worker::catch_up_on_worker() {
  const std::uint64_t now = clock_->now_ns();
  pull_work_on_worker(now);
  drain_outputs_on_worker(now);
  egress_.flush();
}

// The QPs whose ready bit was set, and those without one. A pull that left work behind (the
// transport's queue was full) puts the bit back: the QP is pulled again next turn.
bool Worker::pull_work_on_worker(std::uint64_t now_ns) {
  bool any = false;
  ready_.take([&](Hosted& hosted) {
    if (hosted.binding->pull_work_on_worker(*hosted.qp)) any = true;
    if (hosted.binding->work_pending_on_worker()) ReadyRings::mark_ready(hosted.ready);
    note_send_depth_on_worker(now_ns, hosted);
    work_.mark(hosted);
  });
  for (Hosted* hosted : pull_each_turn_) {
    if (!hosted->binding->pull_work_on_worker(*hosted->qp)) continue;
    any = true;
    note_send_depth_on_worker(now_ns, *hosted);
    work_.mark(*hosted);
  }
  return any;
}

// The QPs whose deadline came, each fired and then drained.
bool Worker::fire_timers_on_worker(std::uint64_t now_ns) {
  bool any = false;
  deadlines_.pop_due(now_ns, qps_, [&](Hosted& hosted) {
    any |= TimersAndPacing::fire(now_ns, hosted);
    work_.mark(hosted);
  });
  return any;
}

// As many QPs the InflightBudget stopped as it now has grants free for, the longest stopped
// first, go to this turn's drain (those it stops again queue at the back).
void Worker::release_budget_queue_on_worker() {
  if (budget_queue_.empty()) return;
  const transport::InflightBudget* budget = budget_queue_.front()->qp->inflight_budget();
  std::size_t grants = budget_queue_.size();
  if (budget != nullptr) {
    const std::uint32_t in_flight = budget->in_flight_psns();
    const std::uint32_t free_psns =
        in_flight >= budget->limit_psns() ? 0 : budget->limit_psns() - in_flight;
    grants = free_psns / budget->grant_psns();
  }
  for (; grants > 0 && !budget_queue_.empty(); --grants) {
    Hosted* hosted = budget_queue_.front();
    budget_queue_.pop_front();
    hosted->budget_listed = false;
    work_.mark(*hosted);
  }
  budget_waiters_.store(!budget_queue_.empty(), std::memory_order_relaxed);
}

// The marked QPs (worker_work.h), in the order they were marked. Round robin: a QP that
// transmitted may have more and is drained again next turn, after the QPs egress's room left
// waiting this turn and those marked since; a QP the budget stopped queues for it.
bool Worker::drain_outputs_on_worker(std::uint64_t now_ns) {
  bool any = false;
  senders_.clear();
  for (Hosted* hosted : work_.take()) {
    bool transmitted = false;
    any |= drain_qp_on_worker(now_ns, *hosted, transmitted);
    if (transmitted) {
      senders_.push_back(hosted);
    } else if (!egress_.has_room()) {
      work_.mark(*hosted);
    }
    if (hosted->qp->waiting_for_budget() && !hosted->budget_listed) {
      hosted->budget_listed = true;
      budget_queue_.push_back(hosted);
      budget_waiters_.store(true, std::memory_order_relaxed);
    }
    deadlines_.set(hosted->qp->qpn().value(), *hosted, TimersAndPacing::next_deadline(*hosted));
  }
  for (Hosted* hosted : senders_)
    work_.mark(*hosted);
  deadlines_.compact(qps_);
  egress_.transmit_batch();
  return any;
}

// A QP's outputs: CNPs its notification point asks for, packets (while egress has room: under
// back-pressure they wait inside the QP; a QP its pacer holds returns none, its release time
// is one of its deadlines), completions and events; then what its counters grew by.
// `transmitted`: whether it sent a packet.
bool Worker::drain_qp_on_worker(std::uint64_t now_ns, Hosted& hosted, bool& transmitted) {
  pacing_.attach(hosted);
  // The pacer stamps each packet with `now`: after other QPs' bursts this turn, the turn's
  // start would be long past and the QP's next packet would leave early by that much.
  if (hosted.cc != nullptr) now_ns = clock_->now_ns();
  bool any = send_cnps_on_worker(now_ns, hosted);
  // A QP cut short sent, so it is visited again next turn (drain_outputs_on_worker).
  const bool cut = lossy_burst_packets_ != 0 && hosted.qp->loss_window().reduced();
  std::size_t burst = 0;
  while (egress_.has_room() && !(cut && burst == lossy_burst_packets_)) {
    const auto tx = hosted.qp->poll_transmit(now_ns, egress_.payload_buffer());
    if (!tx) break;
    egress_.send(now_ns, *tx, *hosted.binding);
    ++burst;
    any = true;
    transmitted = true;
  }
  while (const auto c = hosted.qp->poll_completion()) {
    counters_.completion(*c);
    hosted.binding->complete_on_worker(*c);
    any = true;
  }
  while (const auto e = hosted.qp->poll_event()) {
    hosted.binding->event_on_worker(*e);
    any = true;
  }
  hosted.binding->state_on_worker(hosted.qp->state());
  note_send_depth_on_worker(now_ns, hosted);
  counters_.qp_growth(hosted);
  return any;
}

// A QP's send queue grows only where the worker pulls it and shrinks only where the worker
// drains its completions, so those are where a stream shows. It holds the moderation for
// WorkerConfig::kModerationHoldNs after its queue was last seen that deep: the queue of a stream
// dips as a burst of completions comes back before the application posts again, and a worker that
// went back to doorbells at each dip would fall into the state the moderation exists to leave (a
// doorbell a WQE, each one preempting the application, which then keeps the queue shallow).
void Worker::note_send_depth_on_worker(std::uint64_t now_ns, const Hosted& hosted) {
  if (moderation_ns_ != 0 && hosted.qp->send_queue_depth() >= moderation_sends_ &&
      hosted.qp->newest_send_length() <= WorkerConfig::kModerationMaxMessageBytes) {
    moderate_until_ns_ = now_ns + WorkerConfig::kModerationHoldNs;
  }
}

// A CNP (docs/protocol.md §5.3) to the QP's peer over the QP's own path.
bool Worker::send_cnps_on_worker(std::uint64_t now_ns, Hosted& hosted) {
  if (hosted.cc == nullptr) return false;
  bool any = false;
  while (const auto cnp = hosted.cc->qp_cc.poll_cnp()) {
    any = true;
    const wire::FrameAddress* path = hosted.binding->address_on_worker(hosted.qp->attr().av_id);
    if (path == nullptr) {
      counters_.no_address();
      continue;
    }
    transport::Transmit tx;
    tx.hdr = *cnp;  // no payload; encode_transmit leaves it Not-ECT
    counters_.cnp_sent();
    egress_.emit(now_ns, tx, pacing_.cnp_address(*path), wire::Bytes{});
  }
  return any;
}

void Worker::set_asleep_on_worker(bool asleep) {
  ready_.set_asleep(asleep);
  for (Hosted* hosted : pull_each_turn_)
    hosted->binding->set_asleep_on_worker(asleep);
}

bool Worker::work_pending_on_worker() {
  if (!commands_.empty() || !egress_.backlog_empty() || ingress_.frames_waiting()) return true;
  if (!work_.empty()) return true;
  if (ready_.any_ready()) return true;
  for (const Hosted* hosted : pull_each_turn_)
    if (hosted->binding->work_pending_on_worker()) return true;
  return budget_grant_for_waiter_on_worker();
}

bool Worker::budget_grant_for_waiter_on_worker() const {
  if (budget_queue_.empty()) return false;
  const transport::InflightBudget* budget = budget_queue_.front()->qp->inflight_budget();
  if (budget == nullptr) return false;
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with wake_for_budget's
  if (budget->in_flight_psns() + budget->grant_psns() > budget->limit_psns()) return false;
  return std::any_of(budget_queue_.begin(), budget_queue_.end(),
                     [](const Hosted* h) { return h->qp->budget_held_psns() == 0; });
}

std::optional<std::uint64_t> Worker::next_deadline_on_worker(std::uint64_t now_ns) {
  std::optional<std::uint64_t> earliest = deadlines_.earliest(qps_);
  const auto n = egress_.neighbour_deadline(now_ns);
  if (n && (!earliest || *n < *earliest)) earliest = n;
  return earliest;
}

// "I sleep" is published before the last look for work (worker_sleep.h).
// A moderated sleep (WorkerConfig::moderation_ns) leaves the rings saying the worker is awake,
// so the applications ring no doorbell and what they post waits for the sleep's end at the
// latest. Everything else wakes it as in any sleep: the port, another worker or the control
// thread (wake()), a deadline sooner than the moderation's.
void Worker::sleep_on_worker(std::uint64_t now_ns) {
  const bool moderated = now_ns < moderate_until_ns_ && !sleep_.spin_allowed(now_ns);
  sleep_.publish_asleep();
  if (!moderated) set_asleep_on_worker(true);
  if (work_pending_on_worker() || stop_.load()) {
    sleep_.publish_awake();
    if (!moderated) set_asleep_on_worker(false);
    return;
  }
  const WaitSet set{port_->wait_fd(), egress_.resolver_fd()};
  std::optional<std::uint64_t> deadline = next_deadline_on_worker(now_ns);
  if (moderated && (!deadline || *deadline > now_ns + moderation_ns_))
    deadline = now_ns + moderation_ns_;
  const auto woke = sleep_.sleep(set, deadline, now_ns, moderated);
  if (woke) woke_on_worker(*woke);
}

void Worker::woke_on_worker(const Wakeup& woke) {
  sleep_.publish_awake();
  set_asleep_on_worker(false);
  if (woke.resolver_readable) egress_.resolver_readable();
}

void wake_on_budget_release(transport::InflightBudget& budget, std::vector<Worker*> workers) {
  budget.set_release_hook([workers = std::move(workers)] {
    for (Worker* w : workers)
      w->wake_for_budget();
  });
}

}  // namespace xroce::daemon
