// The opcode table: every protocol fact about an opcode, declared once (docs/protocol.md §2;
// rxe_opcode.c; the IBA 1.5 annex for FLUSH and ATOMIC WRITE). Header lengths and offsets are
// derived from it; nothing else in the engine lists opcodes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace xroce::wire {

enum class Opcode : std::uint8_t {
  // RC
  kRcSendFirst = 0x00,
  kRcSendMiddle = 0x01,
  kRcSendLast = 0x02,
  kRcSendLastImm = 0x03,
  kRcSendOnly = 0x04,
  kRcSendOnlyImm = 0x05,
  kRcWriteFirst = 0x06,
  kRcWriteMiddle = 0x07,
  kRcWriteLast = 0x08,
  kRcWriteLastImm = 0x09,
  kRcWriteOnly = 0x0A,
  kRcWriteOnlyImm = 0x0B,
  kRcReadRequest = 0x0C,
  kRcReadResponseFirst = 0x0D,
  kRcReadResponseMiddle = 0x0E,
  kRcReadResponseLast = 0x0F,
  kRcReadResponseOnly = 0x10,
  kRcAck = 0x11,
  kRcAtomicAck = 0x12,
  kRcCompareSwap = 0x13,
  kRcFetchAdd = 0x14,
  kRcSendLastInv = 0x16,
  kRcSendOnlyInv = 0x17,
  kRcFlush = 0x1C,        // IBA 1.5 (oA19-*); rxe since Linux 6.2
  kRcAtomicWrite = 0x1D,  // IBA 1.5 (oA19-*); rxe since Linux 6.2
  // UC
  kUcSendFirst = 0x20,
  kUcSendMiddle = 0x21,
  kUcSendLast = 0x22,
  kUcSendLastImm = 0x23,
  kUcSendOnly = 0x24,
  kUcSendOnlyImm = 0x25,
  kUcWriteFirst = 0x26,
  kUcWriteMiddle = 0x27,
  kUcWriteLast = 0x28,
  kUcWriteLastImm = 0x29,
  kUcWriteOnly = 0x2A,
  kUcWriteOnlyImm = 0x2B,
  // XRC (IBA 9.2: RC's operations, each request with an XRCETH after the BTH)
  kXrcSendFirst = 0xA0,
  kXrcSendMiddle = 0xA1,
  kXrcSendLast = 0xA2,
  kXrcSendLastImm = 0xA3,
  kXrcSendOnly = 0xA4,
  kXrcSendOnlyImm = 0xA5,
  kXrcWriteFirst = 0xA6,
  kXrcWriteMiddle = 0xA7,
  kXrcWriteLast = 0xA8,
  kXrcWriteLastImm = 0xA9,
  kXrcWriteOnly = 0xAA,
  kXrcWriteOnlyImm = 0xAB,
  kXrcReadRequest = 0xAC,
  kXrcReadResponseFirst = 0xAD,
  kXrcReadResponseMiddle = 0xAE,
  kXrcReadResponseLast = 0xAF,
  kXrcReadResponseOnly = 0xB0,
  kXrcAck = 0xB1,
  kXrcAtomicAck = 0xB2,
  kXrcCompareSwap = 0xB3,
  kXrcFetchAdd = 0xB4,
  kXrcSendLastInv = 0xB6,
  kXrcSendOnlyInv = 0xB7,
  // UD
  kUdSendOnly = 0x64,
  kUdSendOnlyImm = 0x65,
  // RoCEv2 congestion notification packet (not IB-native 0x80; docs/protocol.md §2.2).
  kCnp = 0x81,
};

enum class Transport : std::uint8_t { kRc = 0, kUc = 1, kRd = 2, kUd = 3, kCnp = 4, kXrc = 5 };

