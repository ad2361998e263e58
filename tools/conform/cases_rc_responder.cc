// IBA chapter 9, the RC responder: the peer is the requester, the target answers. Each rule
// is cited by its IBA section and the rxe function that enforces the same check.
#include <fmt/format.h>

#include "rc_session.h"

namespace xroce::conform {
namespace {

using wire::NakCode;
using wire::Opcode;
using Bytes = std::vector<std::uint8_t>;

constexpr std::uint32_t kMtu = 1024;
constexpr std::uint32_t kP = kTargetRqPsn;

// The four request kinds that the PSN, key and bounds rules apply to alike.
enum class Op { kSend, kWrite, kRead, kCmpSwap, kFetchAdd };
const char* op_name(Op op) {
  switch (op) {
    case Op::kSend:
      return "send";
    case Op::kWrite:
      return "write";
    case Op::kRead:
      return "read";
    case Op::kCmpSwap:
      return "cmp_swap";
    case Op::kFetchAdd:
      return "fetch_add";
  }
  return "?";
}
bool is_atomic(Op op) {
  return op == Op::kCmpSwap || op == Op::kFetchAdd;
}

// Sends one request of kind `op` at `psn` against [va, va+len) with `rkey`.
void send_request(Session& s, Op op, std::uint32_t psn, std::uint64_t va, std::uint32_t rkey,
                  std::uint32_t len = 64) {
  switch (op) {
    case Op::kSend:
      s.send(s.req(Opcode::kRcSendOnly, psn), pattern(len, 1));
      return;
    case Op::kWrite:
      s.send(s.write(Opcode::kRcWriteOnly, psn, va, rkey, len), pattern(len, 2));
      return;
    case Op::kRead:
      s.send(s.read(psn, va, rkey, len));
      return;
    case Op::kCmpSwap:
      s.send(s.atomic(Opcode::kRcCompareSwap, psn, va, rkey, 5, 0));
      return;
    case Op::kFetchAdd:
      s.send(s.atomic(Opcode::kRcFetchAdd, psn, va, rkey, 3, 0));
      return;
  }
}

// The first packet of the answer to a successful request of kind `op` at `psn`.
void expect_success(Session& s, Op op, std::uint32_t psn, const std::string& what) {
  const Reply r = s.expect(what);
  const Opcode want = op == Op::kRead ? Opcode::kRcReadResponseOnly
                      : is_atomic(op) ? Opcode::kRcAtomicAck
                                      : Opcode::kRcAck;
  check(r.opcode() == want && r.psn() == psn && r.hdr().aeth && r.hdr().aeth->is_ack(),
        fmt::format("{}: {} PSN {:#x} with an ACK AETH", what, wire::opcode_info(want).name, psn),
        describe(r.bytes));
}

void add(std::vector<Case>& out, std::string name, std::string chapter, std::string rule,
         std::string title, std::function<void(CaseContext&)> run) {
  out.push_back(
      Case{std::move(name), std::move(chapter), std::move(rule), std::move(title), std::move(run)});
}

const char* const kPsnChapter = "9.7 RC responder: PSN";
const char* const kDupChapter = "9.7 RC responder: duplicates";
const char* const kAckChapter = "9.7 RC responder: acknowledgement";
const char* const kRnrChapter = "9.7 RC responder: RNR";
const char* const kAccessChapter = "9.7 RC responder: remote access";
const char* const kInvChapter = "9.7 RC responder: invalid request";
const char* const kAtomicChapter = "9.4 atomics";
const char* const kReadChapter = "9.4 RDMA READ responses";
const char* const kWrapChapter = "9.7 PSN wrap";
const char* const kDataChapter = "9.4 operations: data placement";

void add_psn_cases(std::vector<Case>& out) {
  for (Op op : {Op::kSend, Op::kWrite, Op::kRead, Op::kFetchAdd}) {
    add(out, fmt::format("rc.resp.psn.in_order_{}", op_name(op)), kPsnChapter,
        "IBA 9.7 PSN == ePSN is executed and acknowledged (rxe_resp.c check_psn)",
        "a request at the expected PSN is executed", [op](CaseContext& ctx) {
          if (is_atomic(op)) require_atomics(ctx);
          Session s(ctx);
          if (op == Op::kSend) s.post_recv(1, 0, 4096);
          send_request(s, op, kP, s.va(64), s.mr.rkey);
          expect_success(s, op, kP, "answer at ePSN");
        });
    add(out, fmt::format("rc.resp.psn.ahead_{}", op_name(op)), kPsnChapter,
        "IBA 9.7 PSN ahead of ePSN: NAK PSN sequence error carrying ePSN "
        "(rxe_resp.c check_psn)",
        "a request ahead of the expected PSN is NAKed with ePSN", [op](CaseContext& ctx) {
          if (is_atomic(op)) require_atomics(ctx);
          Session s(ctx);
          s.post_recv(1, 0, 4096);
          send_request(s, op, kP + 2, s.va(64), s.mr.rkey);
          s.expect_nak(kP, NakCode::kPsnSequenceError, "request 2 ahead");
          s.expect_no_cqe("an out-of-sequence request is not executed");
        });
  }
  add(out, "rc.resp.psn.one_nak_per_gap", kPsnChapter,
      "IBA 9.7 one NAK per sequence error until ePSN arrives (rxe_resp.c check_psn "
      "sent_psn_nak)",
      "a second out-of-sequence request draws no second NAK", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(1, 0, 4096);
        s.send(s.req(Opcode::kRcSendOnly, kP + 1), pattern(8, 1));
        s.expect_nak(kP, NakCode::kPsnSequenceError, "first gap");
        s.send(s.req(Opcode::kRcSendOnly, kP + 2), pattern(8, 1));
        s.expect_silence("the gap was NAKed already");
      });
  add(out, "rc.resp.psn.recovers_after_nak", kPsnChapter,
      "IBA 9.7 after a sequence NAK, the request at ePSN is accepted",
      "the resent request at ePSN is executed", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(1, 0, 4096);
        s.send(s.req(Opcode::kRcSendOnly, kP + 1), pattern(8, 1));
        s.expect_nak(kP, NakCode::kPsnSequenceError, "gap");
        s.send(s.req(Opcode::kRcSendOnly, kP), pattern(8, 3));
        s.expect_ack(kP, "resent at ePSN");
        const Cqe c = s.expect_cqe(wc::kSuccess, "the receive");
        check(c.byte_len == 8, "byte_len 8", fmt::format("byte_len {}", c.byte_len));
        s.expect_memory(0, pattern(8, 3), "the receive buffer");
      });
}

