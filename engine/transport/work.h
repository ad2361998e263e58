// What goes into and comes out of a QP: work requests, completions, packets to transmit.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "transport/verbs.h"
#include "wire/headers.h"
#include "wire/types.h"

namespace xroce::transport {

struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  wire::Lkey lkey;
};

// UD destination of a send (ibv_send_wr.wr.ud).
struct UdDestination {
  std::uint32_t av_id = 0;  // address vector handle the port resolves to a FrameAddress
  wire::Qpn remote_qpn;
  wire::Qkey remote_qkey;  // high-order bit set: use the QP's own Q_Key (verbs)
};

// A memory window bind (IBV_WR_BIND_MW, or ibv_bind_mw for a type 1 window): the window's
// current R_Key, the R_Key it takes (its low 8 bits are the consumer's key), and
// ibv_mw_bind_info.
struct WindowBind {
  wire::Rkey window;
  wire::Rkey new_rkey;
  wire::Lkey region;  // ignored for a zero-length (unbinding) bind
  std::uint64_t va = 0;
  std::uint64_t length = 0;
  std::uint32_t access = 0;  // access:: remote flags and kZeroBased
};

// FLUSH's operands beyond remote_addr and rkey (rdma-core v45 ibv_wr_flush: len, type, level).
struct FlushRequest {
  std::uint32_t length = 0;
  std::uint8_t placement = 0;    // wire::flush_placement bits
  std::uint8_t selectivity = 0;  // wire::FlushSelectivity
};

// ibv_send_wr, one at a time.
struct WorkRequest {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  std::uint32_t send_flags = 0;  // send_flags::
  std::vector<Sge> sg_list;
  std::uint32_t imm_data = 0;  // ImmDt value as it goes on the wire
  wire::Rkey invalidate_rkey;  // SEND_WITH_INV
  std::uint64_t remote_addr = 0;
  wire::Rkey rkey;
  std::uint64_t compare_add = 0;  // CmpSwap compare, or FetchAdd add value
  std::uint64_t swap = 0;
  UdDestination ud;
  WindowBind bind;                             // BIND_MW
  std::array<std::uint8_t, 8> atomic_write{};  // ATOMIC_WRITE: the 8 bytes, in memory order
  FlushRequest flush;                          // FLUSH
  std::uint32_t xrc_remote_srqn = 0;           // XRC_SEND: the target XRC SRQ (XRCETH)
};

// ibv_recv_wr.
struct RecvRequest {
  std::uint64_t wr_id = 0;
  std::vector<Sge> sg_list;
};

// ibv_wc. imm_data holds the ImmDt value as on the wire (the provider stores it big-endian).
struct Completion {
  std::uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  std::uint32_t byte_len = 0;
  std::uint32_t imm_data = 0;
  wire::Rkey invalidated_rkey;
  wire::Qpn qp_num;
  wire::Qpn src_qp;
  std::uint32_t wc_flags = 0;  // wc_flags::
  // ibv_wc.sl. On RoCE a UD receive reports the frame's network header type here, as mlx5
  // does (roce_sl::); UCX's UD transport reads it (uct_ud_iface_check_grh).
  std::uint8_t sl = 0;
  bool solicited = false;  // the message carried SE (for solicited-only CQ notification)
  // When the completion was made, in the caller's clock (the latest now_ns the QP was given):
  // IBV_WC_EX_WITH_COMPLETION_TIMESTAMP.
  std::uint64_t timestamp_ns = 0;
  // XRC_RECV receives: the XRC SRQ that supplied the receive WQE. Its CQ takes the completion.
  std::uint32_t xrc_srqn = 0;

  // Receive completions go to the QP's receive CQ, the rest to its send CQ.
  bool is_recv() const { return (static_cast<unsigned>(opcode) & 0x80) != 0; }
};

// One packet the caller must put on the wire: headers, payload_len bytes already written into
// the buffer given to poll_transmit, and where to send it.
struct Transmit {
  wire::TransportHeaders hdr;
  std::uint32_t payload_len = 0;
  std::uint32_t av_id = 0;      // the QP's address vector (RC) or the WR's (UD)
  bool ect = false;             // mark ECT(0): set by the congestion-control hook
  bool retransmission = false;  // a request packet sent before (go-back-N)
};