// Extended headers that can follow the BTH, as a typed flag set (no mixing with integers).
enum class Header : std::uint16_t {
  kNone = 0,
  kDeth = 1 << 0,
  kReth = 1 << 1,
  kAtomicEth = 1 << 2,
  kAeth = 1 << 3,
  kImmDt = 1 << 4,
  kIeth = 1 << 5,
  kAtomicAckEth = 1 << 6,
  kCnpPad = 1 << 7,  // the 16 reserved bytes of a CNP
  kXrcEth = 1 << 8,  // XRC requests: the destination XRC SRQ
  kFeth = 1 << 9,    // FLUSH: placement type and selectivity
};

class HeaderSet {
 public:
  constexpr HeaderSet() = default;
  constexpr HeaderSet(Header h) : bits_(static_cast<std::uint16_t>(h)) {}  // NOLINT implicit
  constexpr HeaderSet operator|(HeaderSet o) const { return HeaderSet(bits_ | o.bits_); }
  constexpr bool has(Header h) const { return (bits_ & static_cast<std::uint16_t>(h)) != 0; }
  constexpr bool operator==(const HeaderSet&) const = default;

 private:
  constexpr explicit HeaderSet(unsigned bits) : bits_(static_cast<std::uint16_t>(bits)) {}
  std::uint16_t bits_ = 0;
};
constexpr HeaderSet operator|(Header a, Header b) {
  return HeaderSet(a) | HeaderSet(b);
}

// Where a packet sits in its message.
enum class Position : std::uint8_t { kFirst, kMiddle, kLast, kOnly };

// What the packet does; with Position it replaces rxe's untyped mask bits.
enum class Operation : std::uint8_t {
  kSend,
  kWrite,
  kReadRequest,
  kReadResponse,
  kAck,
  kAtomicAck,
  kCompareSwap,
  kFetchAdd,
  kAtomicWrite,  // 8 bytes placed atomically; answered by a READ RESPONSE ONLY of no payload
  kFlush,        // makes prior writes visible or persistent; answered as ATOMIC WRITE
  kCnp,
};

// Sizes of the headers on the wire (docs/protocol.md §1.4, §1.5).
inline constexpr std::size_t kBthBytes = 12;
inline constexpr std::size_t kDethBytes = 8;
inline constexpr std::size_t kRethBytes = 16;
inline constexpr std::size_t kAtomicEthBytes = 28;
inline constexpr std::size_t kAethBytes = 4;
inline constexpr std::size_t kAtomicAckEthBytes = 8;
inline constexpr std::size_t kImmDtBytes = 4;
inline constexpr std::size_t kIethBytes = 4;
inline constexpr std::size_t kCnpPadBytes = 16;
inline constexpr std::size_t kXrcEthBytes = 4;
inline constexpr std::size_t kFethBytes = 4;
// ATOMIC WRITE carries exactly one naturally aligned 64-bit word (oA19-28).
inline constexpr std::size_t kAtomicWriteBytes = 8;
inline constexpr std::size_t kIcrcBytes = 4;

struct OpcodeInfo {
  Opcode opcode;
  std::string_view name;  // as rxe and Wireshark spell it
  Operation operation;
  Position position;
  HeaderSet headers;
  bool is_request;   // handled by a responder
  bool has_payload;  // may carry payload bytes
  bool with_imm;     // carries ImmDt (consumes a receive WQE on WRITE)
  bool with_inv;     // carries IETH

