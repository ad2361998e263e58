// Whole frames: the reference frames of docs/protocol.md §1.8 bit-exact, round trips of every
// opcode over IPv4/IPv6 with and without VLAN, and every error path of decode_frame.
#include "wire/frame.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "wire/icrc.h"
#include "wire/icrc_reference.h"

namespace xroce::wire {
namespace {

constexpr std::size_t kEth = 14;
constexpr std::size_t kIp4 = kEth;
constexpr std::size_t kUdp4 = kEth + 20;
constexpr std::size_t kBth4 = kUdp4 + 8;

// docs/protocol.md §1.8: RC ACK, PSN 100, DestQP 0x22, AETH syndrome 0x1F MSN 5.
const std::vector<std::uint8_t> kGoldenAck = {
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x30, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x14, 0x87, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00,
    0x00, 0x02, 0xc1, 0x32, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00, 0xff, 0xff, 0x00, 0x00,
    0x00, 0x22, 0x00, 0x00, 0x00, 0x64, 0x1f, 0x00, 0x00, 0x05, 0xe0, 0x21, 0x88, 0xe7};
// docs/protocol.md §1.8: RC SEND_ONLY, AckReq, PSN 100, DestQP 0x11, 16 bytes 00..0f, TOS 0x02.
const std::vector<std::uint8_t> kGoldenSend = {
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x45,
    0x02, 0x00, 0x3c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x14, 0x79, 0x0a, 0x00, 0x00, 0x01,
    0x0a, 0x00, 0x00, 0x02, 0xc1, 0x32, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, 0x04, 0x00, 0xff,
    0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x64, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05,
    0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x95, 0x25, 0xe7, 0xea};

FrameAddress golden_address() {
  FrameAddress a;
  a.src_mac = {0x02, 0, 0, 0, 0, 0x01};
  a.dst_mac = {0x02, 0, 0, 0, 0, 0x02};
  a.src_ip = IpAddr::v4(0x0A000001);
  a.dst_ip = IpAddr::v4(0x0A000002);
  a.udp_src_port = 0xC132;
  a.ipv4_id = 0x1234;
  return a;
}

std::vector<std::uint8_t> encode(const FrameAddress& a, const TransportHeaders& h,
                                 Bytes payload = {}) {
  std::vector<std::uint8_t> f(frame_bytes(a, h, payload.size()));
  auto n = encode_frame(a, h, payload, f);
  EXPECT_TRUE(n.ok()) << (n.ok() ? "" : to_string(n.error()));
  if (n.ok()) {
    EXPECT_EQ(*n, f.size());
  }
  return f;
}

TransportHeaders ack_headers() {
  TransportHeaders h;
  h.bth.opcode = Opcode::kRcAck;
  h.bth.dest_qp = Qpn(0x22);
  h.bth.psn = Psn(100);
  h.aeth = Aeth::ack(5);
  return h;
}

// Rewrites the IPv4 header checksum after a test edited the header.
void fix_ipv4_checksum(std::vector<std::uint8_t>& f, std::size_t ip = kIp4) {
  f[ip + 10] = f[ip + 11] = 0;
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i < 20; i += 2)
    sum += load_be16(&f[ip + i]);
  while (sum >> 16)
    sum = (sum & 0xFFFF) + (sum >> 16);
  store_be16(&f[ip + 10], static_cast<std::uint16_t>(~sum));
}

// Rewrites the ICRC after a test edited covered bytes (so only the intended check fails).
void fix_icrc(std::vector<std::uint8_t>& f, std::size_t ip = kIp4) {
  const std::size_t udp_len = load_be16(&f[ip + ((f[ip] >> 4) == 6 ? 40 : 20) + 4]);
  const std::size_t end = ip + ((f[ip] >> 4) == 6 ? 40 : 20) + udp_len - 4;
  store_icrc(&f[end], reference::icrc(Bytes(&f[ip], end - ip)));
}

FrameError decode_error(const std::vector<std::uint8_t>& f) {
  auto d = decode_frame(f);
  EXPECT_FALSE(d.ok());
  return d.ok() ? FrameError::kBufferTooSmall : d.error();
}

TEST(Frame, EncodesTheGoldenAckBitExact) {
  EXPECT_EQ(encode(golden_address(), ack_headers()), kGoldenAck);
}

TEST(Frame, EncodesTheGoldenSendOnlyBitExact) {
  FrameAddress a = golden_address();
  a.traffic_class = 0x02;
  TransportHeaders h;
  h.bth.opcode = Opcode::kRcSendOnly;
  h.bth.dest_qp = Qpn(0x11);
  h.bth.ack_req = true;
  h.bth.psn = Psn(100);
  std::vector<std::uint8_t> payload(16);
  for (std::uint8_t i = 0; i < 16; ++i)
    payload[i] = i;
  EXPECT_EQ(encode(a, h, payload), kGoldenSend);
}

TEST(Frame, DecodesTheGoldenSendOnly) {
  auto d = decode_frame(kGoldenSend);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->icrc_ok);
  EXPECT_EQ(d->icrc_wire, 0xEAE72595u);
  EXPECT_EQ(d->addr.traffic_class, 0x02);
  EXPECT_EQ(d->ecn, Ecn::kEct0);
  EXPECT_EQ(to_string(d->addr.src_ip), "10.0.0.1");
  EXPECT_EQ(to_string(d->addr.dst_ip), "10.0.0.2");
  EXPECT_EQ(d->addr.udp_src_port, 0xC132);
  EXPECT_EQ(d->addr.ipv4_id, 0x1234);
  EXPECT_TRUE(d->addr.ipv4_dont_fragment);
  EXPECT_EQ(d->addr.hop_limit, 64);
  EXPECT_FALSE(d->addr.vlan_tci.has_value());
  EXPECT_EQ(d->hdr.bth.opcode, Opcode::kRcSendOnly);
  EXPECT_TRUE(d->hdr.bth.ack_req);
  EXPECT_EQ(d->udp_length, 40);
  EXPECT_EQ(d->udp_checksum, 0);
  EXPECT_EQ(d->ipv4_checksum, 0x1479);
  ASSERT_EQ(d->payload.size(), 16u);
  EXPECT_EQ(d->payload[15], 0x0F);
}

