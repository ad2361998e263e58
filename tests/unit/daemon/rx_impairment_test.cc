// The receive impairment's draws: off means none, the rate is the probability asked for, and a
// seed and worker index give the same sequence every run.
#include <gtest/gtest.h>

#include <vector>

#include "daemon/rx_impairment.h"

namespace xroce::daemon {
namespace {

std::vector<bool> draws(const RxImpairment& i, std::uint32_t worker, int n) {
  RxImpairer r;
  r.set(i, worker);
  std::vector<bool> out;
  for (int k = 0; k < n; ++k)
    out.push_back(r.drop());
  return out;
}

int count(const std::vector<bool>& v) {
  int n = 0;
  for (bool b : v)
    n += b ? 1 : 0;
  return n;
}

TEST(RxImpairer, OffDropsNothing) {
  RxImpairer never;  // as a worker starts
  for (int k = 0; k < 1000; ++k)
    ASSERT_FALSE(never.drop());
  EXPECT_EQ(count(draws({0.0, 9}, 0, 100000)), 0);
}

TEST(RxImpairer, DropsTheFractionAskedForRepeatablyPerSeedAndWorker) {
  constexpr int kN = 200000;
  const auto a = draws({0.02, 7}, 0, kN);
  // 4,000 expected; the binomial's standard deviation is 63: 5 of them either side.
  EXPECT_NEAR(count(a), 4000, 315);
  EXPECT_EQ(draws({0.02, 7}, 0, kN), a);  // the same run again
  EXPECT_NE(draws({0.02, 7}, 1, kN), a);  // another worker draws apart
  EXPECT_NE(draws({0.02, 8}, 0, kN), a);
  EXPECT_NEAR(count(draws({0.5, 1}, 0, kN)), kN / 2, 2500);
}

}  // namespace
}  // namespace xroce::daemon
