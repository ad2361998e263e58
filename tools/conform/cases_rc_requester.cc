// IBA chapter 9, the RC requester: the target sends, the peer plays the responder and answers
// right, late, twice, wrongly or not at all.
#include <fmt/format.h>

#include <optional>
#include <stdexcept>

#include "rc_session.h"

namespace xroce::conform {
namespace {

using wire::Aeth;
using wire::NakCode;
using wire::Opcode;
using Bytes = std::vector<std::uint8_t>;

constexpr std::uint32_t kMtu = 1024;
constexpr std::uint32_t kS = kTargetSqPsn;
constexpr std::uint64_t kPeerVa = 0x7000000;
constexpr std::uint32_t kPeerRkey = 0x4242;

const char* const kReqChapter = "9.7 RC requester";
const char* const kRetryChapter = "9.7 RC requester: retry";
const char* const kNakChapter = "9.9 RC requester: NAKs";

void add(std::vector<Case>& out, std::string name, std::string chapter, std::string rule,
         std::string title, std::function<void(CaseContext&)> run) {
  out.push_back(
      Case{std::move(name), std::move(chapter), std::move(rule), std::move(title), std::move(run)});
}

QpSpec requester_spec() {
  QpSpec q;
  q.sq_psn = kS;
  q.timeout = 16;  // 268 ms: longer than any wait for silence, so nothing is resent unasked
  q.retry_cnt = 7;
  q.rnr_retry = 7;
  return q;
}

// The target posts an operation on its QP.
void post(Session& s, WrOp op, std::uint64_t wr_id, std::uint32_t length,
          std::uint32_t offset = 0) {
  SendSpec w;
  w.wr_id = wr_id;
  w.op = op;
  w.mr = s.mr.id;
  w.offset = offset;
  w.length = length;
  w.remote_addr = kPeerVa;
  w.rkey = kPeerRkey;
  w.compare_add = 1;
  w.swap = 2;
  s.ctx.target.post_send(s.qp, w);
}

wire::TransportHeaders response(const Session& s, Opcode op, std::uint32_t psn, Aeth aeth) {
  wire::TransportHeaders h = s.req(op, psn, false);
  if (h.info().headers.has(wire::Header::kAeth)) h.aeth = aeth;
  return h;
}

void ack(Session& s, std::uint32_t psn, std::uint32_t msn) {
  s.send(response(s, Opcode::kRcAck, psn, Aeth::ack(msn)));
}

// The target's next request: opcode and PSN as asked.
Reply expect_request(Session& s, Opcode op, std::uint32_t psn, const std::string& what) {
  const Reply r = s.expect(what);
  check(r.opcode() == op && r.psn() == psn,
        fmt::format("{}: {} PSN {:#x}", what, wire::opcode_info(op).name, psn), describe(r.bytes));
  return r;
}

void add_format_cases(std::vector<Case>& out) {
  add(out, "rc.req.send_only", kReqChapter,
      "IBA 9.7 the first request carries sq_psn; AckReq on the last packet of a message",
      "a 64-byte SEND: SEND_ONLY at sq_psn with AckReq and the bytes", [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        s.fill(0, 64, 7);
        post(s, WrOp::kSend, 1, 64);
        const Reply r = expect_request(s, Opcode::kRcSendOnly, kS, "the SEND");
        check(
            r.hdr().bth.ack_req && Bytes(r.payload().begin(), r.payload().end()) == pattern(64, 7),
            "AckReq and the 64 bytes", describe(r.bytes));
      });
  add(out, "rc.req.segmentation", kReqChapter,
      "IBA 9.4 a message longer than the MTU is split FIRST/MIDDLE/LAST, full MTUs first",
      "a 2.5-MTU SEND", [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        const std::uint32_t len = 2 * kMtu + kMtu / 2;
        s.fill(0, len, 3);
        post(s, WrOp::kSend, 1, len);
        const Opcode ops[] = {Opcode::kRcSendFirst, Opcode::kRcSendMiddle, Opcode::kRcSendLast};
        Bytes data;
        for (std::uint32_t i = 0; i < 3; ++i) {
          const Reply r = expect_request(s, ops[i], kS + i, "a SEND packet");
          data.insert(data.end(), r.payload().begin(), r.payload().end());
        }
        check(data == pattern(len, 3), "the message's bytes in order", hex(data));
      });
  add(out, "rc.req.path_mtu_within_port", kReqChapter,
      "IBA 9.4 no packet's payload exceeds the path MTU, and a RoCE path carries no more than "
      "the port's active MTU: given path_mtu 4096 on a smaller port, a QP either refuses it "
      "(modify_qp) or still sends packets the port carries",
      "path MTU 4096, a 2.5-port-MTU SEND: every packet at most the port's MTU, the bytes in order",
      [](CaseContext& ctx) {
        const std::uint32_t port_mtu = ctx.caps.port_mtu_bytes;
        if (port_mtu >= 4096) throw NotApplicable{"the port's MTU is 4096: no path MTU exceeds it"};
        QpSpec q = requester_spec();
        q.mtu_bytes = 4096;
        std::optional<Session> s;
        try {
          s.emplace(ctx, q);
        } catch (const std::runtime_error& e) {
          if (std::string(e.what()).find("modify_qp") != std::string::npos) return;  // refused
          throw;
        }
        const std::uint32_t len = 2 * port_mtu + port_mtu / 2;
        s->fill(0, len, 5);
        post(*s, WrOp::kSend, 1, len);
        Bytes data;
        for (std::uint32_t i = 0; data.size() < len && i < len / 256 + 1; ++i) {
          const Reply r = s->expect("a SEND packet");
          check(r.psn() == kS + i && r.payload().size() <= port_mtu,
                fmt::format("SEND packet at PSN {:#x} of at most {} bytes", kS + i, port_mtu),
                describe(r.bytes));
          data.insert(data.end(), r.payload().begin(), r.payload().end());
        }
        check(data == pattern(len, 5), "the message's bytes in order", hex(data));
      });
  add(out, "rc.req.write_reth", kReqChapter,
      "IBA 9.4 RDMA WRITE carries the remote VA, R_Key and the whole DMA length in its RETH",
      "WRITE of 100 bytes", [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        post(s, WrOp::kWrite, 1, 100);
        const Reply r = expect_request(s, Opcode::kRcWriteOnly, kS, "the WRITE");
        check(r.hdr().reth && r.hdr().reth->va == kPeerVa &&
                  r.hdr().reth->rkey.value() == kPeerRkey && r.hdr().reth->dma_length == 100,
              "RETH va 0x7000000 rkey 0x4242 len 100", describe(r.bytes));
      });
  add(out, "rc.req.read_consumes_psns", kReqChapter,
      "IBA 9.7 a READ request takes one PSN per response packet",
      "a 3-MTU READ then a SEND: the SEND is at PSN + 3", [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        post(s, WrOp::kRead, 1, 3 * kMtu);
        post(s, WrOp::kSend, 2, 8, 4 * kMtu);
        expect_request(s, Opcode::kRcReadRequest, kS, "the READ");
        expect_request(s, Opcode::kRcSendOnly, kS + 3, "the SEND after it");
      });
  add(out, "rc.req.atomic_format", kReqChapter,
      "IBA 9.4 a compare-and-swap carries VA, R_Key, swap and compare in its AtomicETH",
      "CMP_SWAP request", [](CaseContext& ctx) {
        require_atomics(ctx);
        Session s(ctx, requester_spec());
        post(s, WrOp::kCmpSwap, 1, 8);
        const Reply r = expect_request(s, Opcode::kRcCompareSwap, kS, "the atomic");
        check(r.hdr().atomic_eth && r.hdr().atomic_eth->va == kPeerVa &&
                  r.hdr().atomic_eth->swap_add == 2 && r.hdr().atomic_eth->compare == 1,
              "AtomicETH va 0x7000000 swap 2 compare 1", describe(r.bytes));
      });
}

void add_ack_cases(std::vector<Case>& out) {
  add(out, "rc.req.ack_completes", kReqChapter,
      "IBA 9.7 an ACK completes the requests up to its PSN", "SEND, ACK: one successful completion",
      [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        post(s, WrOp::kSend, 11, 8);
        expect_request(s, Opcode::kRcSendOnly, kS, "the SEND");
        ack(s, kS, 1);
        const Cqe c = s.expect_cqe(wc::kSuccess, "the SEND");
        check(c.wr_id == 11, "wr_id 11", fmt::format("wr_id {}", c.wr_id));
      });
  add(out, "rc.req.coalesced_ack", kReqChapter,
      "IBA 9.7 an ACK for PSN n acknowledges every request up to n (coalesced ACK)",
      "three SENDs, one ACK for the third: three completions in order", [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        for (std::uint64_t i = 0; i < 3; ++i)
          post(s, WrOp::kSend, 20 + i, 8);
        for (std::uint32_t i = 0; i < 3; ++i)
          expect_request(s, Opcode::kRcSendOnly, kS + i, "a SEND");
        ack(s, kS + 2, 3);
        const auto c = s.expect_cqes(3, "three SENDs");
        check(
            c[0].wr_id == 20 && c[1].wr_id == 21 && c[2].wr_id == 22 && c[2].status == wc::kSuccess,
            "wr_id 20, 21, 22 in order, success",
            fmt::format("{}, {}, {}", c[0].wr_id, c[1].wr_id, c[2].wr_id));
      });
  add(out, "rc.req.implied_ack_by_read_response", kReqChapter,
      "IBA 9.7 a READ response implicitly acknowledges the requests before the READ",
      "SEND then READ; only the READ response: both complete", [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        post(s, WrOp::kSend, 1, 8);
        post(s, WrOp::kRead, 2, 16, 1024);
        expect_request(s, Opcode::kRcSendOnly, kS, "the SEND");
        expect_request(s, Opcode::kRcReadRequest, kS + 1, "the READ");
        s.send(response(s, Opcode::kRcReadResponseOnly, kS + 1, Aeth::ack(2)), pattern(16, 5));
        const auto c = s.expect_cqes(2, "SEND and READ");
        check(c[0].wr_id == 1 && c[0].status == wc::kSuccess && c[1].wr_id == 2,
              "the SEND completed by the implied ACK, then the READ",
              fmt::format("wr_id {} {}, wr_id {}", c[0].wr_id, wc::status_name(c[0].status),
                          c[1].wr_id));
        s.expect_memory(1024, pattern(16, 5), "the READ's data");
      });
  add(out, "rc.req.implied_ack_by_atomic_response", kReqChapter,
      "IBA 9.7 an atomic response implicitly acknowledges the requests before it",
      "SEND then FETCH_ADD; only the atomic response: both complete", [](CaseContext& ctx) {
        require_atomics(ctx);
        Session s(ctx, requester_spec());
        post(s, WrOp::kSend, 1, 8);
        post(s, WrOp::kFetchAdd, 2, 8, 2048);
        expect_request(s, Opcode::kRcSendOnly, kS, "the SEND");
        expect_request(s, Opcode::kRcFetchAdd, kS + 1, "the atomic");
        wire::TransportHeaders h = response(s, Opcode::kRcAtomicAck, kS + 1, Aeth::ack(2));
        h.atomic_ack_orig = 0x1122334455667788ull;
        s.send(h);
        const auto c = s.expect_cqes(2, "SEND and atomic");
        check(c[0].wr_id == 1 && c[1].wr_id == 2 && c[1].status == wc::kSuccess,
              "both complete in order", fmt::format("{} {}", c[0].wr_id, c[1].wr_id));
        s.expect_memory(2048, {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11},
                        "the original value in the local buffer");
      });
  add(out, "rc.req.ghost_ack_ahead", kReqChapter,
      "IBA 9.7 an ACK for a PSN not yet sent (ghost) is discarded (rxe_comp.c check_psn)",
      "ACK for PSN+5 after one SEND: no completion; the real ACK completes it",
      [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        post(s, WrOp::kSend, 1, 8);
        expect_request(s, Opcode::kRcSendOnly, kS, "the SEND");
        ack(s, kS + 5, 6);
        s.expect_no_cqe("a ghost ACK completes nothing");
        ack(s, kS, 1);
        s.expect_cqe(wc::kSuccess, "the SEND after the real ACK");
      });
  add(out, "rc.req.duplicate_ack_ignored", kReqChapter,
      "IBA 9.7 an ACK for an already acknowledged PSN is discarded",
      "a second ACK for the same SEND completes nothing more", [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        post(s, WrOp::kSend, 1, 8);
        post(s, WrOp::kSend, 2, 8);
        expect_request(s, Opcode::kRcSendOnly, kS, "SEND 1");
        expect_request(s, Opcode::kRcSendOnly, kS + 1, "SEND 2");
        ack(s, kS, 1);
        s.expect_cqes(1, "SEND 1");
        ack(s, kS, 1);
        s.expect_no_cqe("the duplicate ACK");
        ack(s, kS + 1, 2);
        s.expect_cqes(1, "SEND 2");
      });
  add(out, "rc.req.unsolicited_response_ignored", kReqChapter,
      "IBA 9.7 a READ response with no READ outstanding is discarded",
      "READ_RESPONSE_ONLY out of the blue: no completion, the QP stays usable",
      [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        s.send(response(s, Opcode::kRcReadResponseOnly, kS, Aeth::ack(1)), pattern(8, 1));
        s.expect_no_cqe("nothing was outstanding");
        post(s, WrOp::kSend, 1, 8);
        expect_request(s, Opcode::kRcSendOnly, kS, "a SEND afterwards");
        ack(s, kS, 1);
        s.expect_cqe(wc::kSuccess, "the SEND");
      });
}

void add_retry_cases(std::vector<Case>& out) {
  add(out, "rc.req.timeout_retransmits", kRetryChapter,
      "IBA 9.7 no ACK within the local ACK timeout: the request is sent again (rxe_comp.c "
      "retransmit_timer)",
      "the SEND again, not before 4.096 us << timeout", [](CaseContext& ctx) {
        QpSpec q = requester_spec();
        q.timeout = 14;  // 67 ms
        Session s(ctx, q);
        post(s, WrOp::kSend, 1, 8);
        expect_request(s, Opcode::kRcSendOnly, kS, "the SEND");
        const std::uint64_t sent = ctx.peer.now_ns();
        const std::uint64_t timeout_ns = std::uint64_t{4096} << s.spec.timeout;
        const Reply again = ctx.peer.expect(ctx.peer_qpn, "the retransmission",
                                            4 * timeout_ns + ctx.timing.reply_ns);
        const std::uint64_t waited = ctx.peer.now_ns() - sent;
        check(
            again.opcode() == Opcode::kRcSendOnly && again.psn() == kS && waited >= timeout_ns / 2,
            fmt::format("SEND_ONLY PSN {:#x} again after >= {} us", kS, timeout_ns / 2000),
            fmt::format("{} after {} us", describe(again.bytes), waited / 1000));
        ack(s, kS, 1);
        s.expect_cqe(wc::kSuccess, "the SEND");
      });
  add(out, "rc.req.retry_count_exceeded", kRetryChapter,
      "IBA 9.7 after retry_cnt retransmissions without an ACK the WR completes with "
      "RETRY_EXC_ERR",
      "retry_cnt 2: the SEND 3 times, then RETRY_EXC_ERR", [](CaseContext& ctx) {
        QpSpec q = requester_spec();
        q.retry_cnt = 2;
        q.timeout = 12;  // 16.8 ms
        Session s(ctx, q);
        post(s, WrOp::kSend, 9, 8);
        const std::uint64_t timeout_ns = std::uint64_t{4096} << q.timeout;
        int sends = 0;
        while (auto r = ctx.peer.receive(ctx.peer_qpn, 8 * timeout_ns + ctx.timing.reply_ns)) {
          if (r->decoded && r->opcode() == Opcode::kRcSendOnly) ++sends;
        }
        check(sends == 3, "the SEND sent 3 times (1 + retry_cnt 2)",
              fmt::format("sent {} times", sends));
        const Cqe c = s.expect_cqe(wc::kRetryExcErr, "the SEND");
        check(c.wr_id == 9, "wr_id 9", fmt::format("wr_id {}", c.wr_id));
      });
  add(out, "rc.req.nak_sequence_retransmits_from_psn", kRetryChapter,
      "IBA 9.7 a PSN sequence NAK makes the requester resend from the NAK's PSN "
      "(rxe_comp.c check_ack)",
      "three SENDs, NAK-seq at PSN+1: SENDs 2 and 3 again; SEND 1 completes", [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        for (std::uint64_t i = 0; i < 3; ++i)
          post(s, WrOp::kSend, i + 1, 8);
        for (std::uint32_t i = 0; i < 3; ++i)
          expect_request(s, Opcode::kRcSendOnly, kS + i, "a SEND");
        s.send(response(s, Opcode::kRcAck, kS + 1, Aeth::nak(1, NakCode::kPsnSequenceError)));
        expect_request(s, Opcode::kRcSendOnly, kS + 1, "SEND 2 again");
        // The first resent packet may come twice (xroce sends it twice, transport/requester.h
        // Requester::retry): the copy is a duplicate request, which a responder re-ACKs and
        // does not execute again (docs/protocol.md §3.6, rxe_resp.c duplicate_request).
        Reply next = s.expect("SEND 3 again");
        if (next.opcode() == Opcode::kRcSendOnly && next.psn() == kS + 1)
          next = s.expect("SEND 3 again, after the copy of SEND 2");
        check(next.opcode() == Opcode::kRcSendOnly && next.psn() == kS + 2,
              fmt::format("SEND 3 again: SEND_ONLY PSN {:#x}", kS + 2), describe(next.bytes));
        const auto c = s.expect_cqes(1, "SEND 1 (implied by the NAK)");
        check(c[0].wr_id == 1, "wr_id 1", fmt::format("wr_id {}", c[0].wr_id));
        ack(s, kS + 2, 3);
        s.expect_cqes(2, "SENDs 2 and 3");
      });
  add(out, "rc.req.rnr_nak_waits_its_timer", kRetryChapter,
      "IBA 9.7 after an RNR NAK the requester waits the NAK's timer before resending "
      "(IBA table 45)",
      "RNR NAK with code 14 (1.28 ms): the SEND again no earlier", [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        post(s, WrOp::kSend, 1, 8);
        expect_request(s, Opcode::kRcSendOnly, kS, "the SEND");
        constexpr std::uint8_t kCode = 14;
        // Read before the NAK is sent: the device's timer cannot start earlier, while the send
        // call itself may return late on a busy host (a reading after it made a device that
        // waited the whole timer look early).
        const std::uint64_t nak_at = ctx.peer.now_ns();
        s.send(response(s, Opcode::kRcAck, kS, Aeth::rnr_nak(0, kCode)));
        const std::uint64_t timer_ns = std::uint64_t{wire::rnr_timer_us(kCode)} * 1000;
        const Reply r = ctx.peer.expect(ctx.peer_qpn, "the SEND after the RNR timer",
                                        timer_ns * 4 + ctx.timing.reply_ns);
        const std::uint64_t waited = ctx.peer.now_ns() - nak_at;
        check(r.opcode() == Opcode::kRcSendOnly && r.psn() == kS && waited >= timer_ns,
              fmt::format("the SEND again after >= {} us", timer_ns / 1000),
              fmt::format("{} after {} us", describe(r.bytes), waited / 1000));
        ack(s, kS, 1);
        s.expect_cqe(wc::kSuccess, "the SEND");
      });
  add(out, "rc.req.rnr_retry_exceeded", kRetryChapter,
      "IBA 9.7 after rnr_retry RNR NAKs the WR completes with RNR_RETRY_EXC_ERR",
      "rnr_retry 1: two RNR NAKs, then RNR_RETRY_EXC_ERR", [](CaseContext& ctx) {
        QpSpec q = requester_spec();
        q.rnr_retry = 1;
        Session s(ctx, q);
        post(s, WrOp::kSend, 4, 8);
        for (int i = 0; i < 2; ++i) {
          expect_request(s, Opcode::kRcSendOnly, kS, "the SEND");
          s.send(response(s, Opcode::kRcAck, kS, Aeth::rnr_nak(0, 1)));
        }
        const Cqe c = s.expect_cqe(wc::kRnrRetryExcErr, "the SEND");
        check(c.wr_id == 4, "wr_id 4", fmt::format("wr_id {}", c.wr_id));
      });
  add(out, "rc.req.read_response_resumed", kRetryChapter,
      "IBA 9.7 a READ response out of sequence makes the requester re-request the READ from "
      "the missing PSN (rxe_req.c req_retry): the rest of it, or, having kept what came after "
      "the gap, only what is missing (IBA 9.4.4: a duplicate READ may name a sub-range)",
      "3-MTU READ; FIRST then LAST (MIDDLE lost): a READ request at PSN+1, va +1 MTU, for 2 MTUs "
      "(the rest) or 1 (the MIDDLE alone); its replay completes the READ with every byte",
      [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        post(s, WrOp::kRead, 1, 3 * kMtu);
        expect_request(s, Opcode::kRcReadRequest, kS, "the READ");
        const Bytes all = pattern(3 * kMtu, 1);
        const auto part = [&](std::uint32_t i) {
          return Bytes(all.begin() + i * kMtu, all.begin() + (i + 1) * kMtu);
        };
        s.send(response(s, Opcode::kRcReadResponseFirst, kS, Aeth::ack(0)), part(0));
        s.send(response(s, Opcode::kRcReadResponseLast, kS + 2, Aeth::ack(1)), part(2));
        const Reply r = expect_request(s, Opcode::kRcReadRequest, kS + 1, "the resumed READ");
        const std::uint32_t length = r.hdr().reth ? r.hdr().reth->dma_length : 0;
        check(r.hdr().reth && r.hdr().reth->va == kPeerVa + kMtu &&
                  (length == 2 * kMtu || length == kMtu),
              "RETH va +1 MTU, length 2 MTU or 1", describe(r.bytes));
        // The replay a responder sends for that range (rxe_resp.c read_reply): it ends where
        // the range does.
        if (length == kMtu) {
          s.send(response(s, Opcode::kRcReadResponseLast, kS + 1, Aeth::ack(1)), part(1));
        } else {
          s.send(response(s, Opcode::kRcReadResponseMiddle, kS + 1, Aeth::ack(0)), part(1));
          s.send(response(s, Opcode::kRcReadResponseLast, kS + 2, Aeth::ack(1)), part(2));
        }
        s.expect_cqe(wc::kSuccess, "the READ");
        s.expect_memory(0, all, "the three MTUs");
      });
  add(out, "rc.req.psn_wrap", kRetryChapter, "IBA 9.7 the requester's PSN wraps from 0xFFFFFF to 0",
      "sq_psn 0xFFFFFF: two SENDs at 0xFFFFFF and 0, one ACK for 0 completes both",
      [](CaseContext& ctx) {
        QpSpec q = requester_spec();
        q.sq_psn = 0xFFFFFF;
        Session s(ctx, q);
        post(s, WrOp::kSend, 1, 8);
        post(s, WrOp::kSend, 2, 8);
        expect_request(s, Opcode::kRcSendOnly, 0xFFFFFF, "SEND 1");
        expect_request(s, Opcode::kRcSendOnly, 0, "SEND 2 after the wrap");
        ack(s, 0, 2);
        s.expect_cqes(2, "both SENDs");
      });
}

void add_nak_cases(std::vector<Case>& out) {
  struct NakCase {
    const char* name;
    NakCode code;
    std::uint32_t status;
  };
  const std::vector<NakCase> naks = {
      {"remote_access", NakCode::kRemoteAccessError, wc::kRemAccessErr},
      {"invalid_request", NakCode::kInvalidRequest, wc::kRemInvReqErr},
      {"remote_operational", NakCode::kRemoteOperationalError, wc::kRemOpErr},
  };
  for (const NakCase& n : naks) {
    add(out, fmt::format("rc.req.nak_{}", n.name), kNakChapter,
        "IBA 9.9 a NAK completes the WR with the matching error status and moves the QP to "
        "ERROR (rxe_comp.c check_ack)",
        fmt::format("NAK {}: WC {}", n.name, wc::status_name(n.status)), [n](CaseContext& ctx) {
          Session s(ctx, requester_spec());
          post(s, WrOp::kWrite, 3, 8);
          expect_request(s, Opcode::kRcWriteOnly, kS, "the WRITE");
          s.send(response(s, Opcode::kRcAck, kS, Aeth::nak(0, n.code)));
          const Cqe c = s.expect_cqe(n.status, "the WRITE");
          check(c.wr_id == 3, "wr_id 3", fmt::format("wr_id {}", c.wr_id));
          check(ctx.target.in_error(s.qp), "the QP in ERROR", "the QP still working");
        });
  }
  add(out, "rc.req.nak_flushes_later_wrs", kNakChapter,
      "IBA 9.9 after a fatal NAK the WRs behind the failed one complete with WR_FLUSH_ERR",
      "two WRITEs, NAK remote access on the first: the second is flushed", [](CaseContext& ctx) {
        Session s(ctx, requester_spec());
        post(s, WrOp::kWrite, 1, 8);
        post(s, WrOp::kWrite, 2, 8);
        expect_request(s, Opcode::kRcWriteOnly, kS, "WRITE 1");
        s.send(response(s, Opcode::kRcAck, kS, Aeth::nak(0, NakCode::kRemoteAccessError)));
        const auto c = s.expect_cqes(2, "both WRITEs");
        check(
            c[0].status == wc::kRemAccessErr && c[1].status == wc::kWrFlushErr,
            "REM_ACCESS_ERR then WR_FLUSH_ERR",
            fmt::format("{} then {}", wc::status_name(c[0].status), wc::status_name(c[1].status)));
      });
}

}  // namespace

void add_rc_requester_cases(std::vector<Case>& out) {
  add_format_cases(out);
  add_ack_cases(out);
  add_retry_cases(out);
  add_nak_cases(out);
}

}  // namespace xroce::conform
