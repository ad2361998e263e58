#include "net/sim/network.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "net/sim/frame_edit.h"

namespace xroce::net::sim {
namespace {

constexpr std::uint64_t kNsPerSecond = 1'000'000'000;
constexpr std::uint64_t kBitsPerByte = 8;

// A programmer's mistake (wrong calling order, unknown id): stop with a message, also in
// release builds, rather than run a simulation that means nothing.
void require(bool ok, const char* what) {
  if (ok) return;
  std::fputs("xroce netsim: contract violated: ", stderr);
  std::fputs(what, stderr);
  std::fputs("\n", stderr);
  std::abort();
}

// A frame in the network, with what the simulator knows about it.
struct Packet {
  Frame bytes;
  NodeId origin = 0;
  std::uint64_t id = 0;
};

enum class EventKind : std::uint8_t {
  kTxDone,  // the port finished serialising its current frame
  kArrive,  // a frame reached the far end of the port's wire
};

// Small, so the heap moves little; an arriving frame waits in Impl::in_flight[slot].
struct Event {
  TimeNs at = 0;
  std::uint64_t seq = 0;  // ties at the same time run in scheduling order
  PortId port = 0;
  std::uint32_t slot = 0;  // kArrive only
  EventKind kind = EventKind::kTxDone;
};

// Min-heap order for std::push_heap/pop_heap.
struct EventLater {
  bool operator()(const Event& a, const Event& b) const {
    return a.at != b.at ? a.at > b.at : a.seq > b.seq;
  }
};

// A frame a lossless queue refused; it waits at the switch ingress, its upstream port paused.
struct HeldFrame {
  Packet packet;
  PortId upstream = 0;
};

struct PortState {
  NodeId owner = 0;
  NodeId peer = 0;
  PortConfig config;
  Rng rng;
  std::deque<Packet> queue;
  std::uint64_t queue_bytes = 0;
  bool busy = false;        // a frame is being serialised
  TimeNs last_arrival = 0;  // FIFO order on the wire: jitter never reorders
  // LinkConfig::stall_every_ns: frames that would arrive in [stall_start, stall_end) arrive at
  // stall_end.
  Rng stall_rng;
  TimeNs stall_start = 0;
  TimeNs stall_end = 0;
  std::deque<HeldFrame> held;
  std::uint32_t frames_held_downstream = 0;  // > 0: this port is paused
  TimeNs pause_started = 0;
  PortStats stats;
  DepthHistogram depth_histogram;
  std::optional<TimeNs> series_interval_ns;
  TimeNs next_series_at = 0;
  std::vector<QueueDepthSample> depth_series;
  std::optional<FlowTrace> trace;
};

struct NodeState {
  bool is_switch = false;
  HostConfig host;  // name only, for a switch
  std::vector<PortId> ports;
  std::deque<Delivery> rx;
  Receiver receiver;
  SwitchStats switch_stats;
  std::map<wire::MacAddr, PortId> mac_routes;
  std::map<std::array<std::uint8_t, 16>, PortId> ip_routes;
};

TimeNs serialisation_ns(std::uint64_t bytes, std::uint64_t rate_bps) {
  if (rate_bps == 0) return 0;
  // Rounded up: a frame is not on the far side before its last bit is sent.
  return (bytes * kBitsPerByte * kNsPerSecond + rate_bps - 1) / rate_bps;
}

std::uint64_t port_seed(std::uint64_t seed, PortId port) {
  std::uint64_t state = seed ^ (0xA0761D6478BD642FULL * (std::uint64_t{port} + 1));
  return splitmix64(state);
}

}  // namespace

struct Network::Impl {
  std::uint64_t seed = 0;
  std::vector<NodeState> nodes;
  std::vector<PortState> ports;
  std::vector<Event> events;      // a heap ordered by EventLater
  std::vector<Packet> in_flight;  // frames on the wire, indexed by Event::slot
  std::vector<std::uint32_t> free_slots;
  std::uint64_t next_seq = 0;
  std::uint64_t next_packet_id = 0;