void add_duplicate_cases(std::vector<Case>& out) {
  add(out, "rc.resp.dup.send", kDupChapter,
      "IBA 9.7 a duplicate SEND is acknowledged and not executed again "
      "(rxe_resp.c duplicate_request)",
      "a replayed SEND is ACKed and consumes no second receive", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(1, 0, 1024);
        s.post_recv(2, 1024, 1024);
        s.send(s.req(Opcode::kRcSendOnly, kP), pattern(16, 1));
        s.expect_ack(kP, "the SEND");
        s.expect_cqes(1, "the first receive");
        s.send(s.req(Opcode::kRcSendOnly, kP), pattern(16, 9));
        s.expect_ack(kP, "the duplicate SEND");
        s.expect_no_cqe("a duplicate consumes no receive");
        s.expect_memory(1024, Bytes(16, 0), "the second receive buffer untouched");
      });
  add(out, "rc.resp.dup.write", kDupChapter,
      "IBA 9.7 a duplicate RDMA WRITE is acknowledged (rxe_resp.c duplicate_request)",
      "a replayed WRITE is ACKed again", [](CaseContext& ctx) {
        Session s(ctx);
        s.send(s.write(Opcode::kRcWriteOnly, kP, s.va(0), s.mr.rkey, 32), pattern(32, 1));
        s.expect_ack(kP, "the WRITE");
        s.send(s.write(Opcode::kRcWriteOnly, kP, s.va(0), s.mr.rkey, 32), pattern(32, 1));
        s.expect_ack(kP, "the duplicate WRITE");
        s.expect_memory(0, pattern(32, 1), "the written bytes");
      });
  add(out, "rc.resp.dup.read", kDupChapter,
      "IBA 9.7 a duplicate RDMA READ is executed again from the responder's resources "
      "(rxe_resp.c duplicate_request)",
      "a replayed READ returns the data again at its PSN", [](CaseContext& ctx) {
        Session s(ctx);
        s.fill(0, 64, 5);
        s.send(s.read(kP, s.va(0), s.mr.rkey, 64));
        s.expect(" the READ response");
        s.send(s.read(kP, s.va(0), s.mr.rkey, 64));
        const Reply r = s.expect("the replayed READ response");
        check(r.opcode() == Opcode::kRcReadResponseOnly && r.psn() == kP &&
                  Bytes(r.payload().begin(), r.payload().end()) == pattern(64, 5),
              fmt::format("READ_RESPONSE_ONLY PSN {:#x} with the 64 bytes", kP), describe(r.bytes));
      });
  add(out, "rc.resp.dup.read_resumed", kDupChapter,
      "IBA 9.7 a duplicate READ at a PSN inside an earlier READ resumes from that "
      "packet (rxe_resp.c duplicate_request)",
      "a replayed READ for the 2nd of 3 packets is answered from that packet on",
      [](CaseContext& ctx) {
        Session s(ctx);
        s.fill(0, 3 * kMtu, 9);
        s.send(s.read(kP, s.va(0), s.mr.rkey, 3 * kMtu));
        for (int i = 0; i < 3; ++i)
          s.expect("the original READ responses");
        s.send(s.read(kP + 1, s.va(kMtu), s.mr.rkey, 2 * kMtu));
        const Reply first = s.expect("the resumed READ's first response");
        const Bytes want = pattern(3 * kMtu, 9);
        // The replay may open with FIRST (a new message) or MIDDLE (the old one resumed, as
        // rxe's read_reply does): what counts is the PSN and the bytes.
        const bool opens = first.opcode() == Opcode::kRcReadResponseFirst ||
                           first.opcode() == Opcode::kRcReadResponseMiddle;
        check(first.psn() == kP + 1 && opens &&
                  Bytes(first.payload().begin(), first.payload().end()) ==
                      Bytes(want.begin() + kMtu, want.begin() + 2 * kMtu),
              fmt::format("READ_RESPONSE_FIRST or _MIDDLE PSN {:#x} with bytes {}..{}", kP + 1,
                          kMtu, 2 * kMtu),
              describe(first.bytes));
        const Reply last = s.expect("the resumed READ's last response");
        check(last.psn() == kP + 2 && last.opcode() == Opcode::kRcReadResponseLast,
              fmt::format("READ_RESPONSE_LAST PSN {:#x}", kP + 2), describe(last.bytes));
      });
  for (Op op : {Op::kCmpSwap, Op::kFetchAdd}) {
    add(out, fmt::format("rc.resp.dup.{}", op_name(op)), kDupChapter,
        "IBA 9.7 a duplicate atomic is answered from the responder's saved "
        "result and not executed again (rxe_resp.c duplicate_request, find_resource)",
        "a replayed atomic returns the first original value, memory changes once",
        [op](CaseContext& ctx) {
          require_atomics(ctx);
          Session s(ctx);
          std::vector<std::uint8_t> v(8, 0);
          v[0] = 0;  // host-order 0: compare 0 swaps to 5; add 3 makes 3
          ctx.target.write_mr(s.mr, 0, v);
          send_request(s, op, kP, s.va(0), s.mr.rkey);
          const Reply a = s.expect("the atomic's answer");
          check(a.opcode() == Opcode::kRcAtomicAck && a.hdr().atomic_ack_orig == 0u,
                "ATOMIC_ACKNOWLEDGE orig 0", describe(a.bytes));
          const Bytes after = s.memory(0, 8);
          send_request(s, op, kP, s.va(0), s.mr.rkey);
          const Reply d = s.expect("the duplicate's answer");
          check(
              d.opcode() == Opcode::kRcAtomicAck && d.psn() == kP && d.hdr().atomic_ack_orig == 0u,
              "the saved ATOMIC_ACKNOWLEDGE again: orig 0", describe(d.bytes));
          s.expect_memory(0, after, "memory changed once");
        });
  }
}

