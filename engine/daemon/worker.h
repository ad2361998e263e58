// A data-path worker (docs/ARCHITECTURE.md decision 7): one thread that owns one port
// queue, the QPs placed on it and their timers, and runs them with the sans-I/O transport.
//
// Threading contract
//  - The worker thread owns the port, every hosted QP, its neighbour cache and its counters.
//    Members named *_on_worker run only there and assert it.
//  - The control thread (one thread: the daemon's, or a test's main thread) talks to a worker
//    only through post_command()/call(): a single-producer single-consumer ring of commands
//    the worker runs between packets. No locks on the packet path.
//  - Worker A hands a frame that arrived on its queue for a QP of worker B over through B's
//    inbox ring for A (one Boost.Lockfree spsc_queue per ordered pair of workers).
//  - A frame a worker sends to a GID this daemon serves (any device) never reaches its port:
//    it goes to the owning worker's loopback inbox (loopback.h), a bounded lock-free queue any
//    worker may push to (push_loopback), and is taken in there as if it had arrived.
//  - wake() may be called from any thread (other workers, the control thread, a doorbell): it
//    writes the worker's eventfd only when the worker said it sleeps (AF_XDP's need_wakeup
//    idea), with sequentially consistent ordering between "I sleep" and "there is work".
//
// The loop, each turn: commands, new work from the QPs' rings (QpBinding::pull_work_on_worker),
// handed-over and looped-back frames, port receive, expired timers, then every QP's outputs
// (packets out through the port or to a local device, completions and events to the binding),
// then the neighbour resolver (answers release the frames that waited for a MAC). An idle
// worker spins for `spin_ns` without work (only while the host has a core for every runnable
// thread), then sleeps in io_uring on the port's fd, its eventfd, its resolver's socket and the
// earliest deadline (retransmission, RNR, pacer release, DCQCN rate increase, resolver retry,
// a waiting frame's give-up).
//
// Egress, per packet: a destination GID in the daemon's LoopbackTable goes to that device's
// owning worker (loopback.h); else, where the worker writes the Ethernet header (AF_XDP), the
// destination MAC and hop limit come from the worker's route and neighbour resolver
// (worker_neighbours.h), the frame waiting there while the MAC is being resolved; else it is
// encoded straight into the port's transmit batch.
//
// Congestion control (docs/ARCHITECTURE.md decision 9, engine/cc): each connected RC QP gets a
// WorkerQpCongestion once its path is known. The transport asks it when the next request packet
// may leave (a QP held by its pacer returns nothing from poll_transmit and the worker moves on
// to the other QPs; its release time is one of the QP's deadlines) and whether to mark it
// ECT(0). The worker feeds CE marks on received data packets to the notification point and
// sends the CNPs it asks for; received CNPs reach the reaction point through the transport.
// The device's parameters live in the worker's CcDevice, changed only by set_cc_on_worker
// (a command from the control thread).
//
// Device counters: the worker is the one writer of its device::CounterBlock (counters.h) and
// feeds it as counters_report.h describes: frames as it sends and classifies them, each QP's
// transport and DCQCN counters (growth since the last drain, and once more when the QP leaves),
// each completion. The control thread reads the blocks at any time.
#pragma once

#include <liburing.h>

#include <atomic>
#include <boost/lockfree/queue.hpp>
#include <boost/lockfree/spsc_queue.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cc/qp_congestion.h"
#include "daemon/datapath_frames.h"
#include "daemon/loopback.h"
#include "daemon/worker_neighbours.h"
#include "device/counters.h"
#include "net/port.h"
#include "transport/qp.h"

