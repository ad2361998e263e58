#include "transport/sim/workload.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "net/sim/network.h"
#include "net/sim/rng.h"
#include "transport/memory.h"
#include "transport/qp.h"
#include "wire/frame.h"

namespace xroce::transport::sim {

namespace {

namespace ns = xroce::net::sim;

constexpr std::uint32_t kMaxInlineBytes = 64;
constexpr std::uint32_t kUdpPortBase = 0xC000;
constexpr std::uint32_t kQpnBase = 0x100;
constexpr std::size_t kInvMrBytes = 64;

// Deterministic message contents: byte i of a message is a function of (seed, i).
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

struct PendingOp {
  std::uint64_t wr_id = 0;
  OpKind kind = OpKind::kSend;
  std::uint32_t length = 0;
  std::uint32_t slot = 0;
  std::uint64_t pattern = 0;
  std::uint64_t expected_original = 0;
  bool signaled = true;
};

struct ExpectedRecv {
  OpKind kind = OpKind::kSend;
  std::uint32_t length = 0;
  std::uint64_t pattern = 0;
  std::uint32_t imm = 0;
  wire::Rkey inv_rkey;
};

struct Node;

// One QP and the memory it works on. Layout of its buffer: [src slots][target slots]
// [recv slots][atomic word][invalidate MR area].
struct Endpoint {
  Node* node = nullptr;
  Endpoint* peer = nullptr;
  std::unique_ptr<Qp> qp;
  wire::FrameAddress addr;  // Ethernet/IP/UDP around this QP's packets
  std::uint64_t base = 0;
  MemoryRegion mr;
  std::uint64_t src = 0, target = 0, recv = 0, atomic_word = 0, inv_area = 0;
  std::vector<std::uint32_t> free_slots;
  std::deque<PendingOp> outstanding;
  std::deque<ExpectedRecv> expected_recvs;  // messages this endpoint will receive, in order
  std::uint64_t atomic_model = 0;           // value of the peer's atomic word after our posts
};

struct Node {
  LocalMemory mem;
  MemoryRegionTable mrs{mem};
  ns::NodeId host = 0;
  std::vector<std::unique_ptr<Endpoint>> eps;
  std::unordered_map<std::uint32_t, Endpoint*> by_qpn;
};

class Driver {
 public:
  explicit Driver(const ScenarioConfig& c) : cfg_(c), rng_(c.seed), net_(c.seed ^ 0x5EED) {
    summary_.seed = c.seed;
  }
  Summary run();

 private:
  std::uint8_t pick_timeout_exp() const;
  void build_network();
  void build_nodes();
  Endpoint& make_endpoint(std::size_t node);
  void connect_qp(Endpoint& e, std::uint32_t peer_qpn, wire::Psn sq_psn, wire::Psn rq_psn);
  void post_work();
  void post_one(Endpoint& e);
  void prepare_send_write(Endpoint& e, PendingOp& op, WorkRequest& wr);
  void prepare_read(Endpoint& e, PendingOp& op, WorkRequest& wr);
  void prepare_atomic(Endpoint& e, PendingOp& op, WorkRequest& wr);
  OpKind pick_kind();
  std::uint32_t pick_length(OpKind k);
  std::vector<Sge> split_sges(const Endpoint& e, std::uint64_t addr, std::uint32_t len);
  void transmit_all();
  void deliver_all();
  void fire_timers();
  void poll_completions();
  void on_send_completion(Endpoint& e, const Completion& c);
  void retire(Endpoint& e, const PendingOp& op);
  void on_recv_completion(Endpoint& e, const Completion& c);
  void post_recv(Endpoint& e, std::uint32_t slot);
  bool done() const;
  void fail(const std::string& why);
  void finish();

