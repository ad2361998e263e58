// The golden samples behind `xroce wire samples`: complete, valid, and decoding to what built
// them. Also the CNP builder.
#include "wire/samples.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "wire/cnp.h"
#include "wire/icrc_reference.h"

namespace xroce::wire {
namespace {

TEST(Samples, EveryOpcodeInEveryVariant) {
  std::map<std::string, int> count;
  for (const auto& s : golden_samples())
    ++count[std::string(s.hdr.info().name)];
  for (const auto& info : kOpcodeTable) {
    EXPECT_GE(count[std::string(info.name)], 4) << info.name;  // v4, v6, each with/without VLAN
  }
  const auto all = golden_samples();
  std::set<std::pair<bool, bool>> variants;
  for (const auto& s : all)
    variants.insert({s.addr.src_ip.is_v4(), s.addr.vlan_tci.has_value()});
  EXPECT_EQ(variants.size(), 4u);
}

TEST(Samples, AcksCoverEveryNakCodeRnrTimerAndCreditCode) {
  std::set<std::uint8_t> syndromes;
  for (const auto& s : golden_samples()) {
    if (s.hdr.bth.opcode == Opcode::kRcAck) syndromes.insert(s.hdr.aeth->syndrome);
  }
  for (std::uint8_t code = 0; code <= 4; ++code)
    EXPECT_TRUE(syndromes.count(0x60 | code));
  for (std::uint8_t code = 0; code < 32; ++code) {
    EXPECT_TRUE(syndromes.count(0x20 | code)) << "RNR " << int(code);
    EXPECT_TRUE(syndromes.count(code)) << "credits " << int(code);
  }
}

TEST(Samples, EachDecodesToWhatBuiltItWithAValidIcrc) {
  std::set<std::string> names;
  for (const auto& s : golden_samples()) {
    SCOPED_TRACE(s.name);
    EXPECT_TRUE(names.insert(s.name).second) << "duplicate name";
    auto d = decode_frame(s.frame);
    ASSERT_TRUE(d.ok()) << to_string(d.error());
    EXPECT_TRUE(d->icrc_ok);
    EXPECT_EQ(d->addr, s.addr);
    EXPECT_EQ(d->hdr, s.hdr);
    EXPECT_EQ(std::vector<std::uint8_t>(d->payload.begin(), d->payload.end()), s.payload);
    const std::size_t l2 = s.addr.vlan_tci ? 18 : 14;
    EXPECT_EQ(d->icrc_wire,
              reference::icrc(Bytes(s.frame.data() + l2, s.frame.size() - l2 - kIcrcBytes)));
    const auto& info = s.hdr.info();
    if (info.position == Position::kFirst || info.position == Position::kMiddle) {
      EXPECT_EQ(s.payload.size(), kSamplePmtu);
    }
    EXPECT_LT(s.hdr.bth.pad_count, 4);
    EXPECT_EQ((s.payload.size() + s.hdr.bth.pad_count) % 4, 0u);
  }
}

TEST(Samples, AreDeterministic) {
  const auto a = golden_samples();
  const auto b = golden_samples();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].frame, b[i].frame) << a[i].name;
}

TEST(Cnp, HeadersAsPublished) {
  const TransportHeaders h = make_cnp(Qpn(0x118));
  std::array<std::uint8_t, 28> buf{};
  buf.fill(0xEE);
  auto n = encode_transport_headers(h, buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 28u);
  const std::array<std::uint8_t, 12> bth = {0x81, 0x00, 0xff, 0xff, 0x40, 0x00,
                                            0x01, 0x18, 0x00, 0x00, 0x00, 0x00};
  EXPECT_TRUE(std::equal(bth.begin(), bth.end(), buf.begin()));
  for (std::size_t i = 12; i < 28; ++i)
    EXPECT_EQ(buf[i], 0) << i;
  EXPECT_TRUE(h.bth.becn);
  EXPECT_FALSE(h.bth.fecn);
  EXPECT_EQ(h.bth.psn, Psn(0));
}

}  // namespace
}  // namespace xroce::wire
