#include "provider/shared_mr.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace xroce::provider {

namespace {

// The memfd's name; /proc/<pid>/maps shows its mappings as "/memfd:xroce-mr (deleted)".
constexpr const char* kMemfdName = "xroce-mr";
constexpr std::string_view kMemfdPath = "/memfd:xroce-mr";

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    const int f = fd;
    fd = -1;
    return f;
  }
};

bool page_aligned(const void* addr, std::size_t length) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return length != 0 && reinterpret_cast<std::uintptr_t>(addr) % page == 0 && length % page == 0;
}

bool read_file(const char* path, std::string& out) {
  Fd f{::open(path, O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return false;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

// One line of /proc/self/maps: "start-end perms offset dev inode   [path]".
struct Vma {
  std::uintptr_t start = 0;
  std::uintptr_t end = 0;
  std::string_view perms;
  unsigned long inode = 0;
  std::string_view path;
};

bool parse_vma(std::string_view line, Vma& v) {
  std::string s(line);  // NUL-terminated for strtoul
  char* p = s.data();
  char* next = nullptr;
  v.start = std::strtoull(p, &next, 16);
  if (*next != '-') return false;
  v.end = std::strtoull(next + 1, &next, 16);
  while (*next == ' ')
    ++next;
  const std::size_t perms_at = static_cast<std::size_t>(next - p);
  v.perms = line.substr(perms_at, 4);
  // Skip perms, offset and dev; then the inode, then optional spaces and the path.
  std::size_t field = perms_at;
  for (int skip = 0; skip < 3; ++skip) {
    field = line.find(' ', field);
    if (field == std::string_view::npos) return false;
    field = line.find_first_not_of(' ', field);
    if (field == std::string_view::npos) return false;
  }
  v.inode = std::strtoul(p + field, &next, 10);
  const std::size_t path_at = line.find_first_not_of(' ', static_cast<std::size_t>(next - p));
  v.path = path_at == std::string_view::npos ? std::string_view{} : line.substr(path_at);
  return true;
}

// Private anonymous read-write memory: malloc'ed heap or an anonymous mmap, nothing else.
bool shareable(const Vma& v) {
  const bool anonymous = v.inode == 0 && (v.path.empty() || v.path == "[heap]");
  return anonymous && v.perms.substr(0, 2) == "rw" && v.perms[3] == 'p';
}

// True if [begin, end) is covered, without gaps, by mappings that are all shareable().
bool range_is_private_anonymous(std::uintptr_t begin, std::uintptr_t end) {
  std::string maps;
  if (!read_file("/proc/self/maps", maps)) return false;
  std::uintptr_t covered = begin;
  std::size_t at = 0;
  while (at < maps.size() && covered < end) {
    std::size_t eol = maps.find('\n', at);
    if (eol == std::string::npos) eol = maps.size();
    Vma v;
    const std::string_view line(maps.data() + at, eol - at);
    at = eol + 1;
    if (!parse_vma(line, v) || v.end <= covered) continue;
    if (v.start > covered || !shareable(v)) return false;
    covered = v.end;
  }
  return covered >= end;
}

// True if [begin, end) is covered, without gaps, by share_region's memfd mappings (of the memfd
// with that inode, when inode != 0).
bool range_is_shared_memfd(std::uintptr_t begin, std::uintptr_t end, unsigned long inode) {
  std::string maps;
  if (!read_file("/proc/self/maps", maps)) return false;
  std::uintptr_t covered = begin;
  std::size_t at = 0;
  while (at < maps.size() && covered < end) {
    std::size_t eol = maps.find('\n', at);
    if (eol == std::string::npos) eol = maps.size();
    Vma v;
    const std::string_view line(maps.data() + at, eol - at);
    at = eol + 1;
    if (!parse_vma(line, v) || v.end <= covered) continue;
    const bool ours = v.path.starts_with(kMemfdPath) && (inode == 0 || v.inode == inode);
    if (v.start > covered || !ours) return false;
    covered = v.end;
  }
  return covered >= end;
}

}  // namespace

int share_region(void* addr, std::size_t length) {
  if (!page_aligned(addr, length)) return -EINVAL;
  const auto begin = reinterpret_cast<std::uintptr_t>(addr);
  if (!range_is_private_anonymous(begin, begin + length)) return -ENOTSUP;

  Fd memfd{::memfd_create(kMemfdName, MFD_CLOEXEC | MFD_ALLOW_SEALING)};
  if (memfd.fd < 0) return -errno;
  if (::ftruncate(memfd.fd, static_cast<off_t>(length)) != 0) return -errno;
  // The daemon maps this memfd; sealing its size means neither side can make the other's
  // mapping fault.
  if (::fcntl(memfd.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) return -errno;
  void* staging = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.fd, 0);
  if (staging == MAP_FAILED) return -errno;
  std::memcpy(staging, addr, length);
  // Replace the application's pages with the memfd's, at the same address.
  void* fixed = ::mmap(addr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd.fd, 0);
  const int map_error = errno;
  ::munmap(staging, length);
  if (fixed == MAP_FAILED) return -map_error;
  return memfd.release();
}

int unshare_region(void* addr, std::size_t length, unsigned long inode) {
  if (!page_aligned(addr, length)) return -EINVAL;
  // The application may have unmapped or re-mapped the range since (freed the buffer before
  // deregistering it, which a real device allows): then there is nothing of ours to undo, and
  // copying from it could fault.
  const auto begin = reinterpret_cast<std::uintptr_t>(addr);
  if (!range_is_shared_memfd(begin, begin + length, inode)) return -ENOENT;
  void* fresh = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fresh == MAP_FAILED) return -errno;
  std::memcpy(fresh, addr, length);
  // Moving anonymous pages into place replaces the memfd mapping in one step.
  if (::mremap(fresh, length, length, MREMAP_MAYMOVE | MREMAP_FIXED, addr) == MAP_FAILED) {
    const int error = errno;
    ::munmap(fresh, length);
    return -error;
  }
  return 0;
}

}  // namespace xroce::provider
