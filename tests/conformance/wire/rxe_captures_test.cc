// Real captures of the Linux rxe driver (tests/data/captures): every RoCEv2 frame decodes and
// every ICRC verifies. Other frames (the TCP side channel of the perftest tools) are skipped.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "wire/frame.h"
#include "wire/pcap.h"

namespace xroce::wire {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(RxeCaptures, EveryRoceFrameDecodesWithAGoodIcrc) {
  const fs::path dir = XROCE_CAPTURES_DIR;
  ASSERT_TRUE(fs::is_directory(dir)) << "no capture folder at " << dir;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".pcap") continue;
    ++files;
    SCOPED_TRACE(entry.path().string());
    const auto bytes = read_file(entry.path());
    auto file = pcap::parse(bytes);
    ASSERT_TRUE(file.ok()) << pcap::to_string(file.error());
    ASSERT_EQ(file->link_type, pcap::kLinkTypeEthernet);
    int roce = 0;
    for (std::size_t i = 0; i < file->records.size(); ++i) {
      auto d = decode_frame(file->records[i].data);
      if (!d.ok()) {
        // Only frames that are not RoCEv2 at all may fail.
        EXPECT_TRUE(d.error() == FrameError::kNotUdp || d.error() == FrameError::kNotRoce ||
                    d.error() == FrameError::kNotIp)
            << "frame " << i + 1 << ": " << to_string(d.error());
        continue;
      }
      ++roce;
      EXPECT_TRUE(d->icrc_ok) << "frame " << i + 1;
    }
    EXPECT_GT(roce, 0);
  }
  EXPECT_GE(files, 2) << "the repo holds two rxe captures in " << dir;
}

}  // namespace
}  // namespace xroce::wire
