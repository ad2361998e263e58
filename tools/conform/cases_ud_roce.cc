// IBA chapter 9 UD (Q_Key, GRH) and Annex A17, RoCEv2 itself: the ICRC, malformed headers,
// ECN and CNPs.
#include <fmt/format.h>

#include "rc_session.h"
#include "wire/cnp.h"

namespace xroce::conform {
namespace {

using wire::Opcode;
using Bytes = std::vector<std::uint8_t>;

constexpr std::uint32_t kP = kTargetRqPsn;
constexpr std::uint32_t kGrhBytes = 40;
constexpr std::uint32_t kQkey = 0x11111111;

const char* const kUdChapter = "9.8 UD";
const char* const kIcrcChapter = "A17 RoCEv2: ICRC and headers";
const char* const kEcnChapter = "A17 RoCEv2: ECN and CNP";

void add(std::vector<Case>& out, std::string name, std::string chapter, std::string rule,
         std::string title, std::function<void(CaseContext&)> run) {
  out.push_back(
      Case{std::move(name), std::move(chapter), std::move(rule), std::move(title), std::move(run)});
}

QpSpec ud_spec() {
  QpSpec q;
  q.kind = QpKind::kUd;
  q.qkey = kQkey;
  q.mtu_bytes = 1024;
  return q;
}

void require_ud(const CaseContext& ctx) {
  if (!ctx.caps.ud) throw NotApplicable{"the device has no UD QPs"};
}

wire::TransportHeaders ud_send(const Session& s, std::uint32_t qkey,
                               Opcode op = Opcode::kUdSendOnly) {
  wire::TransportHeaders h = s.req(op, 0, false);
  h.deth = wire::Deth{wire::Qkey(qkey), wire::Qpn(s.ctx.peer_qpn)};
  return h;
}

void add_ud_list(std::vector<Case>& out) {
  add(out, "ud.qkey_match_delivered", kUdChapter,
      "IBA 9.8 a UD SEND whose Q_Key matches is delivered after the 40-byte GRH area, with "
      "the source QP in the completion",
      "UD SEND_ONLY with the QP's Q_Key", [](CaseContext& ctx) {
        require_ud(ctx);
        Session s(ctx, ud_spec());
        s.post_recv(1, 0, kGrhBytes + 256);
        s.send(ud_send(s, kQkey), pattern(100, 5));
        const Cqe c = s.expect_cqe(wc::kSuccess, "the receive");
        check(
            c.byte_len == kGrhBytes + 100 && c.src_qp == ctx.peer_qpn && (c.wc_flags & 1),
            fmt::format("byte_len 140, src_qp {:#x}, IBV_WC_GRH", ctx.peer_qpn),
            fmt::format("byte_len {} src_qp {:#x} flags {:#x}", c.byte_len, c.src_qp, c.wc_flags));
        s.expect_memory(kGrhBytes, pattern(100, 5), "the payload after the GRH area");
      });
  add(out, "ud.qkey_mismatch_dropped", kUdChapter,
      "IBA 9.8 a UD packet whose Q_Key differs from the QP's is silently dropped "
      "(rxe_recv.c check_keys)",
      "a wrong Q_Key delivers nothing; the right one afterwards does", [](CaseContext& ctx) {
        require_ud(ctx);
        Session s(ctx, ud_spec());
        s.post_recv(1, 0, kGrhBytes + 64);
        s.send(ud_send(s, kQkey ^ 1), pattern(8, 1));
        s.expect_no_cqe("the Q_Key is wrong");
        s.send(ud_send(s, kQkey), pattern(8, 2));
        const Cqe c = s.expect_cqe(wc::kSuccess, "the good one");
        check(c.byte_len == kGrhBytes + 8, "byte_len 48", fmt::format("{}", c.byte_len));
        s.expect_memory(kGrhBytes, pattern(8, 2), "only the good payload");
      });
  // A17: the first 40 bytes of a UD receive hold the packet's IP header; for IPv4 its 20 bytes
  // end the area (rxe_resp.c execute).
  for (const auto version : {wire::IpVersion::kV4, wire::IpVersion::kV6}) {
    const bool v4 = version == wire::IpVersion::kV4;
    add(out, v4 ? "ud.grh_holds_ipv4_header" : "ud.grh_holds_ipv6_header", kUdChapter,
        v4 ? "A17 for RoCEv2 over IPv4 the GRH area holds the IPv4 header in its last 20 bytes "
             "(rxe_resp.c execute)"
           : "A17 for RoCEv2 over IPv6 the GRH area holds the IPv6 header, all 40 bytes "
             "(rxe_resp.c execute)",
        "the receive's first 40 bytes", [version, v4](CaseContext& ctx) {
          require_ud(ctx);
          Session s(ctx, ud_spec());
          s.post_recv(1, 0, kGrhBytes + 64);
          const Frame f = ctx.peer.build(ud_send(s, kQkey), pattern(8, 1));
          const wire::FrameLayout l = wire::walk_frame(f);
          if (l.ip != version) {
            throw NotApplicable{v4 ? "the peer speaks IPv6" : "the peer speaks IPv4"};
          }
          ctx.peer.send_frame(f);
          s.expect_cqe(wc::kSuccess, "the receive");
          const std::size_t header = v4 ? 20 : kGrhBytes;
          const Bytes ip(f.begin() + static_cast<std::ptrdiff_t>(l.ip_offset),
                         f.begin() + static_cast<std::ptrdiff_t>(l.ip_offset + header));
          s.expect_memory(kGrhBytes - header, ip,
                          v4 ? "bytes 20..39 of the GRH area" : "the GRH area");
        });
  }
  add(out, "ud.over_mtu_dropped", kUdChapter,
      "IBA 9.8 a UD message is one packet of at most the MTU: a longer one is dropped",
      "UD SEND of the port MTU + 4 bytes, then one of the MTU", [](CaseContext& ctx) {
        require_ud(ctx);
        Session s(ctx, ud_spec());
        const std::uint32_t mtu = ctx.caps.port_mtu_bytes;
        s.post_recv(1, 0, kGrhBytes + mtu + 64);
        s.send(ud_send(s, kQkey), pattern(mtu + 4, 1));
        s.expect_no_cqe("longer than the port MTU");
        s.send(ud_send(s, kQkey), pattern(mtu, 2));
        const Cqe c = s.expect_cqe(wc::kSuccess, "the datagram of one MTU");
        check(c.byte_len == kGrhBytes + mtu, fmt::format("byte_len {}", kGrhBytes + mtu),
              fmt::format("byte_len {}", c.byte_len));
      });
  add(out, "ud.target_over_mtu_not_sent", kUdChapter,
      "C10-93.1.1 (quoted in rxe_req.c rxe_requester) a UD message longer than the port's MTU "
      "emits no packet, and the CI generates no error for it",
      "the target's UD SENDs of the port MTU + 4 bytes, then of 32: only the second is sent, "
      "both complete successfully",
      [](CaseContext& ctx) {
        require_ud(ctx);
        Session s(ctx, ud_spec());
        const std::uint32_t mtu = ctx.caps.port_mtu_bytes;
        s.fill(0, mtu + 4, 6);
        SendSpec w;
        w.op = WrOp::kSend;
        w.mr = s.mr.id;
        w.ud_remote_qpn = ctx.peer_qpn;
        w.ud_remote_qkey = kQkey;
        w.wr_id = 1;
        w.length = mtu + 4;
        ctx.target.post_send(s.qp, w);
        w.wr_id = 2;
        w.length = 32;
        ctx.target.post_send(s.qp, w);
        const Reply r = s.expect("the 32-byte UD SEND");
        check(r.opcode() == Opcode::kUdSendOnly && r.payload().size() == 32,
              "UD SEND_ONLY of 32 bytes (none of the port MTU + 4)", describe(r.bytes));
        const std::vector<Cqe> c = s.expect_cqes(2, "both UD SENDs");
        check(c[0].wr_id == 1 && c[0].status == wc::kSuccess && c[1].wr_id == 2 &&
                  c[1].status == wc::kSuccess,
              "wr_id 1 SUCCESS, wr_id 2 SUCCESS",
              fmt::format("wr_id {} {}, wr_id {} {}", c[0].wr_id, wc::status_name(c[0].status),
                          c[1].wr_id, wc::status_name(c[1].status)));
      });
  add(out, "ud.no_receive_dropped", kUdChapter,
      "IBA 9.8 a UD packet with no receive posted is dropped, never NAKed",
      "UD SEND with no receive, then one with: one completion", [](CaseContext& ctx) {
        require_ud(ctx);
        Session s(ctx, ud_spec());
        s.send(ud_send(s, kQkey), pattern(8, 1));
        s.expect_silence("UD is never acknowledged");
        s.post_recv(1, 0, kGrhBytes + 64);
        s.send(ud_send(s, kQkey), pattern(8, 2));
        const Cqe c = s.expect_cqe(wc::kSuccess, "the second");
        check(c.wr_id == 1, "wr_id 1", fmt::format("{}", c.wr_id));
        s.expect_memory(kGrhBytes, pattern(8, 2), "the second payload");
      });
  add(out, "ud.send_with_imm", kUdChapter, "IBA 9.8 UD SEND with immediate carries the ImmDt",
      "UD SEND_ONLY_WITH_IMMEDIATE", [](CaseContext& ctx) {
        require_ud(ctx);
        Session s(ctx, ud_spec());
        s.post_recv(1, 0, kGrhBytes + 64);
        wire::TransportHeaders h = ud_send(s, kQkey, Opcode::kUdSendOnlyImm);
        h.imm = 0xCAFEF00D;
        s.send(h, pattern(8, 1));
        const Cqe c = s.expect_cqe(wc::kSuccess, "the receive");
        check(c.imm == 0xCAFEF00D && (c.wc_flags & 2), "imm 0xCAFEF00D, IBV_WC_WITH_IMM",
              fmt::format("imm {:#x} flags {:#x}", c.imm, c.wc_flags));
      });
  add(out, "ud.target_send_format", kUdChapter,
      "IBA 9.8 a UD SEND carries a DETH with the destination's Q_Key and the source QPN",
      "the target's UD SEND to the peer", [](CaseContext& ctx) {
        require_ud(ctx);
        Session s(ctx, ud_spec());
        s.fill(0, 32, 9);
        SendSpec w;
        w.wr_id = 1;
        w.op = WrOp::kSend;
        w.mr = s.mr.id;
        w.length = 32;
        w.ud_remote_qpn = ctx.peer_qpn;
        w.ud_remote_qkey = 0x2222;
        ctx.target.post_send(s.qp, w);
        const Reply r = s.expect("the UD SEND");
        check(r.opcode() == Opcode::kUdSendOnly && r.hdr().deth &&
                  r.hdr().deth->qkey.value() == 0x2222 &&
                  r.hdr().deth->src_qp.value() == s.qp.qpn &&
                  Bytes(r.payload().begin(), r.payload().end()) == pattern(32, 9),
              fmt::format("UD SEND_ONLY DETH qkey 0x2222 src {:#x}, 32 bytes", s.qp.qpn),
              describe(r.bytes));
        s.expect_cqe(wc::kSuccess, "the UD SEND");
      });
}

// A SEND_ONLY frame for the session's QP at kP, then edited by `edit`.
Frame edited_send(Session& s, const std::function<void(Frame&, const wire::FrameLayout&)>& edit) {
  Frame f = s.ctx.peer.build(s.req(Opcode::kRcSendOnly, kP), pattern(16, 1));
  edit(f, wire::walk_frame(f));
  return f;
}

// The dropped frame must not be executed: the correct one at the same PSN is then the first.
void expect_dropped_then_good(Session& s, const Frame& bad, const std::string& why) {
  s.post_recv(1, 0, 64);
  s.ctx.peer.send_frame(bad);
  s.expect_silence(why);
  s.expect_no_cqe(why);
  s.send(s.req(Opcode::kRcSendOnly, kP), pattern(16, 2));
  s.expect_ack(kP, "the good SEND at the same PSN");
  s.expect_cqe(wc::kSuccess, "the good SEND");
  s.expect_memory(0, pattern(16, 2), "only the good payload");
}

void add_header_cases(std::vector<Case>& out) {
  struct Bad {
    const char* name;
    const char* title;
    const char* rule;
    std::function<void(Frame&, const wire::FrameLayout&)> edit;
    bool ipv4_only = false;
  };
  const std::vector<Bad> bads = {
      {"icrc.bad", "a SEND whose ICRC is wrong",
       "A17 the ICRC is checked; a packet that fails it is dropped silently (rxe_icrc.c "
       "rxe_icrc_check)",
       [](Frame& f, const wire::FrameLayout&) { f[f.size() - 1] ^= 0x5A; }},
      {"icrc.payload_flipped", "a SEND with a payload bit flipped (ICRC left as sent)",
       "A17 the ICRC covers the payload (rxe_icrc.c rxe_icrc_check)",
       [](Frame& f, const wire::FrameLayout& l) { f[l.udp_payload_offset() + 12 + 3] ^= 1; }},
      {"icrc.dest_qp_flipped", "a SEND whose DestQP changed after the ICRC was computed",
       "A17 the ICRC covers the BTH's DestQP (rxe_icrc.c rxe_icrc_hdr)",
       [](Frame& f, const wire::FrameLayout& l) {
         // Another QP's number with the same ICRC would need a collision: the frame is refused
         // either as a bad ICRC or as naming no QP.
         f[l.udp_payload_offset() + 7] ^= 0x40;
       }},
      {"hdr.bad_tver", "a SEND with TVer 1",
       "IBA 9.6 a packet whose TVer is not 0 is dropped (rxe_recv.c hdr_check)",
       [](Frame& f, const wire::FrameLayout& l) {
         f[l.udp_payload_offset() + 1] |= 0x01;  // TVer in the low nibble of byte 1
       }},
      {"hdr.bad_pkey", "a SEND with P_Key 0x1234",
       "IBA 9.6 a packet whose P_Key does not match the QP's partition is dropped "
       "(rxe_recv.c check_keys)",
       [](Frame& f, const wire::FrameLayout& l) {
         wire::store_be16(&f[l.udp_payload_offset() + 2], 0x1234);
       }},
      {"hdr.bad_ipv4_checksum", "a SEND whose IPv4 header checksum is wrong",
       "A17 RoCEv2 rides on valid IP: a bad IPv4 header checksum is dropped below the transport",
       [](Frame& f, const wire::FrameLayout& l) { f[l.ip_offset + 10] ^= 0x10; }, true},
      {"hdr.udp_length_too_long", "a SEND whose UDP length runs past the frame",
       "A17 the UDP length bounds the packet; one that runs past the frame is dropped",
       [](Frame& f, const wire::FrameLayout& l) {
         wire::store_be16(&f[l.udp_offset + 4],
                          static_cast<std::uint16_t>(wire::load_be16(&f[l.udp_offset + 4]) + 8));
       }},
      {"hdr.bad_udp_checksum", "a SEND with a non-zero UDP checksum that does not verify",
       "A17 a non-zero UDP checksum is verified like any UDP datagram's (RFC 768)",
       [](Frame& f, const wire::FrameLayout& l) { wire::store_be16(&f[l.udp_offset + 6], 0x1); }},
      {"hdr.pad_over_payload", "a SEND whose PadCnt is 3 with no room for it",
       "IBA 9.2 the pad bytes are part of the payload: a PadCnt that does not fit is malformed",
       [](Frame& f, const wire::FrameLayout& l) {
         // 16 bytes of payload, PadCnt 3: 13 bytes of data and 3 of pad is not what was sent,
         // and the ICRC (which covers byte 1) no longer verifies either.
         f[l.udp_payload_offset() + 1] |= 0x30;
       }},
  };
  for (const Bad& b : bads) {
    add(out, fmt::format("roce.{}", b.name), kIcrcChapter, b.rule,
        std::string(b.title) + ": dropped, not executed, not answered", [b](CaseContext& ctx) {
          if (std::string(b.name).starts_with("icrc") && !ctx.caps.checks_icrc) {
            throw NotApplicable{"the device does not check the ICRC"};
          }
          if (b.ipv4_only && !ctx.peer.address().dst_ip.is_v4()) {
            throw NotApplicable{"the peer speaks IPv6, which has no header checksum"};
          }
          Session s(ctx);
          expect_dropped_then_good(s, edited_send(s, b.edit), b.title);
        });
  }
  add(out, "roce.hdr.unknown_qp", kIcrcChapter,
      "IBA 9.6 a packet for a QP that does not exist is dropped (rxe_recv.c rxe_rcv_pkt)",
      "a SEND to QPN 0xFFFF00: silently dropped", [](CaseContext& ctx) {
        Session s(ctx);
        wire::TransportHeaders h = s.req(Opcode::kRcSendOnly, kP);
        h.bth.dest_qp = wire::Qpn(0xFFFF00);
        s.send(h, pattern(8, 1));
        s.expect_silence("no such QP");
      });
  add(out, "roce.hdr.udp_checksum_valid_accepted", kIcrcChapter,
      "A17 RoCEv2 senders may send a UDP checksum; a correct one is accepted",
      "a SEND with a correct non-zero UDP checksum is executed", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(1, 0, 64);
        Frame f = ctx.peer.build(s.req(Opcode::kRcSendOnly, kP), pattern(16, 3));
        const wire::FrameLayout l = wire::walk_frame(f);
        const std::size_t udp_len = wire::load_be16(&f[l.udp_offset + 4]);
        std::uint32_t sum = l.ip == wire::IpVersion::kV4
                                ? wire::ones_complement_sum(wire::Bytes(&f[l.ip_offset + 12], 8))
                                : wire::ones_complement_sum(wire::Bytes(&f[l.ip_offset + 8], 32));
        sum += wire::kIpProtoUdp + static_cast<std::uint32_t>(udp_len);
        sum = wire::ones_complement_sum(wire::Bytes(&f[l.udp_offset], udp_len), sum);
        std::uint16_t csum = static_cast<std::uint16_t>(~wire::fold_ones_complement(sum));
        wire::store_be16(&f[l.udp_offset + 6], csum == 0 ? 0xFFFF : csum);
        ctx.peer.send_frame(f);
        s.expect_ack(kP, "the SEND with a UDP checksum");
        s.expect_memory(0, pattern(16, 3), "the payload");
      });
}

void add_ecn_cases(std::vector<Case>& out) {
  for (wire::Ecn e : {wire::Ecn::kEct0, wire::Ecn::kEct1, wire::Ecn::kCe}) {
    add(out,
        fmt::format("roce.ecn.request_{}", e == wire::Ecn::kCe     ? "ce"
                                           : e == wire::Ecn::kEct0 ? "ect0"
                                                                   : "ect1"),
        kEcnChapter,
        "A17 the ECN field is masked out of the ICRC: an ECT or CE marked request is executed "
        "like any other (rxe_icrc.c rxe_icrc_hdr)",
        fmt::format("a SEND marked {} is ACKed and delivered", wire::to_string(e)),
        [e](CaseContext& ctx) {
          Session s(ctx);
          s.post_recv(1, 0, 64);
          wire::FrameAddress a = ctx.peer.address();
          a.traffic_class = static_cast<std::uint8_t>(e);
          ctx.peer.send_frame(ctx.peer.build(s.req(Opcode::kRcSendOnly, kP), pattern(8, 4), &a));
          // A notification point may send a CNP too: skip one if it comes first.
          Reply r = s.expect("the ACK");
          if (r.opcode() == Opcode::kCnp) r = s.expect("the ACK after the CNP");
          check(r.opcode() == Opcode::kRcAck && r.hdr().aeth->is_ack() && r.psn() == kP,
                fmt::format("ACK PSN {:#x}", kP), describe(r.bytes));
          s.expect_memory(0, pattern(8, 4), "the payload");
        });
  }
  add(out, "roce.ecn.ce_draws_cnp", kEcnChapter,
      "A17.9 a notification point answers a CE-marked packet with a CNP to the sender's QP "
      "(opcode 0x81, BECN set)",
      "a CE-marked SEND: a CNP to the peer's QP", [](CaseContext& ctx) {
        if (!ctx.caps.generates_cnp) throw NotApplicable{"the device does not generate CNPs"};
        Session s(ctx);
        s.post_recv(1, 0, 64);
        wire::FrameAddress a = ctx.peer.address();
        a.traffic_class = static_cast<std::uint8_t>(wire::Ecn::kCe);
        ctx.peer.send_frame(ctx.peer.build(s.req(Opcode::kRcSendOnly, kP), pattern(8, 4), &a));
        bool cnp = false;
        for (int i = 0; i < 3 && !cnp; ++i) {
          const auto r = ctx.peer.receive(ctx.peer_qpn, ctx.timing.reply_ns);
          if (!r) break;
          cnp = r->decoded && r->opcode() == Opcode::kCnp && r->hdr().bth.becn;
        }
        check(cnp, "a CNP with BECN to the peer's QP", "no CNP");
      });
  add(out, "roce.ecn.responses_not_ce", kEcnChapter,
      "A17 a sender marks ECT or Not-ECT, never CE (RFC 3168: only the network sets CE)",
      "the target's ACK is not CE-marked", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(1, 0, 64);
        s.send(s.req(Opcode::kRcSendOnly, kP), pattern(8, 1));
        const Reply r = s.expect_ack(kP, "the ACK");
        check(r.decoded->ecn != wire::Ecn::kCe, "ECN not CE", wire::to_string(r.decoded->ecn));
      });
  add(out, "roce.cnp.to_responder_ignored", kEcnChapter,
      "A17.9 a CNP is not a request: it is never acknowledged nor executed",
      "a CNP to the target QP: no answer, the next SEND is ACKed", [](CaseContext& ctx) {
        Session s(ctx);
        s.post_recv(1, 0, 64);
        s.send(wire::make_cnp(wire::Qpn(s.qp.qpn)));
        s.expect_silence("a CNP is not acknowledged");
        s.send(s.req(Opcode::kRcSendOnly, kP), pattern(8, 1));
        s.expect_ack(kP, "the SEND after the CNP");
        s.expect_cqe(wc::kSuccess, "only the SEND's receive");
      });
  add(out, "roce.cnp.to_requester_keeps_going", kEcnChapter,
      "A17.9 a reaction point slows down on a CNP but loses nothing: the transfer completes",
      "the target sends, gets a CNP, then the ACK: success", [](CaseContext& ctx) {
        QpSpec q;
        q.sq_psn = kTargetSqPsn;
        Session s(ctx, q);
        SendSpec w;
        w.wr_id = 1;
        w.op = WrOp::kSend;
        w.mr = s.mr.id;
        w.length = 8;
        ctx.target.post_send(s.qp, w);
        const Reply r = s.expect("the SEND");
        check(r.opcode() == Opcode::kRcSendOnly, "SEND_ONLY", describe(r.bytes));
        s.send(wire::make_cnp(wire::Qpn(s.qp.qpn)));
        wire::TransportHeaders a = s.req(Opcode::kRcAck, kTargetSqPsn, false);
        a.aeth = wire::Aeth::ack(1);
        s.send(a);
        s.expect_cqe(wc::kSuccess, "the SEND");
      });
}

}  // namespace

void add_ud_cases(std::vector<Case>& out) {
  add_ud_list(out);
}

void add_roce_cases(std::vector<Case>& out) {
  add_header_cases(out);
  add_ecn_cases(out);
}

}  // namespace xroce::conform