  constexpr Transport transport() const {
    return static_cast<Transport>(static_cast<std::uint8_t>(opcode) >> 5);
  }
  constexpr bool starts_message() const {
    return position == Position::kFirst || position == Position::kOnly;
  }
  constexpr bool ends_message() const {
    return position == Position::kLast || position == Position::kOnly;
  }
  // Bytes from the start of the BTH to the payload.
  constexpr std::size_t header_bytes() const {
    std::size_t n = kBthBytes;
    if (headers.has(Header::kDeth)) n += kDethBytes;
    if (headers.has(Header::kXrcEth)) n += kXrcEthBytes;
    if (headers.has(Header::kFeth)) n += kFethBytes;
    if (headers.has(Header::kReth)) n += kRethBytes;
    if (headers.has(Header::kAtomicEth)) n += kAtomicEthBytes;
    if (headers.has(Header::kAeth)) n += kAethBytes;
    if (headers.has(Header::kAtomicAckEth)) n += kAtomicAckEthBytes;
    if (headers.has(Header::kImmDt)) n += kImmDtBytes;
    if (headers.has(Header::kIeth)) n += kIethBytes;
    if (headers.has(Header::kCnpPad)) n += kCnpPadBytes;
    return n;
  }
};

namespace detail {
using H = Header;
using P = Position;
using Op = Operation;
constexpr OpcodeInfo req(Opcode o, std::string_view n, Op op, P p, HeaderSet h, bool payload,
                         bool imm = false, bool inv = false) {
  return {o, n, op, p, h, true, payload, imm, inv};
}
constexpr OpcodeInfo resp(Opcode o, std::string_view n, Op op, P p, HeaderSet h, bool payload) {
  return {o, n, op, p, h, false, payload, false, false};
}
}  // namespace detail

