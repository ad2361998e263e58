#include "cm/endpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace xroce::cm {
namespace {

constexpr std::uint64_t kNsPerMs = 1'000'000;

template <std::size_t N>
bool copy_private(std::array<std::uint8_t, N>& dst, std::span<const std::uint8_t> src) {
  if (src.size() > N) return false;
  std::copy(src.begin(), src.end(), dst.begin());
  return true;
}

bool in(CmState s, std::initializer_list<CmState> states) {
  return std::find(states.begin(), states.end(), s) != states.end();
}

}  // namespace

const char* to_string(CmState state) {
  switch (state) {
    case CmState::kIdle:
      return "idle";
    case CmState::kReqSent:
      return "req_sent";
    case CmState::kMraReqRcvd:
      return "mra_req_rcvd";
    case CmState::kReqRcvd:
      return "req_rcvd";
    case CmState::kMraReqSent:
      return "mra_req_sent";
    case CmState::kRepSent:
      return "rep_sent";
    case CmState::kMraRepRcvd:
      return "mra_rep_rcvd";
    case CmState::kRepRcvd:
      return "rep_rcvd";
    case CmState::kMraRepSent:
      return "mra_rep_sent";
    case CmState::kEstablished:
      return "established";
    case CmState::kDreqSent:
      return "dreq_sent";
    case CmState::kDreqRcvd:
      return "dreq_rcvd";
    case CmState::kTimewait:
      return "timewait";
    case CmState::kSidrReqSent:
      return "sidr_req_sent";
    case CmState::kSidrReqRcvd:
      return "sidr_req_rcvd";
  }
  return "?";
}

const char* to_string(CmEventType type) {
  switch (type) {
    case CmEventType::kReqReceived:
      return "req_received";
    case CmEventType::kRepReceived:
      return "rep_received";
    case CmEventType::kRtuReceived:
      return "rtu_received";
    case CmEventType::kRejReceived:
      return "rej_received";
    case CmEventType::kMraReceived:
      return "mra_received";
    case CmEventType::kDreqReceived:
      return "dreq_received";
    case CmEventType::kDrepReceived:
      return "drep_received";
    case CmEventType::kReqError:
      return "req_error";
    case CmEventType::kRepError:
      return "rep_error";
    case CmEventType::kDreqError:
      return "dreq_error";
    case CmEventType::kTimewaitExit:
      return "timewait_exit";
    case CmEventType::kSidrReqReceived:
      return "sidr_req_received";
    case CmEventType::kSidrRepReceived:
      return "sidr_rep_received";
    case CmEventType::kSidrReqError:
      return "sidr_req_error";
  }
  return "?";
}

Endpoint::Endpoint(EndpointConfig config)
    : config_(config), rng_(config.seed), id_operand_(static_cast<std::uint32_t>(rng_())) {}

std::uint64_t Endpoint::iba_time_ms(std::uint8_t exponent) {
  return std::uint64_t{1} << (exponent > 8 ? exponent - 8 : 0);
}

CommId Endpoint::new_comm_id() {
  for (;;) {
    const CommId id = next_id_++ ^ id_operand_;
    if (id != 0 && conns_.count(id) == 0) return id;
  }
}

Endpoint::Connection* Endpoint::find(CommId id) {
  const auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second;
}
const Endpoint::Connection* Endpoint::find(CommId id) const {
  const auto it = conns_.find(id);
  return it == conns_.end() ? nullptr : &it->second;
}

Endpoint::Connection* Endpoint::find_by_remote(CommId remote_id, std::uint64_t remote_ca_guid) {
  for (auto& [id, c] : conns_) {
    if (c.remote_id == remote_id && c.remote_ca_guid == remote_ca_guid) return &c;
  }
  return nullptr;
}

void Endpoint::transmit(const MadPeer& to, std::uint64_t tid, const CmMessage& message) {
  out_.push_back(OutgoingMad{to, encode_cm_mad(tid, message)});
  ++counters_.mads_sent;
  if (const auto* rej = std::get_if<RejMsg>(&message)) count_rej_sent(rej->reason);
}

