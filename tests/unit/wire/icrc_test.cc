// ICRC: the three public vectors of docs/protocol.md §1.8, and the fast implementation held against
// the bit-at-a-time reference.
#include "wire/icrc.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <vector>

#include "wire/cnp.h"
#include "wire/frame.h"
#include "wire/icrc_reference.h"

namespace xroce::wire {
namespace {

constexpr std::size_t kEth = 14;

// V1: a CNP captured from a ConnectX-4 Lx (scapy test/contrib/roce.uts).
const std::vector<std::uint8_t> kV1Frame = {
    0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08, 0x00, 0x45,
    0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11, 0x01,
    0x0a, 0x00, 0x12, 0x01, 0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, 0x81, 0x00, 0xff,
    0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x82, 0xfd, 0x00, 0x2a};

// V2/V3 payload: 18 data bytes (the encoder adds the 2 pad bytes).
const std::vector<std::uint8_t> kV2Payload = {0x46, 0x30, 0x81, 0x8b, 0xe2, 0x89, 0x35, 0xd9, 0x0e,
                                              0x9a, 0x95, 0x50, 0x54, 0x01, 0xbe, 0x88, 0x5e, 0x50};

std::array<std::uint8_t, 4> icrc_bytes(const std::vector<std::uint8_t>& frame) {
  return {frame[frame.size() - 4], frame[frame.size() - 3], frame[frame.size() - 2], frame.back()};
}

Bytes datagram_of(const std::vector<std::uint8_t>& frame, std::size_t l2 = kEth) {
  return Bytes(frame.data() + l2, frame.size() - l2 - kIcrcBytes);
}

TransportHeaders v2_headers() {
  TransportHeaders h;
  h.bth.opcode = Opcode::kUcSendOnly;
  h.bth.mig_req = true;
  h.bth.dest_qp = Qpn(211);
  h.bth.psn = Psn(13571856);
  return h;
}

std::vector<std::uint8_t> encode(const FrameAddress& a, const TransportHeaders& h,
                                 const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> f(frame_bytes(a, h, payload.size()));
  auto n = encode_frame(a, h, payload, f);
  EXPECT_TRUE(n.ok());
  return f;
}

TEST(Icrc, V1ConnectXCnpVerifies) {
  const std::uint32_t want = 0x2A00FD82;  // bytes 82 fd 00 2a, least significant first
  EXPECT_EQ(icrc_compute(datagram_of(kV1Frame)), want);
  EXPECT_EQ(reference::icrc(datagram_of(kV1Frame)), want);
  EXPECT_EQ(load_icrc(kV1Frame.data() + kV1Frame.size() - 4), want);
}

TEST(Icrc, V1RebuiltFromItsFieldsIsBitExact) {
  FrameAddress a;
  a.dst_mac = {0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2};
  a.src_mac = {0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32};
  a.src_ip = IpAddr::v4(0x0A001101);
  a.dst_ip = IpAddr::v4(0x0A001201);
  a.traffic_class = 0xC2;
  a.hop_limit = 64;
  a.udp_src_port = 0;  // as the ConnectX sent it
  a.ipv4_id = 0x718C;
  EXPECT_EQ(encode(a, make_cnp(Qpn(0x118)), {}), kV1Frame);
}

TEST(Icrc, V2ScapyUcSendOnlyIpv4) {
  FrameAddress a;
  a.src_ip = IpAddr::v4(0xC0A80007);
  a.dst_ip = IpAddr::v4(0xC0A80007);
  a.traffic_class = 0x01;
  a.hop_limit = 64;
  a.udp_src_port = 49152;
  a.ipv4_id = 1144;
  const auto f = encode(a, v2_headers(), kV2Payload);
  ASSERT_EQ(f.size(), kEth + 64u);
  EXPECT_EQ(load_be16(f.data() + kEth + 10), 0xb4d5);  // IP checksum as scapy computes it
  EXPECT_EQ(load_be16(f.data() + kEth + 24), 44);      // UDP length
  EXPECT_EQ(f[kEth + 28 + 1], 0x60);                   // M=1, PadCnt=2
  EXPECT_EQ(icrc_bytes(f), (std::array<std::uint8_t, 4>{0x78, 0xf3, 0x53, 0xf3}));
  EXPECT_EQ(reference::icrc(datagram_of(f)), load_icrc(f.data() + f.size() - 4));
}

TEST(Icrc, V3ScapyUcSendOnlyIpv6) {
  FrameAddress a;
  std::array<std::uint8_t, 16> src{0x20, 0x22};
  src[14] = 0x10;
  src[15] = 0x23;
  std::array<std::uint8_t, 16> dst{0x20, 0x23};
  dst[14] = 0x10;
  dst[15] = 0x24;
  a.src_ip = IpAddr::v6(src);
  a.dst_ip = IpAddr::v6(dst);
  a.traffic_class = 226;
  a.flow_label = 0x1FACE;
  a.hop_limit = 255;
  a.udp_src_port = 49152;
  const auto f = encode(a, v2_headers(), kV2Payload);
  EXPECT_EQ(to_string(a.src_ip), "2022::1023");
  EXPECT_EQ(icrc_bytes(f), (std::array<std::uint8_t, 4>{0x3e, 0x5b, 0x74, 0x3b}));
  EXPECT_EQ(reference::icrc(datagram_of(f)), load_icrc(f.data() + f.size() - 4));
}

TEST(Icrc, ReferenceCrc32IsZlibCrc32) {
  const std::string s = "123456789";
  EXPECT_EQ(reference::crc32(Bytes(reinterpret_cast<const std::uint8_t*>(s.data()), s.size())),
            0xCBF43926u);  // the CRC-32 check value
}

TEST(Icrc, MaskedFieldsDoNotChangeTheIcrc) {
  auto f = kV1Frame;
  const std::uint32_t before = icrc_compute(datagram_of(f));
  f[kEth + 1] = 0x03;               // ECN CE, DSCP 0
  f[kEth + 8] = 1;                  // TTL
  f[kEth + 10] = f[kEth + 11] = 0;  // IP checksum
  f[kEth + 26] = 0x12;              // UDP checksum
  f[kEth + 28 + 4] = 0x80;          // FECN instead of BECN
  EXPECT_EQ(icrc_compute(datagram_of(f)), before);
  f[kEth + 28 + 8] = 0x80;  // AckReq is covered
  EXPECT_NE(icrc_compute(datagram_of(f)), before);
}

TEST(Icrc, FastAgreesWithReferenceOnRandomDatagrams) {
  const std::uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Every length up to 600 bytes past the headers (both sides of the slicing-by-8 / folding
  // switch), then random lengths up to a jumbo frame.
  for (int i = 0; i < 1600; ++i) {
    const bool v6 = i % 2;
    const std::size_t min = (v6 ? kIpv6HeaderBytes : kIpv4HeaderBytes) + kUdpHeaderBytes + 12;
    std::vector<std::uint8_t> d(min + (i < 1200 ? i / 2 : rng() % 9000));
    for (auto& b : d)
      b = static_cast<std::uint8_t>(rng());
    d[0] = v6 ? 0x60 | (d[0] & 0xF) : 0x45;
    ASSERT_EQ(icrc_compute(d), reference::icrc(d)) << "length " << d.size();
  }
}

// Both short-input paths, at every length either path splits differently (the 16-byte blocks of
// the carry-less one, the 8-byte words of the slicing tables), from any register.
TEST(Icrc, BothShortPathsAgreeWithTheReferenceAtEveryLength) {
  const std::uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Without PCLMULQDQ both calls take the slicing path; the test then checks that one alone.
  const bool carry_less = detail::carry_less_available();
  for (std::size_t n = 0; n <= 300; ++n) {
    std::vector<std::uint8_t> d(n);
    for (auto& b : d)
      b = static_cast<std::uint8_t>(rng());
    // zlib's CRC starts from all ones and inverts at the end.
    const std::uint32_t want = reference::crc32(d);
    EXPECT_EQ(~detail::crc32_register_update(0xFFFFFFFF, d, carry_less), want) << "length " << n;
    EXPECT_EQ(~detail::crc32_register_update(0xFFFFFFFF, d, false), want) << "length " << n;
    const auto reg = static_cast<std::uint32_t>(rng());
    EXPECT_EQ(detail::crc32_register_update(reg, d, true),
              detail::crc32_register_update(reg, d, false))
        << "length " << n << " register " << reg;
  }
}

}  // namespace
}  // namespace xroce::wire

// A port that receives through a UDP socket never sees the IPv4 identification, which the ICRC
// covers: the solver recovers it from the ICRC.
namespace xroce::wire {
namespace {

TEST(IcrcSolveIpv4Id, RecoversTheConnectXCnpsIdentification) {
  std::vector<std::uint8_t> frame = kV1Frame;
  const std::uint32_t wire = load_icrc(&frame[frame.size() - kIcrcBytes]);
  ASSERT_EQ(load_be16(&frame[kEth + 4]), 0x718c);
  store_be16(&frame[kEth + 4], 0);  // what a UDP socket's reader has to assume
  EXPECT_NE(icrc_compute(datagram_of(frame)), wire);
  EXPECT_EQ(icrc_solve_ipv4_id(datagram_of(frame), wire), 0x718c);
}

TEST(IcrcSolveIpv4Id, RecoversRandomIdsAtManyLengths) {
  const std::uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int i = 0; i < 300; ++i) {
    const std::size_t bytes = 40 + rng() % 9000;
    std::vector<std::uint8_t> d(bytes);
    for (auto& b : d)
      b = static_cast<std::uint8_t>(rng());
    d[0] = 0x45;
    const auto id = static_cast<std::uint16_t>(rng());
    store_be16(&d[4], id);
    const std::uint32_t wire = icrc_compute(Bytes(d.data(), d.size()));
    store_be16(&d[4], static_cast<std::uint16_t>(rng()));  // any starting guess
    ASSERT_EQ(icrc_solve_ipv4_id(Bytes(d.data(), d.size()), wire), id) << "length " << bytes;
    // Given the ICRC as the datagram stands, as a port that has just checked it is.
    const std::uint32_t now = icrc_compute(Bytes(d.data(), d.size()));
    ASSERT_EQ(icrc_solve_ipv4_id(Bytes(d.data(), d.size()), wire, now), id) << "length " << bytes;
  }
}

// A sender whose kernel numbers the segments of one UDP GSO send fixes each one's ICRC with
// the change a new identification makes, without computing the CRC again.
TEST(IcrcIpv4IdChange, GivesTheIcrcOfTheDatagramWithTheNewId) {
  const std::uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int i = 0; i < 200; ++i) {
    const std::size_t bytes = 40 + rng() % 9000;
    std::vector<std::uint8_t> d(bytes);
    for (auto& b : d)
      b = static_cast<std::uint8_t>(rng());
    d[0] = 0x45;
    const auto from = static_cast<std::uint16_t>(rng());
    const auto to = static_cast<std::uint16_t>(rng());
    store_be16(&d[4], from);
    const std::uint32_t before = icrc_compute(Bytes(d.data(), d.size()));
    store_be16(&d[4], to);
    const std::uint32_t after = icrc_compute(Bytes(d.data(), d.size()));
    ASSERT_EQ(before ^ icrc_ipv4_id_change(bytes, static_cast<std::uint16_t>(from ^ to)), after)
        << "length " << bytes << " id " << from << " -> " << to;
  }
  EXPECT_EQ(icrc_ipv4_id_change(100, 0), 0u);
}

TEST(IcrcSolveIpv4Id, NoIdExplainsACorruptedDatagram) {
  // Every single-bit error outside the masked fields and the identification, in the V1 CNP:
  // none is mistaken for a different identification.
  std::vector<std::uint8_t> frame = kV1Frame;
  const std::uint32_t wire = load_icrc(&frame[frame.size() - kIcrcBytes]);
  int tried = 0, solved = 0;
  for (std::size_t byte = kEth + 12; byte < frame.size() - kIcrcBytes; ++byte) {
    const std::size_t off = byte - kEth;
    const bool variant = off == 1 || off == 8 || off == 10 || off == 11 || off == 26 || off == 27 ||
                         off == 32;  // TOS, TTL, checksum, UDP checksum, BTH resv8a
    if (variant) continue;
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::uint8_t> bad = frame;
      bad[byte] ^= static_cast<std::uint8_t>(1u << bit);
      ++tried;
      if (icrc_solve_ipv4_id(datagram_of(bad), wire)) ++solved;
    }
  }
  EXPECT_GT(tried, 300);
  EXPECT_EQ(solved, 0);
}

TEST(IcrcSolveIpv4Id, RejectsIpv6AndShortDatagrams) {
  std::vector<std::uint8_t> d(60, 0);
  d[0] = 0x60;
  EXPECT_FALSE(icrc_solve_ipv4_id(Bytes(d.data(), d.size()), 0));
  d[0] = 0x45;
  EXPECT_FALSE(icrc_solve_ipv4_id(Bytes(d.data(), 30), 0));
}

}  // namespace
}  // namespace xroce::wire
