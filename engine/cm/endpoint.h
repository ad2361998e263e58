// The IB Communication Manager of one port (IBA vol. 1 ch. 12), as a sans-I/O state machine:
// the connection states of IBA 12.9 (figure 158: Idle, REQ Sent, REQ Rcvd, REP Sent, REP Rcvd,
// MRA states, Established, DREQ Sent/Rcvd, TimeWait) and SIDR (12.11), the retransmission of
// unanswered MADs, and timewait. It is the kernel ib_cm's counterpart (drivers/infiniband/core/
// cm.c), and the rdma_cm layer above drives it as the kernel's rdma_cm drives ib_cm.
//
// Calling order (quinn-proto's habit): feed handle_mad(now, ...) with every MAD that arrived on
// QP1 for this port, call the consumer operations (send_req, send_rep, ...) at any time, call
// handle_timeout(now) once next_deadline() has passed; after any of these, drain poll_transmit()
// (MADs to send on QP1) and poll_event() (what the consumer must learn). Nothing here reads a
// clock, sends, or blocks.
//
// Timeouts follow the kernel: a REQ is retried every 2 * PacketLifeTime + the peer's CM
// response time (cm_convert_to_ms: 4.096 us * 2^t, rounded to 2^(t-8) ms), up to
// max_cm_retries times; an MRA extends the wait by its service timeout. A consumer that
// destroys a connection leaves on the wire what ib_destroy_cm_id leaves: a REJ (timeout or
// consumer-defined) during the handshake, a DREQ once established, a DREP for a received DREQ,
// and the connection stays in TimeWait for its timewait time so that late or retried messages
// are answered (DREP again, REJ stale connection) and never reach a new connection. One thing
// differs from ib_destroy_cm_id: a DREQ outstanding at destroy time keeps its retries (the
// kernel cancels them) until the DREP or its last retry, so that a peer whose consumer waits for
// DISCONNECTED (rping's server, any rdma_cm server) learns of it even when the one DREQ a
// disconnect-then-destroy consumer sends is lost.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <variant>

#include "cm/mad.h"

