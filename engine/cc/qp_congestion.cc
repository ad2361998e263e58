#include "cc/qp_congestion.h"

#include "wire/cnp.h"
#include "wire/frame.h"

namespace xroce::cc {

namespace {
constexpr std::uint8_t kEcnMask = 0x3;
constexpr int kDscpShift = 2;
constexpr int kPriorityShift = 3;  // DSCP 0..63 -> priority 0..7
}  // namespace

CcCounters& CcCounters::operator+=(const CcCounters& o) {
  np_ecn_marked_roce_packets += o.np_ecn_marked_roce_packets;
  np_cnp_sent += o.np_cnp_sent;
  rp_cnp_handled += o.rp_cnp_handled;
  rp_cnp_ignored += o.rp_cnp_ignored;
  rate_cuts += o.rate_cuts;
  return *this;
}

std::uint8_t data_tos(std::uint8_t traffic_class, bool ect) {
  const auto dscp_bits = static_cast<std::uint8_t>(traffic_class & ~kEcnMask);
  if (!ect) return traffic_class;
  return static_cast<std::uint8_t>(dscp_bits | static_cast<std::uint8_t>(wire::Ecn::kEct0));
}

std::uint8_t cnp_tos(const DcqcnParams& params) {
  return static_cast<std::uint8_t>((params.cnp_dscp & 0x3F) << kDscpShift);
}

int priority_of(std::uint8_t traffic_class) {
  return (traffic_class >> kDscpShift) >> kPriorityShift;
}

QpCongestion::QpCongestion(const CcDevice& device, wire::Qpn peer_qpn, std::uint8_t traffic_class,
                           std::uint32_t overhead_bytes)
    : device_(&device),
      peer_qpn_(peer_qpn),
      priority_(priority_of(traffic_class)),
      overhead_bytes_(overhead_bytes),
      rp_(device.params, device.line_rate_mbps, priority_),
      paced_rate_mbps_(rp_.rate_mbps()) {}

void QpCongestion::sync_pacer(std::uint64_t now_ns) {
  if (rp_.rate_mbps() == paced_rate_mbps_) return;
  pacer_.on_rate_change(now_ns, paced_rate_mbps_, rp_.rate_mbps());
  paced_rate_mbps_ = rp_.rate_mbps();
}

bool QpCongestion::active() const {
  return device_->enabled && device_->params.rp_enabled(priority_);
}

double QpCongestion::rate_mbps() const {
  return active() ? rp_.rate_mbps() : device_->line_rate_mbps;
}

double QpCongestion::target_rate_mbps() const {
  return active() ? rp_.target_rate_mbps() : device_->line_rate_mbps;
}

std::uint64_t QpCongestion::earliest_send_ns(std::uint64_t now_ns) {
  if (!active()) return now_ns;
  rp_.on_timer(now_ns);  // a rate increase that is due applies before the packet
  sync_pacer(now_ns);
  if (!paced()) return now_ns;
  return pacer_.next_send_ns();
}

// Without pace_unlimited, a QP at the line rate is left to the port; one held below it (by
// DCQCN, or by rpg_max_rate) is paced.
bool QpCongestion::paced() const {
  return device_->pace_unlimited || rp_.rate_mbps() < device_->line_rate_mbps;
}

bool QpCongestion::on_transmit(std::uint64_t now_ns, std::uint32_t bytes) {
  if (!active()) return false;
  const std::uint64_t wire_bytes = std::uint64_t{bytes} + overhead_bytes_;
  rp_.on_bytes_sent(wire_bytes, now_ns);
  sync_pacer(now_ns);
  // A packet the pacer was not asked about (earliest_send_ns returned now) is not charged to
  // it (Pacer::on_sent requires may_send): once the QP is cut below the line rate, its pacing
  // starts from the cut, not behind a backlog of packets the port serialised.
  if (paced()) pacer_.on_sent(now_ns, static_cast<std::uint32_t>(wire_bytes), rp_.rate_mbps());
  return true;
}

void QpCongestion::on_cnp(std::uint64_t now_ns) {
  if (!device_->enabled) {
    ++cnp_ignored_cc_off_;  // ConnectX: CNPs ignored because congestion control is off
    return;
  }
  rp_.on_cnp(now_ns);
  sync_pacer(now_ns);
}

void QpCongestion::on_ce_marked(std::uint64_t now_ns) {
  if (!device_->cnp_generation) {
    ++ce_while_cnp_off_;
    return;
  }
  if (np_.on_ce_marked(device_->params, priority_, now_ns)) cnp_pending_ = true;
}

std::optional<wire::TransportHeaders> QpCongestion::poll_cnp() {
  if (!cnp_pending_) return std::nullopt;
  cnp_pending_ = false;
  return wire::make_cnp(peer_qpn_);
}

std::optional<std::uint64_t> QpCongestion::next_deadline() const {
  if (!active()) return std::nullopt;
  return rp_.next_deadline();
}

void QpCongestion::on_timer(std::uint64_t now_ns) {
  if (!active()) return;
  rp_.on_timer(now_ns);
  sync_pacer(now_ns);
}

CcCounters QpCongestion::counters() const {
  CcCounters c;
  c.np_ecn_marked_roce_packets = np_.counters().np_ecn_marked_roce_packets + ce_while_cnp_off_;
  c.np_cnp_sent = np_.counters().np_cnp_sent;
  c.rp_cnp_handled = rp_.counters().rp_cnp_handled;
  c.rp_cnp_ignored = rp_.counters().rp_cnp_ignored + cnp_ignored_cc_off_;
  c.rate_cuts = rp_.counters().rate_cuts;
  return c;
}

}  // namespace xroce::cc
