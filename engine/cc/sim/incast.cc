#include "cc/sim/incast.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <unordered_map>

#include "net/sim/rng.h"
#include "transport/memory.h"
#include "transport/qp.h"
#include "wire/frame.h"

namespace xroce::cc::sim {

namespace {

namespace ns = xroce::net::sim;
using transport::Qp;

constexpr std::uint32_t kUdpPortBase = 0xC000;
constexpr std::uint32_t kQpnBase = 0x100;
// RoCE data traffic class: DSCP 26 (the production TOS 106 of docs/protocol.md §5 without its ECN
// bits).
constexpr std::uint8_t kDataTrafficClass = 26 << 2;
constexpr double kJainConverged = 0.95;
constexpr std::uint64_t kSwingWindowUs = 1000;
constexpr std::uint64_t kStartSeedSalt = 0x57A87;  // the start offsets' own random stream
// A host's NIC takes packets from its QPs only while its port queue holds less than this: the
// NIC's transmit scheduler stops when the port is paused (PFC) instead of filling a deep FIFO,
// so the QP's byte counter counts what actually leaves and the queueing happens at the switch,
// where ECN sees it.
constexpr std::uint64_t kHostQueueBytes = 2 * 4200;

struct Endpoint {
  std::unique_ptr<Qp> qp;
  std::unique_ptr<QpCongestion> cc;
  wire::FrameAddress addr;
  std::uint64_t buffer = 0;
  transport::MemoryRegion mr;
};

struct Host {
  transport::LocalMemory mem;
  transport::MemoryRegionTable mrs{mem};
  ns::NodeId node = 0;
  std::vector<std::unique_ptr<Endpoint>> eps;
  std::unordered_map<std::uint32_t, Endpoint*> by_qpn;
};

class Driver {
 public:
  explicit Driver(const IncastConfig& c) : cfg_(with_defaults(c)), net_(cfg_.seed ^ 0xCC5EED) {
    device_.params = cfg_.params;
    device_.line_rate_mbps = cfg_.rate_gbps * 1000;
    device_.enabled = cfg_.cc;
    device_.cnp_generation = cfg_.cnp_generation;
    result_.config = cfg_;
  }
  IncastResult run();

 private:
  void build();
  Endpoint& make_endpoint(Host& h, std::uint64_t buffer_bytes);
  void connect(Endpoint& e, wire::Qpn peer, wire::Psn sq, wire::Psn rq);
  void post_writes();
  void transmit_all();
  void send_frame(Host& h, const wire::FrameAddress& addr, const wire::TransportHeaders& hdr,
                  std::uint32_t payload_len);
  void deliver_all();
  void fire_timers();
  void poll_completions();
  std::optional<std::uint64_t> next_time() const;
  void start_window();
  void sample_rates();
  void finish();
  std::uint8_t timeout_exp() const;
  void fail(const std::string& why) {
    if (result_.failure.empty()) result_.failure = why;
  }