// Every opcode the project speaks. RD is absent: neither rxe nor xroce implements it. XRC is
// RC with an XRCETH on every request; its responses carry none.
inline constexpr auto kOpcodeTable = [] {
  using namespace detail;
  using O = Opcode;
  return std::array{
      req(O::kRcSendFirst, "SEND_FIRST", Op::kSend, P::kFirst, H::kNone, true),
      req(O::kRcSendMiddle, "SEND_MIDDLE", Op::kSend, P::kMiddle, H::kNone, true),
      req(O::kRcSendLast, "SEND_LAST", Op::kSend, P::kLast, H::kNone, true),
      req(O::kRcSendLastImm, "SEND_LAST_WITH_IMMEDIATE", Op::kSend, P::kLast, H::kImmDt, true,
          true),
      req(O::kRcSendOnly, "SEND_ONLY", Op::kSend, P::kOnly, H::kNone, true),
      req(O::kRcSendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", Op::kSend, P::kOnly, H::kImmDt, true,
          true),
      req(O::kRcWriteFirst, "RDMA_WRITE_FIRST", Op::kWrite, P::kFirst, H::kReth, true),
      req(O::kRcWriteMiddle, "RDMA_WRITE_MIDDLE", Op::kWrite, P::kMiddle, H::kNone, true),
      req(O::kRcWriteLast, "RDMA_WRITE_LAST", Op::kWrite, P::kLast, H::kNone, true),
      req(O::kRcWriteLastImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", Op::kWrite, P::kLast, H::kImmDt,
          true, true),
      req(O::kRcWriteOnly, "RDMA_WRITE_ONLY", Op::kWrite, P::kOnly, H::kReth, true),
      req(O::kRcWriteOnlyImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", Op::kWrite, P::kOnly,
          H::kReth | H::kImmDt, true, true),
      req(O::kRcReadRequest, "RDMA_READ_REQUEST", Op::kReadRequest, P::kOnly, H::kReth, false),
      resp(O::kRcReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", Op::kReadResponse, P::kFirst,
           H::kAeth, true),
      resp(O::kRcReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", Op::kReadResponse, P::kMiddle,
           H::kNone, true),
      resp(O::kRcReadResponseLast, "RDMA_READ_RESPONSE_LAST", Op::kReadResponse, P::kLast, H::kAeth,
           true),
      resp(O::kRcReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", Op::kReadResponse, P::kOnly, H::kAeth,
           true),
      resp(O::kRcAck, "ACKNOWLEDGE", Op::kAck, P::kOnly, H::kAeth, false),
      resp(O::kRcAtomicAck, "ATOMIC_ACKNOWLEDGE", Op::kAtomicAck, P::kOnly,
           H::kAeth | H::kAtomicAckEth, false),
      req(O::kRcCompareSwap, "COMPARE_SWAP", Op::kCompareSwap, P::kOnly, H::kAtomicEth, false),
      req(O::kRcFetchAdd, "FETCH_ADD", Op::kFetchAdd, P::kOnly, H::kAtomicEth, false),
      req(O::kRcSendLastInv, "SEND_LAST_WITH_INVALIDATE", Op::kSend, P::kLast, H::kIeth, true,
          false, true),
      req(O::kRcSendOnlyInv, "SEND_ONLY_WITH_INVALIDATE", Op::kSend, P::kOnly, H::kIeth, true,
          false, true),
      req(O::kRcFlush, "FLUSH", Op::kFlush, P::kOnly, H::kFeth | H::kReth, false),
      req(O::kRcAtomicWrite, "ATOMIC_WRITE", Op::kAtomicWrite, P::kOnly, H::kReth, true),
      req(O::kUcSendFirst, "UC_SEND_FIRST", Op::kSend, P::kFirst, H::kNone, true),
      req(O::kUcSendMiddle, "UC_SEND_MIDDLE", Op::kSend, P::kMiddle, H::kNone, true),
      req(O::kUcSendLast, "UC_SEND_LAST", Op::kSend, P::kLast, H::kNone, true),
      req(O::kUcSendLastImm, "UC_SEND_LAST_WITH_IMMEDIATE", Op::kSend, P::kLast, H::kImmDt, true,
          true),
      req(O::kUcSendOnly, "UC_SEND_ONLY", Op::kSend, P::kOnly, H::kNone, true),
      req(O::kUcSendOnlyImm, "UC_SEND_ONLY_WITH_IMMEDIATE", Op::kSend, P::kOnly, H::kImmDt, true,
          true),
      req(O::kUcWriteFirst, "UC_RDMA_WRITE_FIRST", Op::kWrite, P::kFirst, H::kReth, true),
      req(O::kUcWriteMiddle, "UC_RDMA_WRITE_MIDDLE", Op::kWrite, P::kMiddle, H::kNone, true),
      req(O::kUcWriteLast, "UC_RDMA_WRITE_LAST", Op::kWrite, P::kLast, H::kNone, true),
      req(O::kUcWriteLastImm, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", Op::kWrite, P::kLast, H::kImmDt,
          true, true),
      req(O::kUcWriteOnly, "UC_RDMA_WRITE_ONLY", Op::kWrite, P::kOnly, H::kReth, true),
      req(O::kUcWriteOnlyImm, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", Op::kWrite, P::kOnly,
          H::kReth | H::kImmDt, true, true),
      req(O::kXrcSendFirst, "XRC_SEND_FIRST", Op::kSend, P::kFirst, H::kXrcEth, true),
      req(O::kXrcSendMiddle, "XRC_SEND_MIDDLE", Op::kSend, P::kMiddle, H::kXrcEth, true),
      req(O::kXrcSendLast, "XRC_SEND_LAST", Op::kSend, P::kLast, H::kXrcEth, true),
      req(O::kXrcSendLastImm, "XRC_SEND_LAST_WITH_IMMEDIATE", Op::kSend, P::kLast,
          H::kXrcEth | H::kImmDt, true, true),
      req(O::kXrcSendOnly, "XRC_SEND_ONLY", Op::kSend, P::kOnly, H::kXrcEth, true),
      req(O::kXrcSendOnlyImm, "XRC_SEND_ONLY_WITH_IMMEDIATE", Op::kSend, P::kOnly,
          H::kXrcEth | H::kImmDt, true, true),
      req(O::kXrcWriteFirst, "XRC_RDMA_WRITE_FIRST", Op::kWrite, P::kFirst, H::kXrcEth | H::kReth,
          true),
      req(O::kXrcWriteMiddle, "XRC_RDMA_WRITE_MIDDLE", Op::kWrite, P::kMiddle, H::kXrcEth, true),
      req(O::kXrcWriteLast, "XRC_RDMA_WRITE_LAST", Op::kWrite, P::kLast, H::kXrcEth, true),
      req(O::kXrcWriteLastImm, "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE", Op::kWrite, P::kLast,
          H::kXrcEth | H::kImmDt, true, true),
      req(O::kXrcWriteOnly, "XRC_RDMA_WRITE_ONLY", Op::kWrite, P::kOnly, H::kXrcEth | H::kReth,
          true),
      req(O::kXrcWriteOnlyImm, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", Op::kWrite, P::kOnly,
          H::kXrcEth | H::kReth | H::kImmDt, true, true),
      req(O::kXrcReadRequest, "XRC_RDMA_READ_REQUEST", Op::kReadRequest, P::kOnly,
          H::kXrcEth | H::kReth, false),
      resp(O::kXrcReadResponseFirst, "XRC_RDMA_READ_RESPONSE_FIRST", Op::kReadResponse, P::kFirst,
           H::kAeth, true),
      resp(O::kXrcReadResponseMiddle, "XRC_RDMA_READ_RESPONSE_MIDDLE", Op::kReadResponse,
           P::kMiddle, H::kNone, true),
      resp(O::kXrcReadResponseLast, "XRC_RDMA_READ_RESPONSE_LAST", Op::kReadResponse, P::kLast,
           H::kAeth, true),
      resp(O::kXrcReadResponseOnly, "XRC_RDMA_READ_RESPONSE_ONLY", Op::kReadResponse, P::kOnly,
           H::kAeth, true),
      resp(O::kXrcAck, "XRC_ACKNOWLEDGE", Op::kAck, P::kOnly, H::kAeth, false),
      resp(O::kXrcAtomicAck, "XRC_ATOMIC_ACKNOWLEDGE", Op::kAtomicAck, P::kOnly,
           H::kAeth | H::kAtomicAckEth, false),
      req(O::kXrcCompareSwap, "XRC_COMPARE_SWAP", Op::kCompareSwap, P::kOnly,
          H::kXrcEth | H::kAtomicEth, false),
      req(O::kXrcFetchAdd, "XRC_FETCH_ADD", Op::kFetchAdd, P::kOnly, H::kXrcEth | H::kAtomicEth,
          false),
      req(O::kXrcSendLastInv, "XRC_SEND_LAST_WITH_INVALIDATE", Op::kSend, P::kLast,
          H::kXrcEth | H::kIeth, true, false, true),
      req(O::kXrcSendOnlyInv, "XRC_SEND_ONLY_WITH_INVALIDATE", Op::kSend, P::kOnly,
          H::kXrcEth | H::kIeth, true, false, true),
      req(O::kUdSendOnly, "UD_SEND_ONLY", Op::kSend, P::kOnly, H::kDeth, true),
      req(O::kUdSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", Op::kSend, P::kOnly,
          H::kDeth | H::kImmDt, true, true),
      OpcodeInfo{Opcode::kCnp, "CNP", Op::kCnp, P::kOnly, H::kCnpPad, false, false, false, false},
  };
}();