namespace xroce::daemon {

// The device side of a hosted QP: where its work comes from and where its results go. The
// provider's shared-memory rings (include/xroce/queues.h) implement it; tests use plain queues.
// Every member runs on the owning worker.
class QpBinding {
 public:
  virtual ~QpBinding() = default;
  // Posts to `qp` the work requests that appeared in its send/receive rings since the last call.
  // Returns whether it posted anything.
  virtual bool pull_work_on_worker(transport::Qp& qp) = 0;
  // Cheap check before the worker sleeps: is there work pull_work_on_worker would take?
  virtual bool work_pending_on_worker() const = 0;
  virtual void complete_on_worker(const transport::Completion& completion) = 0;
  virtual void event_on_worker(const transport::AsyncEvent& event) = 0;
  // The eventfds the provider rings when it finds the engine asleep (queues.h doorbells); the
  // worker sleeps on them.
  virtual std::vector<int> doorbell_fds_on_worker() const { return {}; }
  // Publishes to the provider whether the engine sleeps (queues.h `wakeup`): true before the
  // worker's last look for work, false once it is awake again.
  virtual void set_asleep_on_worker(bool asleep) { (void)asleep; }
  // The address vector `av_id` names (RC: the one modify_qp set; UD: an address handle), or
  // nullptr. A dst_mac of all zeros asks the worker to resolve it from dst_ip.
  virtual const wire::FrameAddress* address_on_worker(std::uint32_t av_id) = 0;
  // Whether a packet that arrived with these addresses may reach the QP: for a connected QP,
  // only from its peer's address to the address its path uses (rxe's check_addr); the worker
  // drops and counts (rx_peer_mismatch) the others.
  virtual bool accepts_from_on_worker(const wire::FrameAddress& addr) const {
    (void)addr;
    return true;
  }
};

struct HostedQp {
  std::unique_ptr<transport::Qp> qp;
  std::unique_ptr<QpBinding> binding;
};

// The congestion-control hooks the worker attaches to a connected RC QP: engine/cc's
// QpCongestion, except that CE marks reach its notification point from the worker, which sees
// the opcode (no CNP for an ACK or a CNP, docs/protocol.md §5.2), not from the transport.
class WorkerQpCongestion final : public transport::CongestionHooks {
 public:
  WorkerQpCongestion(const cc::CcDevice& device, wire::Qpn peer, std::uint8_t traffic_class)
      : qp_cc(device, peer, traffic_class), traffic_class(traffic_class) {}
  std::uint64_t earliest_send_ns(std::uint64_t now_ns) override {
    return qp_cc.earliest_send_ns(now_ns);
  }
  bool on_transmit(std::uint64_t now_ns, std::uint32_t bytes) override {
    return qp_cc.on_transmit(now_ns, bytes);
  }
  void on_cnp(std::uint64_t now_ns) override { qp_cc.on_cnp(now_ns); }
  void on_ce_marked(std::uint64_t /*now_ns*/) override {}  // the worker calls the NP itself

  cc::QpCongestion qp_cc;
  std::uint8_t traffic_class;  // of the path it was made for (its priority)
};

// A QP's congestion-control state as `xroce qp show` prints it.
struct QpCcStatus {
  bool active = false;  // congestion control on for its priority (rates below are its own)
  double rate_mbps = 0;
  double target_rate_mbps = 0;
  double alpha = 0;
  std::string stage;  // cc::stage_name, "none" for a QP without congestion control
  int priority = 0;
  cc::CcCounters counters;
};

// What xroced starts a device's workers with: ConnectX parameters, reaction point on, CNP
// generation off (np_enable = 0 on every priority: older rxe peers mishandle CNPs, docs/protocol.md
// §6), no pacing of unlimited QPs (the port serialises them).
cc::CcDevice daemon_cc_defaults();

struct WorkerConfig {
  std::uint32_t index = 0;
  const QpRoutes* routes = nullptr;  // the device's QPN -> worker table (outlives the worker)
  std::unique_ptr<net::Port> port;
  int ifindex = 0;            // the netdev: frames leave through it (neighbour resolution)
  bool resolve_macs = false;  // AF_XDP: we write the Ethernet header; UDP: the kernel does
  // Idle time spent spinning before sleeping. Short: on a host with fewer cores than busy
  // threads (the applications poll their CQs), a spinning worker takes the core the
  // application needs, and a sleeping one is woken at once by its doorbell or port.
  std::uint64_t spin_ns = 20'000;
  // Congestion control; line_rate_mbps must be set before the first QP is placed.
  cc::CcDevice cc = daemon_cc_defaults();
  // The worker thread's EEVDF time slice (sched_setattr's sched_runtime for SCHED_OTHER,
  // Linux 6.12+; 0 leaves the default). A slice shorter than the busy-polling applications'
  // lets a woken worker preempt them at once instead of waiting out their slice (up to a
  // scheduler tick, 4 ms at HZ=250): the difference between ~20 us and ~ms round trips on a
  // host with fewer cores than busy threads. Older kernels refuse it; the worker runs anyway.
  std::uint64_t slice_ns = 100'000;
};

class Worker {
 public:
  using Command = std::function<void(Worker&)>;
  static constexpr std::size_t kHandoverSlots = 1024;
  static constexpr std::size_t kCommandSlots = 256;
  static constexpr std::size_t kRxBatch = 32;
  static constexpr std::size_t kMaxTxBacklog = 4096;
  static constexpr std::size_t kLoopbackSlots = 4096;

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
  // Any thread: makes a sleeping worker run a turn (a doorbell).
  void wake();
  // Any thread (another worker): queues a looped-back frame for this worker, taking ownership
  // on success; false when the inbox is full (the caller drops the frame). Then wake().
  bool push_loopback(LoopbackFrame* frame) { return loopback_inbox_.push(frame); }
  // Control thread only: whether start() ran and stop() has not.
  bool running() const { return thread_.joinable(); }
  // Any thread may read it (counters.h threading contract); only the worker writes it.
  const device::CounterBlock& device_counters() const { return device_counters_; }
  // Any thread: how many times the worker has gone to sleep (without disturbing it, as a
  // command would).
  std::uint64_t sleeps() const { return sleeps_.load(std::memory_order_relaxed); }