// Per-packet facts from below the transport headers.
struct RxMeta {
  // The 40-byte GRH area of a UD receive (ibv_grh): for RoCEv2 the port puts the IPv6 header,
  // or the IPv4 header in the last 20 bytes (as rxe does).
  std::array<std::uint8_t, 40> grh{};
  bool ecn_ce = false;  // the IP header arrived with ECN CE (for the notification point)
};

struct AsyncEvent {
  AsyncEventType type;
  wire::Qpn qpn;
};

// Counters a QP keeps; the simulator and `xroce stat` read them.
struct QpCounters {
  std::uint64_t packets_sent = 0;
  std::uint64_t payload_bytes_sent = 0;  // requests and responses, retransmissions included
  std::uint64_t retransmitted_packets = 0;
  std::uint64_t packets_received = 0;
  std::uint64_t payload_bytes_received = 0;
  std::uint64_t naks_sent = 0;  // every NAK kind, RNR included
  std::uint64_t rnr_naks_sent = 0;
  std::uint64_t naks_received = 0;  // every NAK kind, RNR included
  std::uint64_t rnr_naks_received = 0;
  std::uint64_t timeouts = 0;  // Local ACK Timeout expiries that started a retry (retry_cnt)
  // Go-back-N resends the adaptive retransmission timer started (no retry_cnt used).
  std::uint64_t adaptive_retransmits = 0;
  // Of the expiries above (timeouts + adaptive_retransmits), those that came after a go-back-N
  // resend from the same oldest unacknowledged PSN went unanswered: the resent packet, or its
  // answer, was lost too (the responder NAKs a gap once, rxe_resp.c check_psn). The others
  // found the tail of what was sent, its ACK, or the NAK lost.
  std::uint64_t resend_timeouts = 0;
  // Tail probes sent (QpConfig::tail_probe_floor_ns): one packet each, not counted above.
  std::uint64_t tail_probes = 0;
  // Go-back-N resends started at once because a tail probe's own ACK left the PSNs after it
  // unacknowledged (Completer::probe_answered), rather than after the resend probe's timer.
  std::uint64_t probe_gaps = 0;
  // First packets of a go-back-N resend sent a second time (Requester::retry), each also in
  // retransmitted_packets.
  std::uint64_t resend_repeats = 0;
  // READ/ATOMIC retries started because the replay an earlier retry asked for came without the
  // missing PSN (Completer::response_gap), without waiting for a timer.
  std::uint64_t replay_gap_retries = 0;
  // READ responses placed ahead of a gap, and the missing ranges asked for again by a duplicate
  // READ request each (QpConfig::selective_read_repair); each such request is also in
  // retransmitted_packets.
  std::uint64_t read_responses_ahead = 0;
  std::uint64_t read_ranges_asked = 0;
  std::uint64_t duplicate_requests = 0;
  // Replays of a duplicate READ or ATOMIC the responder sent ahead of responses it had queued
  // for later requests (Responder::queue_replay).
  std::uint64_t replays_reordered = 0;
  std::uint64_t out_of_sequence = 0;
  std::uint64_t ghost_acks = 0;  // responses that match no outstanding work
  std::uint64_t dropped = 0;     // packets dropped at the door (state, opcode, Q_Key)
  std::uint64_t ud_no_recv_drops = 0;
  // Receive WQEs the responder found only by asking its ReceiveSource again (posted after the
  // owner's last pull): each one an RNR NAK (or a UD drop) that did not happen.
  std::uint64_t receives_pulled_late = 0;
  std::uint64_t cnps_received = 0;
  std::uint64_t ecn_ce_received = 0;
  // Faults a peer or the application caused, each with what the rules make of it.
  std::uint64_t rkey_violations = 0;        // R_Key, bounds or access refused (NAK remote access)
  std::uint64_t invalid_requests = 0;       // NAK invalid request sent (class C)
  std::uint64_t mw_bind_errors = 0;         // binds refused (IBV_WC_MW_BIND_ERR)
  std::uint64_t uc_dropped_messages = 0;    // UC messages dropped by the responder (class D/E)
  std::uint64_t xrc_domain_violations = 0;  // XRCETH naming an SRQ outside the target's XRCD
};

}  // namespace xroce::transport
