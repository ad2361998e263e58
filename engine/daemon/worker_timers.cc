#include "daemon/worker_timers.h"

namespace xroce::daemon {
namespace {

constexpr std::uint16_t kVlanPcpShift = 13;
constexpr std::uint16_t kVlanPcpMask = 0x7 << kVlanPcpShift;

// A notification point answers CE marks on data, never on ACKs or CNPs (docs/protocol.md §5.2).
bool cnp_worthy(wire::Operation op) {
  return op != wire::Operation::kAck && op != wire::Operation::kAtomicAck &&
         op != wire::Operation::kCnp;
}

bool connected(transport::QpState s) {
  using transport::QpState;
  return s == QpState::kRtr || s == QpState::kRts || s == QpState::kSqd || s == QpState::kSqe;
}

void take_earliest(std::optional<std::uint64_t>& earliest, std::optional<std::uint64_t> d) {
  if (d && (!earliest || *d < *earliest)) earliest = d;
}

}  // namespace

cc::CcDevice daemon_cc_defaults() {
  cc::CcDevice d;
  d.params.np_enable_mask = 0;
  d.pace_unlimited = false;
  return d;
}

void TimersAndPacing::attach(Hosted& hosted) {
  transport::Qp& qp = *hosted.qp;
  if (qp.type() != transport::QpType::kRc || !connected(qp.state())) {
    if (hosted.cc != nullptr && qp.state() == transport::QpState::kReset) detach(hosted);
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

void TimersAndPacing::detach(Hosted& hosted) {
  hosted.qp->set_congestion_hooks(nullptr);
  hosted.cc.reset();
}

void TimersAndPacing::on_packet(std::uint64_t now_ns, Hosted& hosted, const transport::RxMeta& meta,
                                wire::Operation op, WorkerCounters& counters) {
  if (hosted.cc != nullptr) {
    if (meta.ecn_ce && cnp_worthy(op)) hosted.cc->qp_cc.on_ce_marked(now_ns);
  } else if (op == wire::Operation::kCnp) {
    counters.cnp_without_reaction_point();
  }
}

bool TimersAndPacing::fire(std::uint64_t now_ns, Hosted& hosted) {
  bool any = false;
  const auto deadline = hosted.qp->next_deadline();
  if (deadline && *deadline <= now_ns) {
    hosted.qp->handle_timeout(now_ns);
    any = true;
  }
  if (hosted.cc == nullptr) return any;
  const auto cc_deadline = hosted.cc->qp_cc.next_deadline();
  if (cc_deadline && *cc_deadline <= now_ns) {
    hosted.cc->qp_cc.on_timer(now_ns);  // may raise the rate: the pacer releases sooner
    any = true;
  }
  return any;
}

std::optional<std::uint64_t> TimersAndPacing::next_deadline(const Hosted& hosted) {
  std::optional<std::uint64_t> earliest = hosted.qp->next_deadline();
  if (hosted.cc != nullptr) take_earliest(earliest, hosted.cc->qp_cc.next_deadline());
  return earliest;
}

wire::FrameAddress TimersAndPacing::cnp_address(const wire::FrameAddress& path) const {
  wire::FrameAddress addr = path;
  addr.traffic_class = cc::cnp_tos(cc_.params);
  if (addr.vlan_tci) {
    addr.vlan_tci = static_cast<std::uint16_t>((*addr.vlan_tci & ~kVlanPcpMask) |
                                               (cc_.params.cnp_802p_prio << kVlanPcpShift));
  }
  return addr;
}

QpCcStatus TimersAndPacing::status(const Hosted& hosted) const {
  QpCcStatus status;
  const WorkerQpCongestion* c = hosted.cc.get();
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

}  // namespace xroce::daemon