// Values for every header an opcode may carry, so a round trip exercises every field.
TransportHeaders full_headers(const OpcodeInfo& info) {
  TransportHeaders h;
  h.bth.opcode = info.opcode;
  h.bth.solicited = true;
  h.bth.mig_req = true;
  h.bth.pkey = 0x8001;
  h.bth.fecn = true;
  h.bth.becn = true;
  h.bth.resv6a = 0x15;
  h.bth.dest_qp = Qpn(0xABCDEF);
  h.bth.ack_req = true;
  h.bth.resv7 = 0x2A;
  h.bth.psn = Psn(0xFFFFFF);
  if (info.headers.has(Header::kDeth)) h.deth = Deth{Qkey(0x80010000), Qpn(0x123456)};
  if (info.headers.has(Header::kXrcEth)) h.xrc_srqn = 0xFEDCBA;
  if (info.headers.has(Header::kFeth)) h.feth = Feth{0xF, 0x3};
  if (info.headers.has(Header::kReth)) h.reth = Reth{0xFEDCBA9876543210, Rkey(0x99), 1u << 31};
  if (info.headers.has(Header::kAtomicEth)) {
    h.atomic_eth = AtomicEth{0x1000, Rkey(0x77), 0x1111222233334444, 0x5555666677778888};
  }
  if (info.headers.has(Header::kAeth)) h.aeth = Aeth::rnr_nak(0xFFFFFF, 31);
  if (info.headers.has(Header::kAtomicAckEth)) h.atomic_ack_orig = 0xDEADBEEFCAFEF00D;
  if (info.headers.has(Header::kImmDt)) h.imm = 0x01020304;
  if (info.headers.has(Header::kIeth)) h.ieth = Rkey(0x55AA55AA);
  return h;
}

