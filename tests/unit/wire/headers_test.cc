#include "wire/headers.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

namespace xroce::wire {
namespace {

TEST(Headers, DecodesBthFromProtocolReferenceAck) {
  // RC ACK, PSN 100, DestQP 0x22, AETH 0x1F MSN 5 (docs/protocol.md §1.8 golden frame).
  const std::array<std::uint8_t, 16> bytes = {0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x22,
                                              0x00, 0x00, 0x00, 0x64, 0x1f, 0x00, 0x00, 0x05};
  auto h = decode_transport_headers(bytes);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->bth.opcode, Opcode::kRcAck);
  EXPECT_EQ(h->bth.pkey, 0xFFFF);
  EXPECT_EQ(h->bth.dest_qp, Qpn(0x22));
  EXPECT_EQ(h->bth.psn, Psn(100));
  ASSERT_TRUE(h->aeth.has_value());
  EXPECT_TRUE(h->aeth->is_ack());
  EXPECT_EQ(h->aeth->msn, 5u);
  EXPECT_FALSE(h->reth.has_value());
}

TEST(Headers, RoundTripsEveryOpcode) {
  for (const auto& info : kOpcodeTable) {
    TransportHeaders h;
    h.bth.opcode = info.opcode;
    h.bth.solicited = true;
    h.bth.pad_count = 3;
    h.bth.dest_qp = Qpn(0xABCDEF);
    h.bth.ack_req = true;
    h.bth.psn = Psn(0xFFFFFE);
    h.bth.becn = info.opcode == Opcode::kCnp;
    if (info.headers.has(Header::kDeth)) h.deth = Deth{Qkey(0x80010000), Qpn(7)};
    if (info.headers.has(Header::kXrcEth)) h.xrc_srqn = 0x123456;
    if (info.headers.has(Header::kFeth)) h.feth = Feth{flush_placement::kPersistent, 1};
    if (info.headers.has(Header::kReth)) h.reth = Reth{0x1122334455667788, Rkey(0x99), 4096};
    if (info.headers.has(Header::kAtomicEth)) h.atomic_eth = AtomicEth{8, Rkey(1), 2, 3};
    if (info.headers.has(Header::kAeth)) h.aeth = Aeth::nak(9, NakCode::kRemoteAccessError);
    if (info.headers.has(Header::kAtomicAckEth)) h.atomic_ack_orig = 0xDEADBEEFCAFEF00D;
    if (info.headers.has(Header::kImmDt)) h.imm = 0x01020304;
    if (info.headers.has(Header::kIeth)) h.ieth = Rkey(0x55);
    std::vector<std::uint8_t> buf(info.header_bytes());
    auto n = encode_transport_headers(h, buf);
    ASSERT_TRUE(n.ok()) << info.name;
    EXPECT_EQ(*n, info.header_bytes());
    auto back = decode_transport_headers(buf);
    ASSERT_TRUE(back.ok()) << info.name;
    EXPECT_EQ(*back, h) << info.name;
  }
}

TEST(Headers, RejectsTruncatedAndUnknown) {
  std::array<std::uint8_t, 27> read_req{};  // READ request needs 28 bytes
  read_req[0] = 0x0C;
  EXPECT_EQ(decode_transport_headers(read_req).error(), HeaderError::kTruncated);
  std::array<std::uint8_t, 12> bad{};
  bad[0] = 0x15;
  EXPECT_EQ(decode_transport_headers(bad).error(), HeaderError::kUnknownOpcode);
  bad[0] = 0x04;
  bad[1] = 0x01;  // TVer 1
  EXPECT_EQ(decode_transport_headers(bad).error(), HeaderError::kBadTver);
  EXPECT_EQ(decode_transport_headers(std::span<const std::uint8_t>{}).error(),
            HeaderError::kTruncated);
}

TEST(Headers, EncodeRefusesHeadersTheOpcodeDoesNotCarry) {
  TransportHeaders h;
  h.bth.opcode = Opcode::kRcWriteOnly;
  std::array<std::uint8_t, 64> buf{};
  EXPECT_EQ(encode_transport_headers(h, buf).error(), HeaderError::kMissingHeader);
  h.reth = Reth{};
  h.imm = 1;
  EXPECT_EQ(encode_transport_headers(h, buf).error(), HeaderError::kUnexpectedHeader);
}

// The bytes of a FLUSH as rxe builds it (rxe_hdr.h feth_init: placement type in bits 3:0,
// selectivity in bits 5:4) and of an XRC SEND ONLY (XRCETH: a reserved byte, then the SRQ
// number).
TEST(Headers, FethAndXrcEthLayout) {
  TransportHeaders flush;
  flush.bth.opcode = Opcode::kRcFlush;
  flush.feth = Feth{flush_placement::kGlobal | flush_placement::kPersistent,
                    static_cast<std::uint8_t>(FlushSelectivity::kMemoryRegion)};
  flush.reth = Reth{0x1000, Rkey(0x42), 64};
  std::array<std::uint8_t, 32> buf{};
  ASSERT_EQ(*encode_transport_headers(flush, buf), 32u);
  EXPECT_EQ(buf[12], 0x00);
  EXPECT_EQ(buf[15], 0x13);       // selectivity 1, placement 3
  EXPECT_EQ(buf[16 + 7], 0x00);   // RETH follows the FETH
  EXPECT_EQ(buf[16 + 11], 0x42);  // R_Key low byte
  TransportHeaders xrc;
  xrc.bth.opcode = Opcode::kXrcSendOnly;
  xrc.xrc_srqn = 0xABCDEF;
  std::array<std::uint8_t, 16> xb{};
  ASSERT_EQ(*encode_transport_headers(xrc, xb), 16u);
  EXPECT_EQ(xb[12], 0x00);
  EXPECT_EQ(xb[13], 0xAB);
  EXPECT_EQ(xb[15], 0xEF);
  EXPECT_EQ(decode_transport_headers(xb)->xrc_srqn, 0xABCDEFu);
}

TEST(Aeth, SyndromeKinds) {
  EXPECT_EQ(Aeth::ack(1).syndrome, 0x1F);
  EXPECT_TRUE(Aeth::rnr_nak(0, 14).is_rnr_nak());
  EXPECT_EQ(Aeth::rnr_nak(0, 14).syndrome, 0x2E);
  EXPECT_EQ(Aeth::nak(0, NakCode::kInvalidRequest).syndrome, 0x61);
  EXPECT_EQ(Aeth::nak(0, NakCode::kRemoteOperationalError).nak_code(),
            NakCode::kRemoteOperationalError);
}

TEST(Aeth, TimerAndCreditTables) {
  EXPECT_EQ(rnr_timer_us(0), 655360u);
  EXPECT_EQ(rnr_timer_us(1), 10u);
  EXPECT_EQ(rnr_timer_us(25), 61440u);
  EXPECT_EQ(rnr_timer_us(31), 491520u);
  EXPECT_EQ(aeth_credits(5), 6u);
  EXPECT_EQ(aeth_credits(30), 32768u);
  EXPECT_FALSE(aeth_credits(31).has_value());
}

}  // namespace
}  // namespace xroce::wire
