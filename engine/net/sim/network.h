// The deterministic simulated network: hosts and switches joined by full-duplex links, a
// virtual clock in nanoseconds and a discrete-event queue. Frames are whole Ethernet frames as
// bytes (wire/frame.h builds and parses them). Pure: no sockets, threads, clocks or OS calls;
// all randomness comes from the seed, so one seed gives the same run, bit for bit, anywhere.
//
// Model
//   A node is a host (one port, a MAC, IP addresses, a receive queue) or a switch (one port per
//   link, a forwarding table). Each port has an egress side (PortId): a FIFO queue, a transmitter
//   that serialises one frame at a time at the link rate, and the wire to the peer (propagation
//   delay, jitter, seeded impairments). A link is two ports, one per direction.
//   A frame sent by a host waits in its port's queue, is serialised (bytes * 8 / rate), then
//   arrives at the peer after propagation + jitter (+ a reorder hold). A switch forwards an
//   arriving frame to the egress port its table names for the destination MAC, else the
//   destination IP; it drops frames it cannot route (SwitchStats::unroutable).
//   Egress queues hold bytes up to a capacity; on overflow they drop (kDropTail) or, in
//   kLossless mode (PFC-like), refuse the frame: it waits at the switch ingress and the upstream
//   port that sent it is paused (starts no new transmission) until the queue has room. Nothing
//   is lost in lossless mode; frames already on the wire when the pause starts also wait.
//   ECN: an egress queue with ecn.enabled marks ECT frames CE on enqueue with the RED-style
//   probability of docs/protocol.md §5.1 over the instantaneous queue depth the frame finds.
//
// Calling order (single-threaded; the network never reads a clock)
//   1. Build: add_host / add_switch, connect, optionally add_route for multi-switch paths.
//   2. Loop:
//        t = next_event_time() (and the caller's own timers: take the earliest)
//        run_until(t)          processes every event with time <= t, now() becomes t;
//                              frames reach hosts' receive queues (or their Receiver callback)
//        receive(host)         drain delivered frames, feed them to the transport
//        send(t, host, frame)  inject the transport's output at time t (t >= now(), and no
//                              event earlier than t may be pending: run_until(t) first)
//   Time never goes backwards. A Receiver callback may call send() with its `at` argument;
//   it must not add nodes or links.
//
// Determinism: events at the same time run in the order they were scheduled; each port draws
// from its own xoshiro256** stream derived from (seed, port index), so adding a port does not
// change the random draws of the ports created before it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/sim/rng.h"
#include "wire/frame_layout.h"