struct Variant {
  bool v6;
  bool vlan;
};

FrameAddress variant_address(Variant v) {
  FrameAddress a;
  a.src_mac = {0x02, 1, 2, 3, 4, 5};
  a.dst_mac = {0x02, 6, 7, 8, 9, 10};
  if (v.vlan) a.vlan_tci = 0xE00A;  // PCP 7, DEI 0, VID 10
  if (v.v6) {
    a.src_ip = IpAddr::v6({0x20, 0x01, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01});
    a.dst_ip = IpAddr::v6({0x20, 0x01, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02});
    a.flow_label = 0xFFFFF;
  } else {
    a.src_ip = IpAddr::v4(0xC6120001);
    a.dst_ip = IpAddr::v4(0xC6130002);
    a.ipv4_id = 0xBEEF;
  }
  a.traffic_class = 0x6B;  // DSCP 26, ECN CE
  a.hop_limit = 3;
  a.udp_src_port = 0xFFFF;
  return a;
}

TEST(Frame, RoundTripsEveryOpcodeOverEveryVariant) {
  for (Variant v :
       {Variant{false, false}, Variant{false, true}, Variant{true, false}, Variant{true, true}}) {
    for (const auto& info : kOpcodeTable) {
      for (std::size_t len : {0, 1, 2, 3, 4, 4096}) {
        if (!info.has_payload && len != 0) continue;
        SCOPED_TRACE(std::string(info.name) + (v.v6 ? " v6" : " v4") + (v.vlan ? " vlan" : "") +
                     " payload " + std::to_string(len));
        const FrameAddress a = variant_address(v);
        TransportHeaders h = full_headers(info);
        std::vector<std::uint8_t> payload(len);
        for (std::size_t i = 0; i < len; ++i)
          payload[i] = static_cast<std::uint8_t>(i * 13);
        const auto f = encode(a, h, payload);
        h.bth.pad_count = static_cast<std::uint8_t>((4 - len % 4) % 4);
        auto d = decode_frame(f);
        ASSERT_TRUE(d.ok()) << to_string(d.error());
        EXPECT_EQ(d->addr, a);
        EXPECT_EQ(d->hdr, h);
        EXPECT_EQ(std::vector<std::uint8_t>(d->payload.begin(), d->payload.end()), payload);
        EXPECT_TRUE(d->icrc_ok);
        EXPECT_EQ(d->ecn, Ecn::kCe);
        EXPECT_EQ(f.size() % 4, 2u);  // 14- or 18-byte L2, then everything 4-aligned
      }
    }
  }
}

// A worker has the transport write a payload where the frame will carry it and encodes the
// headers around it (engine/daemon/worker_egress.h): the frame is the one a copy would give,
// for every opcode with a payload, both families, with and without a VLAN tag, and the largest
// headers fit the worker's room for them (Egress::kPayloadOffset, 128 bytes).
TEST(Frame, APayloadAlreadyInPlaceGivesTheSameFrame) {
  std::size_t largest_headers = 0;
  for (Variant v :
       {Variant{false, false}, Variant{false, true}, Variant{true, false}, Variant{true, true}}) {
    for (const auto& info : kOpcodeTable) {
      const FrameAddress a = variant_address(v);
      const TransportHeaders h = full_headers(info);
      const std::size_t headers = frame_bytes(a, h, 0) - kIcrcBytes;
      largest_headers = std::max(largest_headers, headers);
      if (!info.has_payload) continue;
      for (std::size_t len : {1, 3, 4096}) {
        SCOPED_TRACE(std::string(info.name) + (v.v6 ? " v6" : " v4") + (v.vlan ? " vlan" : "") +
                     " payload " + std::to_string(len));
        std::vector<std::uint8_t> payload(len);
        for (std::size_t i = 0; i < len; ++i)
          payload[i] = static_cast<std::uint8_t>(i * 7 + 1);
        const auto copied = encode(a, h, payload);
        std::vector<std::uint8_t> slot(headers + len + 8, 0xEE);
        std::copy(payload.begin(), payload.end(),
                  slot.begin() + static_cast<std::ptrdiff_t>(headers));
        const auto n = encode_frame(a, h, Bytes(slot.data() + headers, len), slot);
        ASSERT_TRUE(n.ok());
        slot.resize(*n);
        EXPECT_EQ(slot, copied);
      }
    }
  }
  EXPECT_LE(largest_headers, 128u);
}