namespace detail {
// Wire value -> index into kOpcodeTable (kNoOpcode where absent): a lookup on every packet.
inline constexpr std::uint8_t kNoOpcode = 0xFF;
static_assert(kOpcodeTable.size() < kNoOpcode);
inline constexpr auto kOpcodeIndex = [] {
  std::array<std::uint8_t, 256> index{};
  index.fill(kNoOpcode);
  for (std::size_t i = 0; i < kOpcodeTable.size(); ++i) {
    index[static_cast<std::uint8_t>(kOpcodeTable[i].opcode)] = static_cast<std::uint8_t>(i);
  }
  return index;
}();
}  // namespace detail

// Lookup by wire value; nullptr for opcodes the project does not speak.
constexpr const OpcodeInfo* find_opcode(std::uint8_t value) {
  const std::uint8_t i = detail::kOpcodeIndex[value];
  return i == detail::kNoOpcode ? nullptr : &kOpcodeTable[i];
}
constexpr const OpcodeInfo& opcode_info(Opcode op) {
  return *find_opcode(static_cast<std::uint8_t>(op));
}

// Derived facts, checked at compile time against docs/protocol.md §2.
static_assert(opcode_info(Opcode::kRcWriteOnlyImm).header_bytes() == 12 + 16 + 4);
static_assert(opcode_info(Opcode::kRcAtomicAck).header_bytes() == 12 + 4 + 8);
static_assert(opcode_info(Opcode::kRcCompareSwap).header_bytes() == 12 + 28);
static_assert(opcode_info(Opcode::kUdSendOnlyImm).header_bytes() == 12 + 8 + 4);
static_assert(opcode_info(Opcode::kCnp).header_bytes() == 12 + 16);
static_assert(opcode_info(Opcode::kUcSendOnly).transport() == Transport::kUc);
static_assert(opcode_info(Opcode::kUdSendOnly).transport() == Transport::kUd);
static_assert(opcode_info(Opcode::kCnp).transport() == Transport::kCnp);
static_assert(!opcode_info(Opcode::kRcReadResponseMiddle).headers.has(Header::kAeth));
static_assert(opcode_info(Opcode::kRcFlush).header_bytes() == 12 + 4 + 16);  // BTH|FETH|RETH
static_assert(opcode_info(Opcode::kRcAtomicWrite).header_bytes() == 12 + 16);
static_assert(opcode_info(Opcode::kXrcSendOnly).header_bytes() == 12 + 4);
static_assert(opcode_info(Opcode::kXrcWriteOnlyImm).header_bytes() == 12 + 4 + 16 + 4);
static_assert(opcode_info(Opcode::kXrcCompareSwap).header_bytes() == 12 + 4 + 28);
static_assert(opcode_info(Opcode::kXrcAck).header_bytes() == 12 + 4);
static_assert(opcode_info(Opcode::kXrcSendOnly).transport() == Transport::kXrc);