void Endpoint::transmit_with_retries(std::uint64_t now_ns, Connection& c, const CmMessage& message,
                                     std::uint64_t timeout_ms, std::uint32_t retries) {
  transmit(c.peer, c.tid, message);
  c.retransmit =
      Retransmit{out_.back(), now_ns + timeout_ms * kNsPerMs, timeout_ms * kNsPerMs, retries};
}

void Endpoint::count_rej_sent(std::uint16_t reason) {
  ++counters_.rej_sent[reason <= kMaxRejReason ? reason : 0];
}

void Endpoint::emit(CmEventType type, const Connection& c, std::optional<CmMessage> message) {
  if (c.destroyed) return;
  CmEvent e{type, c.local_id, c.context, 0, c.peer, std::move(message)};
  events_.push_back(std::move(e));
}

// cm_enter_timewait: the wait is the local ACK timeout of the path (twice the packet lifetime
// and then some), long enough for the peer's last retries to arrive and be answered here.
void Endpoint::enter_timewait(std::uint64_t now_ns, Connection& c) {
  c.state = CmState::kTimewait;
  c.retransmit.reset();
  c.timewait_deadline_ns = now_ns + iba_time_ms(c.packet_life_time + 1) * kNsPerMs;
}

void Endpoint::erase(CommId id) {
  conns_.erase(id);
}

std::uint64_t Endpoint::handshake_timeout_ms(const Connection& c) const {
  return 2 * iba_time_ms(c.packet_life_time) + iba_time_ms(c.remote_cm_response_timeout);
}

int Endpoint::listen(std::uint64_t service_id, std::uint64_t context) {
  if (!listeners_.emplace(service_id, context).second) return EADDRINUSE;
  return 0;
}

int Endpoint::stop_listening(std::uint64_t service_id) {
  return listeners_.erase(service_id) == 1 ? 0 : EINVAL;
}

wire::Result<CommId, int> Endpoint::send_req(std::uint64_t now_ns, const ReqParams& p,
                                             std::uint64_t context) {
  ReqMsg m;
  if (!copy_private(m.private_data, p.private_data)) return wire::Err(EMSGSIZE);
  Connection c;
  c.local_id = new_comm_id();
  c.context = context;
  c.peer = p.peer;
  c.tid = std::uint64_t{c.local_id} << 32 | next_tid_++;
  c.local_qpn = p.qpn;
  c.remote_cm_response_timeout = config_.cm_response_timeout;
  c.max_cm_retries = config_.max_cm_retries;
  c.packet_life_time = config_.packet_life_time;
  m.local_comm_id = c.local_id;
  m.service_id = p.service_id;
  m.local_ca_guid = config_.node_guid;
  m.local_qkey = p.qkey;
  m.local_qpn = p.qpn;
  m.responder_resources = p.responder_resources;
  m.initiator_depth = p.initiator_depth;
  m.remote_cm_response_timeout = config_.cm_response_timeout;
  m.transport = p.transport;
  m.end_to_end_flow_control = p.flow_control;
  m.starting_psn = p.starting_psn & 0xffffff;
  m.local_cm_response_timeout = config_.cm_response_timeout;
  m.retry_count = std::min<std::uint8_t>(p.retry_count, 7);
  m.path_mtu = p.path_mtu;
  m.rnr_retry_count = std::min<std::uint8_t>(p.rnr_retry_count, 7);
  m.max_cm_retries = config_.max_cm_retries;
  m.srq = p.srq;
  m.primary = p.primary;
  c.state = CmState::kReqSent;
  const CommId id = c.local_id;
  auto& stored = conns_.emplace(id, std::move(c)).first->second;
  transmit_with_retries(now_ns, stored, m, handshake_timeout_ms(stored), stored.max_cm_retries);
  return id;
}