void add_ack_cases(std::vector<Case>& out) {
  add(out, "rc.resp.ack.coalesced", kAckChapter,
      "IBA 9.7 one ACK may acknowledge several requests; its MSN counts them",
      "three SENDs, AckReq on the last: the ACK for it carries MSN 3", [](CaseContext& ctx) {
        Session s(ctx);
        for (int i = 0; i < 3; ++i)
          s.post_recv(i, i * 256, 256);
        s.send(s.req(Opcode::kRcSendOnly, kP, false), pattern(8, 1));
        s.send(s.req(Opcode::kRcSendOnly, kP + 1, false), pattern(8, 2));
        s.send(s.req(Opcode::kRcSendOnly, kP + 2, true), pattern(8, 3));
        Reply r = s.expect("an ACK");
        while (r.psn() != kP + 2)
          r = s.expect("the ACK for the third SEND");
        check(r.hdr().aeth && r.hdr().aeth->is_ack() && r.hdr().aeth->msn == 3,
              "ACK PSN +2 with MSN 3", describe(r.bytes));
        s.expect_cqes(3, "three receives");
      });
  add(out, "rc.resp.ack.msn_per_message", kAckChapter,
      "IBA 9.7 the MSN counts messages, not packets",
      "a 3-packet SEND then a SEND_ONLY: MSN 2 on the last ACK", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(1, 0, 4 * kMtu);
        s.post_recv(2, 4 * kMtu, kMtu);
        s.send(s.req(Opcode::kRcSendFirst, kP, false), pattern(kMtu, 1));
        s.send(s.req(Opcode::kRcSendMiddle, kP + 1, false), pattern(kMtu, 2));
        s.send(s.req(Opcode::kRcSendLast, kP + 2, false), pattern(100, 3));
        s.send(s.req(Opcode::kRcSendOnly, kP + 3, true), pattern(10, 4));
        Reply r = s.expect("an ACK");
        while (r.psn() != kP + 3)
          r = s.expect("the ACK for the SEND_ONLY");
        check(r.hdr().aeth && r.hdr().aeth->is_ack() && r.hdr().aeth->msn == 2,
              "ACK PSN +3 with MSN 2", describe(r.bytes));
        const auto c = s.expect_cqes(2, "two receives");
        check(c[0].byte_len == 2 * kMtu + 100, "first receive of 2148 bytes",
              fmt::format("{} bytes", c[0].byte_len));
      });
}

