// The IB Communication Manager's messages (IBA vol. 1 ch. 12.6) and the MAD that carries them
// on the GSI QP (QP1): encode to and decode from the 256-byte MAD, nothing else.
//
// Layout facts, all big-endian with IBA bit numbering (the first bit of a field is its most
// significant): a MAD is a 24-byte common header (IBA 13.4.2) followed by 232 bytes of CM data.
// Offsets below are into the CM data. A private data field always travels whole (IBA 12.6:
// the unused tail is zeros); the consumer's length is not on the wire.
//
// Decoding is the door: decode_cm_mad() checks the header (base version 1, class 0x07, class
// version 2, method Send) and the attribute, and returns a typed message or an error; code after
// it may rely on every field being in range.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <variant>

#include "wire/result.h"
#include "wire/types.h"

namespace xroce::cm {

using Gid = std::array<std::uint8_t, 16>;

inline constexpr std::size_t kMadBytes = 256;
inline constexpr std::size_t kMadHeaderBytes = 24;
inline constexpr std::size_t kCmDataBytes = kMadBytes - kMadHeaderBytes;
using MadBuffer = std::array<std::uint8_t, kMadBytes>;

inline constexpr std::uint8_t kMadBaseVersion = 1;
inline constexpr std::uint8_t kMgmtClassCm = 0x07;    // IBA 13.4.4: Communication Management
inline constexpr std::uint8_t kCmClassVersion = 2;    // IBA 12.6.1
inline constexpr std::uint8_t kMadMethodSend = 0x03;  // CM messages are all SubnAdm-style Sends
inline constexpr std::uint32_t kGsiQpn = 1;           // IBA 9.2.2 (QP1); Q_Key wire::kGsiQkey
using wire::kDefaultPkey;

// IBA 12.6.1 table 104 (CM attribute IDs).
enum class AttrId : std::uint16_t {
  kClassPortInfo = 0x0001,
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
  kLap = 0x0019,
  kApr = 0x001a,
};

// Private data field sizes (IBA 12.6.5 .. 12.6.11, 12.11).
inline constexpr std::size_t kReqPrivateBytes = 92;
inline constexpr std::size_t kMraPrivateBytes = 222;
inline constexpr std::size_t kRejPrivateBytes = 148;
inline constexpr std::size_t kRepPrivateBytes = 196;
inline constexpr std::size_t kRtuPrivateBytes = 224;
inline constexpr std::size_t kDreqPrivateBytes = 220;
inline constexpr std::size_t kDrepPrivateBytes = 224;
inline constexpr std::size_t kSidrReqPrivateBytes = 216;
inline constexpr std::size_t kSidrRepPrivateBytes = 136;
inline constexpr std::size_t kRejAriBytes = 72;
inline constexpr std::size_t kSidrRepInfoBytes = 72;

// REQ "Transport Service Type" (IBA 12.6.5).
enum class TransportService : std::uint8_t { kRc = 0, kUc = 1, kRd = 2, kXrc = 3 };

// The path a REQ describes (IBA 12.6.5, primary or alternate): from the sender's view.
struct CmPath {
  std::uint16_t local_lid = 0;
  std::uint16_t remote_lid = 0;
  Gid local_gid{};
  Gid remote_gid{};
  std::uint32_t flow_label = 0;  // 20 bits
  std::uint8_t packet_rate = 0;  // 6 bits, IB rate encoding
  std::uint8_t traffic_class = 0;
  std::uint8_t hop_limit = 0;
  std::uint8_t sl = 0;  // 4 bits
  bool subnet_local = false;
  std::uint8_t local_ack_timeout = 0;  // 5 bits, 4.096 us * 2^n
  bool operator==(const CmPath&) const = default;
};

struct ReqMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t vendor_id = 0;  // 24 bits (ECE, in the REQ's reserved word); 0: none
  std::uint64_t service_id = 0;
  std::uint64_t local_ca_guid = 0;  // host byte order of the big-endian wire value
  std::uint32_t local_qkey = 0;
  std::uint32_t local_qpn = 0;  // 24 bits
  std::uint8_t responder_resources = 0;
  std::uint32_t local_eecn = 0;  // 24 bits
  std::uint8_t initiator_depth = 0;
  std::uint32_t remote_eecn = 0;                // 24 bits
  std::uint8_t remote_cm_response_timeout = 0;  // 5 bits
  TransportService transport = TransportService::kRc;
  bool end_to_end_flow_control = false;
  std::uint32_t starting_psn = 0;              // 24 bits
  std::uint8_t local_cm_response_timeout = 0;  // 5 bits
  std::uint8_t retry_count = 0;                // 3 bits
  std::uint16_t pkey = kDefaultPkey;
  std::uint8_t path_mtu = 0;  // 4 bits, ibv_mtu encoding (1 = 256 .. 5 = 4096)
  bool rdc_exists = false;
  std::uint8_t rnr_retry_count = 0;  // 3 bits
  std::uint8_t max_cm_retries = 0;   // 4 bits
  bool srq = false;
  std::uint8_t extended_transport = 0;  // 3 bits
  CmPath primary;
  std::optional<CmPath> alternate;  // present when its LIDs or GIDs are not all zero
  std::array<std::uint8_t, kReqPrivateBytes> private_data{};
  bool operator==(const ReqMsg&) const = default;
};

// Which message an MRA or REJ refers to (IBA 12.6.6, 12.6.7).
enum class MessageRef : std::uint8_t { kReq = 0, kRep = 1, kLap = 2, kOther = 3 };

