#include "xroce/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <system_error>

namespace xroce::control {

namespace {

constexpr const char* kDirPrefix = "ns-";
constexpr const char* kLockName = "xroced.lock";

// A run directory's name: "ns-" and the inode number of a network namespace.
bool is_run_dir_name(const std::string& name) {
  if (name.rfind(kDirPrefix, 0) != 0 || name.size() == 3) return false;
  return name.find_first_not_of("0123456789", 3) == std::string::npos;
}

// True if `fd` is still the file at `path` (a daemon that exits unlinks its lock file while
// holding it; whoever locked the unlinked file must start over).
bool still_at(int fd, const std::string& path) {
  struct stat held {};
  struct stat now {};
  return fstat(fd, &held) == 0 && stat(path.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
         held.st_ino == now.st_ino;
}

// The inodes of the network namespaces that exist: those of every process, and those kept by a
// bind mount under /run/netns (`ip netns add`). A namespace held only by an open descriptor
// elsewhere is missed; its directory is then taken for stale if its daemon is gone too.
std::set<std::uint64_t> live_netns_inodes() {
  std::set<std::uint64_t> live;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st {};
    if (stat((entry.path() / "ns" / "net").c_str(), &st) == 0) live.insert(st.st_ino);
  }
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    struct stat st {};
    if (stat(entry.path().c_str(), &st) == 0) live.insert(st.st_ino);
  }
  return live;
}

}  // namespace

std::string run_root() {
  const char* env = std::getenv("XROCE_RUN_ROOT");
  return env != nullptr && env[0] == '/' ? env : "/run/xroce";
}

RunPaths run_paths_for_current_netns() {
  RunPaths paths;
  struct stat st {};
  if (stat("/proc/self/ns/net", &st) != 0) return paths;
  paths.dir = run_root() + "/" + kDirPrefix + std::to_string(st.st_ino);
  paths.control_socket = paths.dir + "/control.sock";
  paths.lock_file = paths.dir + "/" + kLockName;
  paths.log_file = paths.dir + "/xroced.log";
  paths.sysfs_root = paths.dir + "/sys";
  return paths;
}

int lock_run_dir(const RunPaths& paths) {
  // A few rounds at most: each retry means a daemon removed the directory in between.
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::error_code ec;
    std::filesystem::create_directories(paths.dir, ec);
    if (ec) return -ec.value();
    const int fd = open(paths.lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == ENOENT) continue;  // the directory went away under us
      return -errno;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      close(fd);
      return err == EWOULDBLOCK ? -EEXIST : -err;
    }
    if (still_at(fd, paths.lock_file)) return fd;
    close(fd);
  }
  return -EAGAIN;
}

void remove_run_dir(const RunPaths& paths) {
  std::error_code ec;
  std::filesystem::remove_all(paths.sysfs_root, ec);
  unlink(paths.control_socket.c_str());
  unlink(paths.log_file.c_str());
  unlink(paths.lock_file.c_str());  // last, still locked: see lock_run_dir
  rmdir(paths.dir.c_str());         // fails harmlessly if someone put something else there
}

int reclaim_stale_run_dirs(const RunPaths& own) {
  int removed = 0;
  std::error_code ec;
  const std::set<std::uint64_t> live = live_netns_inodes();
  for (const auto& entry : std::filesystem::directory_iterator(run_root(), ec)) {
    const std::string name = entry.path().filename().string();
    if (!is_run_dir_name(name) || entry.path().string() == own.dir) continue;
    // Only the directory of a namespace that is gone (no daemon can be starting there) whose
    // daemon ran (it has a lock file) and is gone too (nobody holds the lock).
    if (live.count(std::strtoull(name.c_str() + 3, nullptr, 10)) != 0) continue;
    const std::string lock = entry.path().string() + "/" + kLockName;
    const int fd = open(lock.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && still_at(fd, lock)) {
      std::filesystem::path dir = entry.path();
      for (const auto& inner : std::filesystem::directory_iterator(dir, ec)) {
        if (inner.path().filename() != kLockName) std::filesystem::remove_all(inner.path(), ec);
      }
      unlink(lock.c_str());
      removed += rmdir(dir.c_str()) == 0 ? 1 : 0;
    }
    close(fd);
  }
  return removed;
}

}  // namespace xroce::control