void add_rnr_cases(std::vector<Case>& out) {
  add(out, "rc.resp.rnr.no_receive", kRnrChapter,
      "IBA 9.7 a SEND with no receive posted draws an RNR NAK with the QP's "
      "min_rnr_timer (rxe_resp.c check_resource)",
      "RNR NAK at the SEND's PSN, timer = min_rnr_timer", [](CaseContext& ctx) {
        QpSpec q;
        q.min_rnr_timer = 12;
        Session s(ctx, q);
        s.send(s.req(Opcode::kRcSendOnly, kP), pattern(8, 1));
        s.expect_rnr_nak(kP, "SEND without a receive");
      });
  add(out, "rc.resp.rnr.write_imm_no_receive", kRnrChapter,
      "IBA 9.7 RDMA WRITE with immediate consumes a receive: RNR NAK without one",
      "RNR NAK for WRITE_ONLY_WITH_IMMEDIATE", [](CaseContext& ctx) {
        Session s(ctx);
        s.send(s.write(Opcode::kRcWriteOnlyImm, kP, s.va(0), s.mr.rkey, 8), pattern(8, 1));
        s.expect_rnr_nak(kP, "WRITE with immediate without a receive");
      });
  add(out, "rc.resp.rnr.then_accepted", kRnrChapter,
      "IBA 9.7 after an RNR NAK the same PSN is accepted once a receive is posted",
      "the retried SEND is ACKed and lands", [](CaseContext& ctx) {
        Session s(ctx);
        s.send(s.req(Opcode::kRcSendOnly, kP), pattern(8, 1));
        s.expect_rnr_nak(kP, "no receive yet");
        s.post_recv(7, 0, 64);
        s.send(s.req(Opcode::kRcSendOnly, kP), pattern(8, 1));
        s.expect_ack(kP, "the retried SEND");
        const Cqe c = s.expect_cqe(wc::kSuccess, "the receive");
        check(c.wr_id == 7, "wr_id 7", fmt::format("wr_id {}", c.wr_id));
      });
  add(out, "rc.resp.rnr.write_needs_no_receive", kRnrChapter,
      "IBA 9.4 RDMA WRITE without immediate consumes no receive: no RNR NAK",
      "a WRITE is ACKed with no receive posted", [](CaseContext& ctx) {
        Session s(ctx);
        s.send(s.write(Opcode::kRcWriteOnly, kP, s.va(0), s.mr.rkey, 8), pattern(8, 1));
        s.expect_ack(kP, "the WRITE");
      });
}

// Remote access: every key, bounds and rights violation of every RDMA operation.
enum class Violation { kBadRkey, kPastEnd, kBeforeStart, kNoMrRight };
const char* violation_name(Violation v) {
  switch (v) {
    case Violation::kBadRkey:
      return "bad_rkey";
    case Violation::kPastEnd:
      return "past_end";
    case Violation::kBeforeStart:
      return "before_start";
    case Violation::kNoMrRight:
      return "no_mr_right";
  }
  return "?";
}

std::uint32_t access_for(Op op) {
  switch (op) {
    case Op::kWrite:
      return access::kRemoteWrite;
    case Op::kRead:
      return access::kRemoteRead;
    default:
      return access::kRemoteAtomic;
  }
}

void add_access_cases(std::vector<Case>& out) {
  for (Op op : {Op::kWrite, Op::kRead, Op::kCmpSwap, Op::kFetchAdd}) {
    for (Violation v : {Violation::kBadRkey, Violation::kPastEnd, Violation::kBeforeStart,
                        Violation::kNoMrRight}) {
      add(out, fmt::format("rc.resp.access.{}.{}", op_name(op), violation_name(v)), kAccessChapter,
          "IBA 9.7 R_Key, bounds and access rights are checked: NAK remote access error "
          "(rxe_resp.c check_rkey)",
          fmt::format("{} with {}: NAK remote access error, nothing executed", op_name(op),
                      violation_name(v)),
          [op, v](CaseContext& ctx) {
            if (is_atomic(op)) require_atomics(ctx);
            const std::uint32_t mr_access = v == Violation::kNoMrRight
                                                ? (access::kAllRemote & ~access_for(op))
                                                : access::kAllRemote;
            Session s(ctx, QpSpec{}, mr_access);
            std::uint64_t va = s.va(0);
            std::uint32_t rkey = s.mr.rkey;
            const std::uint32_t len = is_atomic(op) ? 8 : 64;
            if (v == Violation::kBadRkey) rkey ^= 0x00808000;
            if (v == Violation::kPastEnd) va = s.va(kBufferBytes - len + 8);
            if (v == Violation::kBeforeStart) va = s.va(0) - 8;
            send_request(s, op, kP, va, rkey, len);
            s.expect_nak(kP, NakCode::kRemoteAccessError, "the violating request");
            if (op == Op::kWrite) s.expect_memory(kBufferBytes - 56, Bytes(56, 0), "no bytes");
          });
    }
  }
  for (Op op : {Op::kWrite, Op::kRead, Op::kFetchAdd}) {
    add(out, fmt::format("rc.resp.access.qp_denies_{}", op_name(op)), kAccessChapter,
        "IBA 9.7 an operation the QP's access flags do not enable: NAK invalid request "
        "(rxe_resp.c check_op_valid)",
        fmt::format("{} to a QP without the right: NAK invalid request", op_name(op)),
        [op](CaseContext& ctx) {
          if (is_atomic(op)) require_atomics(ctx);
          QpSpec q;
          q.access = access::kAllRemote & ~access_for(op);
          Session s(ctx, q);
          send_request(s, op, kP, s.va(0), s.mr.rkey, 8);
          s.expect_nak(kP, NakCode::kInvalidRequest, "the disabled operation");
        });
  }
  add(out, "rc.resp.access.error_moves_qp_to_error", kAccessChapter,
      "IBA 9.9 a remote access error on the responder puts the QP in the error state "
      "(rxe_resp.c do_class_ac_error)",
      "after the NAK the target QP is in ERROR", [](CaseContext& ctx) {
        Session s(ctx);
        s.send(s.write(Opcode::kRcWriteOnly, kP, s.va(0), s.mr.rkey ^ 0x00808000, 8),
               pattern(8, 1));
        s.expect_nak(kP, NakCode::kRemoteAccessError, "bad R_Key");
        ctx.peer.idle(ctx.timing.silence_ns);
        check(ctx.target.in_error(s.qp), "the QP in ERROR", "the QP still working");
      });
  add(out, "rc.resp.access.zero_length_write_any_rkey", kAccessChapter,
      "IBA 9.4 a zero-length RDMA WRITE needs no valid R_Key (rxe_resp.c check_rkey)",
      "WRITE of 0 bytes with a made-up R_Key is ACKed", [](CaseContext& ctx) {
        Session s(ctx);
        s.send(s.write(Opcode::kRcWriteOnly, kP, 0, 0xDEAD00, 0));
        s.expect_ack(kP, "the empty WRITE");
      });
  add(out, "rc.resp.access.zero_length_read_any_rkey", kAccessChapter,
      "IBA 9.4 a zero-length RDMA READ needs no valid R_Key: one empty response "
      "(rxe_resp.c check_rkey)",
      "READ of 0 bytes: READ_RESPONSE_ONLY without payload", [](CaseContext& ctx) {
        Session s(ctx);
        s.send(s.read(kP, 0, 0xDEAD00, 0));
        const Reply r = s.expect("the empty READ's response");
        check(r.opcode() == Opcode::kRcReadResponseOnly && r.psn() == kP && r.payload().empty(),
              "READ_RESPONSE_ONLY without payload", describe(r.bytes));
      });
}

