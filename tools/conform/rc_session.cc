#include "rc_session.h"

#include <fmt/format.h>

namespace xroce::conform {

std::vector<std::uint8_t> pattern(std::uint32_t length, std::uint8_t seed) {
  std::vector<std::uint8_t> v(length);
  for (std::uint32_t i = 0; i < length; ++i)
    v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

void fail(const std::string& expected, const std::string& seen) {
  throw CaseFailure{expected, seen};
}

void check(bool ok, const std::string& expected, const std::string& seen) {
  if (!ok) fail(expected, seen);
}

void require_atomics(const CaseContext& ctx) {
  if (!ctx.caps.atomics) throw NotApplicable{"the device does not support atomics"};
}

std::string hex(const std::vector<std::uint8_t>& bytes, std::size_t max) {
  std::string s;
  for (std::size_t i = 0; i < bytes.size() && i < max; ++i)
    s += fmt::format("{:02x}", bytes[i]);
  if (bytes.size() > max) s += "...";
  return s;
}

Session::Session(CaseContext& c, QpSpec s, std::uint32_t mr_access) : ctx(c), spec(s) {
  spec.peer_qpn = ctx.peer_qpn;
  mr = ctx.target.register_mr(kBufferBytes, mr_access);
  qp = ctx.target.create_qp(spec);
}

Session::~Session() {
  try {
    ctx.target.destroy_qp(qp);
  } catch (...) {  // a target that went away: the case has its verdict already
  }
}

wire::TransportHeaders Session::req(wire::Opcode op, std::uint32_t psn, bool ack_req) const {
  wire::TransportHeaders h;
  h.bth.opcode = op;
  h.bth.dest_qp = wire::Qpn(qp.qpn);
  h.bth.psn = wire::Psn(psn);
  h.bth.ack_req = ack_req;
  if (h.info().headers.has(wire::Header::kDeth)) {
    h.deth = wire::Deth{wire::Qkey(spec.qkey), wire::Qpn(ctx.peer_qpn)};
  }
  if (h.info().headers.has(wire::Header::kImmDt)) h.imm = 0x12345678;
  return h;
}

wire::TransportHeaders Session::write(wire::Opcode op, std::uint32_t psn, std::uint64_t va,
                                      std::uint32_t rkey, std::uint32_t len) const {
  wire::TransportHeaders h = req(op, psn);
  if (h.info().headers.has(wire::Header::kReth)) h.reth = wire::Reth{va, wire::Rkey(rkey), len};
  return h;
}

wire::TransportHeaders Session::read(std::uint32_t psn, std::uint64_t va, std::uint32_t rkey,
                                     std::uint32_t len) const {
  wire::TransportHeaders h = req(wire::Opcode::kRcReadRequest, psn);
  h.reth = wire::Reth{va, wire::Rkey(rkey), len};
  return h;
}

wire::TransportHeaders Session::atomic(wire::Opcode op, std::uint32_t psn, std::uint64_t va,
                                       std::uint32_t rkey, std::uint64_t swap_add,
                                       std::uint64_t compare) const {
  wire::TransportHeaders h = req(op, psn);
  h.atomic_eth = wire::AtomicEth{va, wire::Rkey(rkey), swap_add, compare};
  return h;
}

void Session::send(const wire::TransportHeaders& h, const std::vector<std::uint8_t>& payload) {
  ctx.peer.send(h, payload);
}

Reply Session::expect(const std::string& what) {
  return ctx.peer.expect(ctx.peer_qpn, what, ctx.timing.reply_ns);
}

namespace {

std::string aeth_text(const Reply& r) {
  if (!r.hdr().aeth) return describe(r.bytes) + " (no AETH)";
  return describe(r.bytes);
}

}  // namespace

Reply Session::expect_ack(std::uint32_t psn, const std::string& what) {
  const std::string want = fmt::format("{}: ACK PSN {:#x}", what, psn);
  Reply r = expect(want);
  check(r.hdr().aeth && r.hdr().aeth->is_ack() && r.psn() == psn, want, aeth_text(r));
  return r;
}

Reply Session::expect_nak(std::uint32_t psn, wire::NakCode code, const std::string& what) {
  const std::string want =
      fmt::format("{}: NAK code {} PSN {:#x}", what, static_cast<int>(code), psn);
  Reply r = expect(want);
  check(r.opcode() == wire::Opcode::kRcAck && r.hdr().aeth && r.hdr().aeth->is_nak() &&
            r.hdr().aeth->nak_code() == code && r.psn() == psn,
        want, aeth_text(r));
  return r;
}

Reply Session::expect_rnr_nak(std::uint32_t psn, const std::string& what) {
  const std::string want =
      fmt::format("{}: RNR NAK PSN {:#x} timer code {}", what, psn, spec.min_rnr_timer);
  Reply r = expect(want);
  check(r.opcode() == wire::Opcode::kRcAck && r.hdr().aeth && r.hdr().aeth->is_rnr_nak() &&
            r.hdr().aeth->value() == spec.min_rnr_timer && r.psn() == psn,
        want, aeth_text(r));
  return r;
}

void Session::expect_silence(const std::string& why) {
  ctx.peer.expect_silence(ctx.peer_qpn, why, ctx.timing.silence_ns);
}

std::vector<Cqe> Session::expect_cqes(std::size_t n, const std::string& what) {
  std::vector<Cqe> got;
  const std::uint64_t deadline = ctx.peer.now_ns() + ctx.timing.reply_ns;
  const std::uint64_t step = ctx.timing.silence_ns / 10 + 1;
  while (true) {
    for (const Cqe& c : ctx.target.poll(qp))
      got.push_back(c);
    if (got.size() >= n || ctx.peer.now_ns() >= deadline) break;
    ctx.peer.idle(step);
  }
  check(got.size() == n, fmt::format("{}: {} completion(s)", what, n),
        fmt::format("{} completion(s)", got.size()));
  return got;
}

void Session::expect_no_cqe(const std::string& why) {
  ctx.peer.idle(ctx.timing.silence_ns);
  const auto got = ctx.target.poll(qp);
  if (!got.empty()) {
    fail("no completion (" + why + ")",
         fmt::format("{} completion(s), first wr_id {} status {}", got.size(), got[0].wr_id,
                     wc::status_name(got[0].status)));
  }
}

Cqe Session::expect_cqe(std::uint32_t status, const std::string& what) {
  const Cqe c = expect_cqes(1, what)[0];
  check(c.status == status, fmt::format("{}: status {}", what, wc::status_name(status)),
        fmt::format("status {}", wc::status_name(c.status)));
  return c;
}

void Session::post_recv(std::uint64_t wr_id, std::uint32_t offset, std::uint32_t length) {
  ctx.target.post_recv(qp, wr_id, mr, offset, length);
}

void Session::fill(std::uint32_t offset, std::uint32_t length, std::uint8_t seed) {
  ctx.target.write_mr(mr, offset, pattern(length, seed));
}

std::vector<std::uint8_t> Session::memory(std::uint32_t offset, std::uint32_t length) {
  return ctx.target.read_mr(mr, offset, length);
}

void Session::expect_memory(std::uint32_t offset, const std::vector<std::uint8_t>& want,
                            const std::string& what) {
  const auto got = memory(offset, static_cast<std::uint32_t>(want.size()));
  check(got == want, what + ": " + hex(want), hex(got));
}

}  // namespace xroce::conform