TEST(Frame, FrameBytesCountsEveryLayer) {
  TransportHeaders h;
  h.bth.opcode = Opcode::kRcWriteFirst;
  h.reth = Reth{};
  // docs/protocol.md §1.8: WRITE_FIRST at 4096 over IPv4 is 4170 bytes; at 1024, 1098.
  EXPECT_EQ(frame_bytes(golden_address(), h, 4096), 4170u);
  EXPECT_EQ(frame_bytes(golden_address(), h, 1024), 1098u);
  FrameAddress v = variant_address({true, true});
  EXPECT_EQ(frame_bytes(v, h, 1), 18u + 40 + 8 + 28 + 1 + 3 + 4);
}

TEST(Frame, VlanTagIsKeptAndLayersShift) {
  const FrameAddress a = variant_address({false, true});
  const auto f = encode(a, ack_headers());
  EXPECT_EQ(load_be16(&f[12]), 0x8100);
  EXPECT_EQ(load_be16(&f[14]), 0xE00A);
  EXPECT_EQ(load_be16(&f[16]), 0x0800);
  auto d = decode_frame(f);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->addr.vlan_tci, 0xE00A);
}

TEST(Frame, Ipv6HeaderFields) {
  FrameAddress a = variant_address({true, false});
  a.traffic_class = 0xA6;
  a.flow_label = 0x1FACE;
  const auto f = encode(a, ack_headers());
  EXPECT_EQ(load_be32(&f[kEth]), 0x6A61FACEu);
  EXPECT_EQ(load_be16(&f[kEth + 4]), 8 + 16 + 4);
  EXPECT_EQ(f[kEth + 6], 17);
  EXPECT_EQ(f[kEth + 7], 3);
  EXPECT_EQ(to_string(a.src_ip), "2001:2::1");
}

TEST(Frame, EthernetPaddingAfterTheDatagramIsIgnored) {
  auto f = kGoldenAck;
  f.resize(f.size() + 10, 0xEE);
  auto d = decode_frame(f);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->icrc_ok);
  EXPECT_EQ(d->hdr.aeth->msn, 5u);
}

TEST(Frame, BadIcrcStillDecodes) {
  auto f = kGoldenSend;
  f[kBth4 + 12] ^= 0x01;  // a payload bit
  auto d = decode_frame(f);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->icrc_ok);
  EXPECT_EQ(d->icrc_wire, 0xEAE72595u);
}

TEST(FrameDecodeErrors, EveryTruncationIsAnErrorNotACrash) {
  for (const auto* golden : {&kGoldenAck, &kGoldenSend}) {
    for (std::size_t n = 0; n < golden->size(); ++n) {
      std::vector<std::uint8_t> f(golden->begin(), golden->begin() + n);
      auto d = decode_frame(f);
      ASSERT_FALSE(d.ok()) << n;
      EXPECT_EQ(d.error(), FrameError::kTruncated) << n;
    }
  }
  const auto v6 = encode(variant_address({true, true}), ack_headers());
  for (std::size_t n = 0; n < v6.size(); ++n) {
    std::vector<std::uint8_t> f(v6.begin(), v6.begin() + n);
    EXPECT_EQ(decode_error(f), FrameError::kTruncated) << "IPv6 with VLAN, " << n << " bytes";
  }
  std::vector<std::uint8_t> vlan_only(kGoldenAck.begin(), kGoldenAck.begin() + 16);
  store_be16(&vlan_only[12], 0x8100);
  EXPECT_EQ(decode_error(vlan_only), FrameError::kTruncated);
}