int Endpoint::send_rep(std::uint64_t now_ns, CommId id, const RepParams& p) {
  Connection* c = find(id);
  if (c == nullptr || c->destroyed || !in(c->state, {CmState::kReqRcvd, CmState::kMraReqSent}))
    return EINVAL;
  RepMsg m;
  if (!copy_private(m.private_data, p.private_data)) return EMSGSIZE;
  m.local_comm_id = c->local_id;
  m.remote_comm_id = c->remote_id;
  m.local_qkey = p.qkey;
  m.local_qpn = p.qpn;
  m.starting_psn = p.starting_psn & 0xffffff;
  m.responder_resources = p.responder_resources;
  m.initiator_depth = p.initiator_depth;
  m.target_ack_delay = p.target_ack_delay;
  m.end_to_end_flow_control = p.flow_control;
  m.rnr_retry_count = std::min<std::uint8_t>(p.rnr_retry_count, 7);
  m.srq = p.srq;
  m.local_ca_guid = config_.node_guid;
  c->local_qpn = p.qpn;
  c->state = CmState::kRepSent;
  transmit_with_retries(now_ns, *c, m, handshake_timeout_ms(*c), c->max_cm_retries);
  return 0;
}

int Endpoint::send_rtu(std::uint64_t now_ns, CommId id, std::span<const std::uint8_t> data) {
  (void)now_ns;
  Connection* c = find(id);
  if (c == nullptr || c->destroyed || !in(c->state, {CmState::kRepRcvd, CmState::kMraRepSent}))
    return EINVAL;
  RtuMsg m;
  if (!copy_private(m.private_data, data)) return EMSGSIZE;
  m.local_comm_id = c->local_id;
  m.remote_comm_id = c->remote_id;
  transmit(c->peer, c->tid, m);
  c->last_response = out_.back();  // a REP retried because this RTU was lost gets it again
  c->state = CmState::kEstablished;
  return 0;
}

int Endpoint::send_rej(std::uint64_t now_ns, CommId id, std::uint16_t reason,
                       std::span<const std::uint8_t> ari, std::span<const std::uint8_t> data) {
  Connection* c = find(id);
  if (c == nullptr) return EINVAL;
  MessageRef ref;
  switch (c->state) {
    case CmState::kReqRcvd:
    case CmState::kMraReqSent:
      ref = MessageRef::kReq;
      break;
    case CmState::kRepRcvd:
    case CmState::kMraRepSent:
      ref = MessageRef::kRep;
      break;
    case CmState::kReqSent:
    case CmState::kMraReqRcvd:
    case CmState::kRepSent:
    case CmState::kMraRepRcvd:
      ref = MessageRef::kOther;
      break;
    default:
      return EINVAL;
  }
  RejMsg m;
  if (!copy_private(m.private_data, data) || ari.size() > m.ari.size()) return EMSGSIZE;
  std::copy(ari.begin(), ari.end(), m.ari.begin());
  m.ari_length = static_cast<std::uint8_t>(ari.size());
  m.local_comm_id = c->local_id;
  m.remote_comm_id = c->remote_id;
  m.message = ref;
  m.reason = reason;
  transmit(c->peer, c->tid, m);
  c->retransmit.reset();
  if (reason == static_cast<std::uint16_t>(RejReason::kStaleConnection)) {
    enter_timewait(now_ns, *c);
  } else {
    c->state = CmState::kIdle;
  }
  return 0;
}

int Endpoint::send_mra(std::uint64_t now_ns, CommId id, std::uint8_t service_timeout) {
  (void)now_ns;
  Connection* c = find(id);
  if (c == nullptr || c->destroyed) return EINVAL;
  MraMsg m;
  m.local_comm_id = c->local_id;
  m.remote_comm_id = c->remote_id;
  m.service_timeout = service_timeout & 0x1f;
  if (in(c->state, {CmState::kReqRcvd, CmState::kMraReqSent})) {
    m.message = MessageRef::kReq;
    c->state = CmState::kMraReqSent;
  } else if (in(c->state, {CmState::kRepRcvd, CmState::kMraRepSent})) {
    m.message = MessageRef::kRep;
    c->state = CmState::kMraRepSent;
  } else {
    return EINVAL;
  }
  transmit(c->peer, c->tid, m);
  c->last_response = out_.back();
  return 0;
}

int Endpoint::send_dreq(std::uint64_t now_ns, CommId id, std::span<const std::uint8_t> data) {
  Connection* c = find(id);
  if (c == nullptr || c->destroyed || c->state != CmState::kEstablished) return EINVAL;
  DreqMsg m;
  if (!copy_private(m.private_data, data)) return EMSGSIZE;
  m.local_comm_id = c->local_id;
  m.remote_comm_id = c->remote_id;
  m.remote_qpn = c->remote_qpn;
  c->tid = std::uint64_t{c->local_id} << 32 | next_tid_++;
  c->state = CmState::kDreqSent;
  c->last_response.reset();
  transmit_with_retries(now_ns, *c, m, handshake_timeout_ms(*c), c->max_cm_retries);
  return 0;
}