  NodeState& node(NodeId id) {
    require(id < nodes.size(), "unknown node id");
    return nodes[id];
  }
  PortState& port(PortId id) {
    require(id < ports.size(), "unknown port id");
    return ports[id];
  }
  const NodeState& node(NodeId id) const {
    require(id < nodes.size(), "unknown node id");
    return nodes[id];
  }
  const PortState& port(PortId id) const {
    require(id < ports.size(), "unknown port id");
    return ports[id];
  }

  void schedule(TimeNs at, EventKind kind, PortId port_id, std::uint32_t slot = 0) {
    events.push_back(Event{at, next_seq++, port_id, slot, kind});
    std::push_heap(events.begin(), events.end(), EventLater{});
  }

  void schedule_arrival(TimeNs at, PortId port_id, Packet packet) {
    std::uint32_t slot;
    if (free_slots.empty()) {
      slot = static_cast<std::uint32_t>(in_flight.size());
      in_flight.push_back(std::move(packet));
    } else {
      slot = free_slots.back();
      free_slots.pop_back();
      in_flight[slot] = std::move(packet);
    }
    schedule(at, EventKind::kArrive, port_id, slot);
  }

  Packet take_in_flight(std::uint32_t slot) {
    Packet packet = std::move(in_flight[slot]);
    free_slots.push_back(slot);
    return packet;
  }

  Event pop_event() {
    std::pop_heap(events.begin(), events.end(), EventLater{});
    Event ev = std::move(events.back());
    events.pop_back();
    return ev;
  }

  static bool fits(const PortState& p, std::size_t bytes) {
    const std::uint64_t cap = p.config.queue.capacity_bytes;
    return cap == 0 || p.queue_bytes == 0 || p.queue_bytes + bytes <= cap;
  }

  // The depth an arriving frame finds.
  void sample_depth(PortState& p, TimeNs now) {
    ++p.depth_histogram[p.queue_bytes];
    record_series(p, now);
  }

  void record_series(PortState& p, TimeNs now) {
    if (!p.series_interval_ns || now < p.next_series_at) return;
    p.depth_series.push_back(QueueDepthSample{now, p.queue_bytes});
    p.next_series_at = now + *p.series_interval_ns;
  }

  // Puts an admitted frame into the queue: ECN marking on enqueue, then start sending if idle.
  void admit(PortId id, Packet packet, TimeNs now) {
    PortState& p = port(id);
    const EcnConfig& ecn = p.config.queue.ecn;
    if (ecn.enabled) {
      const auto codepoint = ecn_of(packet.bytes);
      const bool ect = codepoint == wire::Ecn::kEct0 || codepoint == wire::Ecn::kEct1;
      if (ect && p.rng.bernoulli(ecn_marking_probability(ecn, p.queue_bytes))) {
        mark_ce(packet.bytes);
        ++p.stats.ecn_marked;
      }
    }
    ++p.stats.enqueued;
    p.stats.enqueued_bytes += packet.bytes.size();
    p.queue_bytes += packet.bytes.size();
    p.queue.push_back(std::move(packet));
    if (!p.busy && p.frames_held_downstream == 0) start_transmission(id, now);
  }

  void pause(PortId id, TimeNs now) {
    PortState& p = port(id);
    if (p.frames_held_downstream++ == 0) {
      ++p.stats.paused;
      p.pause_started = now;
    }
  }

  void resume(PortId id, TimeNs now) {
    PortState& p = port(id);
    require(p.frames_held_downstream > 0, "resume of a port that is not paused");
    if (--p.frames_held_downstream > 0) return;
    p.stats.paused_ns += now - p.pause_started;
    if (!p.busy && !p.queue.empty()) start_transmission(id, now);
  }

  // A frame arriving at a switch for egress `id` from `upstream`.
  void forward(PortId id, Packet packet, PortId upstream, TimeNs now) {
    PortState& p = port(id);
    sample_depth(p, now);
    if (fits(p, packet.bytes.size()) && p.held.empty()) {
      admit(id, std::move(packet), now);
      return;
    }
    if (p.config.queue.overflow == Overflow::kDropTail) {
      ++p.stats.dropped_overflow;
      return;
    }
    ++p.stats.refused;
    p.held.push_back(HeldFrame{std::move(packet), upstream});
    pause(upstream, now);
  }

