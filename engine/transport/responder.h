// The responder: executes inbound requests in PSN order and answers them. PSN checks,
// duplicates (re-ACK, READ replay from the responder resources, the atomic replay cache),
// opcode sequencing, access, length and R_Key checks with their NAKs, RNR NAKs, receive WQEs
// from the QP or its SRQ, ACK coalescing, immediate data and invalidation (docs/protocol.md
// §3.5-3.6); ATOMIC WRITE and FLUSH (IBA 1.5 annex); UC's rules (no responses: a gap, a
// sequence error, a missing WQE or an access error drops the message, and the next FIRST/ONLY
// resynchronises, IBA 9.7.5.1 classes D1/E); XRC targets (the XRCETH's SRQ, of the QP's XRC
// domain); and UD receive (docs/protocol.md §4). Modelled on rxe_resp.c.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "transport/qp_context.h"

namespace xroce::transport {

// One state per processing step (rxe_resp.c's order, docs/protocol.md §3.5) and one per IBA error
// class.
enum class ResponderState : std::uint8_t {
  kCheckPsn,
  kCheckOpSeq,
  kCheckOpValid,
  kCheckResource,
  kCheckLength,
  kCheckRkey,
  kExecute,
  kComplete,
  kAcknowledge,
  kDuplicate,
  kDone,
  kNakPsnSeq,          // class B: PSN sequence error, NAKed once
  kRnrNak,             // no receive WQE: RNR NAK, packet dropped
  kErrInvalidRequest,  // class C: opcode sequence, access flags, length, alignment
  kErrRemoteAccess,    // class C: R_Key, bounds, MR access flags
  kErrRemoteOp,        // class C: a malformed receive WQE
  kErrInvalidateRkey,  // SEND_WITH_INV naming nothing that can be invalidated
  kDropMessage,        // UC class D1/E: the message in progress is dropped, nothing answered
  kDrop,               // silently dropped
};

// READ / ATOMIC state kept for duplicates (rxe's resp_res), max_dest_rd_atomic entries.
struct ResponderResource {
  enum class Kind : std::uint8_t { kNone, kRead, kAtomic, kAtomicWrite, kFlush };
  Kind kind = Kind::kNone;
  MemoryRegionTable* mrs = nullptr;  // READ: where the R_Key is checked again per packet
  wire::Psn first_psn;
  wire::Psn last_psn;
  std::uint64_t va = 0;
  wire::Rkey rkey;
  std::uint32_t length = 0;
  std::uint64_t atomic_original = 0;
  std::uint32_t msn = 0;
};

class Responder {
 public:
  explicit Responder(QpContext& ctx) : ctx_(ctx) {}

  // Called at INIT->RTR with the ePSN and the resource count.
  void reset(wire::Psn rq_psn, std::uint8_t max_dest_rd_atomic);
  void handle_request(std::uint64_t now_ns, const wire::TransportHeaders& hdr, wire::Bytes payload);
  void handle_ud(const wire::TransportHeaders& hdr, wire::Bytes payload, const RxMeta& meta);
  // Next response packet (ACK, NAK, READ response, ATOMIC ACK), payload into `payload`.
  std::optional<Transmit> poll(wire::MutableBytes payload);
  bool has_output() const { return !jobs_.empty() || final_nak_.has_value(); }
  // Flushes the receive WQE in progress and the receive queue (QP -> ERR).
  void flush();

  wire::Psn epsn() const { return epsn_; }
  std::uint32_t msn() const { return msn_; }

 private:
  enum class InMessage : std::uint8_t { kNone, kSend, kWrite };

  struct Request {
    const wire::TransportHeaders& hdr;
    wire::Bytes payload;
    const wire::OpcodeInfo& info;
    wire::Psn psn;
  };

  struct Job {
    // kEmptyRead: READ RESPONSE ONLY with no payload (ATOMIC WRITE and FLUSH answers).
    enum class Kind : std::uint8_t { kAck, kAtomicAck, kRead, kEmptyRead };
    Kind kind = Kind::kAck;
    wire::Psn psn;  // next PSN to send
    wire::Aeth aeth;
    std::uint64_t atomic_original = 0;
    ResponderResource res;  // kRead: a copy, so recycling the ring cannot change a reply
    wire::Psn start_psn;    // kRead: where this reply began (the READ's first PSN or a replay's)
    // kRead: the last PSN this reply sends, and the byte offset (from res.va) one past the last
    // byte it reads: the READ's own, or a duplicate's that named a sub-range of it (duplicate()).
    wire::Psn end_psn{};
    std::uint64_t end_offset = 0;

