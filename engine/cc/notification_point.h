// DCQCN notification point: decides, for each CE-marked RoCEv2 data packet that arrives for a
// QP, whether to send that QP's sender a CNP now (docs/protocol.md §5.2, §5.3). One per QP: the
// moderation is per QP as in the DCQCN model (whether ConnectX moderates per QP or per port is
// documented both ways, docs/protocol.md §5.2); a device that wants per-source moderation keeps one
// per source instead. Sans-I/O: the caller builds and sends the CNP (opcode 0x81, BECN, cnp_dscp,
// cnp_802p_prio) and never calls this for ACKs or CNPs themselves.
#pragma once

#include <cstdint>

#include "cc/params.h"

namespace xroce::cc {

struct NpCounters {
  std::uint64_t np_ecn_marked_roce_packets = 0;  // CE-marked RoCEv2 packets received
  std::uint64_t np_cnp_sent = 0;                 // CNPs this notification point asked for
};

class NotificationPoint {
 public:
  // A RoCEv2 data packet with IP ECN = CE (0b11) arrived at `now_ns` on `priority`. Returns
  // true if a CNP must go out now: the priority's roce_np/enable bit is set and no CNP went to
  // this QP in the last min_time_between_cnps. Time must not go backwards.
  bool on_ce_marked(const DcqcnParams& params, int priority, std::uint64_t now_ns);

  const NpCounters& counters() const { return counters_; }

 private:
  NpCounters counters_;
  bool sent_any_ = false;
  std::uint64_t last_cnp_ns_ = 0;
};

}  // namespace xroce::cc