namespace xroce::cm {

using CommId = std::uint32_t;

// Where a MAD goes or came from: the peer's GID and ours (they pick the device and the RoCE v2
// addresses), and the GRH fields of the path. QP1 to QP1, Q_Key kGsiQkey, P_Key kDefaultPkey.
struct MadPeer {
  Gid remote_gid{};
  Gid local_gid{};
  std::uint8_t hop_limit = 64;
  std::uint8_t traffic_class = 0;
  std::uint32_t flow_label = 0;
  bool operator==(const MadPeer&) const = default;
};

struct OutgoingMad {
  MadPeer to;
  MadBuffer mad;
};

enum class CmState : std::uint8_t {
  kIdle,
  kReqSent,
  kMraReqRcvd,  // our REQ was MRA'd
  kReqRcvd,
  kMraReqSent,  // we MRA'd the REQ
  kRepSent,
  kMraRepRcvd,
  kRepRcvd,
  kMraRepSent,
  kEstablished,
  kDreqSent,
  kDreqRcvd,
  kTimewait,
  kSidrReqSent,
  kSidrReqRcvd,
};
const char* to_string(CmState state);

enum class CmEventType : std::uint8_t {
  kReqReceived,  // a new passive connection in kReqRcvd; listen_context says whose
  kRepReceived,
  kRtuReceived,  // also: the first packet on the QP (the consumer's establish())
  kRejReceived,
  kMraReceived,
  kDreqReceived,
  kDrepReceived,
  kReqError,   // REQ retries exhausted: the connection is idle
  kRepError,   // REP retries exhausted: the connection is idle
  kDreqError,  // DREQ retries exhausted: in timewait
  kTimewaitExit,
  kSidrReqReceived,  // a new id in kSidrReqRcvd
  kSidrRepReceived,
  kSidrReqError,  // SIDR_REQ retries exhausted
};
const char* to_string(CmEventType type);

struct CmEvent {
  CmEventType type;
  CommId id = 0;
  std::uint64_t context = 0;         // the connection's (set_context) or, for new ids, 0
  std::uint64_t listen_context = 0;  // kReqReceived / kSidrReqReceived: the listener's
  MadPeer peer;                      // for new ids: where the request came from
  std::optional<CmMessage> message;  // the received message, for *Received events
};

struct EndpointConfig {
  std::uint64_t node_guid = 0;  // the CA GUID we put in REQ/REP (host order of the wire value)
  std::uint8_t cm_response_timeout = 20;  // CMA_CM_RESPONSE_TIMEOUT: 4.096 us * 2^20, ~4 s
  std::uint8_t max_cm_retries = 15;       // CMA_MAX_CM_RETRIES
  std::uint8_t packet_life_time = 16;     // CMA_IBOE_PACKET_LIFETIME (RoCE has no SA)
  std::uint8_t mra_service_timeout = 24;  // CMA_CM_MRA_SETTING's timeout
  std::uint32_t seed = 1;                 // communication IDs are seeded, not sequential
};

struct CmCounters {
  std::uint64_t mads_sent = 0;
  std::uint64_t mads_received = 0;
  std::uint64_t mads_retried = 0;    // retransmissions after a timeout
  std::uint64_t mads_dropped = 0;    // malformed, unsolicited, or for no connection
  std::uint64_t mads_malformed = 0;  // of the dropped: failed decode_cm_mad
  std::uint64_t timeouts = 0;        // handshakes and DREQs given up after their retries
  std::uint64_t rej_sent[kMaxRejReason + 1] = {};  // by reason (others counted at 0)
  std::uint64_t rej_received[kMaxRejReason + 1] = {};
};

// What the consumer gives for a REQ (the kernel's ib_cm_req_param).
struct ReqParams {
  MadPeer peer;
  std::uint64_t service_id = 0;
  std::uint32_t qpn = 0;
  TransportService transport = TransportService::kRc;
  std::uint32_t starting_psn = 0;
  std::uint32_t qkey = 0;
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t retry_count = 7;
  std::uint8_t rnr_retry_count = 7;
  std::uint8_t path_mtu = 3;  // ibv_mtu (IBV_MTU_1024)
  bool srq = false;
  bool flow_control = true;
  CmPath primary;                              // local/remote GIDs as in `peer`
  std::span<const std::uint8_t> private_data;  // at most kReqPrivateBytes
};

struct RepParams {
  std::uint32_t qpn = 0;
  std::uint32_t starting_psn = 0;
  std::uint32_t qkey = 0;
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t target_ack_delay = 0;
  std::uint8_t rnr_retry_count = 7;
  bool srq = false;
  bool flow_control = true;
  std::span<const std::uint8_t> private_data;  // at most kRepPrivateBytes
};

struct SidrReqParams {
  MadPeer peer;
  std::uint64_t service_id = 0;
  std::span<const std::uint8_t> private_data;  // at most kSidrReqPrivateBytes
};

struct SidrRepParams {
  SidrStatus status = SidrStatus::kValid;
  std::uint32_t qpn = 0;
  std::uint32_t qkey = 0;
  std::span<const std::uint8_t> private_data;  // at most kSidrRepPrivateBytes
};

// What `xroce cm show` prints of a connection.
struct ConnectionInfo {
  CommId local_id = 0;
  CommId remote_id = 0;
  CmState state = CmState::kIdle;
  std::uint64_t context = 0;
  MadPeer peer;
  std::uint32_t local_qpn = 0;
  std::uint32_t remote_qpn = 0;
  bool destroyed = false;  // the consumer is gone; kept for timewait
};

class Endpoint {
 public:
  explicit Endpoint(EndpointConfig config);

  // ---- Consumer operations: 0 or an errno (EINVAL: no such id or not in a state for it;
  // EADDRINUSE: service already listened on; EMSGSIZE: private data too long).
  int listen(std::uint64_t service_id, std::uint64_t context);
  int stop_listening(std::uint64_t service_id);
  // A new connection in kReqSent; its REQ is queued.
  wire::Result<CommId, int> send_req(std::uint64_t now_ns, const ReqParams& params,
                                     std::uint64_t context);
  int send_rep(std::uint64_t now_ns, CommId id, const RepParams& params);
  int send_rtu(std::uint64_t now_ns, CommId id, std::span<const std::uint8_t> private_data);
  int send_rej(std::uint64_t now_ns, CommId id, std::uint16_t reason,
               std::span<const std::uint8_t> ari, std::span<const std::uint8_t> private_data);
  int send_mra(std::uint64_t now_ns, CommId id, std::uint8_t service_timeout);
  int send_dreq(std::uint64_t now_ns, CommId id, std::span<const std::uint8_t> private_data);
  int send_drep(std::uint64_t now_ns, CommId id, std::span<const std::uint8_t> private_data);
  // The first packet arrived on the passive QP before the RTU (IBA 12.9.7.2): established.
  int establish(CommId id);
  wire::Result<CommId, int> send_sidr_req(std::uint64_t now_ns, const SidrReqParams& params,
                                          std::uint64_t context);
  int send_sidr_rep(std::uint64_t now_ns, CommId id, const SidrRepParams& params);
  int set_context(CommId id, std::uint64_t context);
  // The consumer is done with the id (ib_destroy_cm_id): sends what the state requires and
  // reports no more events for it; it lingers only while its DREQ is retried and in timewait.
  void destroy(std::uint64_t now_ns, CommId id);

