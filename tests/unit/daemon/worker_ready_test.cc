// The ready bits of a context page (include/xroce/queues.h "Ready bits") from both sides: the
// provider's Ring::publish sets a QP's bit and says when to ring the doorbell, the worker's
// ReadyRings (engine/daemon/worker_ready.h) pulls exactly the QPs whose bits are set.
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <memory>
#include <set>
#include <vector>

#include "daemon/worker_qps.h"
#include "daemon/worker_ready.h"
#include "xroce/queues.h"

namespace xroce::daemon {
namespace {

// One QP's send ring as the daemon formats it, with its ready bit in the header.
struct TestRing {
  explicit TestRing(std::uint32_t ready_bit) {
    queues::Ring::format(memory.data(), queues::RingKind::send, kSlots, kSlotBytes, ready_bit);
    ring = queues::Ring(memory.data(), kSlots, kSlotBytes);
  }
  static constexpr std::uint32_t kSlots = 4;
  static constexpr std::uint32_t kSlotBytes = 64;
  alignas(
      queues::kCacheLine) std::array<std::byte, queues::ring_bytes(kSlots, kSlotBytes)> memory{};
  queues::Ring ring;
};

// What a turn's take() pulled, as indices into `hosted`.
std::set<std::size_t> take_all(ReadyRings& ready, const std::vector<Hosted>& hosted) {
  std::set<std::size_t> pulled;
  ready.take([&](Hosted& h) {
    const auto index = static_cast<std::size_t>(&h - hosted.data());
    EXPECT_TRUE(pulled.insert(index).second) << "QP " << index << " pulled twice in one take";
  });
  return pulled;
}

TEST(ReadyRings, OfAThousandQpsATurnPullsOnlyThosePostedTo) {
  auto page = std::make_unique<queues::ContextPage>();
  std::vector<Hosted> hosted(1000);
  ReadyRings ready;
  for (std::uint32_t i = 0; i < hosted.size(); ++i)
    ready.add({page.get(), i}, &hosted[i]);
  EXPECT_EQ(ready.qps(), 1000u);
  // A QP starts ready: work may have been posted before it was hosted.
  EXPECT_EQ(take_all(ready, hosted).size(), 1000u);
  EXPECT_FALSE(ready.any_ready());
  EXPECT_TRUE(take_all(ready, hosted).empty());

  std::vector<std::unique_ptr<TestRing>> rings;
  for (const std::uint32_t qp : {3u, 64u, 999u}) {
    rings.push_back(std::make_unique<TestRing>(qp));
    EXPECT_FALSE(rings.back()->ring.publish(1, page.get())) << "no worker sleeps: no doorbell";
  }
  EXPECT_TRUE(ready.any_ready());
  EXPECT_EQ(take_all(ready, hosted), (std::set<std::size_t>{3, 64, 999}));
  EXPECT_TRUE(take_all(ready, hosted).empty()) << "a taken bit stays clear until the next post";
}

TEST(ReadyRings, APostWhileTheWorkerSleepsRingsTheDoorbellAndIsSeen) {
  auto page = std::make_unique<queues::ContextPage>();
  std::vector<Hosted> hosted(2);
  ReadyRings ready;
  ready.add({page.get(), 0}, &hosted[0]);
  ready.add({page.get(), 1}, &hosted[1]);
  (void)take_all(ready, hosted);
  TestRing ring(1);

  ready.set_asleep(true);
  EXPECT_EQ(page->asleep_workers.load(), 1u);
  EXPECT_TRUE(ring.ring.publish(1, page.get())) << "a sleeping worker must be rung";
  EXPECT_TRUE(ready.any_ready()) << "the worker's last look sees the post";
  ready.set_asleep(false);
  EXPECT_EQ(page->asleep_workers.load(), 0u);
  EXPECT_FALSE(ring.ring.publish(2, page.get()));
  EXPECT_EQ(take_all(ready, hosted), (std::set<std::size_t>{1}));
}

TEST(ReadyRings, APageCountsEachSleepingWorkerOnce) {
  auto page = std::make_unique<queues::ContextPage>();
  std::vector<Hosted> hosted(2);
  ReadyRings first;
  ReadyRings second;
  first.add({page.get(), 0}, &hosted[0]);
  second.add({page.get(), 1}, &hosted[1]);
  first.set_asleep(true);
  first.set_asleep(true);  // said twice, counted once
  second.set_asleep(true);
  EXPECT_EQ(page->asleep_workers.load(), 2u);
  second.set_asleep(false);
  EXPECT_EQ(page->asleep_workers.load(), 1u) << "one worker waking must not hide the other's sleep";
  TestRing ring(1);
  EXPECT_TRUE(ring.ring.publish(1, page.get()));
  first.set_asleep(false);
  EXPECT_EQ(page->asleep_workers.load(), 0u);
}

TEST(ReadyRings, WorkersSharingAPageTakeOnlyTheirOwnQpsBits) {
  auto page = std::make_unique<queues::ContextPage>();
  std::vector<Hosted> hosted(128);
  ReadyRings even;
  ReadyRings odd;
  for (std::uint32_t i = 0; i < hosted.size(); ++i)
    (i % 2 == 0 ? even : odd).add({page.get(), i}, &hosted[i]);
  (void)take_all(even, hosted);
  EXPECT_EQ(take_all(odd, hosted).size(), 64u) << "the even worker left the odd QPs' bits alone";
  for (const std::uint32_t qp : {10u, 11u, 127u})
    ReadyRings::mark_ready({page.get(), qp});
  EXPECT_EQ(take_all(even, hosted), (std::set<std::size_t>{10}));
  EXPECT_EQ(take_all(odd, hosted), (std::set<std::size_t>{11, 127}));
}

TEST(ReadyRings, ARemovedQpIsNoLongerPulledAndItsLastPageReleasesTheSleepCount) {
  auto page = std::make_unique<queues::ContextPage>();
  std::vector<Hosted> hosted(2);
  ReadyRings ready;
  ready.add({page.get(), 0}, &hosted[0]);
  ready.add({page.get(), 1}, &hosted[1]);
  (void)take_all(ready, hosted);
  ready.set_asleep(true);
  ready.remove({page.get(), 0});
  ReadyRings::mark_ready({page.get(), 0});
  EXPECT_FALSE(ready.any_ready());
  EXPECT_EQ(page->asleep_workers.load(), 1u);
  ready.remove({page.get(), 1});
  EXPECT_EQ(ready.qps(), 0u);
  EXPECT_EQ(page->asleep_workers.load(), 0u) << "the page may go: no count of ours left in it";
  ready.set_asleep(false);
  EXPECT_EQ(page->asleep_workers.load(), 0u);
}

TEST(ReadyRings, ARingWithoutABitKeepsItsOwnWakeupWord) {
  auto page = std::make_unique<queues::ContextPage>();
  TestRing ring(queues::kNoReadyBit);
  EXPECT_FALSE(ring.ring.publish(1, page.get()));
  ring.ring.header().wakeup.store(queues::kEngineAsleep);
  EXPECT_TRUE(ring.ring.publish(2, page.get()));
  for (const auto& word : page->ready)
    EXPECT_EQ(word.load(), 0u);
}

}  // namespace
}  // namespace xroce::daemon
