// libxroce-preload.so, sysfs part: programs that look at /sys/class/infiniband themselves, not
// through libibverbs (which honours $SYSFS_PATH), find xroce's devices there. UCX reads
// ports/N/gid_attrs/ndevs/I to find a GID's netdev and its subnet; rdma-core's pyverbs tests
// (tests/base.py _get_ip_mac) test that /sys/class/infiniband/DEV/device/net/ exists and list it
// with `ls` to find the device's netdev; scripts walk the class directory.
//
// Each interposed call tries the daemon's tree ($SYSFS_PATH + the path after "/sys") first and
// the program's own path when the tree lacks it (see sysfs_tree_path), read-only: opendir,
// stat/lstat/statx and their 64-bit names, access, readlink. Other paths cost a string compare.
// libc's own internal calls (glibc's opendir opens its directory with an internal open that no
// preload can see) are why opendir itself is taken over, not only open.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "preload_libc.h"

namespace xroce::preload {

std::string sysfs_tree_path(const char* path) {
  constexpr std::string_view kClass = "/sys/class/infiniband";
  if (path == nullptr || std::strncmp(path, kClass.data(), kClass.size()) != 0) return {};
  const char* sysfs = std::getenv("SYSFS_PATH");
  if (sysfs == nullptr || sysfs[0] != '/' || std::strcmp(sysfs, "/sys") == 0) return {};
  return std::string(sysfs) + (path + 4);
}

}  // namespace xroce::preload

namespace {

using xroce::preload::libc;
using xroce::preload::sysfs_tree_path;

std::atomic<void*> g_opendir{nullptr}, g_stat{nullptr}, g_stat64{nullptr}, g_lstat{nullptr},
    g_lstat64{nullptr}, g_statx{nullptr}, g_access{nullptr}, g_readlink{nullptr};

// Calls `fn` on the tree's copy of `path` when there is one and the call succeeds there, else on
// `path` itself with errno as the tree never happened. `failed` says whether a result is a
// failure (-1 for most calls, nullptr for opendir).
template <typename Call, typename Failed>
auto tree_first(const char* path, Call fn, Failed failed) {
  if (const std::string tree = sysfs_tree_path(path); !tree.empty()) {
    const int saved = errno;
    auto r = fn(tree.c_str());
    if (!failed(r)) return r;
    errno = saved;
  }
  return fn(path);
}

bool minus_one(int r) {
  return r == -1;
}
bool minus_one_ssize(ssize_t r) {
  return r == -1;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) DIR* opendir(const char* path) {
  using Fn = DIR* (*)(const char*);
  const auto real = libc<Fn>(g_opendir, "opendir");
  return tree_first(path, real, [](DIR* d) { return d == nullptr; });
}

__attribute__((visibility("default"))) int stat(const char* path, struct stat* st) {
  using Fn = int (*)(const char*, struct stat*);
  const auto real = libc<Fn>(g_stat, "stat");
  return tree_first(
      path, [&](const char* p) { return real(p, st); }, minus_one);
}

__attribute__((visibility("default"))) int stat64(const char* path, struct stat64* st) {
  using Fn = int (*)(const char*, struct stat64*);
  const auto real = libc<Fn>(g_stat64, "stat64");
  return tree_first(
      path, [&](const char* p) { return real(p, st); }, minus_one);
}

__attribute__((visibility("default"))) int lstat(const char* path, struct stat* st) {
  using Fn = int (*)(const char*, struct stat*);
  const auto real = libc<Fn>(g_lstat, "lstat");
  return tree_first(
      path, [&](const char* p) { return real(p, st); }, minus_one);
}

__attribute__((visibility("default"))) int lstat64(const char* path, struct stat64* st) {
  using Fn = int (*)(const char*, struct stat64*);
  const auto real = libc<Fn>(g_lstat64, "lstat64");
  return tree_first(
      path, [&](const char* p) { return real(p, st); }, minus_one);
}

// Only absolute paths (dirfd is then ignored, as the kernel ignores it).
__attribute__((visibility("default"))) int statx(int dirfd, const char* path, int flags,
                                                 unsigned int mask, struct statx* st) {
  using Fn = int (*)(int, const char*, int, unsigned int, struct statx*);
  const auto real = libc<Fn>(g_statx, "statx");
  return tree_first(
      path, [&](const char* p) { return real(dirfd, p, flags, mask, st); }, minus_one);
}

__attribute__((visibility("default"))) int access(const char* path, int mode) {
  using Fn = int (*)(const char*, int);
  const auto real = libc<Fn>(g_access, "access");
  if ((mode & W_OK) != 0) return real(path, mode);  // the tree is not the program's to change
  return tree_first(
      path, [&](const char* p) { return real(p, mode); }, minus_one);
}

__attribute__((visibility("default"))) ssize_t readlink(const char* path, char* buf, size_t size) {
  using Fn = ssize_t (*)(const char*, char*, size_t);
  const auto real = libc<Fn>(g_readlink, "readlink");
  return tree_first(
      path, [&](const char* p) { return real(p, buf, size); }, minus_one_ssize);
}

}  // extern "C"
