// The in-memory pcap reader and writer.
#include "wire/pcap.h"

#include <gtest/gtest.h>

#include <vector>

namespace xroce::wire::pcap {
namespace {

TEST(Pcap, WriterOutputParsesBack) {
  Writer w;
  const std::vector<std::uint8_t> a = {1, 2, 3};
  const std::vector<std::uint8_t> b(1500, 0xAB);
  w.add(a, 1'500'000'123'456'789);
  w.add(b, 1'500'000'124'000'000);
  auto f = parse(w.bytes());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->link_type, kLinkTypeEthernet);
  EXPECT_FALSE(f->nanosecond);
  ASSERT_EQ(f->records.size(), 2u);
  EXPECT_EQ(std::vector<std::uint8_t>(f->records[0].data.begin(), f->records[0].data.end()), a);
  EXPECT_EQ(f->records[0].timestamp_ns, 1'500'000'123'456'000u);  // microsecond resolution
  EXPECT_EQ(f->records[1].data.size(), 1500u);
  EXPECT_EQ(f->records[1].original_length, 1500u);
  EXPECT_EQ(w.bytes().size(), kFileHeaderBytes + 2 * kRecordHeaderBytes + 3 + 1500);
}

TEST(Pcap, BigEndianNanosecondFile) {
  const std::vector<std::uint8_t> file = {
      0xa1, 0xb2, 0x3c, 0x4d, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 1,
      // record: 2 s, 5 ns, 2 bytes captured of 60
      0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0, 0, 60, 0xAA, 0xBB};
  auto f = parse(file);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->nanosecond);
  EXPECT_EQ(f->snaplen, 0xFFFFu);
  ASSERT_EQ(f->records.size(), 1u);
  EXPECT_EQ(f->records[0].timestamp_ns, 2'000'000'005u);
  EXPECT_EQ(f->records[0].original_length, 60u);
  EXPECT_EQ(f->records[0].data[1], 0xBB);
}

TEST(Pcap, Errors) {
  Writer w;
  w.add(std::vector<std::uint8_t>(10, 1), 0);
  auto bytes = w.bytes();
  EXPECT_EQ(parse(Bytes(bytes.data(), 23)).error(), Error::kTruncatedHeader);
  auto bad = bytes;
  bad[0] = 0x0A;  // pcapng section header block starts 0a 0d 0d 0a
  EXPECT_EQ(parse(bad).error(), Error::kBadMagic);
  EXPECT_EQ(parse(Bytes(bytes.data(), bytes.size() - 1)).error(), Error::kTruncatedRecord);
  EXPECT_EQ(parse(Bytes(bytes.data(), kFileHeaderBytes + 5)).error(), Error::kTruncatedRecord);
  EXPECT_TRUE(parse(Bytes(bytes.data(), kFileHeaderBytes)).ok());  // no records
}

}  // namespace
}  // namespace xroce::wire::pcap
