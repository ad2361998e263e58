// A data-path worker (docs/ARCHITECTURE.md decision 7): one thread that owns one port
// queue, the QPs placed on it and their timers, and runs them with the sans-I/O transport.
//
// Parts (each file states its contract):
//   worker_ingress.h   the door: frames from the port, other workers' handover rings and the
//                      loopback inbox; classify, count, route to the owner or deliver
//   worker_egress.h    where a packet goes (loopback, neighbour resolution, the port), encoded
//                      in place into the transmit batch; back-pressure and the backlog
//   worker_timers.h    timers and pacing: QP deadlines, DCQCN timers and state, the pacer
//   worker_sleep.h     sleep policy: spin or sleep, how long, the wakeup handshake
//   worker_counters.h  the counters fed on the way
//   worker_qps.h       the hosted QPs and their bindings (where work comes from, results go)
//   worker_ready.h     which QPs' rings have new work (the context pages' ready bits)
//   worker_work.h      which QPs a turn drains, and their deadlines in time order
//   worker_platform.h  the clock and the sleep/wake mechanism, passed in: the daemon's
//                      (worker_uring.h) or the simulator's (engine/daemon/sim)
// Nothing in the loop reads a clock or calls the OS except through the Clock, the Sleeper and
// the port, so the same loop runs in the daemon and, with a seed, in the simulator.
//
// Threading contract
//  - The worker thread owns the port, every hosted QP, its neighbour cache and its counters.
//    Members named *_on_worker run only there and assert it.
//  - The control thread (one thread: the daemon's, or a test's main thread) talks to a worker
//    only through post_command()/call(): a single-producer single-consumer ring of commands
//    the worker runs between packets. No locks on the packet path.
//  - Worker A hands a frame that arrived on its queue for a QP of worker B over through B's
//    inbox ring for A (worker_ingress.h).
//  - A frame a worker sends to a GID this daemon serves (any device) never reaches its port:
//    it goes to the owning worker's loopback inbox (loopback.h), a bounded lock-free queue any
//    worker may push to (push_loopback), and is taken in there as if it had arrived.
//  - wake() may be called from any thread (other workers, the control thread, a doorbell): it
//    notifies the worker only when the worker said it sleeps (worker_sleep.h).
//  - In the simulator one thread runs every worker: it calls attach_to_this_thread() and then
//    run_once_on_worker() for each, in the order its virtual clock says.
//
// The loop, each turn (run_once_on_worker): commands, new work from the QPs' rings
// (QpBinding::pull_work_on_worker: of the QPs whose ready bit is set, worker_ready.h, and every
// turn of those without one), handed-over and looped-back frames, port receive (batches while
// they come full, up to kRxBatchesBeforeTimers), the timers due (a deadline-ordered queue), the
// QPs the InflightBudget stopped for which it has grants free again, then the outputs of the QPs
// marked since their last drain (worker_work.h: CNPs, packets out through egress, completions
// and events to the binding, counters), in round robin: the ones that sent go last next turn,
// and one on a lossy path sends at most WorkerConfig::lossy_burst_packets a turn;
// then the neighbour resolver (answers release the frames that waited for a MAC), then the
// backlog and the port's flush, then a sample of the port's receive drops; then the sleep
// policy: while a QP streams (WorkerConfig::moderation_sends) an idle worker sleeps without
// doorbells for at most WorkerConfig::moderation_ns, otherwise until its doorbells, port,
// other workers or next deadline wake it.
//
// Device counters: the worker is the one writer of its device::CounterBlock (counters.h) and
// feeds it as counters_report.h describes (worker_counters.h). The control thread reads the
// blocks at any time.
#pragma once

#include <atomic>
#include <boost/lockfree/spsc_queue.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "cc/qp_congestion.h"
#include "daemon/datapath_frames.h"
#include "daemon/loopback.h"
#include "daemon/worker_counters.h"
#include "daemon/worker_egress.h"
#include "daemon/worker_ingress.h"
#include "daemon/worker_neighbours.h"
#include "daemon/worker_platform.h"
#include "daemon/worker_qps.h"
#include "daemon/worker_sleep.h"
#include "daemon/worker_timers.h"
#include "daemon/worker_work.h"
#include "device/counters.h"
#include "net/neighbour.h"
#include "net/port.h"
#include "transport/qp.h"