void add_invalid_request_cases(std::vector<Case>& out) {
  struct Seq {
    const char* name;
    const char* title;
    std::vector<Opcode> ops;  // the last one is out of sequence
  };
  const std::vector<Seq> seqs = {
      {"send_middle_first", "SEND_MIDDLE with no SEND_FIRST", {Opcode::kRcSendMiddle}},
      {"send_last_first", "SEND_LAST with no SEND_FIRST", {Opcode::kRcSendLast}},
      {"write_middle_first", "RDMA_WRITE_MIDDLE with no WRITE_FIRST", {Opcode::kRcWriteMiddle}},
      {"write_last_first", "RDMA_WRITE_LAST with no WRITE_FIRST", {Opcode::kRcWriteLast}},
      {"send_only_inside_send",
       "SEND_ONLY between SEND_FIRST and SEND_LAST",
       {Opcode::kRcSendFirst, Opcode::kRcSendOnly}},
      {"write_inside_send",
       "RDMA_WRITE_MIDDLE inside a SEND",
       {Opcode::kRcSendFirst, Opcode::kRcWriteMiddle}},
      {"send_inside_write",
       "SEND_MIDDLE inside an RDMA WRITE",
       {Opcode::kRcWriteFirst, Opcode::kRcSendMiddle}},
      {"read_inside_send",
       "RDMA READ request inside a SEND",
       {Opcode::kRcSendFirst, Opcode::kRcReadRequest}},
  };
  for (const Seq& q : seqs) {
    add(out, fmt::format("rc.resp.inv.opseq.{}", q.name), kInvChapter,
        "IBA 9.7 opcode sequence violation: NAK invalid request (rxe_resp.c check_op_seq)", q.title,
        [q](CaseContext& ctx) {
          Session s(ctx);
          s.post_recv(1, 0, 8 * kMtu);
          std::uint32_t psn = kP;
          for (std::size_t i = 0; i < q.ops.size(); ++i) {
            wire::TransportHeaders h = s.write(q.ops[i], psn, s.va(0), s.mr.rkey, 4 * kMtu);
            if (q.ops[i] == Opcode::kRcReadRequest) h = s.read(psn, s.va(0), s.mr.rkey, 8);
            const bool has_payload = h.info().has_payload;
            const bool last = i + 1 == q.ops.size();
            h.bth.ack_req = last;
            s.send(h, has_payload ? pattern(kMtu, 1) : Bytes{});
            if (!last) ++psn;
          }
          s.expect_nak(psn, NakCode::kInvalidRequest, q.title);
        });
  }
  struct Len {
    const char* name;
    const char* title;
    Opcode op;
    std::uint32_t payload;
    std::uint32_t dma_length;  // WRITE only
  };
  const std::vector<Len> lens = {
      {"send_only_over_mtu", "SEND_ONLY longer than the path MTU", Opcode::kRcSendOnly, kMtu + 4,
       0},
      {"send_first_short", "SEND_FIRST shorter than the path MTU", Opcode::kRcSendFirst, kMtu - 4,
       0},
      {"write_only_over_mtu", "RDMA_WRITE_ONLY longer than the path MTU", Opcode::kRcWriteOnly,
       kMtu + 4, kMtu + 4},
      {"write_first_short", "RDMA_WRITE_FIRST shorter than the path MTU", Opcode::kRcWriteFirst,
       kMtu - 4, 2 * kMtu},
      {"write_only_length_mismatch", "RDMA_WRITE_ONLY payload != DMA length", Opcode::kRcWriteOnly,
       64, 128},
  };
  for (const Len& l : lens) {
    add(out, fmt::format("rc.resp.inv.length.{}", l.name), kInvChapter,
        "IBA 9.7 packet length against the path MTU and the DMA length: NAK invalid "
        "request (rxe_resp.c check_length, check_rkey)",
        l.title, [l](CaseContext& ctx) {
          Session s(ctx);
          s.post_recv(1, 0, 8 * kMtu);
          s.send(s.write(l.op, kP, s.va(0), s.mr.rkey, l.dma_length), pattern(l.payload, 1));
          s.expect_nak(kP, NakCode::kInvalidRequest, l.title);
        });
  }
  add(out, "rc.resp.inv.length.send_over_receive", kInvChapter,
      "IBA 9.7 a SEND longer than the receive buffer: NAK invalid request, the receive "
      "completes in error (rxe_resp.c send_data_in)",
      "SEND of 200 bytes into a 100-byte receive", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(1, 0, 100);
        s.send(s.req(Opcode::kRcSendOnly, kP), pattern(200, 1));
        s.expect_nak(kP, NakCode::kInvalidRequest, "the overlong SEND");
        const auto c = s.expect_cqes(1, "the receive");
        check(c[0].status != wc::kSuccess, "the receive completes in error",
              wc::status_name(c[0].status));
      });
  add(out, "rc.resp.inv.length.read_over_2gib", kInvChapter,
      "IBA 9.4 a READ's DMA length is at most 2^31: NAK invalid request (rxe_resp.c "
      "check_length)",
      "READ of 2^31 + 1 bytes", [](CaseContext& ctx) {
        Session s(ctx);
        s.send(s.read(kP, s.va(0), s.mr.rkey, 0x80000001u));
        s.expect_nak(kP, NakCode::kInvalidRequest, "the over-long READ");
      });
  add(out, "rc.resp.inv.no_rd_atomic_resources", kInvChapter,
      "IBA 9.7 a READ to a QP with max_dest_rd_atomic 0: NAK invalid request "
      "(rxe_resp.c check_resource)",
      "READ when the responder offers no resources", [](CaseContext& ctx) {
        QpSpec q;
        q.max_dest_rd_atomic = 0;
        Session s(ctx, q);
        s.send(s.read(kP, s.va(0), s.mr.rkey, 8));
        s.expect_nak(kP, NakCode::kInvalidRequest, "READ without resources");
      });
  add(out, "rc.resp.inv.ud_opcode_on_rc", kInvChapter,
      "IBA 9.6 an opcode of another transport is dropped (rxe_recv.c check_type_state)",
      "UD SEND_ONLY to an RC QP: silently dropped", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(1, 0, 256);
        s.send(s.req(Opcode::kUdSendOnly, kP), pattern(8, 1));
        s.expect_silence("a UD opcode is not RC");
        s.expect_no_cqe("nothing executed");
      });
}