int Endpoint::send_drep(std::uint64_t now_ns, CommId id, std::span<const std::uint8_t> data) {
  Connection* c = find(id);
  if (c == nullptr || c->state != CmState::kDreqRcvd) return EINVAL;
  DrepMsg m;
  if (!copy_private(m.private_data, data)) return EMSGSIZE;
  m.local_comm_id = c->local_id;
  m.remote_comm_id = c->remote_id;
  transmit(c->peer, c->tid, m);
  c->last_response = out_.back();  // answers a retried DREQ during timewait
  enter_timewait(now_ns, *c);
  return 0;
}

int Endpoint::establish(CommId id) {
  Connection* c = find(id);
  if (c == nullptr || !in(c->state, {CmState::kRepSent, CmState::kMraRepRcvd})) return EINVAL;
  c->retransmit.reset();
  c->state = CmState::kEstablished;
  emit(CmEventType::kRtuReceived, *c);
  return 0;
}

wire::Result<CommId, int> Endpoint::send_sidr_req(std::uint64_t now_ns, const SidrReqParams& p,
                                                  std::uint64_t context) {
  SidrReqMsg m;
  if (!copy_private(m.private_data, p.private_data)) return wire::Err(EMSGSIZE);
  Connection c;
  c.local_id = new_comm_id();
  c.context = context;
  c.peer = p.peer;
  c.tid = std::uint64_t{c.local_id} << 32 | next_tid_++;
  c.remote_cm_response_timeout = config_.cm_response_timeout;
  c.max_cm_retries = config_.max_cm_retries;
  c.packet_life_time = config_.packet_life_time;
  c.state = CmState::kSidrReqSent;
  c.service_id = p.service_id;
  m.request_id = c.local_id;
  m.service_id = p.service_id;
  const CommId id = c.local_id;
  auto& stored = conns_.emplace(id, std::move(c)).first->second;
  transmit_with_retries(now_ns, stored, m, handshake_timeout_ms(stored), stored.max_cm_retries);
  return id;
}

int Endpoint::send_sidr_rep(std::uint64_t now_ns, CommId id, const SidrRepParams& p) {
  (void)now_ns;
  Connection* c = find(id);
  if (c == nullptr || c->state != CmState::kSidrReqRcvd) return EINVAL;
  SidrRepMsg m;
  if (!copy_private(m.private_data, p.private_data)) return EMSGSIZE;
  m.request_id = c->remote_id;
  m.status = p.status;
  m.qpn = p.qpn;
  m.qkey = p.qkey;
  m.service_id = c->service_id;
  transmit(c->peer, c->tid, m);
  c->state = CmState::kIdle;
  return 0;
}

int Endpoint::set_context(CommId id, std::uint64_t context) {
  Connection* c = find(id);
  if (c == nullptr) return EINVAL;
  c->context = context;
  return 0;
}

const ReqMsg* Endpoint::request_of(CommId id) const {
  const Connection* c = find(id);
  return c != nullptr && c->request ? &*c->request : nullptr;
}

std::uint32_t Endpoint::remote_qpn_of(CommId id) const {
  const Connection* c = find(id);
  return c != nullptr ? c->remote_qpn : 0;
}

std::optional<CmState> Endpoint::state_of(CommId id) const {
  const Connection* c = find(id);
  if (c == nullptr) return std::nullopt;
  return c->state;
}