  // Room was freed in `id`'s queue: admit waiting frames in arrival order, resume upstreams.
  void admit_held(PortId id, TimeNs now) {
    while (!port(id).held.empty() && fits(port(id), port(id).held.front().packet.bytes.size())) {
      HeldFrame frame = std::move(port(id).held.front());
      port(id).held.pop_front();
      admit(id, std::move(frame.packet), now);
      resume(frame.upstream, now);
    }
  }

  void flip_random_bits(PortState& p, Frame& frame) {
    if (frame.empty()) return;
    const Impairments& imp = p.config.link.impair;
    std::optional<CoveredRange> range;
    if (imp.corrupt_scope == Impairments::CorruptScope::kIcrcCovered) {
      range = icrc_covered_range(frame);
    }
    // Byte positions the flip may hit, as [begin, begin + count) with one byte skipped.
    const std::size_t begin = range ? range->begin : 0;
    const std::size_t count = range ? range->end - range->begin - 1 : frame.size();
    const std::uint64_t bits = std::uint64_t{count} * kBitsPerByte;
    const unsigned want = static_cast<unsigned>(std::min<std::uint64_t>(imp.corrupt_bits, bits));
    std::vector<std::uint64_t> chosen;
    while (chosen.size() < want) {
      const std::uint64_t bit = p.rng.below(bits);
      if (std::find(chosen.begin(), chosen.end(), bit) == chosen.end()) chosen.push_back(bit);
    }
    for (const std::uint64_t bit : chosen) {
      std::size_t byte = begin + static_cast<std::size_t>(bit / kBitsPerByte);
      if (range && byte >= range->masked_byte) ++byte;
      frame[byte] ^= static_cast<std::uint8_t>(1u << (bit % kBitsPerByte));
    }
  }

  void record_flow(PortState& p, const Packet& packet, TimeNs now) {
    FlowTrace& trace = *p.trace;
    std::uint32_t flow = packet.origin;
    if (trace.key == FlowKey::kUdpSourcePort) flow = udp_source_port(packet.bytes).value_or(0);
    const std::size_t bin = static_cast<std::size_t>(now / trace.bin_ns);
    auto& bins = trace.bytes_per_bin[flow];
    if (bins.size() <= bin) bins.resize(bin + 1, 0);
    bins[bin] += packet.bytes.size();
    trace.total_bytes[flow] += packet.bytes.size();
  }

  // Puts the frame at the head of the queue on the wire: serialisation, impairments, arrival.
  void start_transmission(PortId id, TimeNs now) {
    PortState& p = port(id);
    Packet packet = std::move(p.queue.front());
    p.queue.pop_front();
    p.queue_bytes -= packet.bytes.size();
    record_series(p, now);
    p.busy = true;
    const LinkConfig& link = p.config.link;
    const TimeNs done =
        now + serialisation_ns(packet.bytes.size() + link.overhead_bytes, link.rate_bps);
    schedule(done, EventKind::kTxDone, id);
    ++p.stats.sent;
    p.stats.sent_bytes += packet.bytes.size();
    if (p.trace) record_flow(p, packet, now);
    put_on_wire(id, std::move(packet), done);
    admit_held(id, now);
  }

  // Where the link's stalls (LinkConfig::stall_every_ns) put a frame due at `arrival`. Arrivals
  // come in order, so the stalls are drawn forward as they pass.
  static TimeNs after_stall(PortState& p, TimeNs arrival) {
    const LinkConfig& link = p.config.link;
    if (link.stall_every_ns == 0) return arrival;
    while (arrival >= p.stall_end) {
      p.stall_start = p.stall_end + p.stall_rng.between(0, 2 * link.stall_every_ns);
      p.stall_end = p.stall_start + p.stall_rng.between(0, link.stall_max_ns);
      if (arrival < p.stall_start) return arrival;
    }
    return arrival >= p.stall_start ? p.stall_end : arrival;
  }

