// The completer: matches responses (ACK, NAK, RNR NAK, READ responses, ATOMIC ACK) to the
// oldest outstanding send WQEs, completes them in order, and decides retries: go-back-N on a
// PSN-sequence NAK or an implied NAK, the local ACK timeout with retry_cnt, RNR waits with
// rnr_retry (docs/protocol.md §3.7-3.9). Modelled on rxe_comp.c.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/qp_context.h"
#include "transport/requester.h"

namespace xroce::transport {

// One state per step of handling a response, and one per way it can end.
enum class CompleterState : std::uint8_t {
  kGetWqe,
  kCheckPsn,
  kCheckAck,
  kRead,
  kAtomic,
  kWriteSend,
  kUpdateComp,
  kCompAck,
  kDone,
  kDrop,        // stale, ghost or out-of-window response: ignored
  kRetry,       // implied NAK or PSN sequence NAK: go-back-N (uses retry_cnt)
  kRnrRetry,    // RNR NAK: wait the NAK's timer, then go-back-N (uses rnr_retry)
  kFatalError,  // a NAK class that ends the QP, or bad response: complete in error
};

class Completer {
 public:
  Completer(QpContext& ctx, Requester& req) : ctx_(ctx), req_(req) {}

  void handle_response(std::uint64_t now_ns, const wire::TransportHeaders& hdr,
                       wire::Bytes payload);
  // The Local ACK Timeout, the adaptive retransmission timer and the RNR timer.
  void handle_timeout(std::uint64_t now_ns);
  void reset() {
    retry_started_ = false;
    resent_unanswered_ = false;
    gap_seen_ = false;
    replay_lost_ = false;
  }

 private:
  struct Response {
    const wire::TransportHeaders& hdr;
    wire::Bytes payload;
    const wire::OpcodeInfo& info;
    wire::Psn psn;
  };

  CompleterState step(CompleterState s, const Response& r);
  CompleterState get_wqe();
  CompleterState retry_once();
  CompleterState response_gap(const Response& r, bool in_head);
  CompleterState rnr_retry(const Response& r);
  CompleterState check_psn(const Response& r, SendWqe& w);
  CompleterState check_ack(const Response& r, SendWqe& w);
  CompleterState check_read_response(const Response& r, SendWqe& w);
  CompleterState check_nak(const Response& r, SendWqe& w);
  CompleterState do_read(const Response& r, SendWqe& w);
  // Selective READ repair (transport/read_repair.h).
  bool selective() const { return ctx_.config.selective_read_repair; }
  CompleterState read_ahead(const Response& r, bool in_head);
  // Asks for the ranges in `lost` again (queue_read_asks) and counts it as a loss; false as
  // queue_read_asks.
  bool ask_again(std::vector<ReadRepair::Range>& lost);
  // Queues one duplicate READ per READ the ranges in `lost` (sorted here) fall in, from that
  // READ's first PSN still missing to the last PSN lost in it, and records them as asked; false
  // when one falls on a PSN that is not a started READ's (a SEND, WRITE or ATOMIC): then only a
  // go-back-N repairs it, and nothing is queued.
  bool queue_read_asks(std::vector<ReadRepair::Range>& lost);
  // From `from` on, the first WQE that is not started or whose PSNs reach `psn` (sq_tail if
  // none): started WQEs hold consecutive PSN ranges from sq_head on.
  std::uint64_t started_wqe_reaching(wire::Psn psn, std::uint64_t from) const;
  // Moves comp_psn over the responses placed ahead that now follow it, completing their READs.
  void take_placed();
  CompleterState do_atomic(const Response& r, SendWqe& w);
  void complete_head(WcStatus status);
  void advance_comp_psn(std::uint64_t now_ns, wire::Psn psn);
  void start_retry(std::uint64_t now_ns, bool from_timeout);
  void probe_answered(const Response& r);
  void adaptive_retransmit(std::uint64_t now_ns);
  void fail(WcStatus status);

  QpContext& ctx_;
  Requester& req_;
  std::uint64_t now_ns_ = 0;  // of the response being handled
  WcStatus fatal_status_ = WcStatus::kSuccess;
  // The comp_psn a NAK-triggered retry started from: one retry at a time (docs/protocol.md §3.7).
  bool retry_started_ = false;
  wire::Psn retry_psn_;
  // A go-back-N resend (any cause) started from comp_psn and nothing has been acknowledged since:
  // a timer that expires now found the resent packet, or what answered it, lost
  // (QpCounters::resend_timeouts).
  bool resent_unanswered_ = false;
  // The newest response since the last progress that showed a gap before it (response_gap), and
  // whether the one being handled went back to or before it during a retry from comp_psn.
  bool gap_seen_ = false;
  wire::Psn last_gap_psn_;
  bool replay_lost_ = false;
  std::vector<ReadRepair::Range> lost_;  // scratch for ReadRepair's findings
};

}  // namespace xroce::transport
