#include "cm/mad.h"

#include <algorithm>
#include <cstring>

#include "wire/byteorder.h"

namespace xroce::cm {
namespace {

using wire::load_be16;
using wire::load_be24;
using wire::load_be32;
using wire::load_be64;
using wire::store_be16;
using wire::store_be24;
using wire::store_be32;
using wire::store_be64;

// Offsets into the CM data (after the 24-byte MAD header), IBA 12.6.
namespace req {
constexpr std::size_t kLocalCommId = 0, kVendorId = 5, kServiceId = 8, kCaGuid = 16, kQkey = 28,
                      kQpn = 32, kEecn = 36, kRemoteEecn = 40, kPsn = 44, kPkey = 48, kMtuByte = 50,
                      kRetriesByte = 51, kPrimary = 52, kAlternate = 96, kPrivate = 140;
}  // namespace req
// A path within the REQ, relative to kPrimary/kAlternate.
namespace path {
constexpr std::size_t kLocalLid = 0, kRemoteLid = 2, kLocalGid = 4, kRemoteGid = 20, kFlowRate = 36,
                      kTrafficClass = 40, kHopLimit = 41, kSlByte = 42, kAckByte = 43, kBytes = 44;
}  // namespace path

void put_path(std::uint8_t* p, const CmPath& path) {
  store_be16(p + path::kLocalLid, path.local_lid);
  store_be16(p + path::kRemoteLid, path.remote_lid);
  std::memcpy(p + path::kLocalGid, path.local_gid.data(), 16);
  std::memcpy(p + path::kRemoteGid, path.remote_gid.data(), 16);
  // Flow Label (20) | Reserved (6) | Packet Rate (6).
  store_be32(p + path::kFlowRate, (path.flow_label & 0xfffff) << 12 | (path.packet_rate & 0x3f));
  p[path::kTrafficClass] = path.traffic_class;
  p[path::kHopLimit] = path.hop_limit;
  // SL (4) | Subnet Local (1) | Reserved (3); Local ACK Timeout (5) | Reserved (3).
  p[path::kSlByte] = static_cast<std::uint8_t>((path.sl & 0xf) << 4 | (path.subnet_local ? 8 : 0));
  p[path::kAckByte] = static_cast<std::uint8_t>((path.local_ack_timeout & 0x1f) << 3);
}

CmPath get_path(const std::uint8_t* p) {
  CmPath path;
  path.local_lid = load_be16(p + path::kLocalLid);
  path.remote_lid = load_be16(p + path::kRemoteLid);
  std::memcpy(path.local_gid.data(), p + path::kLocalGid, 16);
  std::memcpy(path.remote_gid.data(), p + path::kRemoteGid, 16);
  const std::uint32_t flow_rate = load_be32(p + path::kFlowRate);
  path.flow_label = flow_rate >> 12;
  path.packet_rate = flow_rate & 0x3f;
  path.traffic_class = p[path::kTrafficClass];
  path.hop_limit = p[path::kHopLimit];
  path.sl = p[path::kSlByte] >> 4;
  path.subnet_local = (p[path::kSlByte] & 8) != 0;
  path.local_ack_timeout = p[path::kAckByte] >> 3;
  return path;
}

bool path_present(const std::uint8_t* p) {
  return std::any_of(p, p + path::kBytes, [](std::uint8_t b) { return b != 0; });
}

// A 24-bit value in the top of a 32-bit word whose low byte is `low`.
void put24_8(std::uint8_t* p, std::uint32_t high24, std::uint8_t low) {
  store_be24(p, high24 & 0xffffff);
  p[3] = low;
}

template <std::size_t N>
void put_bytes(std::uint8_t* p, const std::array<std::uint8_t, N>& a) {
  std::memcpy(p, a.data(), N);
}
template <std::size_t N>
void get_bytes(std::array<std::uint8_t, N>& a, const std::uint8_t* p) {
  std::memcpy(a.data(), p, N);
}

void encode_req(std::uint8_t* d, const ReqMsg& m) {
  store_be32(d + req::kLocalCommId, m.local_comm_id);
  store_be24(d + req::kVendorId, m.vendor_id & 0xffffff);
  store_be64(d + req::kServiceId, m.service_id);
  store_be64(d + req::kCaGuid, m.local_ca_guid);
  store_be32(d + req::kQkey, m.local_qkey);
  put24_8(d + req::kQpn, m.local_qpn, m.responder_resources);
  put24_8(d + req::kEecn, m.local_eecn, m.initiator_depth);
  put24_8(d + req::kRemoteEecn, m.remote_eecn,
          static_cast<std::uint8_t>((m.remote_cm_response_timeout & 0x1f) << 3 |
                                    (static_cast<std::uint8_t>(m.transport) & 3) << 1 |
                                    (m.end_to_end_flow_control ? 1 : 0)));
  put24_8(
      d + req::kPsn, m.starting_psn,
      static_cast<std::uint8_t>((m.local_cm_response_timeout & 0x1f) << 3 | (m.retry_count & 7)));
  store_be16(d + req::kPkey, m.pkey);
  d[req::kMtuByte] = static_cast<std::uint8_t>((m.path_mtu & 0xf) << 4 | (m.rdc_exists ? 8 : 0) |
                                               (m.rnr_retry_count & 7));
  d[req::kRetriesByte] = static_cast<std::uint8_t>((m.max_cm_retries & 0xf) << 4 | (m.srq ? 8 : 0) |
                                                   (m.extended_transport & 7));
  put_path(d + req::kPrimary, m.primary);
  if (m.alternate) put_path(d + req::kAlternate, *m.alternate);
  put_bytes(d + req::kPrivate, m.private_data);
}

ReqMsg decode_req(const std::uint8_t* d) {
  ReqMsg m;
  m.local_comm_id = load_be32(d + req::kLocalCommId);
  m.vendor_id = load_be24(d + req::kVendorId);
  m.service_id = load_be64(d + req::kServiceId);
  m.local_ca_guid = load_be64(d + req::kCaGuid);
  m.local_qkey = load_be32(d + req::kQkey);
  m.local_qpn = load_be24(d + req::kQpn);
  m.responder_resources = d[req::kQpn + 3];
  m.local_eecn = load_be24(d + req::kEecn);
  m.initiator_depth = d[req::kEecn + 3];
  m.remote_eecn = load_be24(d + req::kRemoteEecn);
  const std::uint8_t b43 = d[req::kRemoteEecn + 3];
  m.remote_cm_response_timeout = b43 >> 3;
  m.transport = static_cast<TransportService>((b43 >> 1) & 3);
  m.end_to_end_flow_control = (b43 & 1) != 0;
  m.starting_psn = load_be24(d + req::kPsn);
  const std::uint8_t b47 = d[req::kPsn + 3];
  m.local_cm_response_timeout = b47 >> 3;
  m.retry_count = b47 & 7;
  m.pkey = load_be16(d + req::kPkey);
  m.path_mtu = d[req::kMtuByte] >> 4;
  m.rdc_exists = (d[req::kMtuByte] & 8) != 0;
  m.rnr_retry_count = d[req::kMtuByte] & 7;
  m.max_cm_retries = d[req::kRetriesByte] >> 4;
  m.srq = (d[req::kRetriesByte] & 8) != 0;
  m.extended_transport = d[req::kRetriesByte] & 7;
  m.primary = get_path(d + req::kPrimary);
  if (path_present(d + req::kAlternate)) m.alternate = get_path(d + req::kAlternate);
  get_bytes(m.private_data, d + req::kPrivate);
  return m;
}

void encode_ids(std::uint8_t* d, std::uint32_t local, std::uint32_t remote) {
  store_be32(d, local);
  store_be32(d + 4, remote);
}

void encode_mra(std::uint8_t* d, const MraMsg& m) {
  encode_ids(d, m.local_comm_id, m.remote_comm_id);
  d[8] = static_cast<std::uint8_t>(static_cast<std::uint8_t>(m.message) << 6);
  d[9] = static_cast<std::uint8_t>((m.service_timeout & 0x1f) << 3);
  put_bytes(d + 10, m.private_data);
}
MraMsg decode_mra(const std::uint8_t* d) {
  MraMsg m;
  m.local_comm_id = load_be32(d);
  m.remote_comm_id = load_be32(d + 4);
  m.message = static_cast<MessageRef>(d[8] >> 6);
  m.service_timeout = d[9] >> 3;
  get_bytes(m.private_data, d + 10);
  return m;
}

void encode_rej(std::uint8_t* d, const RejMsg& m) {
  encode_ids(d, m.local_comm_id, m.remote_comm_id);
  d[8] = static_cast<std::uint8_t>(static_cast<std::uint8_t>(m.message) << 6);
  d[9] = static_cast<std::uint8_t>((m.ari_length & 0x7f) << 1);
  store_be16(d + 10, m.reason);
  put_bytes(d + 12, m.ari);
  put_bytes(d + 84, m.private_data);
}
RejMsg decode_rej(const std::uint8_t* d) {
  RejMsg m;
  m.local_comm_id = load_be32(d);
  m.remote_comm_id = load_be32(d + 4);
  m.message = static_cast<MessageRef>(d[8] >> 6);
  m.ari_length = d[9] >> 1;
  m.reason = load_be16(d + 10);
  get_bytes(m.ari, d + 12);
  get_bytes(m.private_data, d + 84);
  return m;
}

void encode_rep(std::uint8_t* d, const RepMsg& m) {
  encode_ids(d, m.local_comm_id, m.remote_comm_id);
  store_be32(d + 8, m.local_qkey);
  put24_8(d + 12, m.local_qpn, 0);
  put24_8(d + 16, m.local_eecn, 0);
  put24_8(d + 20, m.starting_psn, 0);
  d[24] = m.responder_resources;
  d[25] = m.initiator_depth;
  // Target ACK Delay (5) | Failover Accepted (2) | End-to-End Flow Control (1).
  d[26] =
      static_cast<std::uint8_t>((m.target_ack_delay & 0x1f) << 3 | (m.failover_accepted & 3) << 1 |
                                (m.end_to_end_flow_control ? 1 : 0));
  // RNR Retry Count (3) | SRQ (1) | Reserved (4).
  d[27] = static_cast<std::uint8_t>((m.rnr_retry_count & 7) << 5 | (m.srq ? 0x10 : 0));
  store_be64(d + 28, m.local_ca_guid);
  put_bytes(d + 36, m.private_data);
}
RepMsg decode_rep(const std::uint8_t* d) {
  RepMsg m;
  m.local_comm_id = load_be32(d);
  m.remote_comm_id = load_be32(d + 4);
  m.local_qkey = load_be32(d + 8);
  m.local_qpn = load_be24(d + 12);
  m.local_eecn = load_be24(d + 16);
  m.starting_psn = load_be24(d + 20);
  m.responder_resources = d[24];
  m.initiator_depth = d[25];
  m.target_ack_delay = d[26] >> 3;
  m.failover_accepted = (d[26] >> 1) & 3;
  m.end_to_end_flow_control = (d[26] & 1) != 0;
  m.rnr_retry_count = d[27] >> 5;
  m.srq = (d[27] & 0x10) != 0;
  m.local_ca_guid = load_be64(d + 28);
  get_bytes(m.private_data, d + 36);
  return m;
}

void encode_sidr_req(std::uint8_t* d, const SidrReqMsg& m) {
  store_be32(d, m.request_id);
  store_be16(d + 4, m.pkey);
  store_be64(d + 8, m.service_id);
  put_bytes(d + 16, m.private_data);
}
SidrReqMsg decode_sidr_req(const std::uint8_t* d) {
  SidrReqMsg m;
  m.request_id = load_be32(d);
  m.pkey = load_be16(d + 4);
  m.service_id = load_be64(d + 8);
  get_bytes(m.private_data, d + 16);
  return m;
}

void encode_sidr_rep(std::uint8_t* d, const SidrRepMsg& m) {
  store_be32(d, m.request_id);
  d[4] = static_cast<std::uint8_t>(m.status);
  d[5] = m.additional_info_length;
  put24_8(d + 8, m.qpn, 0);
  store_be64(d + 12, m.service_id);
  store_be32(d + 20, m.qkey);
  put_bytes(d + 24, m.class_port_info);
  put_bytes(d + 96, m.private_data);
}
SidrRepMsg decode_sidr_rep(const std::uint8_t* d) {
  SidrRepMsg m;
  m.request_id = load_be32(d);
  m.status = static_cast<SidrStatus>(d[4]);
  m.additional_info_length = d[5];
  m.qpn = load_be24(d + 8);
  m.service_id = load_be64(d + 12);
  m.qkey = load_be32(d + 20);
  get_bytes(m.class_port_info, d + 24);
  get_bytes(m.private_data, d + 96);
  return m;
}

struct Encoder {
  std::uint8_t* d;
  void operator()(const ReqMsg& m) const { encode_req(d, m); }
  void operator()(const MraMsg& m) const { encode_mra(d, m); }
  void operator()(const RejMsg& m) const { encode_rej(d, m); }
  void operator()(const RepMsg& m) const { encode_rep(d, m); }
  void operator()(const RtuMsg& m) const {
    encode_ids(d, m.local_comm_id, m.remote_comm_id);
    put_bytes(d + 8, m.private_data);
  }
  void operator()(const DreqMsg& m) const {
    encode_ids(d, m.local_comm_id, m.remote_comm_id);
    put24_8(d + 8, m.remote_qpn, 0);
    put_bytes(d + 12, m.private_data);
  }
  void operator()(const DrepMsg& m) const {
    encode_ids(d, m.local_comm_id, m.remote_comm_id);
    put_bytes(d + 8, m.private_data);
  }
  void operator()(const SidrReqMsg& m) const { encode_sidr_req(d, m); }
  void operator()(const SidrRepMsg& m) const { encode_sidr_rep(d, m); }
};

}  // namespace

AttrId attr_id_of(const CmMessage& message) {
  static constexpr AttrId kIds[] = {AttrId::kReq,  AttrId::kMra,     AttrId::kRej,
                                    AttrId::kRep,  AttrId::kRtu,     AttrId::kDreq,
                                    AttrId::kDrep, AttrId::kSidrReq, AttrId::kSidrRep};
  static_assert(std::size(kIds) == std::variant_size_v<CmMessage>);
  return kIds[message.index()];
}

const char* message_name(const CmMessage& message) {
  static constexpr const char* kNames[] = {"REQ",  "MRA",  "REJ",      "REP",     "RTU",
                                           "DREQ", "DREP", "SIDR_REQ", "SIDR_REP"};
  static_assert(std::size(kNames) == std::variant_size_v<CmMessage>);
  return kNames[message.index()];
}

const char* rej_reason_name(std::uint16_t reason) {
  static constexpr const char* kNames[kMaxRejReason + 1] = {
      nullptr,
      "no_qp",
      "no_eec",
      "no_resources",
      "timeout",
      "unsupported_request",
      "invalid_comm_id",
      "invalid_comm_instance",
      "invalid_service_id",
      "invalid_transport_type",
      "stale_connection",
      "rdc_not_exist",
      "invalid_gid",
      "invalid_lid",
      "invalid_sl",
      "invalid_traffic_class",
      "invalid_hop_limit",
      "invalid_packet_rate",
      "invalid_alt_gid",
      "invalid_alt_lid",
      "invalid_alt_sl",
      "invalid_alt_traffic_class",
      "invalid_alt_hop_limit",
      "invalid_alt_packet_rate",
      "port_cm_redirect",
      "port_redirect",
      "invalid_mtu",
      "insufficient_resp_resources",
      "consumer_defined",
      "invalid_rnr_retry",
      "duplicate_local_comm_id",
      "invalid_class_version",
      "invalid_flow_label",
      "invalid_alt_flow_label",
      nullptr,
      "vendor_option_not_supported",
  };
  return reason <= kMaxRejReason ? kNames[reason] : nullptr;
}

const char* to_string(MadError error) {
  switch (error) {
    case MadError::kTooShort:
      return "shorter than a MAD";
    case MadError::kBadBaseVersion:
      return "base version is not 1";
    case MadError::kNotCm:
      return "management class is not CM";
    case MadError::kBadClassVersion:
      return "CM class version is not 2";
    case MadError::kBadMethod:
      return "method is not Send";
    case MadError::kUnsupportedAttr:
      return "attribute not supported";
  }
  return "?";
}

MadBuffer encode_cm_mad(std::uint64_t transaction_id, const CmMessage& message) {
  MadBuffer mad{};
  mad[0] = kMadBaseVersion;
  mad[1] = kMgmtClassCm;
  mad[2] = kCmClassVersion;
  mad[3] = kMadMethodSend;
  store_be64(mad.data() + 8, transaction_id);
  store_be16(mad.data() + 16, static_cast<std::uint16_t>(attr_id_of(message)));
  std::visit(Encoder{mad.data() + kMadHeaderBytes}, message);
  return mad;
}

wire::Result<CmMad, MadError> decode_cm_mad(std::span<const std::uint8_t> mad) {
  if (mad.size() < kMadBytes) return wire::Err(MadError::kTooShort);
  if (mad[0] != kMadBaseVersion) return wire::Err(MadError::kBadBaseVersion);
  if (mad[1] != kMgmtClassCm) return wire::Err(MadError::kNotCm);
  if (mad[2] != kCmClassVersion) return wire::Err(MadError::kBadClassVersion);
  if (mad[3] != kMadMethodSend) return wire::Err(MadError::kBadMethod);
  CmMad out;
  out.transaction_id = load_be64(mad.data() + 8);
  const std::uint8_t* d = mad.data() + kMadHeaderBytes;
  switch (static_cast<AttrId>(load_be16(mad.data() + 16))) {
    case AttrId::kReq:
      out.message = decode_req(d);
      break;
    case AttrId::kMra:
      out.message = decode_mra(d);
      break;
    case AttrId::kRej:
      out.message = decode_rej(d);
      break;
    case AttrId::kRep:
      out.message = decode_rep(d);
      break;
    case AttrId::kRtu: {
      RtuMsg m;
      m.local_comm_id = load_be32(d);
      m.remote_comm_id = load_be32(d + 4);
      get_bytes(m.private_data, d + 8);
      out.message = m;
      break;
    }
    case AttrId::kDreq: {
      DreqMsg m;
      m.local_comm_id = load_be32(d);
      m.remote_comm_id = load_be32(d + 4);
      m.remote_qpn = load_be24(d + 8);
      get_bytes(m.private_data, d + 12);
      out.message = m;
      break;
    }
    case AttrId::kDrep: {
      DrepMsg m;
      m.local_comm_id = load_be32(d);
      m.remote_comm_id = load_be32(d + 4);
      get_bytes(m.private_data, d + 8);
      out.message = m;
      break;
    }
    case AttrId::kSidrReq:
      out.message = decode_sidr_req(d);
      break;
    case AttrId::kSidrRep:
      out.message = decode_sidr_rep(d);
      break;
    default:
      return wire::Err(MadError::kUnsupportedAttr);
  }
  return out;
}

}  // namespace xroce::cm