  // Worker thread only.
  void add_qp_on_worker(HostedQp hosted);
  bool remove_qp_on_worker(wire::Qpn qpn);
  transport::Qp* find_qp_on_worker(wire::Qpn qpn);
  DatapathCounters counters_on_worker() const;
  // Replaces the device's congestion-control settings; existing QPs follow from their next
  // event. A new line rate applies to QPs connected afterwards.
  void set_cc_on_worker(const cc::CcDevice& device);
  const cc::CcDevice& cc_on_worker() const { return cc_; }
  // The QP's congestion-control state; nullopt if the QP is not here.
  std::optional<QpCcStatus> qp_cc_on_worker(wire::Qpn qpn);
  net::PortStats port_stats_on_worker() const;
  std::size_t qp_count_on_worker() const;
  // The GIDs this daemon serves and where their frames go (loopback.h).
  void set_loopback_on_worker(std::shared_ptr<const LoopbackTable> table);

  // QP1, the GSI QP, is the connection manager's (engine/daemon/cm_service.h), not a hosted
  // QP: every frame for QPN 1 goes to `sink` on this thread (nullptr: counted as no QP). The
  // CM's own MADs leave through send_packet_on_worker, MAC resolution included.
  using GsiSink = std::function<void(wire::Bytes frame)>;
  void set_gsi_sink_on_worker(GsiSink sink);
  void send_packet_on_worker(const wire::FrameAddress& addr, const wire::TransportHeaders& hdr,
                             wire::Bytes payload);

 private:
  struct Handover {
    std::vector<std::uint8_t> bytes;
  };
  // A hosted QP with what the worker keeps beside it.
  struct Hosted {
    std::unique_ptr<transport::Qp> qp;
    std::unique_ptr<QpBinding> binding;
    std::unique_ptr<WorkerQpCongestion> cc;  // connected RC QPs only
    transport::QpCounters reported;          // what feed_qp_counters has added
    cc::CcCounters cc_reported;
  };
  using HandoverRing =
      boost::lockfree::spsc_queue<Handover*, boost::lockfree::capacity<kHandoverSlots>>;