TEST(FrameDecodeErrors, NotIp) {
  auto f = kGoldenAck;
  store_be16(&f[12], 0x0806);  // ARP
  EXPECT_EQ(decode_error(f), FrameError::kNotIp);
  auto tagged = encode(variant_address({false, true}), ack_headers());
  store_be16(&tagged[16], 0x8100);  // a second tag (QinQ) is not ours
  EXPECT_EQ(decode_error(tagged), FrameError::kNotIp);
}

TEST(FrameDecodeErrors, BadIpv4Header) {
  auto version = kGoldenAck;
  version[kIp4] = 0x65;  // IPv6 version nibble behind an IPv4 EtherType
  fix_ipv4_checksum(version);
  EXPECT_EQ(decode_error(version), FrameError::kBadIpHeader);
  auto options = kGoldenAck;
  options[kIp4] = 0x46;
  fix_ipv4_checksum(options);
  EXPECT_EQ(decode_error(options), FrameError::kBadIpHeader);
  auto checksum = kGoldenAck;
  checksum[kIp4 + 11] ^= 1;
  EXPECT_EQ(decode_error(checksum), FrameError::kBadIpHeader);
  auto more_fragments = kGoldenAck;
  store_be16(&more_fragments[kIp4 + 6], 0x2000);
  fix_ipv4_checksum(more_fragments);
  EXPECT_EQ(decode_error(more_fragments), FrameError::kBadIpHeader);
  auto offset = kGoldenAck;
  store_be16(&offset[kIp4 + 6], 0x0001);
  fix_ipv4_checksum(offset);
  EXPECT_EQ(decode_error(offset), FrameError::kBadIpHeader);
  auto short_total = kGoldenAck;
  store_be16(&short_total[kIp4 + 2], 19);
  fix_ipv4_checksum(short_total);
  EXPECT_EQ(decode_error(short_total), FrameError::kBadIpHeader);
  auto long_total = kGoldenAck;
  store_be16(&long_total[kIp4 + 2], 49);  // one byte more than the frame holds
  fix_ipv4_checksum(long_total);
  EXPECT_EQ(decode_error(long_total), FrameError::kTruncated);
}

TEST(FrameDecodeErrors, DfClearIsAccepted) {
  auto f = kGoldenAck;
  store_be16(&f[kIp4 + 6], 0);
  fix_ipv4_checksum(f);
  auto d = decode_frame(f);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->addr.ipv4_dont_fragment);
  EXPECT_FALSE(d->icrc_ok) << "the IPv4 flags are covered by the ICRC";
  fix_icrc(f);
  EXPECT_TRUE(decode_frame(f)->icrc_ok);
}

TEST(FrameDecodeErrors, BadIpv6Header) {
  auto f = encode(variant_address({true, false}), ack_headers());
  auto version = f;
  version[kEth] = 0x40 | (version[kEth] & 0x0F);
  EXPECT_EQ(decode_error(version), FrameError::kBadIpHeader);
  auto long_payload = f;
  store_be16(&long_payload[kEth + 4], 29);
  EXPECT_EQ(decode_error(long_payload), FrameError::kTruncated);
  auto mapped = f;
  const IpAddr v4_mapped = IpAddr::v4(0xC6120001);
  std::copy(v4_mapped.bytes.begin(), v4_mapped.bytes.end(), mapped.begin() + kEth + 24);
  EXPECT_EQ(decode_error(mapped), FrameError::kBadIpHeader);
  auto ext_header = f;
  ext_header[kEth + 6] = 0;  // hop-by-hop options
  EXPECT_EQ(decode_error(ext_header), FrameError::kNotUdp);
}

