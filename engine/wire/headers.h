// IBA transport headers: the BTH and the extended headers that follow it (docs/protocol.md
// §1.4-1.5). Plain values; encode/decode with explicit byte order, no bitfields over wire memory.
#pragma once

#include <cstdint>
#include <optional>

#include "wire/byteorder.h"
#include "wire/opcode.h"
#include "wire/psn.h"
#include "wire/result.h"
#include "wire/types.h"

namespace xroce::wire {

struct Bth {
  Opcode opcode = Opcode::kRcSendOnly;
  bool solicited = false;  // SE
  bool mig_req = false;    // M
  std::uint8_t pad_count = 0;
  std::uint8_t tver = 0;  // must be 0
  std::uint16_t pkey = kDefaultPkey;
  bool fecn = false;
  bool becn = false;
  std::uint8_t resv6a = 0;  // sent 0, kept so decode/encode is exact
  Qpn dest_qp;
  bool ack_req = false;
  std::uint8_t resv7 = 0;
  Psn psn;

  bool operator==(const Bth&) const = default;
};

struct Deth {
  Qkey qkey;
  Qpn src_qp;
  bool operator==(const Deth&) const = default;
};

struct Reth {
  std::uint64_t va = 0;
  Rkey rkey;
  std::uint32_t dma_length = 0;
  bool operator==(const Reth&) const = default;
};

struct AtomicEth {
  std::uint64_t va = 0;
  Rkey rkey;
  std::uint64_t swap_add = 0;
  std::uint64_t compare = 0;
  bool operator==(const AtomicEth&) const = default;
};

// FLUSH's extended header (IBA 1.5 annex): what the flush must reach (placement type) and
// over which range (selectivity). rxe_hdr.h's feth: placement type in bits 3:0, selectivity in
// bits 5:4 of one big-endian word.
enum class FlushSelectivity : std::uint8_t {
  kRange = 0,         // the RETH's VA and length
  kMemoryRegion = 1,  // the whole region the R_Key names (VA and length ignored)
};
namespace flush_placement {
inline constexpr std::uint8_t kGlobal = 1u << 0;      // global visibility
inline constexpr std::uint8_t kPersistent = 1u << 1;  // persistence
}  // namespace flush_placement

struct Feth {
  std::uint8_t placement = flush_placement::kGlobal;  // 4 bits
  std::uint8_t selectivity = 0;                       // 2 bits: FlushSelectivity
  bool operator==(const Feth&) const = default;
};

// NAK codes carried in AETH bits 4:0 when the type is NAK (rxe_hdr.h AETH_NAK_*; docs/protocol.md
// §3.4).
enum class NakCode : std::uint8_t {
  kPsnSequenceError = 0,
  kInvalidRequest = 1,
  kRemoteAccessError = 2,
  kRemoteOperationalError = 3,
  kInvalidRdRequest = 4,
};

enum class AethType : std::uint8_t { kAck = 0, kRnrNak = 1, kReserved = 2, kNak = 3 };

struct Aeth {
  std::uint8_t syndrome = kAckNoCredits;
  std::uint32_t msn = 0;  // 24 bits

  // ACK with the "invalid credit count" code that rxe always sends.
  static constexpr std::uint8_t kAckNoCredits = 0x1F;

  static constexpr Aeth ack(std::uint32_t msn, std::uint8_t credit_code = 0x1F) {
    return {static_cast<std::uint8_t>(credit_code & 0x1F), msn & 0xFFFFFF};
  }
  static constexpr Aeth rnr_nak(std::uint32_t msn, std::uint8_t timer_code) {
    return {static_cast<std::uint8_t>(0x20 | (timer_code & 0x1F)), msn & 0xFFFFFF};
  }
  static constexpr Aeth nak(std::uint32_t msn, NakCode code) {
    return {static_cast<std::uint8_t>(0x60 | static_cast<std::uint8_t>(code)), msn & 0xFFFFFF};
  }
  constexpr AethType type() const { return static_cast<AethType>((syndrome >> 5) & 0x3); }
  constexpr std::uint8_t value() const { return syndrome & 0x1F; }
  constexpr bool is_ack() const { return type() == AethType::kAck; }
  constexpr bool is_rnr_nak() const { return type() == AethType::kRnrNak; }
  constexpr bool is_nak() const { return type() == AethType::kNak; }
  constexpr NakCode nak_code() const { return static_cast<NakCode>(value()); }
  bool operator==(const Aeth&) const = default;
};

// RNR NAK timer codes to microseconds (IBA table 45; docs/protocol.md §3.4). Code 0 is 655.36 ms.
std::uint32_t rnr_timer_us(std::uint8_t code);
// AETH credit codes to credit counts; nullopt for code 31 (invalid).
std::optional<std::uint32_t> aeth_credits(std::uint8_t code);

// Everything between the UDP header and the payload, as decoded or to be encoded.
// Which optional members are present is dictated by the opcode table, never chosen freely.
struct TransportHeaders {
  Bth bth;
  std::optional<Deth> deth;
  std::optional<std::uint32_t> xrc_srqn;  // XRCETH: the XRC SRQ number (24 bits)
  std::optional<Feth> feth;
  std::optional<Reth> reth;
  std::optional<AtomicEth> atomic_eth;
  std::optional<Aeth> aeth;
  std::optional<std::uint64_t> atomic_ack_orig;  // AtomicAckETH: original remote data
  std::optional<std::uint32_t> imm;              // ImmDt, opaque (kept in wire byte order value)
  std::optional<Rkey> ieth;                      // R_Key to invalidate

  const OpcodeInfo& info() const { return opcode_info(bth.opcode); }
  bool operator==(const TransportHeaders&) const = default;
};

enum class HeaderError : std::uint8_t {
  kTruncated,         // buffer shorter than the headers the opcode calls for
  kUnknownOpcode,     // opcode the project does not speak
  kBadTver,           // TVer != 0
  kMissingHeader,     // encode: a header the opcode needs is absent
  kUnexpectedHeader,  // encode: a header present that the opcode does not carry
};
const char* to_string(HeaderError e);

// Decodes the BTH and the extended headers its opcode calls for from the front of `bytes`.
Result<TransportHeaders, HeaderError> decode_transport_headers(Bytes bytes);
// The same into a caller's TransportHeaders (no copy on the packet path); `out` is unspecified
// on error.
std::optional<HeaderError> decode_transport_headers_into(Bytes bytes, TransportHeaders& out);

// Writes the headers into `out` (which must hold info().header_bytes()); returns bytes written.
Result<std::size_t, HeaderError> encode_transport_headers(const TransportHeaders& h,
                                                          MutableBytes out);

}  // namespace xroce::wire
