// State shared by the three roles of one QP (requester, responder, completer), as rxe_qp holds
// it for rxe_req.c, rxe_resp.c and rxe_comp.c. Internal to engine/transport.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "transport/memory.h"
#include "transport/qp_state.h"
#include "transport/rtt.h"
#include "transport/srq.h"
#include "transport/work.h"
#include "wire/psn.h"

namespace xroce::transport {

// Hooks the congestion-control engine (engine/cc) attaches to a QP's transmit path. The
// transport calls them; it implements no rate control itself.
class CongestionHooks {
 public:
  virtual ~CongestionHooks() = default;
  // Earliest time the next request packet may leave; <= now_ns means now.
  virtual std::uint64_t earliest_send_ns(std::uint64_t now_ns) = 0;
  // A request packet of `bytes` payload left at now_ns; returns whether to mark it ECT.
  virtual bool on_transmit(std::uint64_t now_ns, std::uint32_t bytes) = 0;
  virtual void on_cnp(std::uint64_t now_ns) = 0;        // reaction point input
  virtual void on_ce_marked(std::uint64_t now_ns) = 0;  // notification point input
};

struct QpConfig {
  QpType type = QpType::kRc;
  wire::Qpn qpn;
  std::uint32_t max_send_wr = 256;
  std::uint32_t max_recv_wr = 256;
  std::uint32_t max_send_sge = 8;
  std::uint32_t max_recv_sge = 8;
  std::uint32_t max_inline_data = 256;
  PathMtu port_mtu = PathMtu::k4096;          // bounds UD messages
  std::uint32_t max_msg_bytes = 1u << 31;     // IBA C9-94
  std::uint32_t max_unacked_psns = 128;       // rxe's RXE_MAX_UNACKED_PSNS
  std::uint32_t max_packets_per_ackreq = 64;  // rxe's RXE_MAX_PKT_PER_ACK
  bool sq_sig_all = false;                    // every send WQE completes signaled
  DeviceLimits limits;
};

enum class WqeStage : std::uint8_t { kPosted, kStarted, kDone };

struct SendWqe {
  WorkRequest wr;
  std::vector<std::uint8_t> inline_data;  // copied at post time when send_flags::kInline
  bool is_inline = false;
  WqeStage stage = WqeStage::kPosted;
  wire::Psn first_psn;
  wire::Psn last_psn;
  std::uint32_t length = 0;

  bool is_read() const { return wr.opcode == WrOpcode::kRdmaRead; }
  bool is_atomic() const {
    return wr.opcode == WrOpcode::kAtomicCmpAndSwp || wr.opcode == WrOpcode::kAtomicFetchAndAdd;
  }
  bool is_read_or_atomic() const { return is_read() || is_atomic(); }
};

// Copies between a message's byte offset and a scatter/gather list already checked against the
// MR table. False on an operating failure of the memory.
bool gather(MemoryAccess& mem, std::span<const Sge> sges, std::uint64_t offset,
            std::span<std::uint8_t> out);
bool scatter(MemoryAccess& mem, std::span<const Sge> sges, std::uint64_t offset,
             std::span<const std::uint8_t> in);
// Total bytes an SGE list describes, and whether every SGE passes check_local with `need`.
std::uint64_t sge_bytes(std::span<const Sge> sges);
bool sges_valid(const MemoryRegionTable& mrs, std::span<const Sge> sges, std::uint32_t need);

struct QpContext {
  QpConfig config;
  QpAttr attr;
  QpState state = QpState::kReset;
  MemoryRegionTable* mrs = nullptr;
  Srq* srq = nullptr;
  CongestionHooks* cc = nullptr;

  // Send queue ring; indices grow forever, slot = index % size.
  std::vector<SendWqe> sq;
  std::uint64_t sq_head = 0;  // oldest WQE not yet completed (the completer's)
  std::uint64_t sq_next = 0;  // next WQE the requester transmits from
  std::uint64_t sq_tail = 0;  // next free slot (post_send)
  SendWqe& wqe(std::uint64_t index) { return sq[index % sq.size()]; }

  std::deque<RecvRequest> rq;

  // Requester / completer PSN state (docs/protocol.md §3.1, §3.8).
  wire::Psn req_psn;   // next PSN the requester sends
  wire::Psn comp_psn;  // oldest PSN not yet acknowledged
  wire::Psn psn_high;  // one past the highest PSN ever sent
  std::uint32_t outstanding_rd_atomic = 0;
  std::uint8_t retry_left = 0;
  std::uint8_t rnr_retry_left = 0;
  std::uint64_t retransmit_deadline_ns = 0;  // 0 = disarmed
  std::uint64_t rnr_deadline_ns = 0;         // 0 = not waiting for an RNR timer
  std::uint64_t pacer_deadline_ns = 0;       // 0 = congestion control is not holding packets

  std::deque<Completion> completions;
  std::deque<AsyncEvent> events;
  QpCounters counters;
  RttEstimator rtt;            // the requester times, the completer measures
  bool fatal_pending = false;  // a role found a fatal error; the QP moves to ERR and flushes
  bool sq_drained_reported = false;

  // The payload bytes per packet: the port's MTU for UD; for RC the path MTU, which can never
  // exceed the port's (a larger path_mtu is accepted, as rxe and mlx5 accept it, but packets
  // stay within what the link carries).
  std::uint32_t mtu() const {
    if (config.type == QpType::kUd) return mtu_bytes(config.port_mtu);
    return mtu_bytes(std::min(attr.path_mtu, config.port_mtu));
  }
  bool outstanding() const { return comp_psn != psn_high; }
  void push_send_completion(const SendWqe& w, WcStatus status);
  void restart_retransmit_timer(std::uint64_t now_ns);
};

}  // namespace xroce::transport