  ScenarioConfig cfg_;
  ns::Rng rng_;
  ns::Network net_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::uint32_t slot_bytes_ = 0;
  std::uint32_t recv_slots_ = 0;
  std::uint8_t timeout_exp_ = 0;
  std::uint64_t next_wr_id_ = 1;
  std::uint64_t now_ = 0;
  Summary summary_;
  std::array<std::uint8_t, 4096> payload_{};
};

std::uint8_t Driver::pick_timeout_exp() const {
  // Longer than the worst RTT the scenario can build: every QP's window queued at the
  // bottleneck, plus propagation both ways.
  const double rate_bps = cfg_.rate_gbps > 0 ? cfg_.rate_gbps * 1e9 : 1e15;
  const double window_bytes = 128.0 * (mtu_bytes(cfg_.mtu) + 80);
  const double flows_into_a_node = 2.0 * cfg_.qps * (cfg_.nodes - 1);
  const double queued_ns = flows_into_a_node * window_bytes * 8 / rate_bps * 1e9;
  const double rtt_ns = queued_ns + 4.0 * cfg_.delay_us * 1000 + 20'000;
  std::uint8_t t = 1;
  while (t < 31 && static_cast<double>(std::uint64_t{4096} << t) < 4 * rtt_ns)
    ++t;
  return t;
}

void Driver::build_network() {
  ns::PortConfig host_egress;
  host_egress.link.rate_bps =
      cfg_.rate_gbps > 0 ? static_cast<std::uint64_t>(cfg_.rate_gbps * 1e9) : 0;
  host_egress.link.propagation_ns = cfg_.delay_us * 1000;
  host_egress.link.impair.loss = cfg_.loss;
  host_egress.link.impair.duplicate = cfg_.dup;
  host_egress.link.impair.corrupt = cfg_.corrupt;
  host_egress.link.impair.reorder = cfg_.reorder;
  ns::PortConfig switch_egress;
  switch_egress.link.rate_bps = host_egress.link.rate_bps;
  switch_egress.link.propagation_ns = 0;

  const ns::NodeId sw = net_.add_switch("sw");
  for (std::uint32_t i = 0; i < cfg_.nodes; ++i) {
    ns::HostConfig h;
    h.name = "n" + std::to_string(i);
    h.mac = {0x02, 0, 0, 0, static_cast<std::uint8_t>(i >> 8), static_cast<std::uint8_t>(i + 1)};
    h.ips = {wire::IpAddr::v4(0xC6120001 + i)};  // 198.18.0.(i + 1)
    nodes_.push_back(std::make_unique<Node>());
    nodes_.back()->host = net_.add_host(h);
    net_.connect(nodes_.back()->host, sw, host_egress, switch_egress);
  }
}

Endpoint& Driver::make_endpoint(std::size_t n) {
  Node& node = *nodes_[n];
  const std::uint64_t slots = cfg_.max_outstanding;
  const std::uint64_t bytes = (2 * slots + recv_slots_) * slot_bytes_ + 8 + slots * kInvMrBytes;
  const std::uint32_t all_access =
      access::kLocalWrite | access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
  auto e = std::make_unique<Endpoint>();
  e->node = &node;
  QpConfig qc;
  qc.qpn = wire::Qpn(kQpnBase + static_cast<std::uint32_t>(node.eps.size()));
  qc.max_send_wr = cfg_.max_outstanding;
  qc.max_recv_wr = recv_slots_;
  qc.max_inline_data = kMaxInlineBytes;
  e->qp = std::make_unique<Qp>(qc, node.mrs);
  e->base = node.mem.allocate(bytes);
  e->mr = node.mrs.register_region(e->base, bytes - slots * kInvMrBytes, all_access);
  e->src = e->base;
  e->target = e->src + slots * slot_bytes_;
  e->recv = e->target + slots * slot_bytes_;
  e->atomic_word = e->recv + std::uint64_t{recv_slots_} * slot_bytes_;
  e->inv_area = e->atomic_word + 8;
  for (std::uint64_t s = 0; s < slots; ++s)
    e->free_slots.push_back(static_cast<std::uint32_t>(slots - 1 - s));
  node.by_qpn[qc.qpn.value()] = e.get();
  node.eps.push_back(std::move(e));
  return *node.eps.back();
}

// Every pair of nodes gets `qps` connected QP pairs; traffic flows both ways on each.
void Driver::build_nodes() {
  slot_bytes_ = std::max<std::uint32_t>(cfg_.max_msg_bytes, 8);
  recv_slots_ = cfg_.max_outstanding * 2;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    for (std::size_t j = i + 1; j < nodes_.size(); ++j) {
      const auto& hi = net_.host(nodes_[i]->host);
      const auto& hj = net_.host(nodes_[j]->host);
      for (std::uint32_t q = 0; q < cfg_.qps; ++q) {
        Endpoint& a = make_endpoint(i);
        Endpoint& b = make_endpoint(j);
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
  a.qp_access_flags = access::kRemoteWrite | access::kRemoteRead | access::kRemoteAtomic;
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
  a.qp_state = QpState::kRtr;
  rc |= e.qp->modify(a, m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn |
                            m::kMaxDestRdAtomic | m::kMinRnrTimer);
  a.qp_state = QpState::kRts;
  rc |= e.qp->modify(
      a, m::kState | m::kTimeout | m::kRetryCnt | m::kRnrRetry | m::kSqPsn | m::kMaxQpRdAtomic);
  if (rc != 0) fail("modify_qp failed while connecting");
}

void Driver::post_recv(Endpoint& e, std::uint32_t slot) {
  RecvRequest r;
  r.wr_id = slot;
  const std::uint64_t addr = e.recv + std::uint64_t{slot} * slot_bytes_;
  // Two SGEs, so receives scatter across buffers too.
  const std::uint32_t first = slot_bytes_ / 3;
  r.sg_list = {Sge{addr, first, e.mr.lkey}, Sge{addr + first, slot_bytes_ - first, e.mr.lkey}};
  if (e.qp->post_recv(r) != 0) fail("post_recv refused");
}

OpKind Driver::pick_kind() {
  std::uint64_t total = 0;
  for (auto w : cfg_.mix.weight)
    total += w;
  std::uint64_t x = rng_.below(total);
  for (std::size_t i = 0; i < kOpKinds; ++i) {
    if (x < cfg_.mix.weight[i]) return static_cast<OpKind>(i);
    x -= cfg_.mix.weight[i];
  }
  return OpKind::kSend;
}

std::uint32_t Driver::pick_length(OpKind k) {
  if (k == OpKind::kCmpSwap || k == OpKind::kFetchAdd) return 8;
  const std::uint32_t mtu = mtu_bytes(cfg_.mtu);
  const std::uint64_t r = rng_.below(100);
  std::uint64_t hi = 0;
  if (r < 45) {
    hi = std::min<std::uint64_t>(64, cfg_.max_msg_bytes);  // small, often inline
  } else if (r < 80) {
    hi = std::min<std::uint64_t>(2 * mtu, cfg_.max_msg_bytes);
  } else {
    hi = cfg_.max_msg_bytes;
  }
  // Exact multiples of the MTU are the edge of segmentation: make them common.
  if (rng_.below(8) == 0 && hi >= mtu)
    return mtu * static_cast<std::uint32_t>(rng_.between(1, hi / mtu));
  return static_cast<std::uint32_t>(rng_.below(hi + 1));
}

std::vector<Sge> Driver::split_sges(const Endpoint& e, std::uint64_t addr, std::uint32_t len) {
  std::vector<Sge> sges;
  const std::uint64_t n = len < 2 ? 1 : rng_.between(1, std::min<std::uint64_t>(3, len));
  std::uint32_t left = len;
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint32_t part =
        i + 1 == n ? left : static_cast<std::uint32_t>(rng_.between(1, left - (n - 1 - i)));
    sges.push_back(Sge{addr, part, e.mr.lkey});
    addr += part;
    left -= part;
  }
  return sges;
}

void Driver::post_one(Endpoint& e) {
  PendingOp op;
  op.kind = pick_kind();
  op.length = pick_length(op.kind);
  op.slot = e.free_slots.back();
  op.pattern = rng_.next_u64();
  op.wr_id = next_wr_id_++;
  // Some work is unsignaled: it completes silently, retired by a later signaled completion.
  // The newest WQE of an endpoint, and everything near the end of the run, stays signaled so
  // every unsignaled WQE has a signaled one behind it.
  const std::uint64_t endpoints = std::uint64_t{cfg_.qps} * cfg_.nodes * (cfg_.nodes - 1);
  const bool may_skip = e.free_slots.size() > 1 && summary_.posted + 2 * endpoints < cfg_.ops;
  op.signaled = !(may_skip && rng_.below(4) == 0);
  WorkRequest wr;
  wr.wr_id = op.wr_id;
  wr.send_flags = op.signaled ? send_flags::kSignaled : 0;
  switch (op.kind) {
    case OpKind::kRead:
      prepare_read(e, op, wr);
      break;
    case OpKind::kCmpSwap:
    case OpKind::kFetchAdd:
      prepare_atomic(e, op, wr);
      break;
    default:
      prepare_send_write(e, op, wr);
      break;
  }
  if (e.qp->post_send(wr) != 0) {
    fail("post_send refused");
    return;
  }
  e.free_slots.pop_back();
  e.outstanding.push_back(op);
  ++summary_.posted;
  if (!op.signaled) ++summary_.posted_unsignaled;
  ++summary_.posted_by_kind[static_cast<std::size_t>(op.kind)];
}

// SEND / SEND_WITH_IMM / SEND_WITH_INV / WRITE / WRITE_WITH_IMM: pattern bytes from our source
// slot; what the peer must receive goes into its expected-receive queue, in posting order.
void Driver::prepare_send_write(Endpoint& e, PendingOp& op, WorkRequest& wr) {
  Endpoint& p = *e.peer;
  const std::uint64_t src = e.src + std::uint64_t{op.slot} * slot_bytes_;
  fill_pattern(e.node->mem.view(src, op.length), op.pattern);
  wr.sg_list = split_sges(e, src, op.length);
  if (op.length <= kMaxInlineBytes && rng_.below(4) == 0) wr.send_flags |= send_flags::kInline;
  wr.opcode = op.kind == OpKind::kSend      ? WrOpcode::kSend
              : op.kind == OpKind::kSendImm ? WrOpcode::kSendWithImm
              : op.kind == OpKind::kSendInv ? WrOpcode::kSendWithInv
              : op.kind == OpKind::kWrite   ? WrOpcode::kRdmaWrite
                                            : WrOpcode::kRdmaWriteWithImm;
  if (op.kind == OpKind::kWrite || op.kind == OpKind::kWriteImm) {
    wr.remote_addr = p.target + std::uint64_t{op.slot} * slot_bytes_;
    wr.rkey = p.mr.rkey;
  }
  ExpectedRecv expect{op.kind, op.length, op.pattern, 0, {}};
  if (op.kind == OpKind::kSendImm || op.kind == OpKind::kWriteImm) {
    wr.imm_data = static_cast<std::uint32_t>(op.pattern >> 32);
    expect.imm = wr.imm_data;
  }
  if (op.kind == OpKind::kSendInv) {
    // A fresh MR at the peer for the message to invalidate.
    const MemoryRegion inv = p.node->mrs.register_region(
        p.inv_area + std::uint64_t{op.slot} * kInvMrBytes, kInvMrBytes, access::kRemoteRead);
    wr.invalidate_rkey = inv.rkey;
    expect.inv_rkey = inv.rkey;
  }
  if (op.kind != OpKind::kWrite) p.expected_recvs.push_back(expect);
}

// READ: the peer's target slot holds the pattern (as its application would have put it there);
// our destination slot is zeroed so missing bytes show.
void Driver::prepare_read(Endpoint& e, PendingOp& op, WorkRequest& wr) {
  Endpoint& p = *e.peer;
  const std::uint64_t src = e.src + std::uint64_t{op.slot} * slot_bytes_;
  const std::uint64_t target = p.target + std::uint64_t{op.slot} * slot_bytes_;
  fill_pattern(p.node->mem.view(target, op.length), op.pattern);
  auto dst = e.node->mem.view(src, op.length);
  std::fill(dst.begin(), dst.end(), std::uint8_t{0});
  wr.opcode = WrOpcode::kRdmaRead;
  wr.sg_list = split_sges(e, src, op.length);
  wr.remote_addr = target;
  wr.rkey = p.mr.rkey;
}

// Atomics on the peer's word execute in posting order, so the original value each returns is
// predicted by a model of the word.
void Driver::prepare_atomic(Endpoint& e, PendingOp& op, WorkRequest& wr) {
  const std::uint64_t src = e.src + std::uint64_t{op.slot} * slot_bytes_;
  wr.opcode =
      op.kind == OpKind::kCmpSwap ? WrOpcode::kAtomicCmpAndSwp : WrOpcode::kAtomicFetchAndAdd;
  wr.sg_list = {Sge{src, 8, e.mr.lkey}};
  wr.remote_addr = e.peer->atomic_word;
  wr.rkey = e.peer->mr.rkey;
  op.expected_original = e.atomic_model;
  if (op.kind == OpKind::kFetchAdd) {
    wr.compare_add = op.pattern;
    e.atomic_model += op.pattern;
    return;
  }
  const bool hit = rng_.below(2) == 0;
  wr.compare_add = hit ? e.atomic_model : e.atomic_model + 1;
  wr.swap = op.pattern;
  if (hit) e.atomic_model = op.pattern;
}

void Driver::post_work() {
  bool progress = true;
  while (progress && summary_.posted < cfg_.ops) {
    progress = false;
    for (auto& np : nodes_) {
      for (auto& e : np->eps) {
        if (summary_.posted >= cfg_.ops) return;
        if (e->free_slots.empty() || e->qp->state() != QpState::kRts) continue;
        post_one(*e);
        progress = true;
      }
    }
  }
}

void Driver::transmit_all() {
  for (auto& np : nodes_) {
    for (auto& e : np->eps) {
      while (auto t = e->qp->poll_transmit(now_, payload_)) {
        wire::FrameAddress addr = e->addr;
        addr.udp_src_port =
            static_cast<std::uint16_t>(kUdpPortBase + (e->qp->qpn().value() & 0x3FFF));
        if (t->ect) addr.traffic_class = static_cast<std::uint8_t>(wire::Ecn::kEct0);
        const wire::Bytes payload(payload_.data(), t->payload_len);
        ns::Frame frame(wire::frame_bytes(addr, t->hdr, t->payload_len));
        auto len = wire::encode_frame(addr, t->hdr, payload, frame);
        if (!len) {
          fail("encode_frame failed");
          return;
        }
        frame.resize(*len);
        net_.send(now_, np->host, std::move(frame));
        ++summary_.frames_sent;
      }
    }
  }
}

void Driver::deliver_all() {
  for (auto& np : nodes_) {
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
  for (auto& np : nodes_)
    for (auto& e : np->eps)
      if (auto d = e->qp->next_deadline(); d && *d <= now_) e->qp->handle_timeout(now_);
}

void Driver::poll_completions() {
  for (auto& np : nodes_) {
    for (auto& e : np->eps) {
      while (auto c = e->qp->poll_completion()) {
        if (!summary_.failure.empty()) return;  // report the first failure, not its fallout
        if (c->is_recv()) {
          on_recv_completion(*e, *c);
        } else {
          on_send_completion(*e, *c);
        }
      }
      if (e->qp->state() != QpState::kRts) fail("a QP left RTS");
    }
  }
}

void Driver::on_send_completion(Endpoint& e, const Completion& c) {
  // Unsignaled WQEs before this one completed silently (RC completes in order).
  while (!e.outstanding.empty() && e.outstanding.front().wr_id != c.wr_id &&
         !e.outstanding.front().signaled) {
    const PendingOp op = e.outstanding.front();
    e.outstanding.pop_front();
    retire(e, op);
  }
  if (e.outstanding.empty() || e.outstanding.front().wr_id != c.wr_id) {
    ++summary_.completion_errors;
    fail("send completion out of order, duplicated or unknown: wr_id " + std::to_string(c.wr_id));
    return;
  }
  const PendingOp op = e.outstanding.front();
  e.outstanding.pop_front();
  if (c.status != WcStatus::kSuccess) {
    ++summary_.completion_errors;
    fail(std::string("completion status ") + to_string(c.status) + " for " + to_string(op.kind));
    return;
  }
  retire(e, op);
}

// Checks the effect of a completed operation and frees its slot.
void Driver::retire(Endpoint& e, const PendingOp& op) {
  e.free_slots.push_back(op.slot);
  ++summary_.completed;
  Node& en = *e.node;
  const std::uint64_t src = e.src + std::uint64_t{op.slot} * slot_bytes_;
  const std::uint64_t target = e.peer->target + std::uint64_t{op.slot} * slot_bytes_;
  bool good = true;
  switch (op.kind) {
    case OpKind::kWrite:
    case OpKind::kWriteImm:
      good = matches_pattern(e.peer->node->mem.view(target, op.length), op.pattern);
      summary_.bytes_verified += op.length;
      break;
    case OpKind::kRead:
      good = matches_pattern(en.mem.view(src, op.length), op.pattern);
      summary_.bytes_verified += op.length;
      break;
    case OpKind::kCmpSwap:
    case OpKind::kFetchAdd: {
      std::uint64_t v = 0;
      std::memcpy(&v, en.mem.view(src, 8).data(), 8);
      good = v == op.expected_original;
      summary_.bytes_verified += 8;
      break;
    }
    default:
      break;  // SEND data is checked at the receiver
  }
  if (!good) {
    ++summary_.data_errors;
    fail(std::string("data mismatch for ") + to_string(op.kind) + " wr_id " +
         std::to_string(op.wr_id));
  }
}

void Driver::on_recv_completion(Endpoint& e, const Completion& c) {
  if (e.expected_recvs.empty()) {
    ++summary_.completion_errors;
    fail("receive completion with no message expected");
    return;
  }
  const ExpectedRecv x = e.expected_recvs.front();
  e.expected_recvs.pop_front();
  ++summary_.received;
  const bool write_imm = x.kind == OpKind::kWriteImm;
  const bool has_imm = x.kind == OpKind::kSendImm || write_imm;
  const bool has_inv = x.kind == OpKind::kSendInv;
  bool ok = c.status == WcStatus::kSuccess && c.byte_len == x.length &&
            c.opcode == (write_imm ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv) &&
            ((c.wc_flags & wc_flags::kWithImm) != 0) == has_imm &&
            (!has_imm || c.imm_data == x.imm) &&
            ((c.wc_flags & wc_flags::kWithInv) != 0) == has_inv &&
            (!has_inv || c.invalidated_rkey == x.inv_rkey);
  if (!ok) {
    ++summary_.completion_errors;
    fail(std::string("receive completion does not match the ") + to_string(x.kind) + " sent");
    return;
  }
  if (has_inv && e.node->mrs.check_remote(x.inv_rkey, e.inv_area, 1, access::kRemoteRead)) {
    ++summary_.data_errors;
    fail("SEND_WITH_INV did not invalidate the rkey");
  }
  if (!write_imm) {
    const std::uint64_t buf = e.recv + std::uint64_t{c.wr_id} * slot_bytes_;
    if (!matches_pattern(e.node->mem.view(buf, x.length), x.pattern)) {
      ++summary_.data_errors;
      fail(std::string("received data mismatch for ") + to_string(x.kind));
    }
    summary_.bytes_verified += x.length;
  }
  post_recv(e, static_cast<std::uint32_t>(c.wr_id));
}

bool Driver::done() const {
  if (summary_.posted < cfg_.ops) return false;
  for (const auto& np : nodes_)
    for (const auto& e : np->eps)
      if (!e->outstanding.empty() || !e->expected_recvs.empty()) return false;
  return true;
}

void Driver::fail(const std::string& why) {
  if (summary_.failure.empty()) summary_.failure = why;
}

void Driver::finish() {
  for (const auto& np : nodes_) {
    for (const auto& e : np->eps) {
      summary_.lost += e->outstanding.size() + e->expected_recvs.size();
      const QpCounters& k = e->qp->counters();
      summary_.retransmitted_packets += k.retransmitted_packets;
      summary_.naks_sent += k.naks_sent;
      summary_.timeouts += k.timeouts;
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
    post_work();
    transmit_all();
    std::optional<std::uint64_t> next = net_.next_event_time();
    for (auto& np : nodes_)
      for (auto& e : np->eps)
        if (auto d = e->qp->next_deadline(); d && (!next || *d < *next)) next = *d;
    if (!next) {
      fail("deadlock: work outstanding but no packet in flight and no timer armed");
      break;
    }
    if (*next > cfg_.time_limit_ns) {
      fail("stalled: virtual time limit reached");
      break;
    }
    now_ = std::max(now_, *next);
    net_.run_until(now_);
    deliver_all();
    fire_timers();
    poll_completions();
  }
  finish();
  return summary_;
}

}  // namespace

Summary run_scenario(const ScenarioConfig& config) {
  auto driver = std::make_unique<Driver>(config);
  return driver->run();
}

}  // namespace xroce::transport::sim