TEST(FrameDecodeErrors, NotUdpAndNotRoce) {
  auto tcp = kGoldenAck;
  tcp[kIp4 + 9] = 6;
  fix_ipv4_checksum(tcp);
  EXPECT_EQ(decode_error(tcp), FrameError::kNotUdp);
  tcp[kIp4 + 10] ^= 0xFF;  // not ours, so not judged broken either
  EXPECT_EQ(decode_error(tcp), FrameError::kNotUdp);
  auto tcp_with_options = tcp;
  tcp_with_options[kIp4] = 0x46;
  EXPECT_EQ(decode_error(tcp_with_options), FrameError::kNotUdp);
  auto port = kGoldenAck;
  store_be16(&port[kUdp4 + 2], 4790);
  EXPECT_EQ(decode_error(port), FrameError::kNotRoce);
}

TEST(FrameDecodeErrors, BadUdpLength) {
  auto longer = kGoldenAck;
  store_be16(&longer[kUdp4 + 4], 29);  // more than the IP datagram holds
  EXPECT_EQ(decode_error(longer), FrameError::kBadUdpLength);
  auto too_short = kGoldenAck;
  store_be16(&too_short[kUdp4 + 4], 8 + 12 + 3);  // no room for BTH and ICRC
  EXPECT_EQ(decode_error(too_short), FrameError::kBadUdpLength);
  // A payload on an opcode that carries none: an ACK with 4 extra bytes.
  FrameAddress a = golden_address();
  TransportHeaders send;
  send.bth.opcode = Opcode::kRcSendOnly;
  auto f = encode(a, send, std::vector<std::uint8_t>(8, 0));
  f[kBth4] = static_cast<std::uint8_t>(Opcode::kRcAck);
  fix_icrc(f);
  EXPECT_EQ(decode_error(f), FrameError::kBadUdpLength);
}

TEST(FrameDecodeErrors, UdpChecksumVerifiedWhenNonZero) {
  auto f = kGoldenAck;
  // Compute the correct checksum over the pseudo-header and datagram (RFC 768).
  std::uint32_t sum = load_be16(&f[kIp4 + 12]) + load_be16(&f[kIp4 + 14]) +
                      load_be16(&f[kIp4 + 16]) + load_be16(&f[kIp4 + 18]) + 17 + 28;
  for (std::size_t i = 0; i < 28; i += 2)
    sum += load_be16(&f[kUdp4 + i]);
  while (sum >> 16)
    sum = (sum & 0xFFFF) + (sum >> 16);
  store_be16(&f[kUdp4 + 6], static_cast<std::uint16_t>(~sum));
  auto d = decode_frame(f);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->icrc_ok);  // the UDP checksum is masked in the ICRC
  EXPECT_NE(d->udp_checksum, 0);
  f[kUdp4 + 7] ^= 0x40;
  EXPECT_EQ(decode_error(f), FrameError::kBadUdpChecksum);
}

// A sender's kernel that leaves the checksum to offload writes the pseudo-header's folded sum
// (Linux udp_set_csum, CHECKSUM_PARTIAL); a veth hands that to its peer unfilled. An XDP reader
// accepts it (the ICRC covers the same bytes), and still refuses any other wrong value.
TEST(FrameDecodeErrors, UdpChecksumLeftForOffloadIsAccepted) {
  auto f = kGoldenAck;
  std::uint32_t sum = load_be16(&f[kIp4 + 12]) + load_be16(&f[kIp4 + 14]) +
                      load_be16(&f[kIp4 + 16]) + load_be16(&f[kIp4 + 18]) + 17 + 28;
  while (sum >> 16)
    sum = (sum & 0xFFFF) + (sum >> 16);
  store_be16(&f[kUdp4 + 6], static_cast<std::uint16_t>(sum));
  auto d = decode_frame(f);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->icrc_ok);
  EXPECT_EQ(d->udp_checksum, sum);
  store_be16(&f[kUdp4 + 6], static_cast<std::uint16_t>(sum + 1));
  EXPECT_EQ(decode_error(f), FrameError::kBadUdpChecksum);
}