void add_atomic_cases(std::vector<Case>& out) {
  for (Op op : {Op::kCmpSwap, Op::kFetchAdd}) {
    add(out, fmt::format("rc.resp.atomic.{}_misaligned", op_name(op)), kAtomicChapter,
        "IBA 9.4 an atomic's VA must be 8-byte aligned: NAK invalid request (rxe_resp.c "
        "atomic_reply)",
        "atomic at VA+4", [op](CaseContext& ctx) {
          require_atomics(ctx);
          Session s(ctx);
          send_request(s, op, kP, s.va(4), s.mr.rkey);
          s.expect_nak(kP, NakCode::kInvalidRequest, "the misaligned atomic");
        });
  }
  struct AtomicCase {
    const char* name;
    Opcode op;
    std::uint64_t start, swap_add, compare, want_after;
  };
  const std::vector<AtomicCase> atomics = {
      {"cmp_swap_equal", Opcode::kRcCompareSwap, 7, 99, 7, 99},
      {"cmp_swap_different", Opcode::kRcCompareSwap, 7, 99, 8, 7},
      {"fetch_add", Opcode::kRcFetchAdd, 40, 2, 0, 42},
      {"fetch_add_wraps", Opcode::kRcFetchAdd, ~std::uint64_t{0}, 2, 0, 1},
  };
  for (const AtomicCase& a : atomics) {
    add(out, fmt::format("rc.resp.atomic.{}", a.name), kAtomicChapter,
        "IBA 9.4 the atomic returns the original value in AtomicAckETH and updates memory",
        fmt::format("{}: original returned, memory updated", a.name), [a](CaseContext& ctx) {
          require_atomics(ctx);
          Session s(ctx);
          Bytes v(8);
          for (int i = 0; i < 8; ++i)
            v[i] = static_cast<std::uint8_t>(a.start >> (8 * i));  // little-endian host
          ctx.target.write_mr(s.mr, 8, v);
          s.send(s.atomic(a.op, kP, s.va(8), s.mr.rkey, a.swap_add, a.compare));
          const Reply r = s.expect("ATOMIC_ACKNOWLEDGE");
          check(r.opcode() == Opcode::kRcAtomicAck && r.psn() == kP &&
                    r.hdr().atomic_ack_orig == a.start,
                fmt::format("ATOMIC_ACKNOWLEDGE orig {:#x}", a.start), describe(r.bytes));
          Bytes want(8);
          for (int i = 0; i < 8; ++i)
            want[i] = static_cast<std::uint8_t>(a.want_after >> (8 * i));
          s.expect_memory(8, want, "the word after the atomic");
        });
  }
}

