#include "peer.h"

#include <fmt/format.h>

namespace xroce::conform {
namespace {

std::optional<wire::DecodedFrame> decode(const Frame& f) {
  wire::DecodedFrame d;
  if (wire::decode_frame_into(f, d)) return std::nullopt;
  return d;
}

const char* aeth_kind(const wire::Aeth& a) {
  switch (a.type()) {
    case wire::AethType::kAck:
      return "ACK";
    case wire::AethType::kRnrNak:
      return "RNR-NAK";
    case wire::AethType::kNak:
      return "NAK";
    case wire::AethType::kReserved:
      break;
  }
  return "reserved";
}

}  // namespace

wire::FrameAddress Peer::address() const {
  wire::FrameAddress a;
  a.src_mac = ends_.peer_mac;
  a.dst_mac = ends_.target_mac;
  a.src_ip = ends_.peer_ip;
  a.dst_ip = ends_.target_ip;
  a.udp_src_port = 0xC0DE;
  return a;
}

Frame Peer::build(const wire::TransportHeaders& hdr, wire::Bytes payload,
                  const wire::FrameAddress* addr) const {
  const wire::FrameAddress a = addr ? *addr : address();
  Frame f(wire::frame_bytes(a, hdr, payload.size()));
  const auto n = wire::encode_frame(a, hdr, payload, f);
  if (!n) {
    throw CaseFailure{"a frame the codec can encode",
                      fmt::format("encode_frame: {}", wire::to_string(n.error()))};
  }
  return f;
}

void Peer::send(const wire::TransportHeaders& hdr, wire::Bytes payload) {
  send_frame(build(hdr, payload));
}

void Peer::send_frame(const Frame& frame) {
  log_.push_back(LoggedFrame{link_.now_ns(), true, frame});
  link_.send(frame);
}

std::optional<Reply> Peer::receive(std::uint32_t peer_qpn, std::uint64_t wait_ns) {
  const std::uint64_t deadline = link_.now_ns() + wait_ns;
  while (auto f = link_.receive(deadline)) {
    log_.push_back(LoggedFrame{link_.now_ns(), false, *f});
    Reply r{std::move(*f), std::nullopt};
    r.decoded = decode(r.bytes);
    // Frames the codec refuses are the target's to answer for: hand them to the case too.
    if (!r.decoded || r.decoded->hdr.bth.dest_qp.value() == peer_qpn) return r;
  }
  return std::nullopt;
}

Reply Peer::expect(std::uint32_t peer_qpn, const std::string& what, std::uint64_t wait_ns) {
  auto r = receive(peer_qpn, wait_ns);
  if (!r) throw CaseFailure{what, fmt::format("nothing within {} us", wait_ns / 1000)};
  if (!r->decoded) throw CaseFailure{what, "a frame the wire codec refuses: " + describe(r->bytes)};
  return std::move(*r);
}

void Peer::expect_silence(std::uint32_t peer_qpn, const std::string& why, std::uint64_t wait_ns) {
  if (auto r = receive(peer_qpn, wait_ns)) {
    throw CaseFailure{"no answer (" + why + ")", describe(r->bytes)};
  }
}

std::string describe(const Frame& frame) {
  wire::DecodedFrame d;
  if (auto e = wire::decode_frame_into(frame, d)) {
    return fmt::format("{}-byte frame the codec refuses ({})", frame.size(), wire::to_string(*e));
  }
  const wire::TransportHeaders& h = d.hdr;
  std::string s =
      fmt::format("{} QP {:#x} PSN {}", h.info().name, h.bth.dest_qp.value(), h.bth.psn.value());
  if (h.bth.ack_req) s += " A";
  if (h.aeth) {
    s += fmt::format(" AETH {} {:#04x} MSN {}", aeth_kind(*h.aeth), h.aeth->syndrome, h.aeth->msn);
  }
  if (h.reth) {
    s += fmt::format(" RETH va {:#x} rkey {:#x} len {}", h.reth->va, h.reth->rkey.value(),
                     h.reth->dma_length);
  }
  if (h.atomic_eth) {
    s +=
        fmt::format(" AtomicETH va {:#x} rkey {:#x}", h.atomic_eth->va, h.atomic_eth->rkey.value());
  }
  if (h.atomic_ack_orig) s += fmt::format(" orig {:#x}", *h.atomic_ack_orig);
  if (h.deth)
    s += fmt::format(" DETH qkey {:#x} src {:#x}", h.deth->qkey.value(), h.deth->src_qp.value());
  if (!d.payload.empty()) s += fmt::format(" payload {}", d.payload.size());
  s += fmt::format(" ECN {}{}", wire::to_string(d.ecn), d.icrc_ok ? "" : " BAD-ICRC");
  return s;
}

}  // namespace xroce::conform
