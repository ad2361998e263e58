#include "transport/sim/workload.h"

#include <algorithm>
#include <cstring>

#include "transport/sim/driver.h"

namespace xroce::transport::sim {

namespace {

constexpr std::uint32_t kUdpPortBase = 0xC000;
constexpr std::uint32_t kQpnBase = 0x100;
// Every region may be written, read, used atomically, flushed and windowed by the peer.
constexpr std::uint32_t kRegionAccess =
    access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic |
    access::kMwBind | access::kFlushGlobal | access::kFlushPersistent;

}  // namespace

std::uint8_t pattern_byte(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t s = seed ^ (i >> 3) * 0x9E3779B97F4A7C15ULL;
  const std::uint64_t word = ns::splitmix64(s);
  return static_cast<std::uint8_t>(word >> ((i & 7) * 8));
}
void fill_pattern(std::span<std::uint8_t> out, std::uint64_t seed) {
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = pattern_byte(seed, i);
}
bool matches_pattern(std::span<const std::uint8_t> in, std::uint64_t seed) {
  for (std::size_t i = 0; i < in.size(); ++i)
    if (in[i] != pattern_byte(seed, i)) return false;
  return true;
}

std::uint8_t timeout_exp_covering(double rtt_ns) {
  std::uint8_t t = 1;
  while (t < 31 && static_cast<double>(std::uint64_t{4096} << t) < 4 * rtt_ns)
    ++t;
  return t;
}

std::uint8_t Driver::pick_timeout_exp() const {
  // Longer than the worst RTT the scenario can build: every QP's window queued at the
  // bottleneck, plus propagation both ways.
  const double rate_bps = cfg_.rate_gbps > 0 ? cfg_.rate_gbps * 1e9 : 1e15;
  const double window_bytes = 128.0 * (mtu_bytes(cfg_.mtu) + 80);
  const double flows_into_a_node = 2.0 * (cfg_.qps + cfg_.uc_qps) * (cfg_.nodes - 1);
  const double queued_ns = flows_into_a_node * window_bytes * 8 / rate_bps * 1e9;
  const double rtt_ns =
      queued_ns + 4.0 * cfg_.delay_us * 1000 + 20'000 +
      2.0 * static_cast<double>(cfg_.jitter_us + cfg_.stall_max_us + cfg_.path_stall_max_us) * 1000;
  return timeout_exp_covering(rtt_ns);
}

void Driver::build_network() {
  ns::PortConfig host_egress;
  host_egress.link.rate_bps =
      cfg_.rate_gbps > 0 ? static_cast<std::uint64_t>(cfg_.rate_gbps * 1e9) : 0;
  host_egress.link.propagation_ns = cfg_.delay_us * 1000;
  host_egress.link.jitter_ns = cfg_.jitter_us * 1000;
  host_egress.link.stall_every_ns = cfg_.path_stall_every_us * 1000;
  host_egress.link.stall_max_ns = cfg_.path_stall_max_us * 1000;
  host_egress.link.impair.loss = cfg_.loss;
  host_egress.link.impair.duplicate = cfg_.dup;
  host_egress.link.impair.corrupt = cfg_.corrupt;
  host_egress.link.impair.reorder = cfg_.reorder;
  ns::PortConfig switch_egress;
  switch_egress.link.rate_bps = host_egress.link.rate_bps;
  switch_egress.link.propagation_ns = 0;
  if (cfg_.bottleneck_gbps > 0)
    switch_egress.link.rate_bps = static_cast<std::uint64_t>(cfg_.bottleneck_gbps * 1e9);
  switch_egress.queue.capacity_bytes = cfg_.queue_bytes;

  const ns::NodeId sw = net_.add_switch("sw");
  for (std::uint32_t i = 0; i < cfg_.nodes; ++i) {
    ns::HostConfig h;
    h.name = "n" + std::to_string(i);
    h.mac = {0x02, 0, 0, 0, static_cast<std::uint8_t>(i >> 8), static_cast<std::uint8_t>(i + 1)};
    h.ips = {wire::IpAddr::v4(0xC6120001 + i)};  // 198.18.0.(i + 1)
    nodes_.push_back(std::make_unique<Node>());
    nodes_.back()->host = net_.add_host(h);
    if (cfg_.inflight_budget_psns > 0)
      nodes_.back()->inflight_budget = std::make_shared<InflightBudget>(cfg_.inflight_budget_psns);
    const ns::Link link = net_.connect(nodes_.back()->host, sw, host_egress, switch_egress);
    switch_ports_.push_back(link.b_to_a);
  }
}

Endpoint& Driver::make_endpoint(std::size_t n, QpType type) {
  Node& node = *nodes_[n];
  const std::uint64_t slots = cfg_.max_outstanding;
  const std::uint64_t bytes = (2 * slots + recv_slots_) * slot_bytes_ + 8;
  auto e = std::make_unique<Endpoint>();
  e->node = &node;
  e->type = type;
  QpConfig qc;
  qc.type = type;
  qc.qpn = wire::Qpn(kQpnBase + static_cast<std::uint32_t>(node.eps.size()));
  // Room for the peer's window binds and invalidations beside our own work.
  qc.max_send_wr = 2 * cfg_.max_outstanding;
  qc.max_recv_wr = recv_slots_;
  qc.max_inline_data = kMaxInlineBytes;
  qc.inflight_budget = node.inflight_budget;
  qc.adaptive_rto_floor_ns = cfg_.rto_floor_us * 1000;
  qc.resend_probe_floor_ns = cfg_.resend_probe_floor_us * 1000;
  qc.loss_window_min_psns = cfg_.loss_window_min_psns;
  qc.tail_probe_floor_ns = cfg_.tail_probe_floor_us * 1000;
  qc.lossy_tail_probe_floor_ns = cfg_.lossy_tail_probe_floor_us * 1000;
  qc.lossy_read_tail_probe_floor_ns = cfg_.lossy_read_tail_probe_floor_us * 1000;
  qc.selective_read_repair = cfg_.selective_read_repair;
  qc.read_repair_floor_ns = cfg_.read_repair_floor_us * 1000;
  e->qp = std::make_unique<Qp>(qc, node.mrs);
  e->base = node.mem.allocate(bytes);
  e->mr = node.mrs.register_region(e->base, bytes, kRegionAccess);
  e->src = e->base;
  e->target = e->src + slots * slot_bytes_;
  e->recv = e->target + slots * slot_bytes_;
  e->atomic_word = e->recv + std::uint64_t{recv_slots_} * slot_bytes_;
  for (std::uint64_t s = 0; s < slots; ++s)
    e->free_slots.push_back(static_cast<std::uint32_t>(slots - 1 - s));
  if (type == QpType::kRc) {
    for (std::uint64_t s = 0; s < slots; ++s)
      e->windows.push_back(*node.mrs.allocate_window(MwType::kType2));
  }
  node.by_qpn[qc.qpn.value()] = e.get();
  node.eps.push_back(std::move(e));
  return *node.eps.back();
}

// Every pair of nodes gets `qps` connected RC pairs and `uc_qps` UC pairs; traffic flows both
// ways on each.
void Driver::build_nodes() {
  // 8-aligned slots: ATOMIC WRITE targets the start of one.
  slot_bytes_ = (std::max<std::uint32_t>(cfg_.max_msg_bytes, 8) + 7) & ~7u;
  recv_slots_ = cfg_.max_outstanding * 2;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    for (std::size_t j = i + 1; j < nodes_.size(); ++j) {
      const auto& hi = net_.host(nodes_[i]->host);
      const auto& hj = net_.host(nodes_[j]->host);
      for (std::uint32_t q = 0; q < cfg_.qps + cfg_.uc_qps; ++q) {
        const QpType type = q < cfg_.qps ? QpType::kRc : QpType::kUc;
        Endpoint& a = make_endpoint(i, type);
        Endpoint& b = make_endpoint(j, type);
        a.peer = &b;
        b.peer = &a;
        a.addr.src_mac = b.addr.dst_mac = hi.mac;
        a.addr.dst_mac = b.addr.src_mac = hj.mac;
        a.addr.src_ip = b.addr.dst_ip = hi.ips[0];
        a.addr.dst_ip = b.addr.src_ip = hj.ips[0];
        // Start just below the 24-bit wrap so every run crosses it (docs/protocol.md §3.1).
        const wire::Psn a_to_b(0xFFFFFF - static_cast<std::uint32_t>(rng_.below(512)));
        const wire::Psn b_to_a(0xFFFFFF - static_cast<std::uint32_t>(rng_.below(512)));
        connect_qp(a, b.qp->qpn().value(), a_to_b, b_to_a);
        connect_qp(b, a.qp->qpn().value(), b_to_a, a_to_b);
        a.uc_next_psn = a_to_b;
        b.uc_next_psn = b_to_a;
        for (std::uint32_t s = 0; s < recv_slots_; ++s) {
          post_recv(a, s);
          post_recv(b, s);
        }
      }
    }
  }
}