namespace xroce::daemon {

struct WorkerConfig {
  std::uint32_t index = 0;
  const QpRoutes* routes = nullptr;  // the device's QPN -> worker table (outlives the worker)
  std::unique_ptr<net::Port> port;
  // The time and the sleep/wake mechanism (worker_platform.h). No clock: CLOCK_MONOTONIC. The
  // sleeper is required: the daemon's is UringSleeper.
  std::unique_ptr<Clock> clock;
  std::unique_ptr<Sleeper> sleeper;
  // Where the worker writes the Ethernet header (AF_XDP; through a UDP socket the kernel does):
  // the destination MACs come from this route and neighbour resolver for the netdev `ifindex`
  // (null: it could not be opened, and no destination resolves).
  bool resolve_macs = false;
  int ifindex = 0;
  std::unique_ptr<net::NeighbourResolver> resolver;
  // Idle time spent spinning before sleeping. Short: on a host with fewer cores than busy
  // threads (the applications poll their CQs), a spinning worker takes the core the
  // application needs, and a sleeping one is woken at once by its doorbell or port.
  std::uint64_t spin_ns = 20'000;
  // On a lossy path (the QP's loss window reduced, transport/loss_window.h) the most packets of
  // one QP a turn sends before the worker reads what came back. A responder NAKs a gap once and
  // drops every later request (go-back-N), so each packet sent after a loss while its NAK waits
  // unread is doomed, and the ACKs that reopen the window wait with it: read a burst sooner, the
  // simulator's lossy QPs sent a third fewer packets again and the wire's WRITE at 2 % loss went
  // up by a quarter. 0: no limit. A clean path's bursts are never cut: each cut adds a turn,
  // which cost a clean udp ib_write_bw 12-14 % (bench/README.md, "A lossy QP's burst ends at 16
  // packets").
  std::size_t lossy_burst_packets = 16;
  // Doorbell moderation, as a NIC moderates its interrupts. On a host with more runnable threads
  // than cores (where an idle worker does not spin: Sleeper::spin_allowed), while one of the
  // worker's QPs has had `moderation_sends` or more send WQEs not yet completed within the last
  // kModerationHoldNs, the newest of at most kModerationMaxMessageBytes (a stream of small
  // messages: its application keeps a queue posted), an idle worker sleeps without asking the
  // applications for doorbells, for at most `moderation_ns`; its port, its timers and the other
  // workers still wake it. What is posted meanwhile goes out at that wake-up, several WQEs a
  // wake-up instead of one. Without it each doorbell woke the worker on its application's core,
  // which the worker then preempted to take the one WQE posted, and 1 KiB `ib_send_bw` ran at
  // 17-52 MB/s in that state (bench/README.md, "Doorbell moderation"). A QP with fewer sends
  // posted (a ping-pong, a latency test) gets its doorbells as before, so a lone request never
  // waits; nor is anything moderated on a host with a core to spare, where a doorbell's wake-up
  // preempts nobody. 0: never moderated.
  static constexpr std::uint64_t kDefaultModerationNs = 30'000;
  // How long a stream's moderation outlasts the last sight of its queue that deep.
  static constexpr std::uint64_t kModerationHoldNs = 1'000'000;
  // Only a stream of messages this long or shorter is moderated: there a wake-up a WQE is the
  // cost that sets the rate. A WQE of 64 KiB is 16 packets' work for one doorbell, and a stream
  // of them keeps its worker busy with frames (64 KiB READs: the responses wake it); moderated,
  // its sleeps ran to their end with nothing posted, a wake-up a plain sleep does not make, and
  // `ib_read_bw` lost up to a fifth of its rate in two rounds (bench/README.md).
  static constexpr std::uint32_t kModerationMaxMessageBytes = 8192;
  std::uint64_t moderation_ns = kDefaultModerationNs;
  std::size_t moderation_sends = 16;
  // The one CPU the worker's thread runs on (sched_setaffinity), or none: wherever the
  // scheduler puts it (DatapathConfig::cpus).
  std::optional<std::uint32_t> cpu;
  // Congestion control; line_rate_mbps must be set before the first QP is placed.
  cc::CcDevice cc = daemon_cc_defaults();
};

class Worker {
 public:
  using Command = std::function<void(Worker&)>;
  static constexpr std::size_t kHandoverSlots = Ingress::kHandoverSlots;
  static constexpr std::size_t kCommandSlots = 256;
  static constexpr std::size_t kRxBatch = Ingress::kRxBatch;
  // Receive batches a turn takes, while they come full, before its timers fire (512 frames:
  // the ACKs and responses of a device's whole InflightBudget at one ACK per grant, and half
  // of a handover ring).
  static constexpr std::size_t kRxBatchesBeforeTimers = 16;
  static constexpr std::size_t kMaxTxBacklog = Egress::kMaxTxBacklog;
  static constexpr std::size_t kLoopbackSlots = Ingress::kLoopbackSlots;

