// Ingress: every way frames reach a worker, through one door where packets are validated.
//
// Frames come from three places: the worker's own port queue (receive), other workers' handover
// rings (a frame that arrived on their queue for a QP of ours) and the loopback inbox (a frame
// a worker of this daemon sent to a GID one of our devices serves, loopback.h). Port and
// loopback frames go through the door, take(): counted, classified (decode, ICRC: a frame
// that fails is counted and dropped), then routed by destination QP to its owner: ours (or
// nobody's) is delivered here, another worker's is copied into that worker's handover ring for
// us and the owner woken. A handed-over frame passed the door on the worker that took it in.
// Delivery gives a frame for QP1 to the connection manager's sink when one is set; else it finds
// the QP (no QP: counted), drops and counts a packet from an address other than a connected
// QP's peer, counts the packet, lets timers-and-pacing see its ECN and opcode, and gives it to
// the transport. Frames the port itself lost (its ring or socket full) are sampled from its
// stats, at most once per kPortDropsSampleNs (a syscall on AF_XDP).
//
// Rings: one Boost.Lockfree spsc_queue per ordered pair of workers (inbox(i): frames from
// worker i, pushed only by worker i), and one bounded lock-free queue for loopback that any
// worker may push to. A full ring drops the frame and counts it, as a full receive ring would
// (RC retransmits it, UD loses it).
//
// Threading: push_handover/push_loopback from the pushing worker; everything else on the
// owning worker.
#pragma once

#include <array>
#include <boost/lockfree/queue.hpp>
#include <boost/lockfree/spsc_queue.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "daemon/datapath_frames.h"
#include "daemon/rx_impairment.h"
#include "daemon/worker_counters.h"
#include "daemon/worker_qps.h"
#include "daemon/worker_timers.h"
#include "daemon/worker_work.h"
#include "net/port.h"
#include "wire/frame.h"

namespace xroce::daemon {

class Worker;

class Ingress {
 public:
  static constexpr std::size_t kHandoverSlots = 1024;
  static constexpr std::size_t kLoopbackSlots = 4096;
  static constexpr std::size_t kRxBatch = 32;
  static constexpr std::uint64_t kPortDropsSampleNs = 1'000'000;
  // Where frames for QP1 (the GSI QP, the connection manager's) go instead of a hosted QP.
  using GsiSink = std::function<void(wire::Bytes frame)>;

  // A QP a packet reached is marked in `work` (worker_work.h).
  Ingress(std::uint32_t index, const QpRoutes& routes, HostedQps& qps, WorkList& work,
          TimersAndPacing& pacing, WorkerCounters& counters);
  ~Ingress();
  Ingress(const Ingress&) = delete;
  Ingress& operator=(const Ingress&) = delete;

  // Before the worker runs: the device's workers by index (self included), one ring each.
  void connect(std::span<Worker* const> workers);
  bool connected() const { return !peers_.empty(); }

  // The pushing worker. Takes ownership of `frame` on success; false when the ring is full.
  bool push_handover(std::uint32_t from, FrameCopy* frame) { return inbox_[from]->push(frame); }
  bool push_loopback(FrameCopy* frame) { return loopback_inbox_.push(frame); }

  // Owning worker. Each returns whether it took any frame.
  // Receives batch after batch until the port has fewer than a batch waiting or
  // `max_batches` were taken: the responses a worker that was kept off its core finds waiting
  // are taken in before its timers fire, so an ACK in the ring never loses to the ACK timeout.
  bool receive_waiting(std::uint64_t now_ns, net::Port& port, std::size_t max_batches);
  bool drain_handovers(std::uint64_t now_ns);
  bool drain_loopback(std::uint64_t now_ns);
  // Whether a ring holds frames (the worker must not sleep).
  bool frames_waiting();
  // Adds the port's receive drops since the last sample to rx_port_drops.
  void sample_port_drops(std::uint64_t now_ns, const net::Port& port);
  void set_impairment(const RxImpairment& impairment) { impairer_.set(impairment, index_); }
  // nullptr: frames for QP1 are counted as no QP.
  void set_gsi_sink(GsiSink sink) { gsi_sink_ = std::move(sink); }

 private:
  using HandoverRing =
      boost::lockfree::spsc_queue<FrameCopy*, boost::lockfree::capacity<kHandoverSlots>>;

  void take(std::uint64_t now_ns, wire::Bytes frame, bool icrc_verified = false);
  std::size_t receive_batch(std::uint64_t now_ns, net::Port& port);  // frames taken
  void hand_over(std::uint32_t owner, wire::Bytes frame);
  void deliver(std::uint64_t now_ns, wire::Bytes frame, const wire::DecodedFrame& f);

  std::uint32_t index_;
  const QpRoutes& routes_;
  HostedQps& qps_;
  WorkList& work_;
  TimersAndPacing& pacing_;
  WorkerCounters& counters_;
  std::vector<Worker*> peers_;
  std::vector<std::unique_ptr<HandoverRing>> inbox_;  // inbox_[i]: frames from worker i
  boost::lockfree::queue<FrameCopy*, boost::lockfree::capacity<kLoopbackSlots>> loopback_inbox_;
  wire::DecodedFrame decoded_;
  GsiSink gsi_sink_;
  RxImpairer impairer_;
  // The port's receive drops already added to rx_port_drops, and when the port was last asked.
  std::uint64_t port_drops_counted_ = 0;
  std::uint64_t port_drops_sampled_ns_ = 0;
};

}  // namespace xroce::daemon
