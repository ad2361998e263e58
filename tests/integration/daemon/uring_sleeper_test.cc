// The worker's io_uring sleeper against the kernel: doorbells stay heard after the kernel ends
// their multishot polls all at once.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "daemon/worker_uring.h"
#include "xroce/fd.h"

namespace xroce::daemon {
namespace {

// The worker's ring has 8 SQ and 16 CQ entries. 40 doorbells rung while it is awake post more
// CQEs than the CQ holds, and the kernel ends the multishot poll of each one that overflows
// (8 or more of them on Linux 6.18). The next reap must re-arm every one, however many that is:
// each doorbell rung afterwards, alone, must be heard within its wait (the sleeper drains an
// eventfd it heard: the counter reads empty afterwards) rather than left at 1 for nobody.
TEST(UringSleeperTest, EveryDoorbellIsHeardAfterTheKernelEndsTheirPollsTogether) {
  UringSleeper sleeper(0, 0);
  constexpr int kDoorbells = 40;
  std::vector<Fd> bells;
  for (int i = 0; i < kDoorbells; ++i) {
    bells.emplace_back(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    ASSERT_TRUE(bells.back().valid());
    sleeper.watch_doorbell(bells.back().get());
  }
  Fd port(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));  // a port with nothing to read
  const WaitSet set{port.get(), -1};
  const std::uint64_t one = 1;
  for (const Fd& bell : bells)
    ASSERT_EQ(write(bell.get(), &one, sizeof one), static_cast<ssize_t>(sizeof one));
  // Reap all of it: the polls that ended are re-armed here.
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(sleeper.wait(set, 0).has_value());

  for (int i = 0; i < kDoorbells; ++i) {
    std::uint64_t count = 0;
    (void)!read(bells[i].get(), &count, sizeof count);  // whatever the first burst left
    ASSERT_EQ(write(bells[i].get(), &one, sizeof one), static_cast<ssize_t>(sizeof one));
    // Up to 2 s: a heard doorbell ends the wait at once.
    ASSERT_TRUE(sleeper.wait(set, 2'000'000'000).has_value());
    EXPECT_NE(read(bells[i].get(), &count, sizeof count), static_cast<ssize_t>(sizeof count))
        << "doorbell " << i << " rang and nobody heard it";
  }
  for (const Fd& bell : bells)
    sleeper.unwatch_doorbell(bell.get());
}

// The daemon's autogroup gets the workers' nice only where the process leads its session
// (worker_uring.cc): a test that runs workers in-process shares the session of whoever ran it,
// and must leave that session's group as it found it. (That xroced does raise its own group is
// DeviceTest.WorkersAndTheDaemonsAutogroupRunAheadOfApplications.)
TEST(UringSleeperTest, AWorkerOutsideItsOwnSessionLeavesTheAutogroupAlone) {
  if (getsid(0) == getpid()) GTEST_SKIP() << "this test process leads its session";
  const auto autogroup = [] {
    std::ifstream in("/proc/self/autogroup");
    std::string line;
    std::getline(in, line);
    return line;
  };
  const std::string before = autogroup();
  if (before.empty()) GTEST_SKIP() << "no /proc/self/autogroup (CONFIG_SCHED_AUTOGROUP)";
  UringSleeper sleeper;                                    // the daemon's default: nice -10
  std::thread worker([&] { sleeper.on_thread_start(); });  // its nice stays on that thread
  worker.join();
  EXPECT_EQ(autogroup(), before);
}

}  // namespace
}  // namespace xroce::daemon