TEST(FrameDecodeErrors, BadTransportHeadersCarryTheirReason) {
  auto unknown = kGoldenAck;
  unknown[kBth4] = 0x15;
  DecodedFrame out;
  EXPECT_EQ(decode_frame_into(unknown, out), FrameError::kBadHeaders);
  EXPECT_EQ(out.header_error, HeaderError::kUnknownOpcode);
  EXPECT_EQ(to_string(out.addr.src_ip), "10.0.0.1");  // filled as far as decoding got
  auto tver = kGoldenAck;
  tver[kBth4 + 1] = 0x01;
  EXPECT_EQ(decode_frame_into(tver, out), FrameError::kBadHeaders);
  EXPECT_EQ(out.header_error, HeaderError::kBadTver);
  auto short_aeth = kGoldenAck;
  short_aeth[kBth4] = static_cast<std::uint8_t>(Opcode::kRcAtomicAck);  // needs 8 more bytes
  EXPECT_EQ(decode_frame_into(short_aeth, out), FrameError::kBadHeaders);
  EXPECT_EQ(out.header_error, HeaderError::kTruncated);
}

TEST(FrameDecodeErrors, PadLargerThanPayload) {
  TransportHeaders h;
  h.bth.opcode = Opcode::kRcSendOnly;
  auto f = encode(golden_address(), h, std::vector<std::uint8_t>(2, 0xAB));  // 2 data + 2 pad
  f[kBth4 + 1] = 0x30;  // PadCnt 3: fine, 4 bytes follow
  EXPECT_TRUE(decode_frame(f).ok());
  auto empty = encode(golden_address(), h);
  empty[kBth4 + 1] = 0x10;  // PadCnt 1 with no bytes at all
  EXPECT_EQ(decode_error(empty), FrameError::kBadPad);
  auto ack = kGoldenAck;
  ack[kBth4 + 1] = 0x10;
  EXPECT_EQ(decode_error(ack), FrameError::kBadPad);
}

TEST(FrameEncodeErrors, EveryEncodeError) {
  std::vector<std::uint8_t> buf(kGoldenAck.size() - 1);
  EXPECT_EQ(encode_frame(golden_address(), ack_headers(), {}, buf).error(),
            FrameError::kBufferTooSmall);
  buf.resize(9000);
  FrameAddress mixed = golden_address();
  mixed.dst_ip = variant_address({true, false}).dst_ip;
  EXPECT_EQ(encode_frame(mixed, ack_headers(), {}, buf).error(), FrameError::kBadAddress);
  TransportHeaders missing = ack_headers();
  missing.aeth.reset();
  EXPECT_EQ(encode_frame(golden_address(), missing, {}, buf).error(), FrameError::kBadHeaders);
  TransportHeaders unknown = ack_headers();
  unknown.bth.opcode = static_cast<Opcode>(0x15);
  EXPECT_EQ(encode_frame(golden_address(), unknown, {}, buf).error(), FrameError::kBadHeaders);
  const std::uint8_t one = 1;
  EXPECT_EQ(encode_frame(golden_address(), ack_headers(), Bytes(&one, 1), buf).error(),
            FrameError::kBadUdpLength);
  TransportHeaders send;
  send.bth.opcode = Opcode::kRcSendOnly;
  std::vector<std::uint8_t> huge(65536);
  buf.resize(70000);
  EXPECT_EQ(encode_frame(golden_address(), send, huge, buf).error(), FrameError::kBadUdpLength);
}

TEST(Frame, IpAddrForms) {
  const IpAddr a = IpAddr::v4(0xC6120001);
  EXPECT_TRUE(a.is_v4());
  EXPECT_EQ(a.v4_host_order(), 0xC6120001u);
  EXPECT_EQ(to_string(a), "198.18.0.1");
  EXPECT_FALSE(IpAddr{}.is_v4());
  EXPECT_EQ(to_string(IpAddr{}), "::");
  EXPECT_STREQ(to_string(Ecn::kCe), "CE");
  EXPECT_STREQ(to_string(FrameError::kNotRoce), "UDP destination port is not 4791");
}

}  // namespace
}  // namespace xroce::wire