  // The received REQ of a passive connection (for its path and parameters), if any.
  const ReqMsg* request_of(CommId id) const;
  // The QPN the peer told us (REQ or REP), 0 if none yet.
  std::uint32_t remote_qpn_of(CommId id) const;
  std::optional<CmState> state_of(CommId id) const;

  // ---- Network and time.
  void handle_mad(std::uint64_t now_ns, const MadPeer& from, std::span<const std::uint8_t> mad);
  void handle_timeout(std::uint64_t now_ns);
  std::optional<std::uint64_t> next_deadline() const;
  std::optional<OutgoingMad> poll_transmit();
  std::optional<CmEvent> poll_event();

  const CmCounters& counters() const { return counters_; }
  std::vector<ConnectionInfo> connections() const;
  std::size_t connection_count() const { return conns_.size(); }

  // cm_convert_to_ms: an IBA time exponent (4.096 us * 2^t) in milliseconds.
  static std::uint64_t iba_time_ms(std::uint8_t exponent);

 private:
  struct Retransmit {
    OutgoingMad mad;
    std::uint64_t deadline_ns = 0;
    std::uint64_t timeout_ns = 0;
    std::uint32_t retries_left = 0;
  };
  struct Connection {
    CommId local_id = 0;
    CommId remote_id = 0;
    std::uint64_t remote_ca_guid = 0;
    std::uint64_t context = 0;
    CmState state = CmState::kIdle;
    MadPeer peer;
    std::uint64_t tid = 0;  // of the handshake (REQ's), or of the DREQ we answer
    std::uint32_t local_qpn = 0;
    std::uint32_t remote_qpn = 0;
    std::uint8_t remote_cm_response_timeout = 20;
    std::uint8_t max_cm_retries = 15;
    std::uint8_t packet_life_time = 16;
    std::optional<Retransmit> retransmit;
    std::optional<OutgoingMad> last_response;  // REP/RTU/DREP/MRA to send again on a dup
    std::uint64_t timewait_deadline_ns = 0;
    bool destroyed = false;
    std::optional<ReqMsg> request;  // passive side
    std::uint64_t service_id = 0;   // SIDR
  };

  CommId new_comm_id();
  Connection* find(CommId id);
  const Connection* find(CommId id) const;
  Connection* find_by_remote(CommId remote_id, std::uint64_t remote_ca_guid);
  void transmit(const MadPeer& to, std::uint64_t tid, const CmMessage& message);
  void transmit_with_retries(std::uint64_t now_ns, Connection& c, const CmMessage& message,
                             std::uint64_t timeout_ms, std::uint32_t retries);
  void emit(CmEventType type, const Connection& c, std::optional<CmMessage> message = {});
  void enter_timewait(std::uint64_t now_ns, Connection& c);
  void erase(CommId id);
  void count_rej_sent(std::uint16_t reason);
  std::uint64_t handshake_timeout_ms(const Connection& c) const;
  void reject_unknown(const MadPeer& from, std::uint64_t tid, CommId remote_comm_id,
                      MessageRef message, RejReason reason);

  void on_req(std::uint64_t now_ns, const MadPeer& from, std::uint64_t tid, const ReqMsg& m);
  void on_rep(std::uint64_t now_ns, const MadPeer& from, std::uint64_t tid, const RepMsg& m);
  void on_rtu(std::uint64_t now_ns, const RtuMsg& m);
  void on_rej(std::uint64_t now_ns, const RejMsg& m);
  void on_mra(std::uint64_t now_ns, const MraMsg& m);
  void on_dreq(std::uint64_t now_ns, const MadPeer& from, std::uint64_t tid, const DreqMsg& m);
  void on_drep(std::uint64_t now_ns, const DrepMsg& m);
  void on_sidr_req(const MadPeer& from, std::uint64_t tid, const SidrReqMsg& m);
  void on_sidr_rep(const SidrRepMsg& m);
  void drop() { ++counters_.mads_dropped; }

  EndpointConfig config_;
  std::mt19937 rng_;
  std::uint32_t id_operand_;  // XORed into a counter, as the kernel's random_id_operand
  std::uint32_t next_id_ = 1;
  std::uint32_t next_tid_ = 1;
  std::map<CommId, Connection> conns_;
  std::map<std::uint64_t, std::uint64_t> listeners_;  // service ID -> context
  std::deque<OutgoingMad> out_;
  std::deque<CmEvent> events_;
  CmCounters counters_;
};

}  // namespace xroce::cm
