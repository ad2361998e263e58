#include "wire/psn.h"

#include <gtest/gtest.h>

namespace xroce::wire {
namespace {

TEST(Psn, MasksTo24Bits) {
  EXPECT_EQ(Psn(0x1234567).value(), 0x234567u);
  EXPECT_EQ((Psn(0xFFFFFF) + 1).value(), 0u);
  EXPECT_EQ((Psn(0) - 1).value(), 0xFFFFFFu);
}

TEST(Psn, ComparesAcrossWrap) {
  EXPECT_TRUE(Psn(0).after(Psn(0xFFFFFF)));
  EXPECT_TRUE(Psn(0xFFFFFF).before(Psn(0)));
  EXPECT_EQ(Psn(2).distance_from(Psn(0xFFFFFE)), 4);
  EXPECT_EQ(Psn(0xFFFFFE).distance_from(Psn(2)), -4);
  EXPECT_FALSE(Psn(5).after(Psn(5)));
  EXPECT_TRUE(Psn(5).at_or_after(Psn(5)));
}

TEST(Psn, HalfWindowBoundary) {
  // ePSN + 2^23 - 1 is still "after"; ePSN - 2^23 is "before" (docs/protocol.md §3.1 windows).
  const Psn e(100);
  EXPECT_TRUE((e + (Psn::kHalfWindow - 1)).after(e));
  EXPECT_TRUE((e - Psn::kHalfWindow).before(e));
  EXPECT_EQ((e - Psn::kHalfWindow).distance_from(e), -static_cast<int>(Psn::kHalfWindow));
}

TEST(Psn, RangeMembershipWraps) {
  EXPECT_TRUE(psn_in_range(Psn(0), Psn(0xFFFFF0), Psn(5)));
  EXPECT_TRUE(psn_in_range(Psn(0xFFFFF0), Psn(0xFFFFF0), Psn(5)));
  EXPECT_FALSE(psn_in_range(Psn(6), Psn(0xFFFFF0), Psn(5)));
  EXPECT_FALSE(psn_in_range(Psn(0xFFFFEF), Psn(0xFFFFF0), Psn(5)));
}

}  // namespace
}  // namespace xroce::wire
