// The worker's work list and deadline queue (engine/daemon/worker_work.h): a turn visits each
// marked QP once, in marking order; deadlines come out in time order, each QP's current one
// only, and a QP that left takes its entries with it.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "daemon/worker_work.h"

namespace xroce::daemon {
namespace {

std::vector<std::uint32_t> qpns_of(std::span<Hosted* const> list, HostedQps& qps) {
  std::vector<std::uint32_t> out;
  for (Hosted* h : list) {
    for (auto& [qpn, hosted] : qps)
      if (&hosted == h) out.push_back(qpn);
  }
  return out;
}

TEST(WorkList, EachMarkedQpIsTakenOnceInMarkingOrder) {
  HostedQps qps;
  for (std::uint32_t qpn = 1; qpn <= 5; ++qpn)
    qps[qpn];
  WorkList work;
  EXPECT_TRUE(work.empty());
  for (const std::uint32_t qpn : {4u, 2u, 4u, 5u, 2u})
    work.mark(qps[qpn]);
  EXPECT_FALSE(work.empty());
  EXPECT_EQ(qpns_of(work.take(), qps), (std::vector<std::uint32_t>{4, 2, 5}));
  EXPECT_TRUE(work.empty());
  EXPECT_TRUE(work.take().empty()) << "nothing marked since: nothing to drain";
}

TEST(WorkList, AQpMarkedDuringADrainIsTakenNextTurn) {
  HostedQps qps;
  qps[1];
  qps[2];
  WorkList work;
  work.mark(qps[1]);
  work.mark(qps[2]);
  const auto taken = work.take();
  ASSERT_EQ(taken.size(), 2u);
  work.mark(*taken[0]);  // transmitted: may have more
  EXPECT_EQ(qpns_of(work.take(), qps), (std::vector<std::uint32_t>{1}));
}

TEST(WorkList, AForgottenQpIsNotTaken) {
  HostedQps qps;
  qps[1];
  qps[2];
  WorkList work;
  work.mark(qps[1]);
  work.mark(qps[2]);
  work.forget(qps[1]);
  EXPECT_FALSE(qps[1].listed);
  EXPECT_EQ(qpns_of(work.take(), qps), (std::vector<std::uint32_t>{2}));
  work.mark(qps[1]);  // marked again after forgetting: listed again
  EXPECT_EQ(qpns_of(work.take(), qps), (std::vector<std::uint32_t>{1}));
}

std::vector<std::uint32_t> due(DeadlineQueue& q, std::uint64_t now_ns, HostedQps& qps) {
  std::vector<std::uint32_t> out;
  q.pop_due(now_ns, qps, [&](Hosted& h) {
    for (auto& [qpn, hosted] : qps)
      if (&hosted == &h) out.push_back(qpn);
  });
  return out;
}

TEST(DeadlineQueue, DueQpsComeOutInTimeOrderOnlyAtTheirCurrentDeadline) {
  HostedQps qps;
  DeadlineQueue q;
  q.set(1, qps[1], 300);
  q.set(2, qps[2], 100);
  q.set(3, qps[3], 200);
  q.set(3, qps[3], 500);  // moved later: its entry at 200 is outdated
  q.set(4, qps[4], std::nullopt);
  EXPECT_EQ(q.earliest(qps), 100u);
  EXPECT_TRUE(due(q, 99, qps).empty());
  EXPECT_EQ(due(q, 300, qps), (std::vector<std::uint32_t>{2, 1}));
  EXPECT_FALSE(qps[1].timer_key) << "a QP that came due leaves the queue until set again";
  EXPECT_EQ(q.earliest(qps), 500u);
  q.set(1, qps[1], 400);
  EXPECT_EQ(due(q, 1000, qps), (std::vector<std::uint32_t>{1, 3}));
  EXPECT_EQ(q.earliest(qps), std::nullopt);
}

TEST(DeadlineQueue, ARemovedQpsEntriesAreDroppedAndTheHeapStaysBounded) {
  HostedQps qps;
  DeadlineQueue q;
  q.set(7, qps[7], 50);
  q.set(8, qps[8], 60);
  qps.erase(7);
  EXPECT_EQ(q.earliest(qps), 60u);
  EXPECT_EQ(due(q, 100, qps), (std::vector<std::uint32_t>{8}));
  // One QP whose deadline moves at every drain leaves outdated entries behind; compact()
  // keeps them from outgrowing the live ones.
  for (std::uint64_t t = 1000; t < 2000; ++t) {
    q.set(8, qps[8], t);
    q.compact(qps);
  }
  EXPECT_LE(q.size(), 4 * qps.size() + 64 + 1);
  EXPECT_EQ(q.earliest(qps), 1999u);
}

}  // namespace
}  // namespace xroce::daemon