void Endpoint::destroy(std::uint64_t now_ns, CommId id) {
  Connection* c = find(id);
  if (c == nullptr || c->destroyed) return;
  // Our CA GUID as the ARI of a timeout REJ, as ib_destroy_cm_id sends it.
  std::array<std::uint8_t, 8> guid{};
  for (int i = 0; i < 8; ++i)
    guid[i] = static_cast<std::uint8_t>(config_.node_guid >> (56 - 8 * i));
  switch (c->state) {
    case CmState::kReqSent:
    case CmState::kMraReqRcvd:
      send_rej(now_ns, id, static_cast<std::uint16_t>(RejReason::kTimeout), guid, {});
      break;
    case CmState::kReqRcvd:
    case CmState::kMraReqSent:
    case CmState::kRepSent:
    case CmState::kMraRepRcvd:
    case CmState::kRepRcvd:
    case CmState::kMraRepSent:
      send_rej(now_ns, id, static_cast<std::uint16_t>(RejReason::kConsumerDefined), {}, {});
      break;
    case CmState::kEstablished:
      send_dreq(now_ns, id, {});  // retried until the DREP, as one still outstanding below
      break;
    case CmState::kDreqSent:
      // ib_destroy_cm_id cancels the DREQ's retries and enters timewait; over a lossy path that
      // leaves the peer established for ever if the one DREQ is lost (rping -C's client
      // disconnects and destroys at once; its server waits for DISCONNECTED). The retries go
      // on: the DREP, or the last retry, moves the connection to timewait, without events.
      break;
    case CmState::kDreqRcvd:
      send_drep(now_ns, id, {});
      break;
    case CmState::kSidrReqRcvd:
      send_sidr_rep(now_ns, id, SidrRepParams{SidrStatus::kRejected, 0, 0, {}});
      break;
    default:
      break;
  }
  if (c->state == CmState::kTimewait || c->state == CmState::kDreqSent) {
    c->destroyed = true;
  } else {
    erase(id);
  }
}

void Endpoint::handle_mad(std::uint64_t now_ns, const MadPeer& from,
                          std::span<const std::uint8_t> bytes) {
  ++counters_.mads_received;
  auto decoded = decode_cm_mad(bytes);
  if (!decoded) {
    ++counters_.mads_malformed;
    drop();
    return;
  }
  const std::uint64_t tid = decoded->transaction_id;
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, ReqMsg>) on_req(now_ns, from, tid, m);
        if constexpr (std::is_same_v<T, RepMsg>) on_rep(now_ns, from, tid, m);
        if constexpr (std::is_same_v<T, RtuMsg>) on_rtu(now_ns, m);
        if constexpr (std::is_same_v<T, RejMsg>) on_rej(now_ns, m);
        if constexpr (std::is_same_v<T, MraMsg>) on_mra(now_ns, m);
        if constexpr (std::is_same_v<T, DreqMsg>) on_dreq(now_ns, from, tid, m);
        if constexpr (std::is_same_v<T, DrepMsg>) on_drep(now_ns, m);
        if constexpr (std::is_same_v<T, SidrReqMsg>) on_sidr_req(from, tid, m);
        if constexpr (std::is_same_v<T, SidrRepMsg>) on_sidr_rep(m);
      },
      decoded->message);
}

// A REJ for a message that has no connection here (cm_issue_rej): our comm ID is unknown (0).
void Endpoint::reject_unknown(const MadPeer& from, std::uint64_t tid, CommId remote_comm_id,
                              MessageRef message, RejReason reason) {
  RejMsg rej;
  rej.remote_comm_id = remote_comm_id;
  rej.message = message;
  rej.reason = static_cast<std::uint16_t>(reason);
  transmit(from, tid, rej);
}

