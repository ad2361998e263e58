// The glue between engine/cc's pure DCQCN pieces and the transport: one QpCongestion per QP
// implements transport::CongestionHooks with a ReactionPoint (sender rate), a Pacer (releases
// the QP's request packets at that rate) and a NotificationPoint (CNPs for CE-marked arrivals).
// A CcDevice holds what a device shares: the parameter table, the line rate and the
// device-wide CNP switch.
//
// Sans-I/O like the rest of engine/cc. Calling order, on the worker that owns the QP:
//   - the transport calls the hooks (earliest_send_ns, on_transmit, on_cnp, on_ce_marked);
//   - after any input to the QP, drain poll_cnp(): each is a CNP's transport headers, to be
//     framed with cnp_tos() (and cnp_802p_prio on a VLAN) and sent to the QP's peer;
//   - call on_timer(now) once now reaches next_deadline() (the reaction point's rate-increase
//     timer and pending cut), like the QP's own timers;
//   - frame each request packet with data_tos(traffic_class, transmit.ect).
#pragma once

#include <cstdint>
#include <optional>

#include "cc/notification_point.h"
#include "cc/pacer.h"
#include "cc/params.h"
#include "cc/reaction_point.h"
#include "transport/qp_context.h"
#include "wire/headers.h"
#include "wire/types.h"

namespace xroce::cc {

// What the QPs of one device share. Must outlive them; changes apply from each QP's next event.
struct CcDevice {
  DcqcnParams params = DcqcnParams::connectx();
  double line_rate_mbps = 100'000;
  bool enabled = true;         // congestion control on: ECT on data, reaction point, pacing
  bool cnp_generation = true;  // CNPs towards peers (off for old rxe peers, docs/protocol.md §6)
  // Pace a QP that may send at the line rate too (the simulator's links need it to model the
  // NIC's serialisation). The daemon turns it off: its port already serialises, and spacing
  // every packet of such a QP would only add timer wake-ups. A QP below the line rate (DCQCN,
  // or rpg_max_rate) is paced either way.
  bool pace_unlimited = true;
};

// Bytes a request packet occupies on the wire beyond its payload, counted by the pacer so a QP
// paced at the line rate does not outrun its port: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 +
// ICRC 4 (the first packet of a message also carries a RETH; that 16-byte slack is absorbed by
// the port's queue).
inline constexpr std::uint32_t kRoceV4DataOverheadBytes = 14 + 20 + 8 + 12 + 4;

// The DCQCN counters of one QP, ConnectX names first (device sums are plain additions).
struct CcCounters {
  std::uint64_t np_ecn_marked_roce_packets = 0;
  std::uint64_t np_cnp_sent = 0;
  std::uint64_t rp_cnp_handled = 0;
  std::uint64_t rp_cnp_ignored = 0;
  std::uint64_t rate_cuts = 0;
  CcCounters& operator+=(const CcCounters& o);
};

// IP TOS / traffic class of a data packet: the QP's traffic class with the ECN bits replaced by
// ECT(0) when congestion control asks for it (rxe puts the AV traffic_class byte verbatim into
// the TOS, rxe_net.c prepare4, so its DSCP is traffic_class >> 2).
std::uint8_t data_tos(std::uint8_t traffic_class, bool ect);
// TOS of a CNP: cnp_dscp, ECN Not-ECT.
std::uint8_t cnp_tos(const DcqcnParams& params);
// The QP's priority for the per-priority enables: DSCP >> 3, the trust-DSCP mapping.
int priority_of(std::uint8_t traffic_class);

class QpCongestion final : public transport::CongestionHooks {
 public:
  // `peer_qpn`: the QP at the other end (the CNP's DestQP, docs/protocol.md §5.3). `overhead_bytes`
  // is added to each packet's payload for pacing and the byte counter.
  QpCongestion(const CcDevice& device, wire::Qpn peer_qpn, std::uint8_t traffic_class,
               std::uint32_t overhead_bytes = kRoceV4DataOverheadBytes);

  // transport::CongestionHooks
  std::uint64_t earliest_send_ns(std::uint64_t now_ns) override;
  bool on_transmit(std::uint64_t now_ns, std::uint32_t bytes) override;
  void on_cnp(std::uint64_t now_ns) override;
  void on_ce_marked(std::uint64_t now_ns) override;

  // A CNP to send to the peer (at most one is pending: the NP spaces them).
  std::optional<wire::TransportHeaders> poll_cnp();
  std::optional<std::uint64_t> next_deadline() const;
  void on_timer(std::uint64_t now_ns);

  // The QP at the other end changed (an RC QP connected again after a reset).
  void set_peer(wire::Qpn peer_qpn) { peer_qpn_ = peer_qpn; }
  wire::Qpn peer() const { return peer_qpn_; }
  int priority() const { return priority_; }
  // Congestion control is on for this QP: on for the device and rp_enable/<priority> set.
  // While it is off the QP's packets are not ECT, not paced, and CNPs are counted as ignored.
  bool active() const;

  double rate_mbps() const;  // the rate the QP is paced at (line rate when CC is off)
  double target_rate_mbps() const;
  double alpha() const { return rp_.alpha(); }
  RpStage stage() const { return rp_.stage(); }
  const ReactionPoint& reaction_point() const { return rp_; }
  CcCounters counters() const;

 private:
  void sync_pacer(std::uint64_t now_ns);
  // Whether the pacer spaces this QP's packets: always with pace_unlimited; without it only
  // while the QP's rate is below the line rate (at the line rate the port serialises them).
  bool paced() const;

  const CcDevice* device_;
  wire::Qpn peer_qpn_;
  int priority_;
  std::uint32_t overhead_bytes_;
  ReactionPoint rp_;
  Pacer pacer_;
  NotificationPoint np_;
  double paced_rate_mbps_;  // the rate the pacer's pending spacing was computed at
  bool cnp_pending_ = false;
  std::uint64_t ce_while_cnp_off_ = 0;  // marked packets seen with CNP generation off
  std::uint64_t cnp_ignored_cc_off_ = 0;
};

}  // namespace xroce::cc
