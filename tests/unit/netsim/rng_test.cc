// The simulator's PRNG: reference outputs pin the sequence on every machine.
#include "net/sim/rng.h"

#include <gtest/gtest.h>

namespace xroce::net::sim {
namespace {

TEST(NetsimRng, SplitmixMatchesReference) {
  std::uint64_t state = 0;
  EXPECT_EQ(splitmix64(state), 0xE220A8397B1DCDAFULL);
}

// Values from an independent implementation of splitmix64 seeding + xoshiro256**.
TEST(NetsimRng, XoshiroSequenceIsPinned) {
  Rng rng(42);
  EXPECT_EQ(rng.next_u64(), 0x15780B2E0C2EC716ULL);
  EXPECT_EQ(rng.next_u64(), 0x6104D9866D113A7EULL);
  EXPECT_EQ(rng.next_u64(), 0xAE17533239E499A1ULL);
}

TEST(NetsimRng, SameSeedSameStreamDifferentSeedDifferentStream) {
  Rng a(7), b(7), c(8);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    differs |= x != c.next_u64();
  }
  EXPECT_TRUE(differs);
}

TEST(NetsimRng, UniformAndBoundedStayInRange) {
  Rng rng(1);
  double sum = 0;
  constexpr int kDraws = 100000;
  for (int i = 0; i < kDraws; ++i) {
    const double u = rng.uniform01();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    const auto k = rng.between(3, 9);
    ASSERT_GE(k, 3u);
    ASSERT_LE(k, 9u);
    ASSERT_LT(rng.below(5), 5u);
  }
  EXPECT_NEAR(sum / kDraws, 0.5, 0.01);
}

TEST(NetsimRng, BernoulliEdgesDrawNothing) {
  Rng a(3), b(3);
  EXPECT_FALSE(a.bernoulli(0.0));
  EXPECT_TRUE(a.bernoulli(1.0));
  EXPECT_EQ(a.next_u64(), b.next_u64());
}

}  // namespace
}  // namespace xroce::net::sim
