// The on-demand daemon's lifetime (daemon/lifetime.h) with a clock the test moves: the grace
// after the last client left, which a client coming within it restarts; the wait for a first
// client; a service that never ends by time.
#include "daemon/lifetime.h"

#include <gtest/gtest.h>

#include <chrono>

namespace xroce::daemon {
namespace {

using Clock = LifetimeRule::Clock;
using std::chrono::milliseconds;

const Clock::time_point kStart{std::chrono::seconds(1000)};

TEST(LifetimeRule, AServiceNeverEndsByTime) {
  LifetimeRule rule(Lifetime::kService, kStart);
  EXPECT_EQ(rule.wait_ms(kStart), -1);
  EXPECT_FALSE(rule.done(false, kStart + std::chrono::hours(1)));
  rule.client_came();
  EXPECT_FALSE(rule.done(false, kStart + std::chrono::hours(2)));
  EXPECT_EQ(rule.wait_ms(kStart + std::chrono::hours(2)), -1);
}

TEST(LifetimeRule, WithNoClientItWaitsForTheFirstClientMsAndNoLonger) {
  LifetimeRule rule(Lifetime::kOnDemand, kStart);
  EXPECT_EQ(rule.wait_ms(kStart), LifetimeRule::kFirstClientMs);
  const auto last = kStart + milliseconds(LifetimeRule::kFirstClientMs - 1);
  EXPECT_FALSE(rule.done(false, last));
  EXPECT_EQ(rule.wait_ms(last), 1);
  EXPECT_TRUE(rule.done(false, last + milliseconds(1)));
}

// The race the grace exists for: the launcher has read "ok" and not connected yet when another
// client comes and goes. The daemon must still be there for the launcher within the grace.
TEST(LifetimeRule, AClientThatComesAndGoesLeavesTheGraceForTheLauncher) {
  LifetimeRule rule(Lifetime::kOnDemand, kStart);
  const auto other = kStart + milliseconds(5);
  rule.client_came();
  EXPECT_FALSE(rule.done(true, other));  // `xroce link show` of another script, served
  const auto left = other + milliseconds(1);
  EXPECT_FALSE(rule.done(false, left));  // it left: the grace starts
  EXPECT_EQ(rule.wait_ms(left), LifetimeRule::kUnusedGraceMs);
  const auto launcher = left + milliseconds(LifetimeRule::kUnusedGraceMs - 1);
  EXPECT_FALSE(rule.done(false, launcher));
  rule.client_came();
  EXPECT_FALSE(rule.done(true, launcher));  // the launcher connects in time and adds its device
  // Served for as long as it likes: no time limit while anything is served.
  EXPECT_FALSE(rule.done(true, launcher + std::chrono::hours(1)));
  EXPECT_EQ(rule.wait_ms(launcher + std::chrono::hours(1)), -1);
}

// A client can connect and leave between two looks (accepted and dropped in one turn of the
// loop): the grace then runs from the first look after it, not from the daemon's start.
TEST(LifetimeRule, AClientSeenOnlyAfterItLeftStillLeavesAWholeGrace) {
  LifetimeRule rule(Lifetime::kOnDemand, kStart);
  EXPECT_FALSE(rule.done(false, kStart + milliseconds(1)));
  EXPECT_FALSE(rule.done(false, kStart + milliseconds(500)));
  rule.client_came();
  const auto seen = kStart + milliseconds(900);
  EXPECT_FALSE(rule.done(false, seen));
  EXPECT_EQ(rule.wait_ms(seen), LifetimeRule::kUnusedGraceMs);
  EXPECT_FALSE(rule.done(false, seen + milliseconds(LifetimeRule::kUnusedGraceMs - 1)));
  EXPECT_TRUE(rule.done(false, seen + milliseconds(LifetimeRule::kUnusedGraceMs)));
}

TEST(LifetimeRule, ServingAnythingRestartsTheGraceTheNextTimeNothingIs) {
  LifetimeRule rule(Lifetime::kOnDemand, kStart);
  rule.client_came();
  const auto t1 = kStart + milliseconds(10);
  EXPECT_FALSE(rule.done(false, t1));
  EXPECT_FALSE(rule.done(true, t1 + milliseconds(50)));
  const auto t2 = t1 + milliseconds(80);
  EXPECT_FALSE(rule.done(false, t2));  // a fresh grace from t2, not what was left of t1's
  EXPECT_FALSE(rule.done(false, t2 + milliseconds(LifetimeRule::kUnusedGraceMs - 1)));
  EXPECT_TRUE(rule.done(false, t2 + milliseconds(LifetimeRule::kUnusedGraceMs)));
  EXPECT_EQ(rule.wait_ms(t2 + milliseconds(LifetimeRule::kUnusedGraceMs + 5)), 0);
}

TEST(LifetimeRule, AFailedAddEndsTheDaemonOnceTheGraceHasRun) {
  LifetimeRule rule(Lifetime::kOnDemand, kStart);
  rule.client_came();
  EXPECT_FALSE(rule.done(true, kStart + milliseconds(1)));  // the launcher's add, refused
  const auto gone = kStart + milliseconds(2);
  EXPECT_FALSE(rule.done(false, gone));
  EXPECT_TRUE(rule.done(false, gone + milliseconds(LifetimeRule::kUnusedGraceMs)));
}

}  // namespace
}  // namespace xroce::daemon
