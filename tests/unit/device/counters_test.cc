// The counter set: rxe's names, and per-writer blocks summed by concurrent readers.
#include "device/counters.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace xroce::device {
namespace {

TEST(Counters, FirstFifteenAreRxeHwCountersInRxeOrder) {
  // drivers/infiniband/sw/rxe/rxe_hw_counters.c, enum rxe_counters order.
  const char* rxe[] = {"sent_pkts",           "rcvd_pkts",
                       "duplicate_request",   "out_of_seq_request",
                       "rcvd_rnr_err",        "send_rnr_err",
                       "rcvd_seq_err",        "ack_deferred",
                       "retry_exceeded_err",  "retry_rnr_exceeded_err",
                       "completer_retry_err", "send_err",
                       "link_downed",         "rdma_sends",
                       "rdma_recvs"};
  ASSERT_EQ(static_cast<std::size_t>(kFirstXroceCounter), std::size(rxe));
  for (std::size_t i = 0; i < std::size(rxe); ++i)
    EXPECT_EQ(kCounterNames[i], rxe[i]) << i;
}

TEST(Counters, NamesAreUniqueAndMapBack) {
  for (std::size_t i = 0; i < kCounterCount; ++i) {
    ASSERT_FALSE(kCounterNames[i].empty()) << i;
    const auto c = counter_from_name(kCounterNames[i]);
    ASSERT_TRUE(c.has_value()) << kCounterNames[i];
    EXPECT_EQ(static_cast<std::size_t>(*c), i);
  }
  EXPECT_FALSE(counter_from_name("lifespan").has_value());  // a file, not a counter
  EXPECT_FALSE(counter_from_name("no_such_counter").has_value());
}

TEST(Counters, ReadSumsEveryWriter) {
  DeviceCounters counters(3);
  EXPECT_EQ(counters.writers(), 4u);
  counters.control_block().add(Counter::kLinkDowned);
  counters.worker_block(0).add(Counter::kSentPkts, 5);
  counters.worker_block(2).add(Counter::kSentPkts, 7);
  counters.worker_block(1).add(Counter::kRxIcrcErrors);
  const CounterValues v = counters.read();
  EXPECT_EQ(v[static_cast<std::size_t>(Counter::kSentPkts)], 12u);
  EXPECT_EQ(v[static_cast<std::size_t>(Counter::kLinkDowned)], 1u);
  EXPECT_EQ(v[static_cast<std::size_t>(Counter::kRxIcrcErrors)], 1u);
  EXPECT_EQ(v[static_cast<std::size_t>(Counter::kRcvdPkts)], 0u);
  EXPECT_EQ(counters.read(Counter::kSentPkts), 12u);
}

TEST(Counters, BlocksDoNotShareCacheLines) {
  DeviceCounters counters(2);
  const auto a = reinterpret_cast<std::uintptr_t>(&counters.worker_block(0));
  const auto b = reinterpret_cast<std::uintptr_t>(&counters.worker_block(1));
  EXPECT_EQ(a % 64, 0u);
  EXPECT_GE(b - a, sizeof(CounterBlock));
  EXPECT_EQ(sizeof(CounterBlock) % 64, 0u);
}

TEST(Counters, ConcurrentWritersAndReaderSeeMonotonicExactTotals) {
  constexpr std::size_t kWorkers = 3;
  constexpr std::uint64_t kAdds = 200000;
  DeviceCounters counters(kWorkers);
  std::atomic<bool> done{false};
  std::uint64_t last = 0;
  bool went_backwards = false;
  std::thread reader([&] {
    while (!done.load(std::memory_order_acquire)) {
      const std::uint64_t now = counters.read(Counter::kRcvdPkts);
      if (now < last) went_backwards = true;
      last = now;
    }
  });
  std::vector<std::thread> writers;
  for (std::size_t w = 0; w < kWorkers; ++w)
    writers.emplace_back([&counters, w] {
      for (std::uint64_t i = 0; i < kAdds; ++i)
        counters.worker_block(w).add(Counter::kRcvdPkts);
    });
  for (auto& t : writers)
    t.join();
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_FALSE(went_backwards);
  EXPECT_EQ(counters.read(Counter::kRcvdPkts), kWorkers * kAdds);
}

}  // namespace
}  // namespace xroce::device