void add_read_cases(std::vector<Case>& out) {
  add(out, "rc.resp.read.only", kReadChapter,
      "IBA 9.4 a READ of at most one MTU is one READ_RESPONSE_ONLY with an AETH",
      "READ of 100 bytes", [](CaseContext& ctx) {
        Session s(ctx);
        s.fill(0, 100, 3);
        s.send(s.read(kP, s.va(0), s.mr.rkey, 100));
        const Reply r = s.expect("READ_RESPONSE_ONLY");
        check(r.opcode() == Opcode::kRcReadResponseOnly && r.psn() == kP && r.hdr().aeth &&
                  Bytes(r.payload().begin(), r.payload().end()) == pattern(100, 3),
              "READ_RESPONSE_ONLY with the 100 bytes", describe(r.bytes));
      });
  add(out, "rc.resp.read.split", kReadChapter,
      "IBA 9.4 a READ longer than the MTU is split FIRST/MIDDLE/LAST at consecutive PSNs; "
      "AETH on FIRST and LAST only",
      "READ of 2.5 MTU", [](CaseContext& ctx) {
        Session s(ctx);
        const std::uint32_t len = 2 * kMtu + kMtu / 2;
        s.fill(0, len, 11);
        s.send(s.read(kP, s.va(0), s.mr.rkey, len));
        const Opcode want[] = {Opcode::kRcReadResponseFirst, Opcode::kRcReadResponseMiddle,
                               Opcode::kRcReadResponseLast};
        Bytes data;
        for (std::uint32_t i = 0; i < 3; ++i) {
          const Reply r = s.expect("a READ response");
          const bool aeth_ok = (i == 1) != r.hdr().aeth.has_value();
          check(r.opcode() == want[i] && r.psn() == kP + i && aeth_ok,
                fmt::format("{} PSN {:#x}", wire::opcode_info(want[i]).name, kP + i),
                describe(r.bytes));
          data.insert(data.end(), r.payload().begin(), r.payload().end());
        }
        check(data == pattern(len, 11), "the READ's bytes in order", hex(data));
      });
  add(out, "rc.resp.read.consumes_psns", kReadChapter,
      "IBA 9.7 a READ of n packets takes n PSNs: the next request is at PSN + n",
      "after a 3-packet READ, a SEND at PSN+3 is ACKed", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(1, 0, 64);
        s.send(s.read(kP, s.va(0), s.mr.rkey, 3 * kMtu));
        for (int i = 0; i < 3; ++i)
          s.expect("READ responses");
        s.send(s.req(Opcode::kRcSendOnly, kP + 3), pattern(8, 1));
        s.expect_ack(kP + 3, "the SEND after the READ");
      });
  add(out, "rc.resp.read.then_send_ordered", kReadChapter,
      "IBA 9.5 responses are returned in request order",
      "READ then SEND: the READ response comes before the SEND's ACK", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(1, 0, 64);
        s.send(s.read(kP, s.va(0), s.mr.rkey, 16));
        s.send(s.req(Opcode::kRcSendOnly, kP + 1), pattern(8, 1));
        const Reply a = s.expect("the READ response");
        check(a.opcode() == Opcode::kRcReadResponseOnly && a.psn() == kP,
              "READ_RESPONSE_ONLY first", describe(a.bytes));
        s.expect_ack(kP + 1, "then the SEND's ACK");
      });
}

void add_wrap_cases(std::vector<Case>& out) {
  add(out, "rc.resp.wrap.sends", kWrapChapter,
      "IBA 9.7 PSNs are modulo 2^24: 0xFFFFFE, 0xFFFFFF, 0 are in sequence",
      "three SENDs across the wrap", [](CaseContext& ctx) {
        QpSpec q;
        q.rq_psn = 0xFFFFFE;
        Session s(ctx, q);
        for (int i = 0; i < 3; ++i)
          s.post_recv(i, i * 64, 64);
        for (std::uint32_t i = 0; i < 3; ++i) {
          const std::uint32_t psn = (0xFFFFFE + i) & 0xFFFFFF;
          s.send(s.req(Opcode::kRcSendOnly, psn), pattern(8, 1));
          s.expect_ack(psn, "a SEND across the wrap");
        }
      });
  add(out, "rc.resp.wrap.read", kWrapChapter, "IBA 9.7 a READ's responses wrap from 0xFFFFFF to 0",
      "3-packet READ at 0xFFFFFF", [](CaseContext& ctx) {
        QpSpec q;
        q.rq_psn = 0xFFFFFF;
        Session s(ctx, q);
        s.send(s.read(0xFFFFFF, s.va(0), s.mr.rkey, 3 * kMtu));
        for (std::uint32_t want : {0xFFFFFFu, 0u, 1u}) {
          const Reply r = s.expect("a READ response across the wrap");
          check(r.psn() == want, fmt::format("PSN {:#x}", want), describe(r.bytes));
        }
      });
  add(out, "rc.resp.wrap.duplicate_behind", kWrapChapter,
      "IBA 9.7 a PSN just behind ePSN across the wrap is a duplicate, not ahead",
      "ePSN 1, a SEND at 0xFFFFFF again: ACK, not a sequence NAK", [](CaseContext& ctx) {
        QpSpec q;
        q.rq_psn = 0xFFFFFF;
        Session s(ctx, q);
        s.post_recv(1, 0, 64);
        s.post_recv(2, 64, 64);
        s.send(s.req(Opcode::kRcSendOnly, 0xFFFFFF), pattern(8, 1));
        s.expect_ack(0xFFFFFF, "first");
        s.send(s.req(Opcode::kRcSendOnly, 0), pattern(8, 1));
        s.expect_ack(0, "second");
        s.send(s.req(Opcode::kRcSendOnly, 0xFFFFFF), pattern(8, 1));
        // A duplicate is answered with an ACK for it or for a later PSN already received
        // (which acknowledges it too: rxe_resp.c duplicate_request ACKs ePSN - 1); never a NAK.
        const Reply r = s.expect("the duplicate's ACK");
        check(r.opcode() == Opcode::kRcAck && r.hdr().aeth && r.hdr().aeth->is_ack() &&
                  (r.psn() == 0xFFFFFF || r.psn() == 0),
              "ACK PSN 0xffffff or 0", describe(r.bytes));
        s.expect_cqes(2, "two receives, none for the duplicate");
      });
  add(out, "rc.resp.wrap.ahead_across", kWrapChapter,
      "IBA 9.7 a PSN ahead of ePSN across the wrap is a sequence error",
      "ePSN 0xFFFFFF, a SEND at 1: NAK with 0xFFFFFF", [](CaseContext& ctx) {
        QpSpec q;
        q.rq_psn = 0xFFFFFF;
        Session s(ctx, q);
        s.post_recv(1, 0, 64);
        s.send(s.req(Opcode::kRcSendOnly, 1), pattern(8, 1));
        s.expect_nak(0xFFFFFF, NakCode::kPsnSequenceError, "ahead across the wrap");
      });
}

