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
  std::uint64_t timeouts = 0;
  std::uint64_t duplicate_requests = 0;
  std::uint64_t out_of_sequence = 0;
  std::uint64_t ghost_acks = 0;  // responses that match no outstanding work
  std::uint64_t dropped = 0;     // packets dropped at the door (state, opcode, Q_Key)
  std::uint64_t ud_no_recv_drops = 0;
  std::uint64_t cnps_received = 0;
  std::uint64_t ecn_ce_received = 0;
  std::uint64_t remote_access_errors = 0;  // responder: requests NAKed for a remote access error
};

}  // namespace xroce::transport
