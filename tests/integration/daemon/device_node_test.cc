// The uverbs nodes in /dev/infiniband, which every daemon on the host shares
// (daemon/sysfs_tree.h): a node another daemon is making, or one whose owner lives, is taken
// and skipped; only a dead owner's node is reclaimed. Root only: the test runs in a mount
// namespace of its own with a tmpfs on /dev/infiniband (the running daemons' nodes are neither
// seen nor touched) and a run root of its own (XROCE_RUN_ROOT).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/sysfs_tree.h"

namespace xroce::daemon {
namespace {

namespace fs = std::filesystem;

class DeviceNode : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (a mount namespace, mknod)";
    ASSERT_EQ(unshare(CLONE_NEWNS), 0) << std::strerror(errno);
    ASSERT_EQ(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
    ::mkdir(kCdevDir, 0755);
    ASSERT_EQ(mount("tmpfs", kCdevDir, "tmpfs", 0, "mode=755"), 0) << std::strerror(errno);
    mounted_ = true;
    root_ = fs::temp_directory_path() / ("xrdn-" + std::to_string(getpid()));
    fs::create_directories(root_ / "nodes");
    setenv("XROCE_RUN_ROOT", root_.c_str(), 1);
  }
  void TearDown() override {
    if (mounted_) umount2(kCdevDir, MNT_DETACH);
    unsetenv("XROCE_RUN_ROOT");
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // A c 1:7 node at the lowest free uverbsN, registered to nobody (as a daemon leaves it
  // between its mknod and its registry write), or to `owner` when that is not 0.
  std::string occupy(pid_t owner) {
    for (int n = 0; n < 64; ++n) {
      const std::string name = "uverbs" + std::to_string(n);
      if (mknod(node(name).c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0) continue;
      if (owner != 0) std::ofstream(root_ / "nodes" / name) << owner << '\n';
      return name;
    }
    return {};
  }
  static std::string node(const std::string& name) { return std::string(kCdevDir) + "/" + name; }
  static bool exists(const std::string& name) {
    struct stat st {};
    return lstat(node(name).c_str(), &st) == 0;
  }
  static pid_t registered(const fs::path& root, const std::string& name) {
    std::ifstream in(root / "nodes" / name);
    pid_t pid = 0;
    in >> pid;
    return pid;
  }

  fs::path root_;
  bool mounted_ = false;
};

TEST_F(DeviceNode, ANodeBeingMadeByAnotherDaemonIsSkippedNotAnError) {
  const std::string busy = occupy(0);
  ASSERT_FALSE(busy.empty());
  errno = 0;
  const std::string mine = create_device_node();
  ASSERT_FALSE(mine.empty()) << "create_device_node failed: " << std::strerror(errno);
  EXPECT_NE(mine, busy);
  EXPECT_EQ(registered(root_, mine), getpid());
  EXPECT_TRUE(exists(busy)) << "another daemon's fresh node was taken away";
  remove_device_node(mine);
  EXPECT_FALSE(exists(mine));
}

TEST_F(DeviceNode, ALiveOwnersNodeIsKeptAndADeadOwnersIsReclaimed) {
  const std::string live = occupy(getppid());
  ASSERT_FALSE(live.empty());
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  int status = 0;
  ASSERT_EQ(waitpid(dead, &status, 0), dead);
  const std::string stale = occupy(dead);
  ASSERT_FALSE(stale.empty());
  reclaim_stale_device_nodes();
  EXPECT_TRUE(exists(live)) << "a live daemon's node was reclaimed";
  EXPECT_FALSE(exists(stale)) << "a dead daemon's node was left";
}

}  // namespace
}  // namespace xroce::daemon
