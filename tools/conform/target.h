// The two sides a conformance case talks to.
//
// Target: the device under test, as its agent drives it through verbs (create a QP and bring it
// to RTS, register memory, post work, poll completions, read async events). On the wire the
// agent is tools/conform/agent (an ibverbs program), reached over TCP; in-process it is
// engine/transport itself (inprocess.h).
//
// Link: the wire between the scripted peer and the target, carrying whole Ethernet frames and
// owning time: real time on the wire, a virtual clock in-process (so ACK timeouts and RNR
// timers cost nothing there).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wire/frame_layout.h"

namespace xroce::conform {

using Frame = std::vector<std::uint8_t>;

// What the device says it does; a case that needs more is "not applicable".
struct Capabilities {
  std::string name;            // "xroce (in-process transport)", "rxe0", ...
  bool atomics = true;         // IBV_ATOMIC_HCA or better
  bool generates_cnp = false;  // answers ECN CE with a CNP (DCQCN notification point)
  bool ud = true;
  bool checks_icrc = true;              // counts and drops a bad ICRC
  std::uint32_t port_mtu_bytes = 1024;  // the port's active MTU, which bounds UD messages
};

// ibv_access_flags values.
namespace access {
inline constexpr std::uint32_t kLocalWrite = 1u << 0;
inline constexpr std::uint32_t kRemoteWrite = 1u << 1;
inline constexpr std::uint32_t kRemoteRead = 1u << 2;
inline constexpr std::uint32_t kRemoteAtomic = 1u << 3;
inline constexpr std::uint32_t kAllRemote =
    kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic;
}  // namespace access

enum class QpKind : std::uint8_t { kRc, kUd };

// The attributes a case gives the target's QP (ibv_modify_qp through INIT, RTR, RTS).
struct QpSpec {
  QpKind kind = QpKind::kRc;
  std::uint32_t peer_qpn = 0;     // RC: dest_qp_num
  std::uint32_t sq_psn = 0x2000;  // the target's first request PSN
  std::uint32_t rq_psn = 0x1000;  // the PSN the target expects from the peer
  std::uint32_t mtu_bytes = 1024;
  std::uint8_t timeout = 14;  // 4.096 us << timeout
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;
  std::uint8_t min_rnr_timer = 1;  // IBA table 45 code
  std::uint8_t max_rd_atomic = 4;
  std::uint8_t max_dest_rd_atomic = 4;
  std::uint32_t access = access::kAllRemote;  // qp_access_flags
  std::uint32_t qkey = 0x11111111;            // UD
};

struct QpInfo {
  std::uint32_t id = 0;   // the agent's handle
  std::uint32_t qpn = 0;  // on the wire
};

struct MrInfo {
  std::uint32_t id = 0;
  std::uint64_t addr = 0;  // the agent's virtual address: the VA a peer puts in a RETH
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
};

// ibv_wr_opcode values.
enum class WrOp : std::uint8_t {
  kWrite = 0,
  kWriteImm = 1,
  kSend = 2,
  kSendImm = 3,
  kRead = 4,
  kCmpSwap = 5,
  kFetchAdd = 6,
};

struct SendSpec {
  std::uint64_t wr_id = 0;
  WrOp op = WrOp::kSend;
  std::uint32_t mr = 0;  // local buffer: MR id, offset, length (length 0: no SGE)
  std::uint32_t offset = 0;
  std::uint32_t length = 0;
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t imm = 0;
  std::uint64_t compare_add = 0;
  std::uint64_t swap = 0;
  std::uint32_t ud_remote_qpn = 0;  // UD: the peer's QPN and Q_Key
  std::uint32_t ud_remote_qkey = 0;
};

// ibv_wc, as much as the cases read. status and opcode hold ibv_wc_status / ibv_wc_opcode.
struct Cqe {
  std::uint64_t wr_id = 0;
  std::uint32_t status = 0;
  std::uint32_t opcode = 0;
  std::uint32_t byte_len = 0;
  std::uint32_t imm = 0;
  std::uint32_t src_qp = 0;
  std::uint32_t wc_flags = 0;
  bool is_recv() const { return (opcode & 0x80) != 0; }
};

// ibv_wc_status values the cases name.
namespace wc {
inline constexpr std::uint32_t kSuccess = 0;
inline constexpr std::uint32_t kLocLenErr = 1;
inline constexpr std::uint32_t kWrFlushErr = 5;
inline constexpr std::uint32_t kBadRespErr = 7;
inline constexpr std::uint32_t kRemInvReqErr = 9;
inline constexpr std::uint32_t kRemAccessErr = 10;
inline constexpr std::uint32_t kRemOpErr = 11;
inline constexpr std::uint32_t kRetryExcErr = 12;
inline constexpr std::uint32_t kRnrRetryExcErr = 13;
const char* status_name(std::uint32_t status);
}  // namespace wc

class Target {
 public:
  virtual ~Target() = default;
  virtual Capabilities capabilities() = 0;
  // Creates a QP and brings it to RTS (RC: connected to spec.peer_qpn at the peer's address).
  virtual QpInfo create_qp(const QpSpec& spec) = 0;
  virtual void destroy_qp(const QpInfo& qp) = 0;
  virtual MrInfo register_mr(std::uint32_t length, std::uint32_t access) = 0;
  virtual void write_mr(const MrInfo& mr, std::uint32_t offset,
                        const std::vector<std::uint8_t>& data) = 0;
  virtual std::vector<std::uint8_t> read_mr(const MrInfo& mr, std::uint32_t offset,
                                            std::uint32_t length) = 0;
  virtual void post_recv(const QpInfo& qp, std::uint64_t wr_id, const MrInfo& mr,
                         std::uint32_t offset, std::uint32_t length) = 0;
  virtual void post_send(const QpInfo& qp, const SendSpec& wr) = 0;
  // Completions of the QP's CQ (send and receive) that have arrived; never blocks.
  virtual std::vector<Cqe> poll(const QpInfo& qp) = 0;
  // Whether the QP has gone to the error state (ibv_query_qp).
  virtual bool in_error(const QpInfo& qp) = 0;
};

class Link {
 public:
  virtual ~Link() = default;
  virtual std::uint64_t now_ns() = 0;
  virtual void send(const Frame& frame) = 0;
  // The next frame from the target, or nullopt once now_ns() reaches deadline_ns. On the wire,
  // only frames from the target's address to the peer's.
  virtual std::optional<Frame> receive(std::uint64_t deadline_ns) = 0;
  // Lets time pass (and the target act) until deadline_ns without taking frames.
  virtual void idle_until(std::uint64_t deadline_ns) = 0;
};

// Where the peer is and where the target is, for the frames the peer builds.
struct Endpoints {
  wire::MacAddr peer_mac{};
  wire::MacAddr target_mac{};
  wire::IpAddr peer_ip;
  wire::IpAddr target_ip;
};

}  // namespace xroce::conform