void Driver::connect_qp(Endpoint& e, std::uint32_t peer_qpn, wire::Psn sq_psn, wire::Psn rq_psn) {
  namespace m = qp_attr;
  QpAttr a;
  a.qp_access_flags = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic |
                      access::kFlushGlobal | access::kFlushPersistent;
  a.path_mtu = cfg_.mtu;
  a.dest_qp_num = wire::Qpn(peer_qpn);
  a.rq_psn = rq_psn;
  a.sq_psn = sq_psn;
  a.max_rd_atomic = 4;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.timeout = timeout_exp_;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.qp_state = QpState::kInit;
  int rc = e.qp->modify(a, m::kState | m::kPkeyIndex | m::kPort | m::kAccessFlags);
  // The UC columns of the modify-QP table: no responder resources, RNR timer or retries.
  const bool uc = e.type == QpType::kUc;
  a.qp_state = QpState::kRtr;
  rc |= e.qp->modify(a, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn |
                            (uc ? 0 : m::kMaxDestRdAtomic | m::kMinRnrTimer));
  a.qp_state = QpState::kRts;
  rc |= e.qp->modify(a, uc ? m::kState | m::kSqPsn
                           : m::kState | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kSqPsn |
                                 m::kMaxQpRdAtomic);
  if (rc != 0) fail("modify_qp failed while connecting");
}