// Every operation of RC, UC and XRC sits at the same low five bits in each transport (IBA 9.2),
// so the requester picks the RC opcode and moves it into the QP's transport.
constexpr Opcode in_transport(Opcode rc_opcode, Transport t) {
  return static_cast<Opcode>((static_cast<std::uint8_t>(rc_opcode) & 0x1F) |
                             static_cast<std::uint8_t>(t) << 5);
}
static_assert(in_transport(Opcode::kRcWriteOnlyImm, Transport::kUc) == Opcode::kUcWriteOnlyImm);
static_assert(in_transport(Opcode::kRcSendOnlyInv, Transport::kXrc) == Opcode::kXrcSendOnlyInv);
static_assert(in_transport(Opcode::kRcAck, Transport::kXrc) == Opcode::kXrcAck);
// The same operation and position in every transport that has the opcode. (Table indices,
// not pointers: GCC's sanitizers make pointer comparisons non-constant.)
constexpr bool mirrors_rc(const OpcodeInfo& here) {
  const std::uint8_t i = detail::kOpcodeIndex[static_cast<std::uint8_t>(here.opcode) & 0x1F];
  if (i == detail::kNoOpcode) return false;
  const OpcodeInfo& rc = kOpcodeTable[i];
  return here.operation == rc.operation && here.position == rc.position &&
         here.is_request == rc.is_request && here.with_imm == rc.with_imm &&
         here.with_inv == rc.with_inv;
}
static_assert([] {
  for (const OpcodeInfo& info : kOpcodeTable) {
    const Transport t = info.transport();
    if ((t == Transport::kUc || t == Transport::kXrc) && !mirrors_rc(info)) return false;
  }
  return true;
}());

}  // namespace xroce::wire
