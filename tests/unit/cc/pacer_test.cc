// Per-QP pacer: packet spacing at the current rate.
#include "cc/pacer.h"

#include <gtest/gtest.h>

namespace xroce::cc {
namespace {

TEST(Pacer, SpacesPacketsByTheirSerialisationTime) {
  Pacer pacer;
  ASSERT_TRUE(pacer.may_send(0));
  // 1000 bytes at 1000 Mb/s: 8000 bits / 1e9 b/s = 8 µs.
  EXPECT_EQ(pacer.on_sent(0, 1000, 1000), 8000u);
  EXPECT_FALSE(pacer.may_send(7999));
  EXPECT_TRUE(pacer.may_send(8000));
  // The rate changed to 2000 Mb/s: the next 1000 bytes take 4 µs.
  EXPECT_EQ(pacer.on_sent(8000, 1000, 2000), 12000u);
}

TEST(Pacer, SendingLateDoesNotBuildCreditWithoutBurst) {
  Pacer pacer;
  pacer.on_sent(0, 1000, 1000);                           // next at 8 µs
  EXPECT_EQ(pacer.on_sent(50'000, 1000, 1000), 58'000u);  // idle until 50 µs: no credit
}

TEST(Pacer, BurstAllowanceLetsAnIdleQpSendAhead) {
  Pacer pacer(3000);  // 3000 bytes of credit: 24 µs at 1000 Mb/s
  int sent = 0;
  const std::uint64_t now = 100'000;
  while (pacer.may_send(now)) {
    pacer.on_sent(now, 1000, 1000);
    ++sent;
  }
  // Virtual clock starts at now - 24 µs: packets at 76, 84, 92 and 100 µs of virtual time fit;
  // the fourth moves it to 108 µs.
  EXPECT_EQ(sent, 4);
  EXPECT_EQ(pacer.next_send_ns(), 108'000u);
}

TEST(Pacer, LongRunAverageMatchesTheRateWithFractionalSpacing) {
  Pacer pacer;
  // 100 bytes at 3000 Mb/s: 800 / 3e9 s = 266.667 ns, not a whole number of nanoseconds.
  std::uint64_t now = 0;
  for (int i = 0; i < 30'000; ++i) {
    ASSERT_TRUE(pacer.may_send(now));
    now = pacer.on_sent(now, 100, 3000);
  }
  // 30000 packets * 800 bits / 3000 Mb/s = 8 ms exactly: sending at the rounded-up times loses
  // nothing to rounding (each spacing is 266.667 ns in picoseconds, 1 ps rounding each).
  EXPECT_NEAR(static_cast<double>(now), 8'000'000.0, 30.0);
}

TEST(Pacer, RateChangeRescalesTheSpacingNotYetElapsed) {
  Pacer pacer;
  // 4000 bytes at 1 Mb/s: 32 ms of spacing.
  EXPECT_EQ(pacer.on_sent(0, 4000, 1), 32'000'000u);
  // 1 ms later the rate is 1000 Mb/s: the remaining 31 ms at 1 Mb/s are 31 µs at 1000 Mb/s.
  EXPECT_EQ(pacer.on_rate_change(1'000'000, 1, 1000), 1'031'000u);
  // Slower again (500 Mb/s) at 1.021 ms: the remaining 10 µs become 20 µs.
  EXPECT_EQ(pacer.on_rate_change(1'021'000, 1000, 500), 1'041'000u);
  // Once the spacing has elapsed a rate change moves nothing.
  EXPECT_EQ(pacer.on_rate_change(2'000'000, 500, 1), 1'041'000u);
  EXPECT_TRUE(pacer.may_send(2'000'000));
}

}  // namespace
}  // namespace xroce::cc
