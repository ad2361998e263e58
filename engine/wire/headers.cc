#include "wire/headers.h"

#include <array>

#include "wire/byteorder.h"

namespace xroce::wire {
namespace {

// IBA table 45 (rxe_comp.c rnrnak_usec; docs/protocol.md §3.4), in microseconds; index 0 is the
// longest, 655.36 ms.
constexpr std::array<std::uint32_t, 32> kRnrTimerUs = {
    655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
    480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

// Credit counts per AETH credit code 0..30 (code 31 means "invalid").
constexpr std::array<std::uint32_t, 31> kCredits = {
    0,   1,   2,   3,   4,    6,    8,    12,   16,   24,   32,   48,    64,    96,    128,  192,
    256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768};

void encode_bth(const Bth& b, std::uint8_t* p) {
  p[0] = static_cast<std::uint8_t>(b.opcode);
  p[1] = static_cast<std::uint8_t>((b.solicited ? 0x80 : 0) | (b.mig_req ? 0x40 : 0) |
                                   (b.pad_count & 0x3) << 4 | (b.tver & 0xF));
  store_be16(p + 2, b.pkey);
  p[4] = static_cast<std::uint8_t>((b.fecn ? 0x80 : 0) | (b.becn ? 0x40 : 0) | (b.resv6a & 0x3F));
  store_be24(p + 5, b.dest_qp.value());
  p[8] = static_cast<std::uint8_t>((b.ack_req ? 0x80 : 0) | (b.resv7 & 0x7F));
  store_be24(p + 9, b.psn.value());
}

Bth decode_bth(const std::uint8_t* p) {
  Bth b;
  b.opcode = static_cast<Opcode>(p[0]);
  b.solicited = p[1] & 0x80;
  b.mig_req = p[1] & 0x40;
  b.pad_count = (p[1] >> 4) & 0x3;
  b.tver = p[1] & 0xF;
  b.pkey = load_be16(p + 2);
  b.fecn = p[4] & 0x80;
  b.becn = p[4] & 0x40;
  b.resv6a = p[4] & 0x3F;
  b.dest_qp = Qpn(load_be24(p + 5));
  b.ack_req = p[8] & 0x80;
  b.resv7 = p[8] & 0x7F;
  b.psn = Psn(load_be24(p + 9));
  return b;
}

// Checks that exactly the headers the opcode calls for are present.
bool presence_matches(const TransportHeaders& h, HeaderSet want, bool* missing) {
  auto check = [&](bool present, Header which) {
    if (present == want.has(which)) return true;
    *missing = !present;
    return false;
  };
  return check(h.deth.has_value(), Header::kDeth) &&
         check(h.xrc_srqn.has_value(), Header::kXrcEth) &&
         check(h.feth.has_value(), Header::kFeth) && check(h.reth.has_value(), Header::kReth) &&
         check(h.atomic_eth.has_value(), Header::kAtomicEth) &&
         check(h.aeth.has_value(), Header::kAeth) &&
         check(h.atomic_ack_orig.has_value(), Header::kAtomicAckEth) &&
         check(h.imm.has_value(), Header::kImmDt) && check(h.ieth.has_value(), Header::kIeth);
}

}  // namespace

std::uint32_t rnr_timer_us(std::uint8_t code) {
  return kRnrTimerUs[code & 0x1F];
}

std::optional<std::uint32_t> aeth_credits(std::uint8_t code) {
  code &= 0x1F;
  if (code >= kCredits.size()) return std::nullopt;
  return kCredits[code];
}

const char* to_string(HeaderError e) {
  switch (e) {
    case HeaderError::kTruncated:
      return "truncated transport headers";
    case HeaderError::kUnknownOpcode:
      return "unknown opcode";
    case HeaderError::kBadTver:
      return "BTH TVer is not 0";
    case HeaderError::kMissingHeader:
      return "a header the opcode needs is missing";
    case HeaderError::kUnexpectedHeader:
      return "a header the opcode does not carry is present";
  }
  return "unknown header error";
}

std::optional<HeaderError> decode_transport_headers_into(Bytes bytes, TransportHeaders& h) {
  if (bytes.size() < kBthBytes) return HeaderError::kTruncated;
  const std::uint8_t* p = bytes.data();
  const OpcodeInfo* info = find_opcode(p[0]);
  if (info == nullptr) return HeaderError::kUnknownOpcode;
  if (bytes.size() < info->header_bytes()) return HeaderError::kTruncated;

  h = TransportHeaders{};
  h.bth = decode_bth(p);
  if (h.bth.tver != 0) return HeaderError::kBadTver;
  p += kBthBytes;
  // Header order after the BTH (docs/protocol.md §1.5): DETH, XRCETH, FETH, RETH|AtomicETH|AETH,
  // ImmDt|IETH, AtomicAckETH after AETH.
  const HeaderSet hs = info->headers;
  if (hs.has(Header::kDeth)) {
    h.deth = Deth{Qkey(load_be32(p)), Qpn(load_be24(p + 5))};
    p += kDethBytes;
  }
  if (hs.has(Header::kXrcEth)) {
    h.xrc_srqn = load_be24(p + 1);
    p += kXrcEthBytes;
  }
  if (hs.has(Header::kFeth)) {
    const std::uint32_t bits = load_be32(p);
    h.feth =
        Feth{static_cast<std::uint8_t>(bits & 0xF), static_cast<std::uint8_t>(bits >> 4 & 0x3)};
    p += kFethBytes;
  }
  if (hs.has(Header::kReth)) {
    h.reth = Reth{load_be64(p), Rkey(load_be32(p + 8)), load_be32(p + 12)};
    p += kRethBytes;
  }
  if (hs.has(Header::kAtomicEth)) {
    h.atomic_eth =
        AtomicEth{load_be64(p), Rkey(load_be32(p + 8)), load_be64(p + 12), load_be64(p + 20)};
    p += kAtomicEthBytes;
  }
  if (hs.has(Header::kAeth)) {
    h.aeth = Aeth{p[0], load_be24(p + 1)};
    p += kAethBytes;
  }
  if (hs.has(Header::kImmDt)) {
    h.imm = load_be32(p);
    p += kImmDtBytes;
  }
  if (hs.has(Header::kIeth)) {
    h.ieth = Rkey(load_be32(p));
    p += kIethBytes;
  }
  if (hs.has(Header::kAtomicAckEth)) {
    h.atomic_ack_orig = load_be64(p);
    p += kAtomicAckEthBytes;
  }
  return std::nullopt;
}

Result<TransportHeaders, HeaderError> decode_transport_headers(Bytes bytes) {
  TransportHeaders h;
  if (auto e = decode_transport_headers_into(bytes, h)) return Err{*e};
  return h;
}

Result<std::size_t, HeaderError> encode_transport_headers(const TransportHeaders& h,
                                                          MutableBytes out) {
  const OpcodeInfo* info = find_opcode(static_cast<std::uint8_t>(h.bth.opcode));
  if (info == nullptr) return Err{HeaderError::kUnknownOpcode};
  bool missing = false;
  if (!presence_matches(h, info->headers, &missing)) {
    return Err{missing ? HeaderError::kMissingHeader : HeaderError::kUnexpectedHeader};
  }
  const std::size_t len = info->header_bytes();
  if (out.size() < len) return Err{HeaderError::kTruncated};
  std::uint8_t* p = out.data();
  encode_bth(h.bth, p);
  p += kBthBytes;
  if (h.deth) {
    store_be32(p, h.deth->qkey.value());
    p[4] = 0;
    store_be24(p + 5, h.deth->src_qp.value());
    p += kDethBytes;
  }
  if (h.xrc_srqn) {
    p[0] = 0;
    store_be24(p + 1, *h.xrc_srqn & 0xFFFFFF);
    p += kXrcEthBytes;
  }
  if (h.feth) {
    store_be32(p, std::uint32_t{h.feth->placement & 0xFu} | (h.feth->selectivity & 0x3u) << 4);
    p += kFethBytes;
  }
  if (h.reth) {
    store_be64(p, h.reth->va);
    store_be32(p + 8, h.reth->rkey.value());
    store_be32(p + 12, h.reth->dma_length);
    p += kRethBytes;
  }
  if (h.atomic_eth) {
    store_be64(p, h.atomic_eth->va);
    store_be32(p + 8, h.atomic_eth->rkey.value());
    store_be64(p + 12, h.atomic_eth->swap_add);
    store_be64(p + 20, h.atomic_eth->compare);
    p += kAtomicEthBytes;
  }
  if (h.aeth) {
    p[0] = h.aeth->syndrome;
    store_be24(p + 1, h.aeth->msn);
    p += kAethBytes;
  }
  if (h.imm) {
    store_be32(p, *h.imm);
    p += kImmDtBytes;
  }
  if (h.ieth) {
    store_be32(p, h.ieth->value());
    p += kIethBytes;
  }
  if (h.atomic_ack_orig) {
    store_be64(p, *h.atomic_ack_orig);
    p += kAtomicAckEthBytes;
  }
  if (info->headers.has(Header::kCnpPad)) {
    for (std::size_t i = 0; i < kCnpPadBytes; ++i)
      p[i] = 0;
    p += kCnpPadBytes;
  }
  return len;
}

}  // namespace xroce::wire
