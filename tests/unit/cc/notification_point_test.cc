// DCQCN notification point: CNP moderation per QP with min_time_between_cnps.
#include "cc/notification_point.h"

#include <gtest/gtest.h>

namespace xroce::cc {
namespace {

constexpr std::uint64_t us(double v) {
  return static_cast<std::uint64_t>(v * 1000);
}

TEST(NotificationPoint, ConnectxSpacesCnpsByFourMicroseconds) {
  const DcqcnParams p = DcqcnParams::connectx();  // min_time_between_cnps = 4 µs
  NotificationPoint np;
  EXPECT_TRUE(np.on_ce_marked(p, 3, us(10)));       // first mark: CNP at once
  EXPECT_FALSE(np.on_ce_marked(p, 3, us(11)));      // 1 µs later
  EXPECT_FALSE(np.on_ce_marked(p, 3, us(13.999)));  // 3.999 µs later
  EXPECT_TRUE(np.on_ce_marked(p, 3, us(14)));       // 4 µs later
  EXPECT_FALSE(np.on_ce_marked(p, 3, us(14.5)));
  EXPECT_TRUE(np.on_ce_marked(p, 3, us(100)));
  EXPECT_EQ(np.counters().np_ecn_marked_roce_packets, 6u);
  EXPECT_EQ(np.counters().np_cnp_sent, 3u);
}

TEST(NotificationPoint, PaperSpacesCnpsByFiftyMicroseconds) {
  const DcqcnParams p = DcqcnParams::paper();
  NotificationPoint np;
  int sent = 0;
  // A mark every µs for 200 µs: CNPs at 0, 50, 100, 150 µs.
  for (int t = 0; t < 200; ++t)
    sent += np.on_ce_marked(p, 0, us(t)) ? 1 : 0;
  EXPECT_EQ(sent, 4);
  EXPECT_EQ(np.counters().np_cnp_sent, 4u);
  EXPECT_EQ(np.counters().np_ecn_marked_roce_packets, 200u);
}

TEST(NotificationPoint, ZeroSpacingSendsForEveryMark) {
  DcqcnParams p = DcqcnParams::connectx();
  p.min_time_between_cnps = 0;
  NotificationPoint np;
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(np.on_ce_marked(p, 0, us(1)));
  EXPECT_EQ(np.counters().np_cnp_sent, 5u);
}

TEST(NotificationPoint, DisabledPriorityCountsMarksButSendsNothing) {
  DcqcnParams p = DcqcnParams::connectx();
  ASSERT_TRUE(apply_assignment(p, "np_enable/3=0").ok());
  NotificationPoint np;
  EXPECT_FALSE(np.on_ce_marked(p, 3, us(0)));
  EXPECT_FALSE(np.on_ce_marked(p, 3, us(10)));
  EXPECT_EQ(np.counters().np_ecn_marked_roce_packets, 2u);
  EXPECT_EQ(np.counters().np_cnp_sent, 0u);
  // Turning it back on at run time: the next mark sends.
  ASSERT_TRUE(apply_assignment(p, "np_enable/3=1").ok());
  EXPECT_TRUE(np.on_ce_marked(p, 3, us(11)));
}

TEST(NotificationPoint, EachQpIsModeratedSeparately) {
  const DcqcnParams p = DcqcnParams::connectx();
  NotificationPoint qp_a;
  NotificationPoint qp_b;
  EXPECT_TRUE(qp_a.on_ce_marked(p, 0, us(0)));
  EXPECT_TRUE(qp_b.on_ce_marked(p, 0, us(1)));
  EXPECT_FALSE(qp_a.on_ce_marked(p, 0, us(2)));
}

}  // namespace
}  // namespace xroce::cc