void Endpoint::on_req(std::uint64_t now_ns, const MadPeer& from, std::uint64_t tid,
                      const ReqMsg& m) {
  if (Connection* dup = find_by_remote(m.local_comm_id, m.local_ca_guid)) {
    // A retried REQ (cm_dup_req_handler): tell a patient peer we are still working on it,
    // repeat an answer already given, refuse one for a connection in timewait.
    if (dup->state == CmState::kReqRcvd) {
      send_mra(now_ns, dup->local_id, config_.mra_service_timeout);
    } else if (dup->state == CmState::kMraReqSent && dup->last_response) {
      out_.push_back(*dup->last_response);
      ++counters_.mads_sent;
    } else if (dup->state == CmState::kTimewait) {
      reject_unknown(from, tid, m.local_comm_id, MessageRef::kReq, RejReason::kStaleConnection);
    } else {
      drop();
    }
    return;
  }
  const auto listener = listeners_.find(m.service_id);
  if (listener == listeners_.end()) {
    reject_unknown(from, tid, m.local_comm_id, MessageRef::kReq, RejReason::kInvalidServiceId);
    return;
  }
  if (m.transport != TransportService::kRc && m.transport != TransportService::kUc) {
    reject_unknown(from, tid, m.local_comm_id, MessageRef::kReq, RejReason::kInvalidTransportType);
    return;
  }
  Connection c;
  c.local_id = new_comm_id();
  c.remote_id = m.local_comm_id;
  c.remote_ca_guid = m.local_ca_guid;
  c.peer = from;
  c.tid = tid;
  c.remote_qpn = m.local_qpn;
  c.remote_cm_response_timeout = m.local_cm_response_timeout;
  c.max_cm_retries = m.max_cm_retries;
  c.packet_life_time = config_.packet_life_time;
  c.state = CmState::kReqRcvd;
  c.request = m;
  const CommId id = c.local_id;
  auto& stored = conns_.emplace(id, std::move(c)).first->second;
  CmEvent e{CmEventType::kReqReceived, id, 0, listener->second, from, CmMessage{m}};
  events_.push_back(std::move(e));
  (void)stored;
}

void Endpoint::on_rep(std::uint64_t now_ns, const MadPeer& from, std::uint64_t tid,
                      const RepMsg& m) {
  (void)from;
  (void)tid;
  Connection* c = find(m.remote_comm_id);
  if (c == nullptr) {
    drop();
    return;
  }
  if (in(c->state, {CmState::kReqSent, CmState::kMraReqRcvd})) {
    c->retransmit.reset();
    c->remote_id = m.local_comm_id;
    c->remote_ca_guid = m.local_ca_guid;
    c->remote_qpn = m.local_qpn;
    c->state = CmState::kRepRcvd;
    emit(CmEventType::kRepReceived, *c, CmMessage{m});
    return;
  }
  // A retried REP (cm_dup_rep_handler): our consumer is still readying its QP (tell the peer
  // to wait, as rdma_cm's delayed MRA does), or the RTU or MRA we sent was lost.
  if (c->state == CmState::kRepRcvd && c->remote_id == m.local_comm_id) {
    send_mra(now_ns, c->local_id, config_.mra_service_timeout);
    return;
  }
  if (in(c->state, {CmState::kEstablished, CmState::kMraRepSent}) && c->last_response &&
      c->remote_id == m.local_comm_id) {
    out_.push_back(*c->last_response);
    ++counters_.mads_sent;
    return;
  }
  (void)now_ns;
  drop();
}

void Endpoint::on_rtu(std::uint64_t now_ns, const RtuMsg& m) {
  (void)now_ns;
  Connection* c = find(m.remote_comm_id);
  if (c == nullptr || c->remote_id != m.local_comm_id ||
      !in(c->state, {CmState::kRepSent, CmState::kMraRepRcvd})) {
    drop();
    return;
  }
  c->retransmit.reset();
  c->state = CmState::kEstablished;
  emit(CmEventType::kRtuReceived, *c, CmMessage{m});
}

void Endpoint::on_rej(std::uint64_t now_ns, const RejMsg& m) {
  ++counters_.rej_received[m.reason <= kMaxRejReason ? m.reason : 0];
  Connection* c = find(m.remote_comm_id);
  // A peer that gives up on its REQ before knowing our comm ID names itself instead: its comm ID
  // and, as the ARI of a timeout REJ, its CA GUID (cm_acquire_rejected_id).
  if (c == nullptr && m.remote_comm_id == 0 &&
      m.reason == static_cast<std::uint16_t>(RejReason::kTimeout) && m.ari_length >= 8) {
    std::uint64_t guid = 0;
    for (int i = 0; i < 8; ++i)
      guid = guid << 8 | m.ari[i];
    c = find_by_remote(m.local_comm_id, guid);
  }
  // A REJ for our REQ carries our comm ID; later ones also the peer's, which must match.
  if (c == nullptr || c->destroyed ||
      (c->remote_id != 0 && m.local_comm_id != 0 && c->remote_id != m.local_comm_id)) {
    drop();
    return;
  }
  switch (c->state) {
    case CmState::kReqSent:
    case CmState::kMraReqRcvd:
    case CmState::kRepSent:
    case CmState::kMraRepRcvd:
    case CmState::kReqRcvd:
    case CmState::kMraReqSent:
    case CmState::kRepRcvd:
    case CmState::kMraRepSent:
      c->retransmit.reset();
      if (m.reason == static_cast<std::uint16_t>(RejReason::kStaleConnection)) {
        enter_timewait(now_ns, *c);
      } else {
        c->state = CmState::kIdle;
      }
      emit(CmEventType::kRejReceived, *c, CmMessage{m});
      return;
    case CmState::kEstablished:
      enter_timewait(now_ns, *c);
      emit(CmEventType::kRejReceived, *c, CmMessage{m});
      return;
    default:
      drop();
  }
}