// A NIC takes a QP's next packet when its transmitter has room (nic_queue_bytes waiting), in
// turn over the node's QPs, so a go-back-N restart rewinds what has not left yet instead of
// finding a whole window queued ahead of the wire.
void Driver::transmit_all() {
  for (auto& np : nodes_) {
    Node& node = *np;
    if (node.stalled(now_)) continue;
    const ns::PortId port = net_.host_port(node.host);
    auto room = [&] {
      return cfg_.nic_queue_bytes == 0 || net_.queue_bytes(port) < cfg_.nic_queue_bytes;
    };
    const std::size_t n = node.eps.size();
    std::size_t idle = 0;  // endpoints in a row that had nothing to send
    while (idle < n && room() && summary_.failure.empty()) {
      Endpoint& e = *node.eps[node.tx_turn % n];
      node.tx_turn = (node.tx_turn + 1) % n;
      idle = transmit_one(node, e) ? 0 : idle + 1;
    }
  }
}

bool Driver::transmit_one(Node& node, Endpoint& e) {
  auto t = e.qp->poll_transmit(now_, payload_);
  if (!t) return false;
  wire::FrameAddress addr = e.addr;
  addr.udp_src_port = static_cast<std::uint16_t>(kUdpPortBase + (e.qp->qpn().value() & 0x3FFF));
  if (t->ect) addr.traffic_class = static_cast<std::uint8_t>(wire::Ecn::kEct0);
  const wire::Bytes payload(payload_.data(), t->payload_len);
  ns::Frame frame(wire::frame_bytes(addr, t->hdr, t->payload_len));
  auto len = wire::encode_frame(addr, t->hdr, payload, frame);
  if (!len) {
    fail("encode_frame failed");
    return false;
  }
  frame.resize(*len);
  net_.send(now_, node.host, std::move(frame));
  ++summary_.frames_sent;
  return true;
}