    // The PSN responses are ordered by: the first this job sends.
    wire::Psn order_psn() const { return kind == Kind::kRead ? start_psn : psn; }
  };

  ResponderState step(ResponderState s, const Request& r);
  ResponderState check_psn(const Request& r);
  ResponderState check_op_seq(const Request& r) const;
  ResponderState check_op_valid(const Request& r) const;
  ResponderState check_resource(const Request& r);
  ResponderState check_length(const Request& r);
  ResponderState check_rkey(const Request& r);
  ResponderState execute(const Request& r);
  ResponderState complete(const Request& r);
  ResponderState duplicate(const Request& r);
  ResponderState execute_read(const Request& r);
  ResponderState execute_atomic(const Request& r);
  ResponderState execute_atomic_write(const Request& r);
  ResponderState execute_flush(const Request& r);
  ResponderState check_rkey_flush(const Request& r);
  ResponderState rkey_violation();
  ResponderState drop_message(const Request& r);
  ResponderState uc_error(const Request& r, WcStatus srq_status);
  bool resolve_xrc_target(const Request& r);
  void push_recv_completion(Completion c);
  wire::Opcode response_opcode(wire::Opcode rc_opcode) const;
  bool uc() const { return ctx_.config.type == QpType::kUc; }
  void queue_ack(wire::Psn psn, wire::Aeth aeth);
  // `restart_later`: a READ reply under way for a later request starts over (a go-back-N asked for
  // everything from the replay's PSN on); false for a sub-range, which asks for nothing else.
  void queue_replay(Job job, bool restart_later);
  void queue_nak(wire::Psn psn, wire::NakCode code);
  ResponderState acknowledge(const Request& r);
  ResponderState nak_psn_sequence();
  ResponderState rnr_nak(const Request& r);
  ResponderState fatal(const Request& r, wire::NakCode code, WcStatus recv_status);
  // The affiliated asynchronous error a class C fault raises (IBA 11.6.3): QP_ACCESS_ERR for a
  // remote access error (an R_Key, window or bounds violation), QP_REQ_ERR for an invalid
  // request, QP_FATAL otherwise.
  void raise_fatal_event(wire::NakCode code);
  ResponderResource& new_resource();
  std::optional<RecvRequest> take_recv();
  bool recv_sges_ok(const RecvRequest& recv) const;
  Transmit build_read_response(Job& job, wire::MutableBytes payload, bool* done);

  QpContext& ctx_;
  // The table the current request's keys and receive SGEs are checked against: the QP's PD,
  // or for an XRC target the PD of the SRQ the XRCETH names. Srq likewise.
  MemoryRegionTable* mrs_ = nullptr;
  Srq* srq_ = nullptr;
  std::uint32_t xrc_srqn_ = 0;
  bool drop_msg_ = false;  // UC: the rest of the current message is dropped
  wire::Psn epsn_;
  wire::Psn ack_psn_;  // PSN after the last SEND/WRITE/ATOMIC executed (docs/protocol.md §3.6)
  std::uint32_t msn_ = 0;
  bool nak_sent_ = false;  // a PSN-sequence NAK (or RNR NAK) is out; drop until in sequence
  InMessage in_message_ = InMessage::kNone;

  std::optional<RecvRequest> recv_;  // the receive WQE the current message fills
  std::uint32_t recv_bytes_ = 0;
  bool recv_too_long_ = false;     // the failing packet overflowed the receive WQE
  ProcessAddress write_addr_ = 0;  // where the next WRITE payload lands in the process
  std::uint32_t write_remaining_ = 0;
  std::uint32_t write_length_ = 0;
  wire::Rkey write_rkey_;

  std::vector<ResponderResource> resources_;
  std::size_t next_resource_ = 0;
  std::deque<Job> jobs_;
  std::optional<Job> final_nak_;  // the NAK that precedes the move to ERR; sent even in ERR
};

}  // namespace xroce::transport