  void put_on_wire(PortId id, Packet packet, TimeNs done) {
    PortState& p = port(id);
    const LinkConfig& link = p.config.link;
    const Impairments& imp = link.impair;
    if (p.rng.bernoulli(imp.loss)) {
      ++p.stats.lost;
      return;
    }
    if (p.rng.bernoulli(imp.corrupt)) {
      flip_random_bits(p, packet.bytes);
      ++p.stats.corrupted;
    }
    TimeNs arrival = done + link.propagation_ns;
    if (link.jitter_ns > 0) arrival += p.rng.between(0, link.jitter_ns);
    arrival = std::max(arrival, p.last_arrival);
    arrival = after_stall(p, arrival);
    const bool duplicate = p.rng.bernoulli(imp.duplicate);
    if (p.rng.bernoulli(imp.reorder)) {
      // Held back: later frames may overtake it; they do not wait for it.
      arrival +=
          p.rng.between(imp.reorder_min_ns, std::max(imp.reorder_min_ns, imp.reorder_max_ns));
      ++p.stats.reordered;
    } else {
      p.last_arrival = arrival;
    }
    if (duplicate) {
      ++p.stats.duplicated;
      schedule_arrival(arrival, id, packet);
    }
    schedule_arrival(arrival, id, std::move(packet));
  }

  std::optional<PortId> route(NodeState& sw, const Frame& frame) {
    if (const auto mac = destination_mac(frame)) {
      if (auto it = sw.mac_routes.find(*mac); it != sw.mac_routes.end()) return it->second;
    }
    if (const auto ip = destination_ip(frame)) {
      if (auto it = sw.ip_routes.find(ip->bytes); it != sw.ip_routes.end()) return it->second;
    }
    return std::nullopt;
  }

  void arrive(PortId id, Packet packet, TimeNs now) {
    PortState& p = port(id);
    ++p.stats.delivered;
    p.stats.delivered_bytes += packet.bytes.size();
    const NodeId to = p.peer;
    NodeState& n = node(to);
    if (n.is_switch) {
      ++n.switch_stats.received;
      const auto egress = route(n, packet.bytes);
      if (!egress) {
        ++n.switch_stats.unroutable;
        return;
      }
      forward(*egress, std::move(packet), id, now);
      return;
    }
    Delivery delivery{now, packet.origin, packet.id, std::move(packet.bytes)};
    if (n.receiver) {
      n.receiver(to, std::move(delivery));
    } else {
      n.rx.push_back(std::move(delivery));
    }
  }

  void process(const Event& ev) {
    if (ev.kind == EventKind::kArrive) {
      arrive(ev.port, take_in_flight(ev.slot), ev.at);
      return;
    }
    PortState& p = port(ev.port);
    p.busy = false;
    if (p.frames_held_downstream == 0 && !p.queue.empty()) start_transmission(ev.port, ev.at);
  }

  PortId add_port(NodeId owner, NodeId peer, const PortConfig& config) {
    const auto id = static_cast<PortId>(ports.size());
    PortState p;
    p.owner = owner;
    p.peer = peer;
    p.config = config;
    p.rng.reseed(port_seed(seed, id));
    p.stall_rng.reseed(port_seed(seed ^ 0x57A11ED, id));
    ports.push_back(std::move(p));
    node(owner).ports.push_back(id);
    return id;
  }