  explicit Worker(WorkerConfig config);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Before start(): the other workers of the device, indexed by worker index (self included).
  void connect(std::span<Worker* const> workers);
  void start();
  void stop();

  std::uint32_t index() const { return index_; }
  net::PortMode port_mode() const { return port_mode_; }
  // The port's, fixed when it opened: readable from any thread.
  std::size_t port_max_frame_bytes() const { return port_max_frame_bytes_; }
  // How many of its largest frames the port's receive queue holds (net::Port::receive_frames;
  // 0: not known). Fixed when it opened: readable from any thread.
  std::size_t port_receive_frames() const { return port_receive_frames_; }

  // Control thread only. Queues `command` to run on the worker; false if the ring is full.
  bool post_command(Command command);
  // Control thread only. Runs `fn` on the worker and returns its result (blocks until then).
  template <class Fn>
  auto call(Fn fn) -> decltype(fn(std::declval<Worker&>())) {
    using R = decltype(fn(std::declval<Worker&>()));
    std::promise<R> done;
    auto result = done.get_future();
    while (!post_command([&](Worker& w) { done.set_value(fn(w)); }))
      std::this_thread::yield();
    return result.get();
  }
  // On the worker: takes in the work posted to its QPs and sends what it can (a turn's
  // pull and drain, without the port's receive), for a control call that must see it.
  void catch_up_on_worker();
  // Any thread: makes a sleeping worker run a turn (a doorbell).
  void wake() { sleep_.wake(); }
  // Any thread, after freeing PSNs of the device's InflightBudget (its release hook): wakes the
  // worker if QPs of its wait for the budget. Pairs with the last look before sleeping
  // (work_pending_on_worker, budget_grant_for_waiter_on_worker): either this sees the worker
  // asleep, or that look sees the PSNs freed (seq_cst fences on both sides).
  void wake_for_budget() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (budget_waiters_.load(std::memory_order_relaxed)) wake();
  }
  // On the worker: whether a whole grant of the device's InflightBudget is free while a QP the
  // worker queued for it holds none of it. No ACK of that QP's will come to wake the worker,
  // so it must not sleep (the simulator checks this at every sleep).
  bool budget_grant_for_waiter_on_worker() const;
  // Another worker: queues a looped-back frame for this worker, taking ownership on success;
  // false when the inbox is full (the caller drops the frame). Then wake().
  bool push_loopback(FrameCopy* frame) { return ingress_.push_loopback(frame); }
  // Worker `from` of this device: queues a frame that arrived on its queue for a QP of ours,
  // taking ownership on success; false when the ring is full. Then wake().
  bool push_handover(std::uint32_t from, FrameCopy* frame) {
    return ingress_.push_handover(from, frame);
  }
  // Control thread only: whether start() ran and stop() has not.
  bool running() const { return thread_.joinable(); }
  // Any thread may read it (counters.h threading contract); only the worker writes it.
  const device::CounterBlock& device_counters() const { return counters_.device(); }
  // Any thread: how many times the worker has gone to sleep (without disturbing it, as a
  // command would).
  std::uint64_t sleeps() const { return sleep_.sleeps(); }

  // The simulator (instead of start()): the calling thread becomes the worker's thread, and
  // runs the loop one turn at a time with run_once_on_worker().
  void attach_to_this_thread();
  // One turn of the loop, then the sleep policy (it may sleep, or suspend: worker_platform.h).
  void run_once_on_worker();
  // Whether the worker is asleep in a suspended wait (the simulator's Sleeper).
  bool suspended_on_worker() const { return sleep_.suspended(); }

  // Worker thread only.
  void add_qp_on_worker(HostedQp hosted);
  bool remove_qp_on_worker(wire::Qpn qpn);
  transport::Qp* find_qp_on_worker(wire::Qpn qpn);
  DatapathCounters counters_on_worker() const;
  // Replaces the device's congestion-control settings; existing QPs follow from their next
  // event. A new line rate applies to QPs connected afterwards.
  void set_cc_on_worker(const cc::CcDevice& device);
  // Replaces the receive impairment (rx_impairment.h); the draws restart from its seed.
  void set_impairment_on_worker(const RxImpairment& impairment) {
    ingress_.set_impairment(impairment);
  }
  const cc::CcDevice& cc_on_worker() const { return pacing_.cc(); }
  // The QP's congestion-control state; nullopt if the QP is not here.
  std::optional<QpCcStatus> qp_cc_on_worker(wire::Qpn qpn);
  net::PortStats port_stats_on_worker() const;
  std::size_t qp_count_on_worker() const;
  // The GIDs this daemon serves and where their frames go (loopback.h).
  void set_loopback_on_worker(std::shared_ptr<const LoopbackTable> table);

