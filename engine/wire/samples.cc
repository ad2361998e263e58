#include "wire/samples.h"

#include <cstdlib>

#include "wire/cnp.h"
#include "wire/udp_sport.h"

namespace xroce::wire {
namespace {

constexpr std::uint16_t kSampleVlanTci = 3 << 13 | 100;  // PCP 3, VID 100
constexpr std::uint8_t kDataTrafficClass = 26 << 2 | static_cast<std::uint8_t>(Ecn::kEct0);
constexpr std::uint8_t kCnpTrafficClass = 48 << 2 | static_cast<std::uint8_t>(Ecn::kEct0);
constexpr std::uint32_t kBaseQpn = 0x000100;
constexpr std::uint32_t kPeerQpn = 0x000011;

IpAddr v6_addr(std::uint8_t last) {
  // 2001:2::<last>, the IPv6 benchmarking range (RFC 5180).
  std::array<std::uint8_t, 16> b{0x20, 0x01, 0x00, 0x02};
  b[15] = last;
  return IpAddr::v6(b);
}

FrameAddress sample_address(bool v6, bool vlan, std::uint32_t index) {
  FrameAddress a;
  a.src_mac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
  a.dst_mac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x02};
  if (vlan) a.vlan_tci = kSampleVlanTci;
  a.src_ip = v6 ? v6_addr(1) : IpAddr::v4(0xC6120001);  // 198.18.0.1
  a.dst_ip = v6 ? v6_addr(2) : IpAddr::v4(0xC6120002);  // 198.18.0.2
  a.traffic_class = kDataTrafficClass;
  a.hop_limit = 64;
  a.flow_label = v6 ? (0x12340 + index) & kFlowLabelMask : 0;
  a.udp_src_port = rdma_get_udp_sport(a.flow_label, Qpn(kBaseQpn + index), Qpn(kPeerQpn));
  a.ipv4_id = v6 ? 0 : static_cast<std::uint16_t>(0x1000 + index);
  return a;
}

std::size_t payload_len_for(const OpcodeInfo& info, std::uint32_t index) {
  if (!info.has_payload) return 0;
  switch (info.position) {
    case Position::kFirst:
    case Position::kMiddle:
      return kSamplePmtu;
    case Position::kLast:
      return 61 + index % 4;  // every pad count from 3 to 0
    case Position::kOnly:
      // Some zero-length messages; not over UD, where tshark 4.0 runs its EoIB heuristic on
      // the empty payload and reports the packet malformed.
      if (index % 5 == 0 && info.transport() != Transport::kUd) return 0;
      return 17 + index % 4;
  }
  return 0;
}

// Distinct, recognisable values for every field the opcode carries.
TransportHeaders sample_headers(const OpcodeInfo& info, std::uint32_t index) {
  if (info.opcode == Opcode::kCnp) return make_cnp(Qpn(kBaseQpn + index));
  TransportHeaders h;
  h.bth.opcode = info.opcode;
  h.bth.dest_qp = Qpn(kBaseQpn + index);
  // PSNs near the 24-bit wrap.
  h.bth.psn = Psn(0xFFFF00 + index * 3);
  h.bth.ack_req = info.is_request && info.ends_message();
  h.bth.solicited = info.operation == Operation::kSend && info.ends_message() && index % 2 == 0;
  const HeaderSet hs = info.headers;
  // Not the GSI Q_Key: Wireshark would parse the payload of a GSI packet as a MAD.
  if (hs.has(Header::kDeth)) h.deth = Deth{Qkey(0x11110000 + index), Qpn(0x42)};
  if (hs.has(Header::kXrcEth)) h.xrc_srqn = 0x00A00000 + index;
  if (hs.has(Header::kFeth)) {
    h.feth = Feth{static_cast<std::uint8_t>(1 + index % 3), static_cast<std::uint8_t>(index % 2)};
  }
  if (hs.has(Header::kReth)) {
    const std::uint32_t len = info.operation == Operation::kReadRequest ? 4096 + index
                              : info.operation == Operation::kAtomicWrite
                                  ? static_cast<std::uint32_t>(kAtomicWriteBytes)
                                  : 1000;
    h.reth = Reth{0x00007F0000001000ull + index * 0x1000ull, Rkey(0x00AB0000 + index), len};
  }
  if (hs.has(Header::kAtomicEth)) {
    h.atomic_eth = AtomicEth{0x00007F0000002000ull + index * 8, Rkey(0x00CD0000 + index),
                             0x0102030405060708ull, 0x1112131415161718ull};
  }
  if (hs.has(Header::kAeth)) h.aeth = Aeth::ack(index);
  if (hs.has(Header::kAtomicAckEth)) h.atomic_ack_orig = 0xCAFEF00DDEADBEEFull;
  if (hs.has(Header::kImmDt)) h.imm = 0xA5000000 + index;
  if (hs.has(Header::kIeth)) h.ieth = Rkey(0x00EF0000 + index);
  return h;
}

void add(std::vector<Sample>& out, std::string name, const FrameAddress& addr, TransportHeaders hdr,
         std::vector<std::uint8_t> payload) {
  Sample s{std::move(name), addr, hdr, std::move(payload), {}};
  s.hdr.bth.pad_count = static_cast<std::uint8_t>((4 - (s.payload.size() & 3)) & 3);
  s.frame.resize(frame_bytes(addr, hdr, s.payload.size()));
  auto n = encode_frame(addr, hdr, s.payload, s.frame);
  // Every sample is built from valid fields; a failure is a bug in this file.
  if (!n.ok() || *n != s.frame.size()) std::abort();
  out.push_back(std::move(s));
}

std::vector<std::uint8_t> pattern(std::size_t len, std::uint32_t seed) {
  std::vector<std::uint8_t> p(len);
  for (std::size_t i = 0; i < len; ++i)
    p[i] = static_cast<std::uint8_t>(seed * 7 + i);
  return p;
}

void add_every_opcode(std::vector<Sample>& out) {
  for (bool v6 : {false, true}) {
    for (bool vlan : {false, true}) {
      for (std::uint32_t i = 0; i < kOpcodeTable.size(); ++i) {
        const OpcodeInfo& info = kOpcodeTable[i];
        FrameAddress addr = sample_address(v6, vlan, i);
        if (info.opcode == Opcode::kCnp) addr.traffic_class = kCnpTrafficClass;
        std::string name =
            std::string(info.name) + (v6 ? "/ipv6" : "/ipv4") + (vlan ? "/vlan" : "");
        add(out, std::move(name), addr, sample_headers(info, i),
            pattern(payload_len_for(info, i), i));
      }
    }
  }
}

void add_acks(std::vector<Sample>& out) {
  const FrameAddress addr = sample_address(false, false, 0);
  TransportHeaders h;
  h.bth.opcode = Opcode::kRcAck;
  h.bth.dest_qp = Qpn(kPeerQpn);
  for (std::uint8_t code = 0; code <= 4; ++code) {
    h.bth.psn = Psn(0x100 + code);
    h.aeth = Aeth::nak(0x10 + code, static_cast<NakCode>(code));
    add(out, "ACKNOWLEDGE/nak-" + std::to_string(code), addr, h, {});
  }
  for (std::uint8_t code = 0; code < 32; ++code) {
    h.bth.psn = Psn(0x200 + code);
    h.aeth = Aeth::rnr_nak(0x20 + code, code);
    add(out, "ACKNOWLEDGE/rnr-" + std::to_string(code), addr, h, {});
  }
  for (std::uint8_t code = 0; code < 32; ++code) {
    h.bth.psn = Psn(0x300 + code);
    h.aeth = Aeth::ack(0x40 + code, code);
    add(out, "ACKNOWLEDGE/credits-" + std::to_string(code), addr, h, {});
  }
}

// The self-generated reference frames of docs/protocol.md §1.8, rebuilt from their fields.
void add_protocol_references(std::vector<Sample>& out) {
  FrameAddress addr;
  addr.src_mac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
  addr.dst_mac = {0x02, 0x00, 0x00, 0x00, 0x00, 0x02};
  addr.src_ip = IpAddr::v4(0x0A000001);
  addr.dst_ip = IpAddr::v4(0x0A000002);
  addr.udp_src_port = 0xC132;
  addr.ipv4_id = 0x1234;
  TransportHeaders ack;
  ack.bth.opcode = Opcode::kRcAck;
  ack.bth.dest_qp = Qpn(0x22);
  ack.bth.psn = Psn(100);
  ack.aeth = Aeth::ack(5);
  add(out, "reference/ack", addr, ack, {});

  TransportHeaders send;
  send.bth.opcode = Opcode::kRcSendOnly;
  send.bth.dest_qp = Qpn(0x11);
  send.bth.ack_req = true;
  send.bth.psn = Psn(100);
  addr.traffic_class = 0x02;
  std::vector<std::uint8_t> payload(16);
  for (std::uint8_t i = 0; i < 16; ++i)
    payload[i] = i;
  add(out, "reference/send-only", addr, send, payload);
}

}  // namespace

std::vector<Sample> golden_samples() {
  std::vector<Sample> out;
  add_every_opcode(out);
  add_acks(out);
  add_protocol_references(out);
  return out;
}

}  // namespace xroce::wire
