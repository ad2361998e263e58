// Timers and pacing of a worker's QPs: the transport's deadlines (retransmission, RNR, ACK
// coalescing, a pacer's release time), DCQCN's (rate increase, alpha update) and the state
// behind them (docs/ARCHITECTURE.md decision 9, engine/cc).
//
// Each connected RC QP gets a WorkerQpCongestion once its path is known. The transport asks it
// when the next request packet may leave (a QP its pacer holds returns nothing from
// poll_transmit and the worker moves on to the other QPs; its release time is one of the QP's
// deadlines) and whether to mark it ECT(0). CE marks on received data packets go to the QP's
// notification point here, which sees the opcode (no CNP for an ACK or a CNP,
// docs/protocol.md §5.2); received CNPs reach the reaction point through the transport. The
// device's parameters are the CcDevice held here, changed only by set_cc (a command from the
// control thread); the QPs' QpCongestion objects point at it, so they follow from their next event.
//
// Time: every member takes `now` from the caller (the loop's Clock); nothing here reads one.
// Threading: owning worker only.
#pragma once

#include <cstdint>
#include <optional>

#include "cc/qp_congestion.h"
#include "daemon/worker_counters.h"
#include "daemon/worker_qps.h"
#include "transport/work.h"
#include "wire/frame.h"

namespace xroce::daemon {

// What xroced starts a device's workers with: ConnectX parameters, reaction point on, CNP
// generation off (np_enable = 0 on every priority: older rxe peers mishandle CNPs, docs/protocol.md
// §6), no pacing of unlimited QPs (the port serialises them).
cc::CcDevice daemon_cc_defaults();

class TimersAndPacing {
 public:
  explicit TimersAndPacing(const cc::CcDevice& device) : cc_(device) {}
  TimersAndPacing(const TimersAndPacing&) = delete;
  TimersAndPacing& operator=(const TimersAndPacing&) = delete;

  const cc::CcDevice& cc() const { return cc_; }
  // Replaces the device's settings; a new line rate applies to QPs connected afterwards.
  void set_cc(const cc::CcDevice& device) { cc_ = device; }

  // Gives a connected RC QP its congestion control once its path is known (RTR), keeps the
  // CNP's destination current, and takes it away when the QP is reset. A UD QP has none:
  // DCQCN is per connection.
  void attach(Hosted& hosted);
  // Before the QP leaves the worker.
  static void detach(Hosted& hosted);
  // A packet on its way to `hosted` (attach() done): a CE mark on data reaches the QP's
  // notification point; a CNP for a QP without a reaction point is counted.
  void on_packet(std::uint64_t now_ns, Hosted& hosted, const transport::RxMeta& meta,
                 wire::Operation op, WorkerCounters& counters);

  // Fires the QP's and its DCQCN's timers due at now_ns. Returns whether any fired.
  static bool fire(std::uint64_t now_ns, Hosted& hosted);
  // The QP's earliest QP or DCQCN deadline, if any.
  static std::optional<std::uint64_t> next_deadline(const Hosted& hosted);

  // A CNP to the QP's peer goes over the QP's own path with cnp_dscp, Not-ECT, and
  // cnp_802p_prio on a VLAN (docs/protocol.md §5.3).
  wire::FrameAddress cnp_address(const wire::FrameAddress& path) const;
  QpCcStatus status(const Hosted& hosted) const;

 private:
  cc::CcDevice cc_;
};

}  // namespace xroce::daemon