  void run();
  bool on_worker() const { return std::this_thread::get_id() == thread_id_.load(); }
  bool run_commands_on_worker();
  bool spin_allowed_on_worker(std::uint64_t now_ns);
  // Adds the port's receive drops since the last sample to rx_port_drops (a syscall on AF_XDP,
  // so at most once per kSpinCheckNs).
  void sample_port_drops_on_worker(std::uint64_t now_ns);
  bool drain_handovers_on_worker(std::uint64_t now_ns);
  bool drain_loopback_on_worker(std::uint64_t now_ns);
  bool receive_on_worker(std::uint64_t now_ns);
  void route_on_worker(std::uint64_t now_ns, wire::Bytes frame);
  void deliver_on_worker(std::uint64_t now_ns, wire::Bytes frame, const wire::DecodedFrame& f);
  bool pull_work_on_worker();
  bool fire_timers_on_worker(std::uint64_t now_ns);
  bool drain_outputs_on_worker(std::uint64_t now_ns);
  bool drain_qp_on_worker(std::uint64_t now_ns, Hosted& hosted);
  void attach_cc_on_worker(Hosted& hosted);
  void feed_counters_on_worker(Hosted& hosted);
  void send_frame_on_worker(std::uint64_t now_ns, const transport::Transmit& tx,
                            QpBinding& binding);
  void send_cnp_on_worker(std::uint64_t now_ns, const wire::TransportHeaders& cnp, Hosted& hosted);
  void emit_on_worker(std::uint64_t now_ns, const transport::Transmit& tx,
                      const wire::FrameAddress& addr, wire::Bytes payload);
  void loop_back_on_worker(const transport::Transmit& tx, const wire::FrameAddress& addr,
                           wire::Bytes payload, const LoopbackTarget& target);
  void encode_to_port_on_worker(const transport::Transmit& tx, const wire::FrameAddress& addr,
                                wire::Bytes payload);
  std::vector<std::uint8_t>& tx_slot_on_worker();
  void transmit_batch_on_worker();
  void count_sent_on_worker(std::size_t bytes);
  bool flush_on_worker();
  bool service_neighbours_on_worker(std::uint64_t now_ns);
  void count_neighbour_failures_on_worker(std::size_t frames);
  bool work_pending_on_worker();
  void sleep_on_worker(std::uint64_t now_ns);
  void arm_poll_on_worker(int fd, std::uint64_t tag);
  void watch_doorbells_on_worker(const QpBinding& binding, bool watch);
  void set_asleep_on_worker(bool asleep);
  std::optional<std::uint64_t> next_deadline_on_worker(std::uint64_t now_ns) const;

  std::uint32_t index_;
  const QpRoutes* routes_;
  std::unique_ptr<net::Port> port_;
  net::PortMode port_mode_;
  int ifindex_;
  bool resolve_macs_;
  std::uint64_t spin_ns_;
  std::uint64_t slice_ns_;

  std::vector<Worker*> peers_;
  std::vector<std::unique_ptr<HandoverRing>> inbox_;  // inbox_[i]: frames from worker i
  boost::lockfree::spsc_queue<Command*, boost::lockfree::capacity<kCommandSlots>> commands_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<std::uint64_t> sleeps_{0};
  std::atomic<std::thread::id> thread_id_{};
  int wake_fd_ = -1;
  int loadavg_fd_ = -1;
  unsigned long cpus_ = 1;
  static constexpr std::uint64_t kSpinCheckNs = 1'000'000;
  std::uint64_t spin_checked_ns_ = 0;
  // The port's receive drops already added to rx_port_drops, and when the port was last asked.
  std::uint64_t port_drops_counted_ = 0;
  std::uint64_t port_drops_sampled_ns_ = 0;
  bool spin_allowed_ = true;
  io_uring ring_{};
  bool ring_ok_ = false;
  bool port_poll_armed_ = false;
  bool wake_poll_armed_ = false;
  bool resolver_poll_armed_ = false;
  bool resolver_readable_ = false;  // the sleep saw the resolver's socket readable
  std::thread thread_;

  // Worker-owned state.
  std::unordered_map<std::uint32_t, Hosted> qps_;
  cc::CcDevice cc_;
  device::CounterBlock device_counters_;
  std::map<int, std::uint32_t> doorbell_users_;  // doorbell fd -> QPs that ring it (an SRQ's: many)
  std::unique_ptr<WorkerNeighbours> neighbours_;  // only where the worker writes the MACs
  std::shared_ptr<const LoopbackTable> loopback_;
  boost::lockfree::queue<LoopbackFrame*, boost::lockfree::capacity<kLoopbackSlots>> loopback_inbox_;
  std::deque<std::vector<std::uint8_t>> tx_backlog_;
  std::vector<std::uint8_t> payload_buf_;
  // Frames are encoded in place into the next batch slot (tx_slot_on_worker) and sent together
  // by transmit_batch_on_worker (one port call, one kernel kick, for up to kTxBatch frames): no
  // allocation or copy on the packet path.
  static constexpr std::size_t kTxBatch = 32;
  std::vector<std::vector<std::uint8_t>> tx_batch_bufs_;
  std::array<net::TxFrame, kTxBatch> tx_batch_{};
  std::size_t tx_batch_count_ = 0;
  wire::DecodedFrame decoded_;
  DatapathCounters counters_;
  GsiSink gsi_sink_;
};

std::uint64_t monotonic_now_ns();

}  // namespace xroce::daemon