struct MraMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  MessageRef message = MessageRef::kReq;
  std::uint8_t service_timeout = 0;  // 5 bits
  std::array<std::uint8_t, kMraPrivateBytes> private_data{};
  bool operator==(const MraMsg&) const = default;
};

struct RejMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  MessageRef message = MessageRef::kReq;
  std::uint8_t ari_length = 0;  // 7 bits
  std::uint16_t reason = 0;     // RejReason values, or others a peer sends
  std::array<std::uint8_t, kRejAriBytes> ari{};
  std::array<std::uint8_t, kRejPrivateBytes> private_data{};
  bool operator==(const RejMsg&) const = default;
};

struct RepMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::uint32_t local_qkey = 0;
  std::uint32_t local_qpn = 0;   // 24 bits
  std::uint32_t local_eecn = 0;  // 24 bits
  std::uint32_t starting_psn = 0;
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t target_ack_delay = 0;   // 5 bits
  std::uint8_t failover_accepted = 0;  // 2 bits
  bool end_to_end_flow_control = false;
  std::uint8_t rnr_retry_count = 0;  // 3 bits
  bool srq = false;
  std::uint64_t local_ca_guid = 0;
  std::array<std::uint8_t, kRepPrivateBytes> private_data{};
  bool operator==(const RepMsg&) const = default;
};

struct RtuMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::array<std::uint8_t, kRtuPrivateBytes> private_data{};
  bool operator==(const RtuMsg&) const = default;
};

struct DreqMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::uint32_t remote_qpn = 0;  // 24 bits: the receiver's QPN
  std::array<std::uint8_t, kDreqPrivateBytes> private_data{};
  bool operator==(const DreqMsg&) const = default;
};

struct DrepMsg {
  std::uint32_t local_comm_id = 0;
  std::uint32_t remote_comm_id = 0;
  std::array<std::uint8_t, kDrepPrivateBytes> private_data{};
  bool operator==(const DrepMsg&) const = default;
};

struct SidrReqMsg {
  std::uint32_t request_id = 0;
  std::uint16_t pkey = kDefaultPkey;
  std::uint64_t service_id = 0;
  std::array<std::uint8_t, kSidrReqPrivateBytes> private_data{};
  bool operator==(const SidrReqMsg&) const = default;
};

// SIDR_REP status (IBA 12.11.2 table 117).
enum class SidrStatus : std::uint8_t {
  kValid = 0,
  kServiceIdNotSupported = 1,
  kRejected = 2,
  kNoQp = 3,
  kRedirect = 4,
  kVersionNotSupported = 5,
};

struct SidrRepMsg {
  std::uint32_t request_id = 0;
  SidrStatus status = SidrStatus::kValid;
  std::uint8_t additional_info_length = 0;
  std::uint32_t qpn = 0;  // 24 bits
  std::uint64_t service_id = 0;
  std::uint32_t qkey = 0;
  std::array<std::uint8_t, kSidrRepInfoBytes> class_port_info{};
  std::array<std::uint8_t, kSidrRepPrivateBytes> private_data{};
  bool operator==(const SidrRepMsg&) const = default;
};

// REJ reasons (IBA 12.6.7.2 table 106), the ones this CM sends or names in counters.
enum class RejReason : std::uint16_t {
  kNoQp = 1,
  kNoEec = 2,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupportedRequest = 5,
  kInvalidCommId = 6,
  kInvalidCommInstance = 7,
  kInvalidServiceId = 8,
  kInvalidTransportType = 9,
  kStaleConnection = 10,
  kRdcNotExist = 11,
  kInvalidGid = 12,
  kInvalidLid = 13,
  kInvalidSl = 14,
  kInvalidTrafficClass = 15,
  kInvalidHopLimit = 16,
  kInvalidPacketRate = 17,
  kInvalidAltGid = 18,
  kInvalidAltLid = 19,
  kInvalidAltSl = 20,
  kInvalidAltTrafficClass = 21,
  kInvalidAltHopLimit = 22,
  kInvalidAltPacketRate = 23,
  kPortCmRedirect = 24,
  kPortRedirect = 25,
  kInvalidMtu = 26,
  kInsufficientRespResources = 27,
  kConsumerDefined = 28,
  kInvalidRnrRetry = 29,
  kDuplicateLocalCommId = 30,
  kInvalidClassVersion = 31,
  kInvalidFlowLabel = 32,
  kInvalidAltFlowLabel = 33,
  kVendorOptionNotSupported = 35,
};
inline constexpr std::uint16_t kMaxRejReason = 35;
// A short name for counters and `xroce cm show` ("timeout", "invalid_service_id", ...), or
// nullptr for reasons outside table 106.
const char* rej_reason_name(std::uint16_t reason);

using CmMessage =
    std::variant<ReqMsg, MraMsg, RejMsg, RepMsg, RtuMsg, DreqMsg, DrepMsg, SidrReqMsg, SidrRepMsg>;

AttrId attr_id_of(const CmMessage& message);
const char* message_name(const CmMessage& message);  // "REQ", "REP", ...

struct CmMad {
  std::uint64_t transaction_id = 0;
  CmMessage message;
};

enum class MadError : std::uint8_t {
  kTooShort,
  kBadBaseVersion,
  kNotCm,  // management class other than CM
  kBadClassVersion,
  kBadMethod,
  kUnsupportedAttr,  // ClassPortInfo, LAP, APR and unknown attributes
};
const char* to_string(MadError error);

// The MAD: header (method Send, status 0, attribute modifier 0) and the message.
MadBuffer encode_cm_mad(std::uint64_t transaction_id, const CmMessage& message);
wire::Result<CmMad, MadError> decode_cm_mad(std::span<const std::uint8_t> mad);

}  // namespace xroce::cm