void Driver::deliver_all() {
  for (auto& np : nodes_) {
    if (np->stalled(now_)) continue;
    while (auto d = net_.receive(np->host)) {
      auto f = wire::decode_frame(d->frame);
      if (!f || !f->icrc_ok) {
        ++summary_.frames_dropped_bad;  // the ICRC (or a header check) caught the corruption
        continue;
      }
      auto it = np->by_qpn.find(f->hdr.bth.dest_qp.value());
      if (it == np->by_qpn.end()) {
        ++summary_.frames_dropped_bad;
        continue;
      }
      RxMeta meta;
      meta.ecn_ce = f->ecn == wire::Ecn::kCe;
      it->second->qp->handle_packet(now_, f->hdr, f->payload, meta);
    }
  }
}

void Driver::fire_timers() {
  for (auto& np : nodes_) {
    if (np->stalled(now_)) continue;
    for (auto& e : np->eps)
      if (auto d = e->qp->next_deadline(); d && *d <= now_) e->qp->handle_timeout(now_);
  }
}

// Each node's stalls, drawn in order as time reaches them: stall k starts at s(k), lasts
// d(k), and the next starts at s(k) + d(k) + an interval.
void Driver::schedule_stalls() {
  if (cfg_.stall_every_us == 0) return;
  for (auto& np : nodes_) {
    Node& node = *np;
    if (node.next_stall_ns == 0)
      node.next_stall_ns = stall_rng_.between(0, 2 * cfg_.stall_every_us) * 1000;
    while (node.next_stall_ns <= now_) {
      node.stalled_until_ns = node.next_stall_ns + stall_rng_.between(0, cfg_.stall_max_us) * 1000;
      node.next_stall_ns =
          node.stalled_until_ns + 1 + stall_rng_.between(0, 2 * cfg_.stall_every_us) * 1000;
    }
  }
}

// The next time anything happens: a frame moves, a running node's timer expires, or a stalled
// node runs again (then its expired timers fire, after what arrived meanwhile).
std::optional<std::uint64_t> Driver::next_wakeup() const {
  std::optional<std::uint64_t> next = net_.next_event_time();
  auto take = [&](std::uint64_t t) {
    if (!next || t < *next) next = t;
  };
  for (const auto& np : nodes_) {
    const bool stalled = np->stalled(now_);
    if (stalled) take(np->stalled_until_ns);
    for (const auto& e : np->eps)
      if (auto d = e->qp->next_deadline()) take(stalled ? std::max(*d, np->stalled_until_ns) : *d);
  }
  return next;
}

// What the run still waits for, for a deadlock report: the first WQE not completed anywhere,
// else the first window operation or RC message not received.
std::string Driver::describe_outstanding() const {
  auto name = [](const Endpoint& e) {
    return "qpn " + std::to_string(e.qp->qpn().value()) + " (" + to_string(e.qp->state()) + ")";
  };
  for (const auto& np : nodes_) {
    for (const auto& e : np->eps) {
      if (e->outstanding.empty()) continue;
      const PendingOp& op = e->outstanding.front();
      return name(*e) + ": " + to_string(op.kind) + " wr_id " + std::to_string(op.wr_id) +
             " not completed, " + std::to_string(e->outstanding.size()) + " WQEs outstanding";
    }
  }
  for (const auto& np : nodes_) {
    for (const auto& e : np->eps) {
      if (!e->flows.empty()) return name(*e) + ": a window operation in progress";
      if (e->type == QpType::kRc && !e->expected_recvs.empty()) {
        return name(*e) + ": " + to_string(e->expected_recvs.front().kind) + " not received";
      }
    }
  }
  return "nothing";
}

bool Driver::faulty() const {
  return cfg_.loss > 0 || cfg_.reorder > 0 || cfg_.dup > 0 || cfg_.corrupt > 0 ||
         cfg_.queue_bytes > 0;
}