  // QP1, the GSI QP, is the connection manager's (engine/daemon/cm_service.h), not a hosted
  // QP: every frame for QPN 1 goes to `sink` on this thread (nullptr: counted as no QP). The
  // CM's own MADs leave through send_packet_on_worker, MAC resolution included.
  using GsiSink = Ingress::GsiSink;
  void set_gsi_sink_on_worker(GsiSink sink);
  void send_packet_on_worker(const wire::FrameAddress& addr, const wire::TransportHeaders& hdr,
                             wire::Bytes payload);

 private:
  void run();
  void name_and_bind_thread_on_worker();
  void connect_alone();
  bool on_worker() const { return std::this_thread::get_id() == thread_id_.load(); }
  bool turn_on_worker();
  bool run_commands_on_worker();
  bool pull_work_on_worker(std::uint64_t now_ns);
  bool fire_timers_on_worker(std::uint64_t now_ns);
  void release_budget_queue_on_worker();
  bool drain_outputs_on_worker(std::uint64_t now_ns);
  bool drain_qp_on_worker(std::uint64_t now_ns, Hosted& hosted, bool& transmitted);
  bool send_cnps_on_worker(std::uint64_t now_ns, Hosted& hosted);
  bool work_pending_on_worker();
  void sleep_on_worker(std::uint64_t now_ns);
  void woke_on_worker(const Wakeup& woke);
  void set_asleep_on_worker(bool asleep);
  void forget_ready_on_worker(Hosted& hosted);
  std::optional<std::uint64_t> next_deadline_on_worker(std::uint64_t now_ns);
  void note_send_depth_on_worker(std::uint64_t now_ns, const Hosted& hosted);

  std::uint32_t index_;
  std::optional<std::uint32_t> cpu_;
  const QpRoutes* routes_;
  std::unique_ptr<net::Port> port_;
  net::PortMode port_mode_;
  std::size_t port_max_frame_bytes_;
  std::size_t port_receive_frames_;
  std::unique_ptr<Clock> clock_;
  std::size_t lossy_burst_packets_;  // WorkerConfig::lossy_burst_packets
  std::uint64_t moderation_ns_;      // WorkerConfig::moderation_ns
  std::size_t moderation_sends_;     // WorkerConfig::moderation_sends
  // Sleeps before this time are moderated (note_send_depth_on_worker).
  std::uint64_t moderate_until_ns_ = 0;

  boost::lockfree::spsc_queue<Command*, boost::lockfree::capacity<kCommandSlots>> commands_;
  std::atomic<bool> stop_{false};
  std::atomic<std::thread::id> thread_id_{};
  std::thread thread_;
  std::uint64_t turn_now_ns_ = 0;  // the time the last turn's timers saw

  // Worker-owned state and the parts that work on it (declared in dependency order).
  HostedQps qps_;
  ReadyRings ready_;                     // the QPs with a ready bit
  std::vector<Hosted*> pull_each_turn_;  // the others
  WorkList work_;                        // the QPs the next drain visits (worker_work.h)
  DeadlineQueue deadlines_;
  std::deque<Hosted*> budget_queue_;  // QPs the InflightBudget stopped, in the order they stopped
  // Any thread reads it: whether budget_queue_ holds QPs (wake_for_budget).
  std::atomic<bool> budget_waiters_{false};
  std::vector<Hosted*> senders_;  // a drain's QPs that transmitted (kept to reuse its memory)
  WorkerCounters counters_;
  TimersAndPacing pacing_;
  Egress egress_;
  Ingress ingress_;
  SleepPolicy sleep_;
};

// Makes `budget` (a device's) wake those of `workers` (the device's) with QPs waiting for it
// when PSNs come free: a worker whose QPs all wait, holding nothing, gets no packet or doorbell
// for them; only ACKs other workers take in free the budget. Call before the first QP uses the
// budget; the workers must outlive the hook (clear it with set_release_hook({})).
void wake_on_budget_release(transport::InflightBudget& budget, std::vector<Worker*> workers);

}  // namespace xroce::daemon