  void learn_host(NodeId sw, NodeId host, PortId toward_host) {
    NodeState& s = node(sw);
    const HostConfig& h = node(host).host;
    s.mac_routes[h.mac] = toward_host;
    for (const auto& ip : h.ips)
      s.ip_routes[ip.bytes] = toward_host;
  }
};

Network::Network(std::uint64_t seed) : impl_(std::make_unique<Impl>()) {
  impl_->seed = seed;
}
Network::~Network() = default;

NodeId Network::add_host(HostConfig config) {
  const auto id = static_cast<NodeId>(impl_->nodes.size());
  NodeState n;
  n.host = std::move(config);
  impl_->nodes.push_back(std::move(n));
  return id;
}

NodeId Network::add_switch(std::string name) {
  const auto id = static_cast<NodeId>(impl_->nodes.size());
  NodeState n;
  n.is_switch = true;
  n.host.name = std::move(name);
  impl_->nodes.push_back(std::move(n));
  return id;
}

Link Network::connect(NodeId a, NodeId b, const PortConfig& a_to_b, const PortConfig& b_to_a) {
  require(a != b, "connect: a node cannot be linked to itself");
  for (const NodeId n : {a, b}) {
    const NodeState& s = impl_->node(n);
    require(s.is_switch || s.ports.empty(), "connect: a host has exactly one port");
  }
  Link link;
  link.a_to_b = impl_->add_port(a, b, a_to_b);
  link.b_to_a = impl_->add_port(b, a, b_to_a);
  if (impl_->node(a).is_switch && !impl_->node(b).is_switch) impl_->learn_host(a, b, link.a_to_b);
  if (impl_->node(b).is_switch && !impl_->node(a).is_switch) impl_->learn_host(b, a, link.b_to_a);
  return link;
}

void Network::add_route(NodeId sw, const wire::MacAddr& mac, PortId egress) {
  require(impl_->node(sw).is_switch && impl_->port(egress).owner == sw, "add_route: bad port");
  impl_->node(sw).mac_routes[mac] = egress;
}

void Network::add_route(NodeId sw, const wire::IpAddr& ip, PortId egress) {
  require(impl_->node(sw).is_switch && impl_->port(egress).owner == sw, "add_route: bad port");
  impl_->node(sw).ip_routes[ip.bytes] = egress;
}

void Network::set_link(PortId port, const LinkConfig& link) {
  impl_->port(port).config.link = link;
}

void Network::set_impairments(PortId port, const Impairments& impair) {
  impl_->port(port).config.link.impair = impair;
}

void Network::set_queue(PortId port, const QueueConfig& queue) {
  impl_->port(port).config.queue = queue;
  impl_->admit_held(port, now_);  // a larger capacity may make room at once
}

SendResult Network::send(TimeNs at, NodeId host, Frame&& frame) {
  require(at >= now_, "send: time went backwards");
  const auto next = next_event_time();
  require(!next || *next >= at, "send: events before `at` are pending; run_until(at) first");
  NodeState& n = impl_->node(host);
  require(!n.is_switch && n.ports.size() == 1, "send: not a connected host");
  now_ = at;
  const PortId id = n.ports.front();
  PortState& p = impl_->port(id);
  impl_->sample_depth(p, at);
  if (!Impl::fits(p, frame.size())) {
    if (p.config.queue.overflow == Overflow::kLossless) {
      ++p.stats.refused;
      return SendResult::kRefused;
    }
    ++p.stats.dropped_overflow;
    frame.clear();
    return SendResult::kDropped;
  }
  impl_->admit(id, Packet{std::move(frame), host, impl_->next_packet_id++}, at);
  return SendResult::kQueued;
}

std::optional<TimeNs> Network::next_event_time() const {
  if (impl_->events.empty()) return std::nullopt;
  return impl_->events.front().at;
}

bool Network::step() {
  if (impl_->events.empty()) return false;
  Event ev = impl_->pop_event();
  now_ = std::max(now_, ev.at);
  impl_->process(ev);
  return true;
}

void Network::run_until(TimeNs t) {
  while (!impl_->events.empty() && impl_->events.front().at <= t)
    step();
  now_ = std::max(now_, t);
}

TimeNs Network::run_until_idle(TimeNs limit) {
  while (!impl_->events.empty() && impl_->events.front().at <= limit)
    step();
  return now_;
}

std::optional<Delivery> Network::receive(NodeId host) {
  auto& rx = impl_->node(host).rx;
  if (rx.empty()) return std::nullopt;
  Delivery d = std::move(rx.front());
  rx.pop_front();
  return d;
}

std::size_t Network::pending_deliveries(NodeId host) const {
  return impl_->node(host).rx.size();
}

void Network::set_receiver(NodeId host, Receiver receiver) {
  impl_->node(host).receiver = std::move(receiver);
}

std::size_t Network::node_count() const {
  return impl_->nodes.size();
}
bool Network::is_switch(NodeId node) const {
  return impl_->node(node).is_switch;
}
const std::string& Network::name(NodeId node) const {
  return impl_->node(node).host.name;
}

const HostConfig& Network::host(NodeId node) const {
  require(!impl_->node(node).is_switch, "host: node is a switch");
  return impl_->node(node).host;
}

PortId Network::host_port(NodeId host) const {
  const NodeState& n = impl_->node(host);
  require(!n.is_switch && n.ports.size() == 1, "host_port: not a connected host");
  return n.ports.front();
}

const std::vector<PortId>& Network::ports(NodeId node) const {
  return impl_->node(node).ports;
}
NodeId Network::port_owner(PortId port) const {
  return impl_->port(port).owner;
}
NodeId Network::port_peer(PortId port) const {
  return impl_->port(port).peer;
}
const PortConfig& Network::port_config(PortId port) const {
  return impl_->port(port).config;
}

PortStats Network::stats(PortId port) const {
  const PortState& p = impl_->port(port);
  PortStats s = p.stats;
  if (p.frames_held_downstream > 0) s.paused_ns += now_ - p.pause_started;
  return s;
}

const SwitchStats& Network::switch_stats(NodeId sw) const {
  require(impl_->node(sw).is_switch, "switch_stats: not a switch");
  return impl_->node(sw).switch_stats;
}

std::uint64_t Network::queue_bytes(PortId port) const {
  return impl_->port(port).queue_bytes;
}
std::size_t Network::queue_frames(PortId port) const {
  return impl_->port(port).queue.size();
}
bool Network::paused(PortId port) const {
  return impl_->port(port).frames_held_downstream > 0;
}

QueueDepthSummary Network::queue_depth(PortId port) const {
  return summarize_depths(impl_->port(port).depth_histogram);
}

const DepthHistogram& Network::queue_depth_histogram(PortId port) const {
  return impl_->port(port).depth_histogram;
}

void Network::enable_depth_series(PortId port, TimeNs interval_ns) {
  PortState& p = impl_->port(port);
  p.series_interval_ns = interval_ns;
  p.next_series_at = now_;
}

const std::vector<QueueDepthSample>& Network::queue_depth_samples(PortId port) const {
  return impl_->port(port).depth_series;
}

void Network::clear_stats() {
  for (auto& p : impl_->ports) {
    p.stats = PortStats{};
    if (p.frames_held_downstream > 0) p.pause_started = now_;
    p.depth_histogram.clear();
    p.depth_series.clear();
    p.next_series_at = now_;
    if (p.trace) p.trace = FlowTrace{p.trace->key, p.trace->bin_ns, {}, {}};
  }
  for (auto& n : impl_->nodes)
    n.switch_stats = SwitchStats{};
}

void Network::enable_flow_trace(PortId port, FlowKey key, TimeNs bin_ns) {
  require(bin_ns > 0, "enable_flow_trace: bin_ns must be positive");
  FlowTrace trace;
  trace.key = key;
  trace.bin_ns = bin_ns;
  impl_->port(port).trace = std::move(trace);
}

const FlowTrace* Network::flow_trace(PortId port) const {
  const auto& trace = impl_->port(port).trace;
  return trace ? &*trace : nullptr;
}

double ecn_marking_probability(const EcnConfig& ecn, std::uint64_t depth_bytes) {
  if (depth_bytes <= ecn.kmin_bytes) return 0.0;
  if (depth_bytes > ecn.kmax_bytes) return 1.0;
  const double span = static_cast<double>(ecn.kmax_bytes - ecn.kmin_bytes);
  return ecn.pmax * static_cast<double>(depth_bytes - ecn.kmin_bytes) / span;
}

QueueDepthSummary summarize_depths(const DepthHistogram& histogram) {
  QueueDepthSummary s;
  for (const auto& [depth, count] : histogram)
    s.samples += count;
  if (s.samples == 0) return s;
  // Nearest rank: the smallest depth with at least pct% of the samples at or below it.
  const auto rank = [&](std::uint64_t pct) {
    const std::uint64_t r = std::max<std::uint64_t>(1, (pct * s.samples + 99) / 100);
    std::uint64_t seen = 0;
    for (const auto& [depth, count] : histogram) {
      seen += count;
      if (seen >= r) return depth;
    }
    return histogram.rbegin()->first;
  };
  s.p50_bytes = rank(50);
  s.p95_bytes = rank(95);
  s.p99_bytes = rank(99);
  s.max_bytes = histogram.rbegin()->first;
  return s;
}

QueueDepthSummary summarize_depths(const std::vector<std::uint64_t>& depths) {
  DepthHistogram histogram;
  for (const auto d : depths)
    ++histogram[d];
  return summarize_depths(histogram);
}

}  // namespace xroce::net::sim