void Endpoint::on_mra(std::uint64_t now_ns, const MraMsg& m) {
  Connection* c = find(m.remote_comm_id);
  if (c == nullptr || !c->retransmit) {
    drop();
    return;
  }
  const bool for_req =
      m.message == MessageRef::kReq && in(c->state, {CmState::kReqSent, CmState::kMraReqRcvd});
  const bool for_rep =
      m.message == MessageRef::kRep && in(c->state, {CmState::kRepSent, CmState::kMraRepRcvd});
  if (!for_req && !for_rep) {
    drop();
    return;
  }
  // cm_mra_handler: wait the peer's service time plus a packet lifetime before trying again.
  const std::uint64_t wait_ms = iba_time_ms(m.service_timeout) + iba_time_ms(c->packet_life_time);
  c->retransmit->deadline_ns = now_ns + wait_ms * kNsPerMs;
  if (for_req) {
    c->remote_id = m.local_comm_id;
    c->state = CmState::kMraReqRcvd;
  } else {
    c->state = CmState::kMraRepRcvd;
  }
  emit(CmEventType::kMraReceived, *c, CmMessage{m});
}

void Endpoint::on_dreq(std::uint64_t now_ns, const MadPeer& from, std::uint64_t tid,
                       const DreqMsg& m) {
  Connection* c = find(m.remote_comm_id);
  if (c == nullptr || c->remote_id != m.local_comm_id || c->local_qpn != m.remote_qpn) {
    drop();
    return;
  }
  switch (c->state) {
    case CmState::kRepSent:  // the RTU was lost; the DREQ says the peer is established
    case CmState::kMraRepRcvd:
    case CmState::kEstablished:
      c->retransmit.reset();
      c->tid = tid;
      c->peer = from;
      c->state = CmState::kDreqRcvd;
      if (c->destroyed) {
        send_drep(now_ns, c->local_id, {});
      } else {
        emit(CmEventType::kDreqReceived, *c, CmMessage{m});
      }
      return;
    case CmState::kDreqSent:  // both sides disconnect at once: answer, and we are done
      c->tid = tid;
      c->state = CmState::kDreqRcvd;
      send_drep(now_ns, c->local_id, {});
      emit(CmEventType::kDrepReceived, *c);
      return;
    case CmState::kTimewait:  // our DREP was lost
      if (c->last_response) {
        out_.push_back(*c->last_response);
        ++counters_.mads_sent;
      } else {
        DrepMsg drep;
        drep.local_comm_id = c->local_id;
        drep.remote_comm_id = c->remote_id;
        transmit(from, tid, drep);
      }
      return;
    default:
      drop();
  }
}

void Endpoint::on_drep(std::uint64_t now_ns, const DrepMsg& m) {
  Connection* c = find(m.remote_comm_id);
  if (c != nullptr && c->remote_id == m.local_comm_id && c->state == CmState::kTimewait) {
    return;  // the answer to the DREQ of a connection destroyed without waiting for it
  }
  if (c == nullptr || c->remote_id != m.local_comm_id || c->state != CmState::kDreqSent) {
    drop();
    return;
  }
  enter_timewait(now_ns, *c);
  emit(CmEventType::kDrepReceived, *c, CmMessage{m});
}

