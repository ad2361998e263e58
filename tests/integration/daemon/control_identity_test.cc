// The daemon's check that the fds a client hands over at hello are its own /proc/<pid>/mem and
// /proc/<pid>/maps (daemon/control_identity.h), wherever the client's /proc is mounted.
#include "daemon/control_identity.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "xroce/fd.h"

namespace xroce::daemon {
namespace {

TEST(ControlIdentity, OwnProcFilesAreTheImageOfThisProcessOnly) {
  Fd mem(open("/proc/self/mem", O_RDWR | O_CLOEXEC));
  Fd maps(open("/proc/self/maps", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(mem.valid() && maps.valid());
  EXPECT_TRUE(is_image_of(getpid(), mem.get(), maps.get()));
  EXPECT_FALSE(is_image_of(getppid(), mem.get(), maps.get()));
  EXPECT_FALSE(is_image_of(getpid(), maps.get(), mem.get()));
  // Read-only mem: the daemon would reach the memory with more than the client's rights.
  Fd read_only(open("/proc/self/mem", O_RDONLY | O_CLOEXEC));
  EXPECT_FALSE(is_image_of(getpid(), read_only.get(), maps.get()));
  // The parent's files, opened by this process: not this process's image.
  Fd parent_maps(open(("/proc/" + std::to_string(getppid()) + "/maps").c_str(), O_RDONLY));
  if (parent_maps.valid()) {
    EXPECT_FALSE(is_image_of(getpid(), mem.get(), parent_maps.get()));
  }
}

TEST(ControlIdentity, FilesThatOnlyLookLikeProcFilesAreRefused) {
  const auto dir = std::filesystem::temp_directory_path() / ("xrid-" + std::to_string(getpid())) /
                   std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "mem") << "x";
  std::ofstream(dir / "maps") << "x";
  Fd mem(open((dir / "mem").c_str(), O_RDWR | O_CLOEXEC));
  Fd maps(open((dir / "maps").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(mem.valid() && maps.valid());
  EXPECT_FALSE(is_image_of(getpid(), mem.get(), maps.get()));
  std::error_code ignored;
  std::filesystem::remove_all(dir.parent_path(), ignored);
}

// A client whose /proc is mounted elsewhere (its own mount namespace, a chroot, a container):
// the path names that mount point, the files are still its image.
TEST(ControlIdentity, ProcMountedElsewhereIsStillTheImage) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (a mount namespace)";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string at = "/tmp/xrid-proc-" + std::to_string(getpid());
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) ||
        mkdir(at.c_str(), 0700) != 0 || mount("proc", at.c_str(), "proc", 0, nullptr) != 0) {
      _exit(2);
    }
    const int mem = open((at + "/self/mem").c_str(), O_RDWR | O_CLOEXEC);
    const int maps = open((at + "/self/maps").c_str(), O_RDONLY | O_CLOEXEC);
    const bool ok = mem >= 0 && maps >= 0 && is_image_of(getpid(), mem, maps) &&
                    !is_image_of(getppid(), mem, maps);
    umount(at.c_str());
    rmdir(at.c_str());
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: refused; 2: could not mount a /proc of its own";
}

}  // namespace
}  // namespace xroce::daemon
