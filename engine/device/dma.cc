#include "device/dma.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace xroce::device {

const char* to_string(DmaKind kind) {
  return kind == DmaKind::kSharedMapping ? "shared" : "cma";
}

namespace {

std::uint64_t page_bytes() {
  return static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

bool range_inside(std::uint64_t addr, std::uint64_t len, std::uint64_t base, std::uint64_t size) {
  return addr >= base && len <= size && addr - base <= size - len;
}

}  // namespace

// --- SharedMapping ------------------------------------------------------------------------

std::unique_ptr<SharedMapping> SharedMapping::map(int memfd, std::uint64_t app_addr,
                                                  std::uint64_t length, int& error) {
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{memfd};  // the mapping keeps the memfd's pages; the fd itself is not needed
  const std::uint64_t page = page_bytes();
  if (length == 0 || app_addr % page != 0 || length % page != 0) {
    error = EINVAL;
    return nullptr;
  }
  // Without F_SEAL_SHRINK the client could truncate the memfd and make the daemon's next access
  // fault (SIGBUS): a client must never be able to crash the NIC.
  const int seals = ::fcntl(memfd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    error = EPERM;
    return nullptr;
  }
  struct stat st {};
  if (::fstat(memfd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < length) {
    error = EINVAL;
    return nullptr;
  }
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (p == MAP_FAILED) {
    error = errno;
    return nullptr;
  }
  return std::unique_ptr<SharedMapping>(
      new SharedMapping(static_cast<std::uint8_t*>(p), app_addr, length));
}

SharedMapping::~SharedMapping() {
  ::munmap(base_, length_);
}

bool SharedMapping::contains(std::uint64_t addr, std::uint64_t len) const {
  return range_inside(addr, len, app_addr_, length_);
}

// --- ClientProcess ------------------------------------------------------------------------

ClientProcess::ClientProcess(pid_t pid) : pid_(pid) {
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd_ < 0) alive_.store(false, std::memory_order_relaxed);
}

ClientProcess::~ClientProcess() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

bool ClientProcess::alive() const {
  if (!marked_alive()) return false;
  // A pidfd becomes readable when the process exits; until then its pid cannot be re-used.
  pollfd p{pidfd_, POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

// --- CrossMemoryAccess --------------------------------------------------------------------
//
// The pid-reuse argument: a pid is re-used only after its process has exited and been reaped.
// A read checks the pidfd after process_vm_readv: if the process had not exited by then, the
// bytes came from it. A write checks before: the remaining window is the process exiting, being
// reaped and its pid being handed to a new process of this user between that check and the
// kernel's pid lookup a microsecond later, which needs the pid space to wrap in that time.

bool CrossMemoryAccess::read(std::uint64_t addr, std::span<std::uint8_t> out) {
  if (out.empty()) return process_.marked_alive();
  iovec local{out.data(), out.size()};
  iovec remote{reinterpret_cast<void*>(addr), out.size()};
  const ssize_t n = ::process_vm_readv(process_.pid(), &local, 1, &remote, 1, 0);
  if (n != static_cast<ssize_t>(out.size())) return false;
  return process_.alive();
}

bool CrossMemoryAccess::write(std::uint64_t addr, std::span<const std::uint8_t> in) {
  if (!process_.alive()) return false;
  if (in.empty()) return true;
  iovec local{const_cast<std::uint8_t*>(in.data()), in.size()};
  iovec remote{reinterpret_cast<void*>(addr), in.size()};
  const ssize_t n = ::process_vm_writev(process_.pid(), &local, 1, &remote, 1, 0);
  return n == static_cast<ssize_t>(in.size());
}

std::mutex& CrossMemoryAccess::stripe(std::uint64_t addr) {
  return atomic_locks_[(addr / sizeof(std::uint64_t)) % kAtomicStripes];
}

bool CrossMemoryAccess::read_word(std::uint64_t addr, std::uint64_t* value) {
  return read(addr, {reinterpret_cast<std::uint8_t*>(value), sizeof *value});
}

bool CrossMemoryAccess::atomic_cmp_swap(std::uint64_t addr, std::uint64_t compare,
                                        std::uint64_t swap, std::uint64_t* original) {
  std::lock_guard lock(stripe(addr));
  if (!read_word(addr, original)) return false;
  if (*original != compare) return true;
  return write(addr, {reinterpret_cast<const std::uint8_t*>(&swap), sizeof swap});
}

bool CrossMemoryAccess::atomic_fetch_add(std::uint64_t addr, std::uint64_t add,
                                         std::uint64_t* original) {
  std::lock_guard lock(stripe(addr));
  if (!read_word(addr, original)) return false;
  const std::uint64_t sum = *original + add;
  return write(addr, {reinterpret_cast<const std::uint8_t*>(&sum), sizeof sum});
}

// --- ProcessMemory ------------------------------------------------------------------------

ProcessMemory::ProcessMemory(pid_t pid)
    : process_(pid), mappings_(std::make_shared<const Mappings>()) {}

int ProcessMemory::add_shared(int memfd, std::uint64_t app_addr, std::uint64_t length) {
  int error = 0;
  std::shared_ptr<const SharedMapping> m = SharedMapping::map(memfd, app_addr, length, error);
  if (!m) return error;
  auto next = std::make_shared<Mappings>(*mappings_.load());
  for (const auto& other : *next) {
    const bool overlap =
        app_addr < other->app_addr() + other->length() && other->app_addr() < app_addr + length;
    if (overlap) return EEXIST;
  }
  next->push_back(std::move(m));
  std::sort(next->begin(), next->end(),
            [](const auto& a, const auto& b) { return a->app_addr() < b->app_addr(); });
  mappings_.store(std::move(next));
  return 0;
}

bool ProcessMemory::remove_shared(std::uint64_t app_addr) {
  auto next = std::make_shared<Mappings>(*mappings_.load());
  const auto it = std::find_if(next->begin(), next->end(),
                               [&](const auto& m) { return m->app_addr() == app_addr; });
  if (it == next->end()) return false;
  next->erase(it);
  // Workers still holding the old snapshot keep the mapping alive until they finish.
  mappings_.store(std::move(next));
  return true;
}

std::shared_ptr<const SharedMapping> ProcessMemory::find(std::uint64_t addr,
                                                         std::uint64_t len) const {
  const std::shared_ptr<const Mappings> snapshot = mappings_.load();
  const auto it =
      std::upper_bound(snapshot->begin(), snapshot->end(), addr,
                       [](std::uint64_t a, const auto& m) { return a < m->app_addr(); });
  if (it == snapshot->begin()) return nullptr;
  const auto& m = *(it - 1);
  return m->contains(addr, len) ? m : nullptr;
}

DmaKind ProcessMemory::kind_of(std::uint64_t addr, std::uint64_t len) const {
  return find(addr, len) ? DmaKind::kSharedMapping : DmaKind::kCrossMemory;
}

std::vector<SharedRange> ProcessMemory::shared_ranges() const {
  std::vector<SharedRange> out;
  for (const auto& m : *mappings_.load())
    out.push_back({m->app_addr(), m->length()});
  return out;
}

bool ProcessMemory::read(std::uint64_t addr, std::span<std::uint8_t> out) {
  if (!process_.marked_alive()) return false;
  if (const auto m = find(addr, out.size())) {
    if (!out.empty()) std::memcpy(out.data(), m->at(addr), out.size());
    return true;
  }
  return cross_.read(addr, out);
}

bool ProcessMemory::write(std::uint64_t addr, std::span<const std::uint8_t> in) {
  if (!process_.marked_alive()) return false;
  if (const auto m = find(addr, in.size())) {
    if (!in.empty()) std::memcpy(m->at(addr), in.data(), in.size());
    return true;
  }
  return cross_.write(addr, in);
}

bool ProcessMemory::atomic_cmp_swap(std::uint64_t addr, std::uint64_t compare, std::uint64_t swap,
                                    std::uint64_t* original) {
  if (!process_.marked_alive()) return false;
  if (const auto m = find(addr, sizeof(std::uint64_t))) {
    if (addr % alignof(std::uint64_t) != 0) return false;  // the transport checks alignment
    std::atomic_ref<std::uint64_t> word(*reinterpret_cast<std::uint64_t*>(m->at(addr)));
    std::uint64_t expected = compare;
    word.compare_exchange_strong(expected, swap, std::memory_order_seq_cst);
    *original = expected;  // the old value whether or not it matched
    return true;
  }
  return cross_.atomic_cmp_swap(addr, compare, swap, original);
}

bool ProcessMemory::atomic_fetch_add(std::uint64_t addr, std::uint64_t add,
                                     std::uint64_t* original) {
  if (!process_.marked_alive()) return false;
  if (const auto m = find(addr, sizeof(std::uint64_t))) {
    if (addr % alignof(std::uint64_t) != 0) return false;
    std::atomic_ref<std::uint64_t> word(*reinterpret_cast<std::uint64_t*>(m->at(addr)));
    *original = word.fetch_add(add, std::memory_order_seq_cst);
    return true;
  }
  return cross_.atomic_fetch_add(addr, add, original);
}

bool ProcessMemory::check_alive() {
  if (process_.alive()) return true;
  process_.mark_dead();
  return false;
}

// --- ProcessMemoryDirectory -----------------------------------------------------------------

std::unique_ptr<ProcessMemoryView> ProcessMemoryDirectory::view(pid_t pid) {
  std::shared_ptr<ProcessMemory> memory = find(pid);
  // A dead entry still held by an old PD belongs to an earlier process with this pid.
  if (!memory || !memory->check_alive()) {
    memory = std::make_shared<ProcessMemory>(pid);
    entries_[pid] = memory;
  }
  return std::make_unique<ProcessMemoryView>(std::move(memory));
}

std::shared_ptr<ProcessMemory> ProcessMemoryDirectory::find(pid_t pid) const {
  const auto it = entries_.find(pid);
  return it == entries_.end() ? nullptr : it->second.lock();
}

void ProcessMemoryDirectory::reap_exited() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (std::shared_ptr<ProcessMemory> memory = it->second.lock()) {
      memory->check_alive();
      ++it;
    } else {
      it = entries_.erase(it);
    }
  }
}

}  // namespace xroce::device