void Endpoint::on_sidr_req(const MadPeer& from, std::uint64_t tid, const SidrReqMsg& m) {
  for (const auto& [id, c] : conns_) {
    if (c.state == CmState::kSidrReqRcvd && c.remote_id == m.request_id &&
        c.peer.remote_gid == from.remote_gid) {
      drop();  // a retry of one the consumer has not answered yet
      return;
    }
  }
  const auto listener = listeners_.find(m.service_id);
  if (listener == listeners_.end()) {
    SidrRepMsg rep;
    rep.request_id = m.request_id;
    rep.status = SidrStatus::kServiceIdNotSupported;
    rep.service_id = m.service_id;
    transmit(from, tid, rep);
    return;
  }
  Connection c;
  c.local_id = new_comm_id();
  c.remote_id = m.request_id;
  c.peer = from;
  c.tid = tid;
  c.state = CmState::kSidrReqRcvd;
  c.service_id = m.service_id;
  const CommId id = c.local_id;
  conns_.emplace(id, std::move(c));
  events_.push_back(
      CmEvent{CmEventType::kSidrReqReceived, id, 0, listener->second, from, CmMessage{m}});
}

void Endpoint::on_sidr_rep(const SidrRepMsg& m) {
  Connection* c = find(m.request_id);
  if (c == nullptr || c->state != CmState::kSidrReqSent) {
    drop();
    return;
  }
  c->retransmit.reset();
  c->state = CmState::kIdle;
  emit(CmEventType::kSidrRepReceived, *c, CmMessage{m});
}

void Endpoint::handle_timeout(std::uint64_t now_ns) {
  std::vector<CommId> expired;
  for (auto& [id, c] : conns_) {
    if (c.state == CmState::kTimewait) {
      if (now_ns >= c.timewait_deadline_ns) expired.push_back(id);
      continue;
    }
    if (!c.retransmit || now_ns < c.retransmit->deadline_ns) continue;
    if (c.retransmit->retries_left > 0) {
      --c.retransmit->retries_left;
      c.retransmit->deadline_ns = now_ns + c.retransmit->timeout_ns;
      out_.push_back(c.retransmit->mad);
      ++counters_.mads_sent;
      ++counters_.mads_retried;
      continue;
    }
    c.retransmit.reset();
    ++counters_.timeouts;
    switch (c.state) {
      case CmState::kReqSent:
      case CmState::kMraReqRcvd:
        c.state = CmState::kIdle;
        emit(CmEventType::kReqError, c);
        break;
      case CmState::kRepSent:
      case CmState::kMraRepRcvd:
        c.state = CmState::kIdle;
        emit(CmEventType::kRepError, c);
        break;
      case CmState::kDreqSent:
        enter_timewait(now_ns, c);
        emit(CmEventType::kDreqError, c);
        break;
      case CmState::kSidrReqSent:
        c.state = CmState::kIdle;
        emit(CmEventType::kSidrReqError, c);
        break;
      default:
        break;
    }
  }
  for (const CommId id : expired) {
    Connection& c = conns_.at(id);
    if (c.destroyed) {
      erase(id);
    } else {
      c.state = CmState::kIdle;
      c.last_response.reset();
      emit(CmEventType::kTimewaitExit, c);
    }
  }
}

std::optional<std::uint64_t> Endpoint::next_deadline() const {
  std::optional<std::uint64_t> earliest;
  auto consider = [&](std::uint64_t t) {
    if (!earliest || t < *earliest) earliest = t;
  };
  for (const auto& [id, c] : conns_) {
    if (c.state == CmState::kTimewait) consider(c.timewait_deadline_ns);
    if (c.retransmit) consider(c.retransmit->deadline_ns);
  }
  return earliest;
}

std::optional<OutgoingMad> Endpoint::poll_transmit() {
  if (out_.empty()) return std::nullopt;
  OutgoingMad m = out_.front();
  out_.pop_front();
  return m;
}

std::optional<CmEvent> Endpoint::poll_event() {
  if (events_.empty()) return std::nullopt;
  CmEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::vector<ConnectionInfo> Endpoint::connections() const {
  std::vector<ConnectionInfo> out;
  for (const auto& [id, c] : conns_) {
    out.push_back(ConnectionInfo{c.local_id, c.remote_id, c.state, c.context, c.peer, c.local_qpn,
                                 c.remote_qpn, c.destroyed});
  }
  return out;
}

}  // namespace xroce::cm