  IncastConfig cfg_;
  CcDevice device_;
  ns::Network net_;
  std::vector<std::unique_ptr<Host>> hosts_;  // senders 0..N-1, receiver N
  ns::PortId bottleneck_ = 0;
  std::vector<std::uint32_t> in_flight_;  // WRITEs outstanding per sender
  std::vector<std::uint64_t> start_ns_;   // when each sender posts its first WRITE
  std::vector<std::uint64_t> completed_;
  std::uint64_t now_ = 0;
  std::uint64_t end_ns_ = 0;
  std::uint64_t window_ns_ = 0;
  bool window_started_ = false;
  ns::PortStats window_base_;
  std::vector<ns::PortStats> sender_base_;
  ns::DepthHistogram depth_base_;
  std::uint64_t next_wr_id_ = 1;
  std::uint64_t next_sample_ns_ = 0;
  std::vector<std::vector<double>> rc_series_;
  IncastResult result_;
  std::array<std::uint8_t, 4096> payload_{};
};

std::uint8_t Driver::timeout_exp() const {
  // Longer than the worst RTT: a full bottleneck buffer plus propagation, with margin.
  const double rtt_ns = static_cast<double>(cfg_.buffer_bytes) * 8 / cfg_.rate_gbps +
                        4.0 * static_cast<double>(cfg_.propagation_ns) + 20'000;
  std::uint8_t t = 1;
  while (t < 31 && static_cast<double>(std::uint64_t{4096} << t) < 4 * rtt_ns)
    ++t;
  return t;
}

Endpoint& Driver::make_endpoint(Host& h, std::uint64_t buffer_bytes) {
  auto e = std::make_unique<Endpoint>();
  transport::QpConfig qc;
  qc.qpn = wire::Qpn(kQpnBase + static_cast<std::uint32_t>(h.eps.size()));
  qc.max_send_wr = cfg_.outstanding;
  qc.max_recv_wr = 1;
  e->qp = std::make_unique<Qp>(qc, h.mrs);
  e->buffer = h.mem.allocate(buffer_bytes);
  e->mr = h.mrs.register_region(e->buffer, buffer_bytes,
                                transport::access::kLocalWrite | transport::access::kRemoteWrite);
  h.by_qpn[qc.qpn.value()] = e.get();
  h.eps.push_back(std::move(e));
  return *h.eps.back();
}

void Driver::connect(Endpoint& e, wire::Qpn peer, wire::Psn sq, wire::Psn rq) {
  namespace m = transport::qp_attr;
  transport::QpAttr a;
  a.qp_access_flags = transport::access::kRemoteWrite;
  a.path_mtu = cfg_.mtu;
  a.dest_qp_num = peer;
  a.rq_psn = rq;
  a.sq_psn = sq;
  a.max_rd_atomic = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.timeout = timeout_exp();
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.qp_state = transport::QpState::kInit;
  int rc = e.qp->modify(a, m::kState | m::kPkeyIndex | m::kPort | m::kAccessFlags);
  a.qp_state = transport::QpState::kRtr;
  rc |= e.qp->modify(a, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn |
                            m::kMaxDestRdAtomic | m::kMinRnrTimer);
  a.qp_state = transport::QpState::kRts;
  rc |= e.qp->modify(
      a, m::kState | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kSqPsn | m::kMaxQpRdAtomic);
  if (rc != 0) fail("modify_qp failed while connecting");
  e.cc = std::make_unique<QpCongestion>(device_, peer, kDataTrafficClass);
  e.qp->set_congestion_hooks(e.cc.get());
}

void Driver::build() {
  const auto rate_bps = static_cast<std::uint64_t>(cfg_.rate_gbps * 1e9);
  ns::PortConfig edge;
  edge.link.rate_bps = rate_bps;
  edge.link.propagation_ns = cfg_.propagation_ns;
  ns::PortConfig bottleneck = edge;
  bottleneck.queue.capacity_bytes = cfg_.buffer_bytes;
  bottleneck.queue.overflow = cfg_.lossless ? ns::Overflow::kLossless : ns::Overflow::kDropTail;
  bottleneck.queue.ecn = {true, cfg_.kmin_bytes, cfg_.kmax_bytes, cfg_.pmax};

  const ns::NodeId sw = net_.add_switch("sw");
  for (std::uint32_t i = 0; i <= cfg_.senders; ++i) {
    ns::HostConfig h;
    h.name = i == cfg_.senders ? "receiver" : "s" + std::to_string(i);
    h.mac = {0x02, 0, 0, 0, static_cast<std::uint8_t>(i >> 8), static_cast<std::uint8_t>(i + 1)};
    h.ips = {wire::IpAddr::v4(0xC6120001 + i)};  // 198.18.0.(i + 1)
    hosts_.push_back(std::make_unique<Host>());
    hosts_.back()->node = net_.add_host(h);
    const bool receiver = i == cfg_.senders;
    const ns::Link link = net_.connect(sw, hosts_.back()->node, receiver ? bottleneck : edge, edge);
    if (receiver) bottleneck_ = link.a_to_b;
  }
  Host& rx = *hosts_.back();
  const auto& rx_cfg = net_.host(rx.node);
  for (std::uint32_t i = 0; i < cfg_.senders; ++i) {
    Host& tx = *hosts_[i];
    const auto& tx_cfg = net_.host(tx.node);
    Endpoint& s = make_endpoint(tx, cfg_.message_bytes);
    Endpoint& r = make_endpoint(rx, cfg_.message_bytes);
    s.addr.src_mac = r.addr.dst_mac = tx_cfg.mac;
    s.addr.dst_mac = r.addr.src_mac = rx_cfg.mac;
    s.addr.src_ip = r.addr.dst_ip = tx_cfg.ips[0];
    s.addr.dst_ip = r.addr.src_ip = rx_cfg.ips[0];
    s.addr.traffic_class = r.addr.traffic_class = kDataTrafficClass;
    s.addr.udp_src_port = static_cast<std::uint16_t>(kUdpPortBase + i);
    r.addr.udp_src_port = static_cast<std::uint16_t>(kUdpPortBase + i);
    const wire::Psn psn(0xFFFF00 + i);  // crosses the 24-bit wrap early
    connect(s, r.qp->qpn(), psn, psn);
    connect(r, s.qp->qpn(), psn, psn);
  }
  in_flight_.assign(cfg_.senders, 0);
  completed_.assign(cfg_.senders, 0);
  ns::Rng start_rng(cfg_.seed ^ kStartSeedSalt);
  for (std::uint32_t i = 0; i < cfg_.senders; ++i)
    start_ns_.push_back(
        cfg_.start_spread_us == 0 ? 0 : start_rng.below(cfg_.start_spread_us * ns::kNsPerUs));
  net_.enable_flow_trace(bottleneck_, ns::FlowKey::kSourceNode, cfg_.bin_us * ns::kNsPerUs);
  net_.enable_depth_series(bottleneck_, cfg_.bin_us * ns::kNsPerUs / 4);
}

void Driver::post_writes() {
  Host& rx = *hosts_.back();
  for (std::uint32_t i = 0; i < cfg_.senders; ++i) {
    Endpoint& s = *hosts_[i]->eps.front();
    const Endpoint& r = *rx.eps[i];
    if (now_ < start_ns_[i]) continue;
    while (in_flight_[i] < cfg_.outstanding) {
      transport::WorkRequest wr;
      wr.wr_id = next_wr_id_++;
      wr.opcode = transport::WrOpcode::kRdmaWrite;
      wr.send_flags = transport::send_flags::kSignaled;
      wr.sg_list = {transport::Sge{s.buffer, cfg_.message_bytes, s.mr.lkey}};
      wr.remote_addr = r.buffer;
      wr.rkey = r.mr.rkey;
      if (s.qp->post_send(wr) != 0) {
        fail("post_send refused");
        return;
      }
      ++in_flight_[i];
    }
  }
}

void Driver::send_frame(Host& h, const wire::FrameAddress& addr, const wire::TransportHeaders& hdr,
                        std::uint32_t payload_len) {
  const wire::Bytes payload(payload_.data(), payload_len);
  ns::Frame frame(wire::frame_bytes(addr, hdr, payload_len));
  auto len = wire::encode_frame(addr, hdr, payload, frame);
  if (!len) {
    fail("encode_frame failed");
    return;
  }
  frame.resize(*len);
  net_.send(now_, h.node, std::move(frame));
  ++result_.frames;
}

void Driver::transmit_all() {
  for (auto& h : hosts_) {
    const ns::PortId port = net_.host_port(h->node);
    for (auto& e : h->eps) {
      while (net_.queue_bytes(port) < kHostQueueBytes) {
        auto t = e->qp->poll_transmit(now_, payload_);
        if (!t) break;
        wire::FrameAddress addr = e->addr;
        addr.traffic_class = data_tos(e->addr.traffic_class, t->ect);
        send_frame(*h, addr, t->hdr, t->payload_len);
      }
      while (auto cnp = e->cc->poll_cnp()) {
        wire::FrameAddress addr = e->addr;
        addr.traffic_class = cnp_tos(device_.params);
        send_frame(*h, addr, *cnp, 0);
      }
    }
  }
}

void Driver::deliver_all() {
  for (auto& h : hosts_) {
    while (auto d = net_.receive(h->node)) {
      auto f = wire::decode_frame(d->frame);
      if (!f || !f->icrc_ok) {
        fail("a frame failed to decode or its ICRC");
        continue;
      }
      auto it = h->by_qpn.find(f->hdr.bth.dest_qp.value());
      if (it == h->by_qpn.end()) {
        fail("a frame for an unknown QP");
        continue;
      }
      transport::RxMeta meta;
      meta.ecn_ce = f->ecn == wire::Ecn::kCe;
      it->second->qp->handle_packet(now_, f->hdr, f->payload, meta);
    }
  }
}

void Driver::fire_timers() {
  for (auto& h : hosts_) {
    for (auto& e : h->eps) {
      if (auto d = e->qp->next_deadline(); d && *d <= now_) e->qp->handle_timeout(now_);
      if (auto d = e->cc->next_deadline(); d && *d <= now_) e->cc->on_timer(now_);
    }
  }
}

void Driver::poll_completions() {
  for (std::uint32_t i = 0; i < cfg_.senders; ++i) {
    Qp& qp = *hosts_[i]->eps.front()->qp;
    while (auto c = qp.poll_completion()) {
      if (c->status != transport::WcStatus::kSuccess) {
        fail(std::string("WRITE completed with ") + transport::to_string(c->status));
        return;
      }
      --in_flight_[i];
      ++completed_[i];
    }
  }
  for (auto& h : hosts_)
    for (auto& e : h->eps)
      if (e->qp->state() != transport::QpState::kRts) fail("a QP left RTS");
}

std::optional<std::uint64_t> Driver::next_time() const {
  std::optional<std::uint64_t> next = net_.next_event_time();
  const auto take = [&](std::optional<std::uint64_t> t) {
    if (t && (!next || *t < *next)) next = t;
  };
  for (const auto& h : hosts_) {
    for (const auto& e : h->eps) {
      take(e->qp->next_deadline());
      take(e->cc->next_deadline());
    }
  }
  for (const std::uint64_t start : start_ns_)
    if (start > now_) take(start);
  if (!window_started_) take(window_ns_);
  take(end_ns_);
  return next;
}

void Driver::start_window() {
  window_started_ = true;
  window_base_ = net_.stats(bottleneck_);
  depth_base_ = net_.queue_depth_histogram(bottleneck_);
  for (std::uint32_t i = 0; i < cfg_.senders; ++i)
    sender_base_.push_back(net_.stats(net_.host_port(hosts_[i]->node)));
}

// Rc of every sender at each bin boundary (the value in force when the boundary passed).
void Driver::sample_rates() {
  const std::uint64_t bin_ns = cfg_.bin_us * ns::kNsPerUs;
  rc_series_.resize(cfg_.senders);
  while (next_sample_ns_ <= now_ && next_sample_ns_ < end_ns_) {
    for (std::uint32_t i = 0; i < cfg_.senders; ++i)
      rc_series_[i].push_back(hosts_[i]->eps.front()->cc->rate_mbps() / 1000);
    next_sample_ns_ += bin_ns;
  }
}

IncastResult Driver::run() {
  end_ns_ = cfg_.duration_us * ns::kNsPerUs;
  window_ns_ = static_cast<std::uint64_t>(static_cast<double>(end_ns_) * cfg_.warmup_fraction);
  window_ns_ = window_ns_ / (cfg_.bin_us * ns::kNsPerUs) * (cfg_.bin_us * ns::kNsPerUs);
  build();
  while (result_.failure.empty()) {
    post_writes();
    transmit_all();
    const std::optional<std::uint64_t> next = next_time();
    if (!next || *next >= end_ns_) break;
    now_ = std::max(now_, *next);
    net_.run_until(now_);
    if (!window_started_ && now_ >= window_ns_) start_window();
    sample_rates();
    deliver_all();
    fire_timers();
    poll_completions();
  }
  now_ = end_ns_;
  net_.run_until(end_ns_);
  sample_rates();
  if (!window_started_) start_window();
  finish();
  return std::move(result_);
}

}  // namespace

namespace {

// Bytes per bin of one flow, bins [first, last).
std::uint64_t bytes_in(const std::vector<std::uint64_t>& bins, std::size_t first,
                       std::size_t last) {
  std::uint64_t sum = 0;
  for (std::size_t i = first; i < last && i < bins.size(); ++i)
    sum += bins[i];
  return sum;
}

ns::DepthHistogram minus(const ns::DepthHistogram& now, const ns::DepthHistogram& base) {
  ns::DepthHistogram out;
  for (const auto& [depth, count] : now) {
    const auto it = base.find(depth);
    const std::uint64_t before = it == base.end() ? 0 : it->second;
    if (count > before) out[depth] = count - before;
  }
  return out;
}

// Per flow: coefficient of variation of its rate over `group` consecutive bins in [first, last).
double swing_cv(const std::vector<std::uint64_t>& bins, std::size_t first, std::size_t last,
                std::size_t group) {
  std::vector<double> v;
  for (std::size_t b = first; b + group <= last; b += group)
    v.push_back(static_cast<double>(bytes_in(bins, b, b + group)));
  if (v.size() < 2) return 0;
  double mean = 0;
  for (double x : v)
    mean += x;
  mean /= static_cast<double>(v.size());
  if (mean <= 0) return 0;
  double var = 0;
  for (double x : v)
    var += (x - mean) * (x - mean);
  return std::sqrt(var / static_cast<double>(v.size())) / mean;
}

}  // namespace

void Driver::finish() {
  const ns::FlowTrace& trace = *net_.flow_trace(bottleneck_);
  const std::uint64_t bin_ns = trace.bin_ns;
  const std::size_t first = window_ns_ / bin_ns;
  const std::size_t last = end_ns_ / bin_ns;
  const double window_ns = static_cast<double>(end_ns_ - window_ns_);
  result_.bin_ns = bin_ns;
  result_.window_start_us = static_cast<double>(window_ns_) / 1000;
  result_.window_end_us = static_cast<double>(end_ns_) / 1000;
  result_.fair_share_gbps = cfg_.rate_gbps / cfg_.senders;
  // Swing and convergence look at 1 ms averages (whatever the plotting bin).
  const std::size_t group =
      std::max<std::size_t>(1, (kSwingWindowUs + cfg_.bin_us / 2) / cfg_.bin_us);
  result_.swing_bin_us = cfg_.bin_us * group;

  std::vector<double> throughput;
  std::vector<const std::vector<std::uint64_t>*> bins_of;
  static const std::vector<std::uint64_t> kEmpty;
  double total_bytes = 0;
  for (std::uint32_t i = 0; i < cfg_.senders; ++i) {
    const auto it = trace.bytes_per_bin.find(hosts_[i]->node);
    const std::vector<std::uint64_t>& bins = it == trace.bytes_per_bin.end() ? kEmpty : it->second;
    bins_of.push_back(&bins);
    FlowResult f;
    f.sender = i;
    const double bytes = static_cast<double>(bytes_in(bins, first, last));
    total_bytes += bytes;
    f.throughput_gbps = bytes * 8 / window_ns;
    const Endpoint& s = *hosts_[i]->eps.front();
    f.final_rate_gbps = s.cc->rate_mbps() / 1000;
    f.final_alpha = s.cc->alpha();
    f.writes_completed = completed_[i];
    f.counters = s.cc->counters();
    f.counters += hosts_.back()->eps[i]->cc->counters();
    f.timer_events = s.cc->reaction_point().counters().timer_events;
    f.byte_events = s.cc->reaction_point().counters().byte_events;
    for (std::size_t b = 0; b < last; ++b)
      f.rate_series_gbps.push_back(
          b < bins.size() ? static_cast<double>(bins[b]) * 8 / static_cast<double>(bin_ns) : 0.0);
    f.rc_series_gbps = std::move(rc_series_[i]);
    const double cv = swing_cv(bins, first, last, group);
    result_.swing_cv_mean += cv / cfg_.senders;
    result_.swing_cv_max = std::max(result_.swing_cv_max, cv);
    result_.totals += f.counters;
    const transport::QpCounters& k = s.qp->counters();
    result_.retransmitted_packets += k.retransmitted_packets;
    result_.timeouts += k.timeouts;
    throughput.push_back(f.throughput_gbps);
    result_.flows.push_back(std::move(f));
  }
  result_.jain = jain_index(throughput);
  result_.utilization = total_bytes * 8 / (window_ns * cfg_.rate_gbps);

  // Convergence: the first aligned window after which every window's Jain stays >= 0.95.
  for (std::size_t b = 0; b + group <= last; b += group) {
    std::vector<double> x;
    for (const auto* bins : bins_of)
      x.push_back(static_cast<double>(bytes_in(*bins, b, b + group)));
    if (jain_index(x) < kJainConverged) {
      result_.converged_at_us = -1;
    } else if (result_.converged_at_us < 0) {
      result_.converged_at_us = static_cast<double>(b * bin_ns) / 1000;
    }
  }

  const ns::PortStats end = net_.stats(bottleneck_);
  result_.queue = ns::summarize_depths(minus(net_.queue_depth_histogram(bottleneck_), depth_base_));
  result_.drops = end.dropped_overflow - window_base_.dropped_overflow;
  result_.drops_total = end.dropped_overflow;
  result_.ecn_marked = end.ecn_marked - window_base_.ecn_marked;
  result_.ecn_marked_total = end.ecn_marked;
  for (std::uint32_t i = 0; i < cfg_.senders; ++i) {
    const ns::PortStats s = net_.stats(net_.host_port(hosts_[i]->node));
    result_.pauses += s.paused - sender_base_[i].paused;
    result_.paused_ns += s.paused_ns - sender_base_[i].paused_ns;
  }
  for (const auto& q : net_.queue_depth_samples(bottleneck_))
    result_.queue_series.emplace_back(q.at, q.bytes);
}

double jain_index(const std::vector<double>& x) {
  double sum = 0;
  double squares = 0;
  for (double v : x) {
    sum += v;
    squares += v * v;
  }
  if (x.empty() || squares == 0) return 0;
  return sum * sum / (static_cast<double>(x.size()) * squares);
}

IncastConfig with_defaults(IncastConfig c) {
  // Marking thresholds scale with the line rate (as HPCC's DCQCN configs do, docs/protocol.md
  // §5.1), a few 4 KB frames at 25 Gb/s; the pause or drop point well above Kmax, so ECN acts
  // first.
  const double scale = c.rate_gbps / 25.0;
  if (c.kmin_bytes == 0) c.kmin_bytes = static_cast<std::uint64_t>(10'000 * scale);
  if (c.kmax_bytes == 0) c.kmax_bytes = static_cast<std::uint64_t>(40'000 * scale);
  if (c.pmax == 0) c.pmax = 0.2;
  if (c.buffer_bytes == 0) c.buffer_bytes = 10 * c.kmax_bytes;
  if (c.bin_us == 0) c.bin_us = 20;
  return c;
}

IncastResult run_incast(const IncastConfig& config) {
  auto driver = std::make_unique<Driver>(config);
  return driver->run();
}

FluidConfig fluid_config_for(const IncastConfig& c) {
  const double frame_bytes = transport::mtu_bytes(c.mtu) + kRoceV4DataOverheadBytes;
  FluidConfig f = fluid_config_for(c.params, c.senders, c.rate_gbps, frame_bytes,
                                   static_cast<double>(c.kmin_bytes),
                                   static_cast<double>(c.kmax_bytes), c.pmax);
  f.duration_us = static_cast<double>(c.duration_us);
  return f;
}

std::string reproduce_command(const IncastConfig& c) {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "xroce sim --incast %u --cc %s --profile %s --rate-gbps %g --duration-ms %g "
      "--seed %llu --kmin %llu --kmax %llu --pmax %g --buffer %llu --port %s "
      "--start-spread-us %llu",
      c.senders, c.cc ? "dcqcn" : "none", c.profile.c_str(), c.rate_gbps,
      static_cast<double>(c.duration_us) / 1000, static_cast<unsigned long long>(c.seed),
      static_cast<unsigned long long>(c.kmin_bytes), static_cast<unsigned long long>(c.kmax_bytes),
      c.pmax, static_cast<unsigned long long>(c.buffer_bytes), c.lossless ? "lossless" : "droptail",
      static_cast<unsigned long long>(c.start_spread_us));
  return buf;
}

}  // namespace xroce::cc::sim
