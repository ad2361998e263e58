#include "wire/opcode.h"

#include <gtest/gtest.h>

#include <set>

namespace xroce::wire {
namespace {

TEST(OpcodeTable, EveryEntryIsFoundByItsValue) {
  std::set<std::uint8_t> seen;
  for (const auto& info : kOpcodeTable) {
    const auto v = static_cast<std::uint8_t>(info.opcode);
    EXPECT_TRUE(seen.insert(v).second) << "duplicate opcode " << int(v);
    ASSERT_NE(find_opcode(v), nullptr);
    EXPECT_EQ(find_opcode(v)->name, info.name);
  }
}

TEST(OpcodeTable, UnknownOpcodesAreRejected) {
  for (std::uint8_t v : {0x15, 0x18, 0x1E, 0x35, 0x40, 0x80, 0xB5, 0xBC, 0xFF}) {
    EXPECT_EQ(find_opcode(v), nullptr) << int(v);
  }
}

TEST(OpcodeTable, RequestsAndResponsesMatchProtocolReference) {
  // docs/protocol.md §2.1: responses are 0x0D-0x12, everything else RC is a request.
  for (const auto& info : kOpcodeTable) {
    const auto v = static_cast<std::uint8_t>(info.opcode);
    if (info.transport() == Transport::kRc) {
      EXPECT_EQ(info.is_request, !(v >= 0x0D && v <= 0x12)) << info.name;
    }
  }
}

TEST(OpcodeTable, RethOnlyOnWriteStartReadAtomicWriteAndFlush) {
  for (const auto& info : kOpcodeTable) {
    const bool want = (info.operation == Operation::kWrite && info.starts_message()) ||
                      info.operation == Operation::kReadRequest ||
                      info.operation == Operation::kAtomicWrite ||
                      info.operation == Operation::kFlush;
    EXPECT_EQ(info.headers.has(Header::kReth), want) << info.name;
  }
}

TEST(OpcodeTable, ImmediateAndInvalidateOnlyEndMessages) {
  for (const auto& info : kOpcodeTable) {
    if (info.headers.has(Header::kImmDt) || info.headers.has(Header::kIeth)) {
      EXPECT_TRUE(info.ends_message()) << info.name;
    }
    EXPECT_EQ(info.with_imm, info.headers.has(Header::kImmDt)) << info.name;
    EXPECT_EQ(info.with_inv, info.headers.has(Header::kIeth)) << info.name;
  }
}

// IBA 9.2: every XRC request carries an XRCETH right after the BTH; XRC responses never do.
TEST(OpcodeTable, XrcEthOnEveryXrcRequestOnly) {
  for (const auto& info : kOpcodeTable) {
    const bool want = info.transport() == Transport::kXrc && info.is_request;
    EXPECT_EQ(info.headers.has(Header::kXrcEth), want) << info.name;
  }
}

// IBA 1.5 annex: FLUSH (0x1C) is BTH|FETH|RETH with no payload (oA19-2); ATOMIC WRITE (0x1D)
// is BTH|RETH with an 8-byte payload. Both are RC requests that fit in one packet.
TEST(OpcodeTable, FlushAndAtomicWrite) {
  const OpcodeInfo& flush = opcode_info(Opcode::kRcFlush);
  EXPECT_EQ(static_cast<int>(flush.opcode), 0x1C);
  EXPECT_TRUE(flush.is_request);
  EXPECT_FALSE(flush.has_payload);
  EXPECT_EQ(flush.position, Position::kOnly);
  EXPECT_TRUE(flush.headers.has(Header::kFeth) && flush.headers.has(Header::kReth));
  const OpcodeInfo& aw = opcode_info(Opcode::kRcAtomicWrite);
  EXPECT_EQ(static_cast<int>(aw.opcode), 0x1D);
  EXPECT_TRUE(aw.is_request && aw.has_payload);
  EXPECT_EQ(aw.header_bytes(), 28u);
}

TEST(OpcodeTable, HeaderLengths) {
  EXPECT_EQ(opcode_info(Opcode::kRcSendMiddle).header_bytes(), 12u);
  EXPECT_EQ(opcode_info(Opcode::kRcReadResponseFirst).header_bytes(), 16u);
  EXPECT_EQ(opcode_info(Opcode::kRcReadRequest).header_bytes(), 28u);
  EXPECT_EQ(opcode_info(Opcode::kRcSendOnlyInv).header_bytes(), 16u);
}

}  // namespace
}  // namespace xroce::wire