namespace xroce::net::sim {

using TimeNs = std::uint64_t;
using Frame = std::vector<std::uint8_t>;
using NodeId = std::uint32_t;
using PortId = std::uint32_t;  // a port's egress side = one direction of a link

inline constexpr TimeNs kNsPerUs = 1000;
inline constexpr TimeNs kNsPerMs = 1000 * kNsPerUs;

// Seeded faults applied to each frame as it leaves a port, after serialisation.
struct Impairments {
  double loss = 0.0;       // probability a frame vanishes on the wire
  double duplicate = 0.0;  // probability a second copy arrives right after the original
  double corrupt = 0.0;    // probability corrupt_bits random bits are flipped (length unchanged)
  double reorder = 0.0;    // probability a frame is held back by an extra random delay
  TimeNs reorder_min_ns = 1 * kNsPerUs;  // the hold is uniform in [min, max]
  TimeNs reorder_max_ns = 10 * kNsPerUs;
  unsigned corrupt_bits = 1;  // bits flipped per corrupted frame (1..3 are always caught by
                              // CRC-32 at frame sizes up to jumbo)
  // Where flipped bits land. kIcrcCovered: bytes from the BTH to the end of the frame, except
  // BTH byte 4 (FECN/BECN, masked out of the ICRC), so the receiver's ICRC check always sees it.
  // kWholeFrame: anywhere (may break Ethernet/IP/UDP headers too, and misroute at a switch).
  enum class CorruptScope : std::uint8_t { kIcrcCovered, kWholeFrame };
  CorruptScope corrupt_scope = CorruptScope::kIcrcCovered;
};

// One direction of a link: the wire.
struct LinkConfig {
  std::uint64_t rate_bps = 100'000'000'000;  // serialisation rate; 0 = infinite (no delay)
  TimeNs propagation_ns = 1 * kNsPerUs;
  TimeNs jitter_ns = 0;  // extra delay uniform in [0, jitter]; never reorders (FIFO kept)
  // A path that stops now and then, as a relay process (a user-space switch, a bridge's
  // softirq) that is descheduled: at intervals uniform in [0, 2 * stall_every_ns] the link holds
  // every frame that would arrive for a time uniform in [0, stall_max_ns], then delivers them in
  // order. 0 = never. Its draws come from their own stream, so a link without stalls draws the
  // same losses and jitter as before.
  TimeNs stall_every_ns = 0;
  TimeNs stall_max_ns = 0;
  std::uint32_t overhead_bytes = 0;  // added per frame for serialisation only (24 = preamble,
                                     // FCS and inter-frame gap of real Ethernet)
  Impairments impair;
};

// RED-style ECN marking (docs/protocol.md §5.1) over queue depth q in bytes:
// p = 0 if q <= kmin; pmax * (q - kmin) / (kmax - kmin) if kmin < q <= kmax; 1 if q > kmax.
// Only ECT(0)/ECT(1) frames are marked (to CE); Not-ECT and CE frames pass unchanged.
struct EcnConfig {
  bool enabled = false;
  std::uint64_t kmin_bytes = 5'000;
  std::uint64_t kmax_bytes = 200'000;
  double pmax = 0.01;
};

enum class Overflow : std::uint8_t {
  kDropTail,  // a frame that does not fit is dropped (PortStats::dropped_overflow)
  kLossless,  // a frame that does not fit waits and pauses its upstream port (PFC-like)
};

// A port's egress queue (the frames waiting, not the one being serialised).
struct QueueConfig {
  std::uint64_t capacity_bytes = 0;  // 0 = unbounded. A frame larger than the capacity is
                                     // still admitted into an empty queue.
  Overflow overflow = Overflow::kDropTail;
  EcnConfig ecn;
};

struct PortConfig {
  LinkConfig link;
  QueueConfig queue;
};

struct HostConfig {
  std::string name;
  wire::MacAddr mac{};
  std::vector<wire::IpAddr> ips;  // a switch learns these as routes when the host is connected
};

// Counters of one port (one direction of a link). All counts are frames unless named _bytes.
struct PortStats {
  std::uint64_t enqueued = 0;  // admitted into the egress queue
  std::uint64_t enqueued_bytes = 0;
  std::uint64_t dropped_overflow = 0;  // drop-tail overflow
  std::uint64_t ecn_marked = 0;        // ECT frames this queue set to CE
  std::uint64_t sent = 0;              // serialised onto the wire
  std::uint64_t sent_bytes = 0;
  std::uint64_t lost = 0;        // impairment: vanished on the wire
  std::uint64_t duplicated = 0;  // impairment: extra copies put on the wire
  std::uint64_t corrupted = 0;   // impairment: frames with flipped bits
  std::uint64_t reordered = 0;   // impairment: frames held back by a reorder delay
  std::uint64_t delivered = 0;   // arrived at the peer (copies and corrupted included)
  std::uint64_t delivered_bytes = 0;
  std::uint64_t paused = 0;   // times this port was paused by a lossless peer queue
  TimeNs paused_ns = 0;       // total time paused (up to now() for an ongoing pause)
  std::uint64_t refused = 0;  // lossless: frames this queue made wait (upstream paused)
};

// Queue depth as seen by each frame arriving at a port's egress queue (before it is added).
// Exact counts: depth in bytes -> arrivals that found it. Memory grows with distinct depths,
// not with frames.
using DepthHistogram = std::map<std::uint64_t, std::uint64_t>;

struct QueueDepthSummary {
  std::uint64_t samples = 0;
  std::uint64_t p50_bytes = 0;  // nearest-rank percentiles
  std::uint64_t p95_bytes = 0;
  std::uint64_t p99_bytes = 0;
  std::uint64_t max_bytes = 0;
};

struct QueueDepthSample {
  TimeNs at = 0;
  std::uint64_t bytes = 0;
};

struct SwitchStats {
  std::uint64_t received = 0;    // frames arriving on any port
  std::uint64_t unroutable = 0;  // no route for the destination MAC or IP: dropped
};

// How flow traces group frames.
enum class FlowKey : std::uint8_t {
  kSourceNode,     // the host that sent the frame
  kUdpSourcePort,  // UDP source port (per-QP entropy, docs/protocol.md §1.3); 0 if not UDP
};

// Bytes each flow sent through one port, in fixed time bins (for plotting throughput).
struct FlowTrace {
  FlowKey key = FlowKey::kSourceNode;
  TimeNs bin_ns = 0;
  // flow -> bytes whose serialisation started in bin i = [i * bin_ns, (i + 1) * bin_ns)
  std::map<std::uint32_t, std::vector<std::uint64_t>> bytes_per_bin;
  std::map<std::uint32_t, std::uint64_t> total_bytes;
};

// A frame handed to a host.
struct Delivery {
  TimeNs at = 0;
  NodeId origin = 0;     // the host that sent it
  std::uint64_t id = 0;  // unique per send(); a duplicate carries its original's id
  Frame frame;
};

// Called at delivery instead of queueing the frame for receive().
using Receiver = std::function<void(NodeId host, Delivery&& delivery)>;

enum class SendResult : std::uint8_t {
  kQueued,   // accepted into the host's egress queue
  kDropped,  // host queue bounded, drop-tail, full: counted in dropped_overflow
  kRefused,  // host queue bounded, lossless, full: the frame is left with the caller
};

struct Link {
  PortId a_to_b = 0;  // egress port of node a
  PortId b_to_a = 0;  // egress port of node b
};

class Network {
 public:
  explicit Network(std::uint64_t seed);
  ~Network();
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;

