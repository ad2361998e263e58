#include "device/dma.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "xroce/proc_maps.h"

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

// --- ClientImage --------------------------------------------------------------------------

ClientImage::ClientImage(pid_t pid, Fd pidfd, Fd mem, Fd maps)
    : pid_(pid), pidfd_(std::move(pidfd)), mem_(std::move(mem)), maps_(std::move(maps)) {
  struct stat st {};
  if (pidfd_.valid() && ::fstat(pidfd_.get(), &st) == 0) process_id_ = st.st_ino;
  if (!pidfd_.valid() || !mem_.valid() || !maps_.valid()) mark_dead();
}

bool ClientImage::alive() const {
  if (!marked_alive()) return false;
  // A pidfd becomes readable when the process exits.
  pollfd p{pidfd_.get(), POLLIN, 0};
  if (::poll(&p, 1, 0) != 0) return false;
  // A maps descriptor shows the address space it was opened on, and nothing once that address
  // space is gone (the process exec'd: the image we were handed no longer runs).
  char first = 0;
  ssize_t n;
  do {
    n = ::pread(maps_.get(), &first, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n == 1;
}

int ClientImage::read_maps(std::string& out) const {
  return proc::read_all(maps_.get(), out);
}

// --- CrossMemoryAccess --------------------------------------------------------------------
//
// /proc/<pid>/mem is read and written at the client's own addresses as file offsets. A short
// transfer (an unmapped page, or the address space gone) is a failure.

bool CrossMemoryAccess::read(std::uint64_t addr, std::span<std::uint8_t> out) {
  if (!image_.marked_alive()) return false;
  if (out.empty()) return true;
  ssize_t n;
  do {
    n = ::pread(image_.mem_fd(), out.data(), out.size(), static_cast<off_t>(addr));
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(out.size());
}

bool CrossMemoryAccess::write(std::uint64_t addr, std::span<const std::uint8_t> in) {
  if (!image_.marked_alive()) return false;
  if (in.empty()) return true;
  ssize_t n;
  do {
    n = ::pwrite(image_.mem_fd(), in.data(), in.size(), static_cast<off_t>(addr));
  } while (n < 0 && errno == EINTR);
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

ProcessMemory::ProcessMemory(pid_t pid, Fd pidfd, Fd mem, Fd maps)
    : image_(pid, std::move(pidfd), std::move(mem), std::move(maps)),
      mappings_(std::make_shared<const Mappings>()) {}

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
  publish(std::move(next));
  return 0;
}

bool ProcessMemory::remove_shared(std::uint64_t app_addr) {
  auto next = std::make_shared<Mappings>(*mappings_.load());
  const auto it = std::find_if(next->begin(), next->end(),
                               [&](const auto& m) { return m->app_addr() == app_addr; });
  if (it == next->end()) return false;
  next->erase(it);
  // Workers still holding the old snapshot (mid-access, or kept by their turn) keep the mapping
  // alive until they let it go.
  publish(std::move(next));
  return true;
}

void ProcessMemory::publish(std::shared_ptr<const Mappings> next) {
  mappings_.store(std::move(next));
  // After the store: a worker that reads the new version loads this snapshot or a later one.
  version_.fetch_add(1, std::memory_order_release);
}

const SharedMapping* ProcessMemory::find(std::uint64_t addr, std::uint64_t len,
                                         std::shared_ptr<const Mappings>& hold) const {
  // Read before the snapshot is loaded, so a snapshot kept at this version is never older than
  // the version says (publish() stores, then counts).
  const std::uint64_t version = version_.load(std::memory_order_acquire);
  const Mappings* snapshot = nullptr;
  if (const auto* kept = transport::AccessTurn::kept(keeper_, version)) {
    snapshot = static_cast<const Mappings*>(kept->get());
  } else {
    hold = mappings_.load();
    snapshot = hold.get();
    transport::AccessTurn::keep(keeper_, version, hold);
  }
  const auto it =
      std::upper_bound(snapshot->begin(), snapshot->end(), addr,
                       [](std::uint64_t a, const auto& m) { return a < m->app_addr(); });
  if (it == snapshot->begin()) return nullptr;
  const SharedMapping* m = (it - 1)->get();
  return m->contains(addr, len) ? m : nullptr;
}

DmaKind ProcessMemory::kind_of(std::uint64_t addr, std::uint64_t len) const {
  std::shared_ptr<const Mappings> hold;
  return find(addr, len, hold) != nullptr ? DmaKind::kSharedMapping : DmaKind::kCrossMemory;
}

std::vector<SharedRange> ProcessMemory::shared_ranges() const {
  std::vector<SharedRange> out;
  for (const auto& m : *mappings_.load())
    out.push_back({m->app_addr(), m->length()});
  return out;
}

bool ProcessMemory::read(std::uint64_t addr, std::span<std::uint8_t> out) {
  if (!image_.marked_alive()) return false;
  std::shared_ptr<const Mappings> hold;
  if (const SharedMapping* m = find(addr, out.size(), hold)) {
    if (!out.empty()) std::memcpy(out.data(), m->at(addr), out.size());
    return true;
  }
  return cross_.read(addr, out);
}

bool ProcessMemory::write(std::uint64_t addr, std::span<const std::uint8_t> in) {
  if (!image_.marked_alive()) return false;
  std::shared_ptr<const Mappings> hold;
  if (const SharedMapping* m = find(addr, in.size(), hold)) {
    if (!in.empty()) std::memcpy(m->at(addr), in.data(), in.size());
    return true;
  }
  return cross_.write(addr, in);
}

bool ProcessMemory::atomic_cmp_swap(std::uint64_t addr, std::uint64_t compare, std::uint64_t swap,
                                    std::uint64_t* original) {
  if (!image_.marked_alive()) return false;
  std::shared_ptr<const Mappings> hold;
  if (const SharedMapping* m = find(addr, sizeof(std::uint64_t), hold)) {
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
  if (!image_.marked_alive()) return false;
  std::shared_ptr<const Mappings> hold;
  if (const SharedMapping* m = find(addr, sizeof(std::uint64_t), hold)) {
    if (addr % alignof(std::uint64_t) != 0) return false;
    std::atomic_ref<std::uint64_t> word(*reinterpret_cast<std::uint64_t*>(m->at(addr)));
    *original = word.fetch_add(add, std::memory_order_seq_cst);
    return true;
  }
  return cross_.atomic_fetch_add(addr, add, original);
}

bool ProcessMemory::check_alive() {
  if (image_.alive()) return true;
  image_.mark_dead();
  return false;
}

// --- ProcessMemoryDirectory -----------------------------------------------------------------

std::shared_ptr<ProcessMemory> ProcessMemoryDirectory::attach(std::uint64_t client, pid_t pid,
                                                              Fd pidfd, Fd mem, Fd maps) {
  auto memory =
      std::make_shared<ProcessMemory>(pid, std::move(pidfd), std::move(mem), std::move(maps));
  for (const auto& [other, existing] : clients_) {
    const ClientImage& image = existing->image();
    if (image.pid() == pid && image.process_id() == memory->image().process_id() &&
        existing->check_alive()) {
      memory = existing;  // the same process, the same address space: share it
      break;
    }
  }
  clients_[client] = memory;
  return memory;
}

void ProcessMemoryDirectory::detach(std::uint64_t client) {
  clients_.erase(client);
}

std::unique_ptr<ProcessMemoryView> ProcessMemoryDirectory::view(std::uint64_t client) {
  std::shared_ptr<ProcessMemory> memory = find(client);
  return memory ? std::make_unique<ProcessMemoryView>(std::move(memory)) : nullptr;
}

std::shared_ptr<ProcessMemory> ProcessMemoryDirectory::find(std::uint64_t client) const {
  const auto it = clients_.find(client);
  return it == clients_.end() ? nullptr : it->second;
}

void ProcessMemoryDirectory::reap_exited() {
  for (const auto& [client, memory] : clients_)
    memory->check_alive();
}

}  // namespace xroce::device