void add_data_cases(std::vector<Case>& out) {
  add(out, "rc.resp.data.send_multi", kDataChapter,
      "IBA 9.4 a multi-packet SEND lands in order in one receive", "SEND FIRST/MIDDLE/LAST",
      [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(3, 0, 4 * kMtu);
        const Bytes all = pattern(2 * kMtu + 10, 21);
        s.send(s.req(Opcode::kRcSendFirst, kP, false), Bytes(all.begin(), all.begin() + kMtu));
        s.send(s.req(Opcode::kRcSendMiddle, kP + 1, false),
               Bytes(all.begin() + kMtu, all.begin() + 2 * kMtu));
        s.send(s.req(Opcode::kRcSendLast, kP + 2), Bytes(all.begin() + 2 * kMtu, all.end()));
        s.expect_ack(kP + 2, "the last packet");
        const Cqe c = s.expect_cqe(wc::kSuccess, "the receive");
        check(c.byte_len == all.size() && c.wr_id == 3, "wr_id 3, 2058 bytes",
              fmt::format("wr_id {} {} bytes", c.wr_id, c.byte_len));
        s.expect_memory(0, all, "the receive buffer");
      });
  add(out, "rc.resp.data.write_multi", kDataChapter,
      "IBA 9.4 a multi-packet RDMA WRITE lands at the RETH's VA", "WRITE FIRST/LAST",
      [](CaseContext& ctx) {
        Session s(ctx);
        const Bytes all = pattern(kMtu + 20, 31);
        wire::TransportHeaders first =
            s.write(Opcode::kRcWriteFirst, kP, s.va(256), s.mr.rkey, kMtu + 20);
        first.bth.ack_req = false;
        s.send(first, Bytes(all.begin(), all.begin() + kMtu));
        s.send(s.req(Opcode::kRcWriteLast, kP + 1), Bytes(all.begin() + kMtu, all.end()));
        s.expect_ack(kP + 1, "the WRITE");
        s.expect_memory(256, all, "the written range");
      });
  add(out, "rc.resp.data.send_with_imm", kDataChapter,
      "IBA 9.4 SEND with immediate: the receive completes with the ImmDt",
      "SEND_ONLY_WITH_IMMEDIATE", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(1, 0, 64);
        s.send(s.req(Opcode::kRcSendOnlyImm, kP), pattern(8, 1));
        s.expect_ack(kP, "the SEND");
        const Cqe c = s.expect_cqe(wc::kSuccess, "the receive");
        check(c.imm == 0x12345678 && (c.wc_flags & 2) != 0, "IBV_WC_WITH_IMM, imm 0x12345678",
              fmt::format("flags {:#x} imm {:#x}", c.wc_flags, c.imm));
      });
  add(out, "rc.resp.data.write_with_imm", kDataChapter,
      "IBA 9.4 RDMA WRITE with immediate: data at the VA and a receive completion with ImmDt",
      "RDMA_WRITE_ONLY_WITH_IMMEDIATE", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(5, 4096, 64);
        s.send(s.write(Opcode::kRcWriteOnlyImm, kP, s.va(0), s.mr.rkey, 24), pattern(24, 4));
        s.expect_ack(kP, "the WRITE");
        const Cqe c = s.expect_cqe(wc::kSuccess, "the receive");
        check(c.opcode == 0x81 && c.imm == 0x12345678 && c.wr_id == 5,
              "IBV_WC_RECV_RDMA_WITH_IMM wr_id 5 imm 0x12345678",
              fmt::format("opcode {:#x} wr_id {} imm {:#x}", c.opcode, c.wr_id, c.imm));
        s.expect_memory(0, pattern(24, 4), "the written bytes");
      });
}

}  // namespace

void add_rc_responder_cases(std::vector<Case>& out) {
  add_psn_cases(out);
  add_duplicate_cases(out);
  add_ack_cases(out);
  add_rnr_cases(out);
  add_access_cases(out);
  add_invalid_request_cases(out);
  add_atomic_cases(out);
  add_read_cases(out);
  add_wrap_cases(out);
  add_data_cases(out);
}

}  // namespace xroce::conform