  // --- Topology (before or between runs) ---
  NodeId add_host(HostConfig config);
  NodeId add_switch(std::string name);
  // Joins a and b; each direction has its own config. A host may be connected once. A switch
  // connected to a host learns the host's MAC and IPs as routes to that port.
  Link connect(NodeId a, NodeId b, const PortConfig& a_to_b, const PortConfig& b_to_a);
  Link connect(NodeId a, NodeId b, const PortConfig& both) { return connect(a, b, both, both); }
  // Extra routes for switches (e.g. toward a host behind another switch). `egress` must be one
  // of the switch's ports.
  void add_route(NodeId sw, const wire::MacAddr& mac, PortId egress);
  void add_route(NodeId sw, const wire::IpAddr& ip, PortId egress);

  // Run-time reconfiguration of a port (takes effect for frames enqueued/sent afterwards).
  void set_link(PortId port, const LinkConfig& link);
  void set_impairments(PortId port, const Impairments& impair);
  void set_queue(PortId port, const QueueConfig& queue);

  // --- Traffic ---
  // Injects a frame into the host's port at time `at`. Moves from `frame` unless kRefused.
  SendResult send(TimeNs at, NodeId host, Frame&& frame);
  // The time of the earliest pending event, if any.
  std::optional<TimeNs> next_event_time() const;
  // Processes every event with time <= t in order; afterwards now() == max(now(), t).
  void run_until(TimeNs t);
  // Processes the earliest pending event (and only it); false if there was none.
  bool step();
  // Runs until no event is pending or `limit` is reached; returns now().
  TimeNs run_until_idle(TimeNs limit = UINT64_MAX);
  TimeNs now() const { return now_; }

  // Frames delivered to a host and not yet taken, oldest first.
  std::optional<Delivery> receive(NodeId host);
  std::size_t pending_deliveries(NodeId host) const;
  // Deliver to `receiver` instead of the receive queue (empty function: back to the queue).
  void set_receiver(NodeId host, Receiver receiver);

  // --- Inspection ---
  std::size_t node_count() const;
  bool is_switch(NodeId node) const;
  const std::string& name(NodeId node) const;
  const HostConfig& host(NodeId node) const;
  PortId host_port(NodeId host) const;  // the host's single port
  const std::vector<PortId>& ports(NodeId node) const;
  NodeId port_owner(PortId port) const;
  NodeId port_peer(PortId port) const;  // the node at the far end of the wire
  const PortConfig& port_config(PortId port) const;

  PortStats stats(PortId port) const;  // a copy: paused_ns includes an ongoing pause
  const SwitchStats& switch_stats(NodeId sw) const;
  std::uint64_t queue_bytes(PortId port) const;  // waiting now (not the frame on the wire)
  std::size_t queue_frames(PortId port) const;
  bool paused(PortId port) const;
  // Percentiles of the depth every arriving frame found (since construction or clear_stats).
  QueueDepthSummary queue_depth(PortId port) const;
  const DepthHistogram& queue_depth_histogram(PortId port) const;
  // Starts recording a depth time series for plots: (time, bytes waiting) at arrivals (before
  // the frame is added) and departures (after it is removed), at most one sample per
  // interval_ns (0: every change). Off by default, since a long run would keep one sample per
  // frame.
  void enable_depth_series(PortId port, TimeNs interval_ns);
  const std::vector<QueueDepthSample>& queue_depth_samples(PortId port) const;  // the series
  // Zeroes every port and switch counter, depth histogram, series and flow trace (series and
  // traces stay enabled), e.g. to measure a steady state after a warm-up. Queues, pauses and
  // frames in flight are untouched; an ongoing pause counts from now().
  void clear_stats();
  // Starts recording per-flow bytes for frames serialised by `port`, from now on.
  void enable_flow_trace(PortId port, FlowKey key, TimeNs bin_ns);
  const FlowTrace* flow_trace(PortId port) const;  // nullptr if not enabled

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  TimeNs now_ = 0;
};

// The RED marking probability above for a queue of `depth_bytes` (what the CP applies).
double ecn_marking_probability(const EcnConfig& ecn, std::uint64_t depth_bytes);

// Percentiles (nearest rank) of a histogram or a set of samples; all zero for no samples.
QueueDepthSummary summarize_depths(const DepthHistogram& histogram);
QueueDepthSummary summarize_depths(const std::vector<std::uint64_t>& depths);

}  // namespace xroce::net::sim