// Every operation completed and every RC message arrived. UC receptions are not waited for:
// the network may have lost them; finish() counts what never came.
bool Driver::done() const {
  if (summary_.posted < cfg_.ops) return false;
  for (const auto& np : nodes_) {
    for (const auto& e : np->eps) {
      if (!e->outstanding.empty() || !e->flows.empty()) return false;
      if (e->type == QpType::kRc && !e->expected_recvs.empty()) return false;
    }
  }
  return true;
}

void Driver::fail(const std::string& why) {
  if (summary_.failure.empty()) summary_.failure = why;
}

void Driver::finish() {
  for (const ns::PortId port : switch_ports_)
    summary_.queue_drops += net_.stats(port).dropped_overflow;
  for (const auto& np : nodes_) {
    for (const auto& e : np->eps) {
      if (e->type == QpType::kUc) {
        check_uc_progress(*e);
        // UC (IBA 9.8): a lost message is simply never received. On a network that loses
        // nothing, nothing may be missing.
        std::uint64_t missing = e->peer->expected_recvs.size();
        for (const UcInFlight& m : e->uc_in_flight)
          missing += m.kind == OpKind::kUcWrite ? 1 : 0;
        summary_.uc_lost += missing;
        if (!faulty() && missing != 0) fail("UC message lost on a network without faults");
      } else {
        summary_.lost += e->peer->expected_recvs.size();
      }
      summary_.lost += e->outstanding.size() + e->flows.size();
      const QpCounters& k = e->qp->counters();
      summary_.retransmitted_packets += k.retransmitted_packets;
      summary_.naks_sent += k.naks_sent;
      summary_.timeouts += k.timeouts;
      summary_.adaptive_retransmits += k.adaptive_retransmits;
      summary_.resend_timeouts += k.resend_timeouts;
      summary_.tail_probes += k.tail_probes;
      summary_.probe_gaps += k.probe_gaps;
      summary_.resend_repeats += k.resend_repeats;
      if (!summary_.failure.empty()) continue;
      // The atomic word each peer holds must equal the model of what was posted to it.
      std::uint64_t v = 0;
      std::memcpy(&v, e->peer->node->mem.view(e->peer->atomic_word, 8).data(), 8);
      if (v != e->atomic_model) {
        ++summary_.data_errors;
        fail("final atomic value differs from the model");
      }
    }
  }
  if (summary_.lost != 0) fail(std::to_string(summary_.lost) + " operations never completed");
  summary_.sim_time_us = now_ / 1000;
}

Summary Driver::run() {
  timeout_exp_ = pick_timeout_exp();
  summary_.timeout_exp = timeout_exp_;
  build_network();
  build_nodes();
  while (summary_.failure.empty() && !done()) {
    schedule_stalls();
    post_work();
    transmit_all();
    // Local operations (binds, LOCAL_INV) and UC sends complete with no packet or timer
    // behind them: their completions may start the next step of the workload at once.
    if (poll_completions()) continue;
    const std::optional<std::uint64_t> next = next_wakeup();
    if (!next) {
      fail("deadlock: work outstanding but no packet in flight and no timer armed (" +
           describe_outstanding() + ")");
      break;
    }
    if (*next > cfg_.time_limit_ns) {
      fail("stalled: virtual time limit reached");
      break;
    }
    now_ = std::max(now_, *next);
    net_.run_until(now_);
    schedule_stalls();
    deliver_all();
    fire_timers();
    poll_completions();
  }
  // UC messages still on the wire arrive (or are lost) before anything is counted missing.
  while (summary_.failure.empty()) {
    const std::optional<std::uint64_t> next = net_.next_event_time();
    if (!next) break;
    now_ = std::max(now_, *next);
    net_.run_until(now_);
    deliver_all();
    poll_completions();
  }
  finish();
  return summary_;
}

Summary run_scenario(const ScenarioConfig& config) {
  auto driver = std::make_unique<Driver>(config);
  return driver->run();
}

}  // namespace xroce::transport::sim
