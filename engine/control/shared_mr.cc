#include "xroce/shared_mr.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "xroce/fd.h"
#include "xroce/proc_maps.h"

namespace xroce::control {

namespace {

// The memfd's name; /proc/<pid>/maps shows its mappings as "/memfd:xroce-mr (deleted)".
constexpr const char* kMemfdName = "xroce-mr";
constexpr std::string_view kMemfdPath = "/memfd:xroce-mr";

bool page_aligned(const void* addr, std::size_t length) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return length != 0 && reinterpret_cast<std::uintptr_t>(addr) % page == 0 && length % page == 0;
}

// Private anonymous read-write memory: malloc'ed heap or an anonymous mmap, nothing else.
bool shareable(const proc::Mapping& m) {
  const bool anonymous = m.inode == 0 && (m.path.empty() || m.path == "[heap]");
  return anonymous && m.readable() && m.writable() && !m.shared();
}

// True if [begin, end) is covered, without gaps, by mappings that are all shareable().
bool range_is_private_anonymous(std::uintptr_t begin, std::uintptr_t end) {
  std::string maps;
  if (proc::read_all("/proc/self/maps", maps) != 0) return false;
  return proc::covers(maps, begin, end - begin, shareable);
}

// True if [begin, end) is covered, without gaps, by share_region's memfd mappings (of the memfd
// with that inode, when inode != 0).
bool range_is_shared_memfd(std::uintptr_t begin, std::uintptr_t end, unsigned long inode) {
  std::string maps;
  if (proc::read_all("/proc/self/maps", maps) != 0) return false;
  return proc::covers(maps, begin, end - begin, [inode](const proc::Mapping& m) {
    return m.path.starts_with(kMemfdPath) && (inode == 0 || m.inode == inode);
  });
}

}  // namespace

int share_region(void* addr, std::size_t length) {
  if (!page_aligned(addr, length)) return -EINVAL;
  const auto begin = reinterpret_cast<std::uintptr_t>(addr);
  if (!range_is_private_anonymous(begin, begin + length)) return -ENOTSUP;

  Fd memfd(::memfd_create(kMemfdName, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!memfd.valid()) return -errno;
  if (::ftruncate(memfd.get(), static_cast<off_t>(length)) != 0) return -errno;
  // The daemon maps this memfd; sealing its size means neither side can make the other's
  // mapping fault.
  if (::fcntl(memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return -errno;
  void* staging = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
  if (staging == MAP_FAILED) return -errno;
  std::memcpy(staging, addr, length);
  // Replace the application's pages with the memfd's, at the same address.
  void* fixed =
      ::mmap(addr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd.get(), 0);
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

}  // namespace xroce::control
