// Verbs-level enums of the transport core. Their numeric values mirror rdma-core's
// <infiniband/verbs.h> (v44) one for one, so the provider maps them with a cast; the pure core
// does not include rdma-core headers (tests/unit/transport/verbs_values_test.cc checks them).
#pragma once

#include <cstdint>

namespace xroce::transport {

// kXrcSend is an XRC initiator (requester only), kXrcRecv an XRC target (responder only).
enum class QpType : std::uint8_t { kRc = 2, kUc = 3, kUd = 4, kXrcSend = 9, kXrcRecv = 10 };

enum class QpState : std::uint8_t {
  kReset = 0,
  kInit = 1,
  kRtr = 2,
  kRts = 3,
  kSqd = 4,
  kSqe = 5,
  kErr = 6,
};
const char* to_string(QpState s);

enum class WcStatus : std::uint8_t {
  kSuccess = 0,
  kLocLenErr = 1,
  kLocQpOpErr = 2,
  kLocEecOpErr = 3,
  kLocProtErr = 4,
  kWrFlushErr = 5,
  kMwBindErr = 6,
  kBadRespErr = 7,
  kLocAccessErr = 8,
  kRemInvReqErr = 9,
  kRemAccessErr = 10,
  kRemOpErr = 11,
  kRetryExcErr = 12,
  kRnrRetryExcErr = 13,
  kLocRddViolErr = 14,
  kRemInvRdReqErr = 15,
  kRemAbortErr = 16,
  kInvEecnErr = 17,
  kInvEecStateErr = 18,
  kFatalErr = 19,
  kRespTimeoutErr = 20,
  kGeneralErr = 21,
};
const char* to_string(WcStatus s);

enum class WcOpcode : std::uint8_t {
  kSend = 0,
  kRdmaWrite = 1,
  kRdmaRead = 2,
  kCompSwap = 3,
  kFetchAdd = 4,
  kBindMw = 5,
  kLocalInv = 6,
  kFlush = 8,  // rdma-core v45's IBV_WC_FLUSH (v44 has no FLUSH verb)
  kAtomicWrite = 9,
  kRecv = 1 << 7,
  kRecvRdmaWithImm = (1 << 7) + 1,
};

enum class WrOpcode : std::uint8_t {
  kRdmaWrite = 0,
  kRdmaWriteWithImm = 1,
  kSend = 2,
  kSendWithImm = 3,
  kRdmaRead = 4,
  kAtomicCmpAndSwp = 5,
  kAtomicFetchAndAdd = 6,
  kLocalInv = 7,
  kBindMw = 8,
  kSendWithInv = 9,
  kFlush = 14,  // rdma-core v45's IBV_WR_FLUSH (v44 has no FLUSH verb)
  kAtomicWrite = 15,
};

// Flag words stay plain integers because they cross the provider ABI as ibv_* masks; the
// named constants below are the only way the core spells them.
namespace wc_flags {
inline constexpr std::uint32_t kGrh = 1u << 0;
inline constexpr std::uint32_t kWithImm = 1u << 1;
inline constexpr std::uint32_t kWithInv = 1u << 3;
}  // namespace wc_flags

// The ibv_wc.sl of a RoCE UD receive: the network header type in the layout of mlx5's CQE
// (the roce packet type UCX's uct_ud_iface_check_grh documents from the PRM): bits 2:0 the L3
// header (1 IPv6, 2 IPv4), bit 3 set when the frame carries a UDP header (RoCE v2). A17.4.5.1:
// a RoCE v2 UD completion tells whether the datagram came over IPv4 or IPv6.
namespace roce_sl {
inline constexpr std::uint8_t kUdp = 1u << 3;
inline constexpr std::uint8_t kL3Ipv6 = 1;
inline constexpr std::uint8_t kL3Ipv4 = 2;
inline constexpr std::uint8_t kUdpIpv6 = kUdp | kL3Ipv6;
inline constexpr std::uint8_t kUdpIpv4 = kUdp | kL3Ipv4;
}  // namespace roce_sl

namespace send_flags {
inline constexpr std::uint32_t kFence = 1u << 0;
inline constexpr std::uint32_t kSignaled = 1u << 1;
inline constexpr std::uint32_t kSolicited = 1u << 2;
inline constexpr std::uint32_t kInline = 1u << 3;
}  // namespace send_flags

namespace access {
inline constexpr std::uint32_t kLocalWrite = 1u << 0;
inline constexpr std::uint32_t kRemoteWrite = 1u << 1;
inline constexpr std::uint32_t kRemoteRead = 1u << 2;
inline constexpr std::uint32_t kRemoteAtomic = 1u << 3;
inline constexpr std::uint32_t kMwBind = 1u << 4;
inline constexpr std::uint32_t kZeroBased = 1u << 5;  // memory windows: VAs are window offsets
inline constexpr std::uint32_t kOnDemand = 1u << 6;
// rdma-core v45's IBV_ACCESS_FLUSH_GLOBAL / _PERSISTENT: a region FLUSH may target.
inline constexpr std::uint32_t kFlushGlobal = 1u << 8;
inline constexpr std::uint32_t kFlushPersistent = 1u << 9;
}  // namespace access

// ibv_mw_type.
enum class MwType : std::uint8_t { kType1 = 1, kType2 = 2 };

namespace qp_attr {
inline constexpr std::uint32_t kState = 1u << 0;
inline constexpr std::uint32_t kCurState = 1u << 1;
inline constexpr std::uint32_t kEnSqdAsyncNotify = 1u << 2;
inline constexpr std::uint32_t kAccessFlags = 1u << 3;
inline constexpr std::uint32_t kPkeyIndex = 1u << 4;
inline constexpr std::uint32_t kPort = 1u << 5;
inline constexpr std::uint32_t kQkey = 1u << 6;
inline constexpr std::uint32_t kAv = 1u << 7;
inline constexpr std::uint32_t kPathMtu = 1u << 8;
inline constexpr std::uint32_t kTimeout = 1u << 9;
inline constexpr std::uint32_t kRetryCnt = 1u << 10;
inline constexpr std::uint32_t kRnrRetry = 1u << 11;
inline constexpr std::uint32_t kRqPsn = 1u << 12;
inline constexpr std::uint32_t kMaxQpRdAtomic = 1u << 13;
inline constexpr std::uint32_t kAltPath = 1u << 14;
inline constexpr std::uint32_t kMinRnrTimer = 1u << 15;
inline constexpr std::uint32_t kSqPsn = 1u << 16;
inline constexpr std::uint32_t kMaxDestRdAtomic = 1u << 17;
inline constexpr std::uint32_t kPathMigState = 1u << 18;
inline constexpr std::uint32_t kCap = 1u << 19;
inline constexpr std::uint32_t kDestQpn = 1u << 20;
inline constexpr std::uint32_t kRateLimit = 1u << 25;
}  // namespace qp_attr

// ibv_mtu: 1..5 = 256..4096 bytes of payload per packet.
enum class PathMtu : std::uint8_t { k256 = 1, k512 = 2, k1024 = 3, k2048 = 4, k4096 = 5 };
constexpr std::uint32_t mtu_bytes(PathMtu m) {
  return 128u << static_cast<unsigned>(m);
}
static_assert(mtu_bytes(PathMtu::k256) == 256 && mtu_bytes(PathMtu::k4096) == 4096);

enum class AsyncEventType : std::uint8_t {
  kQpFatal = 1,
  kQpReqErr = 2,
  kQpAccessErr = 3,
  kCommEst = 4,
  kSqDrained = 5,
  kSrqErr = 14,
  kSrqLimitReached = 15,
  kQpLastWqeReached = 16,
};

}  // namespace xroce::transport
