// Registered memory of a client process, reached from the daemon (docs/ARCHITECTURE.md decision 5):
// the "DMA engine" behind transport::MemoryAccess, with two implementations chosen per region.
//
//   CrossMemoryAccess  process_vm_readv/process_vm_writev on the registering pid. Works on any
//                      memory the process has mapped. One system call per access. Atomics are
//                      a read and a write under a daemon-side lock: atomic against every other
//                      xroce atomic on the same process (IBV_ATOMIC_HCA), NOT against the
//                      application's own CPU stores to that word.
//   SharedMapping      the provider re-backed the region's pages with a memfd
//                      (provider/shared_mr.h) that the daemon maps too. No system call per
//                      access; atomics are real CPU atomics, coherent with the application's.
//
// ProcessMemory is the MemoryAccess of one client process: it routes each access by address —
// through a SharedMapping when the whole range lies inside one, else through cross-memory
// attach — so that an atomic on a word always takes the same path, whichever region named it.
//
// Protection (keys, bounds, access flags) is MemoryRegionTable's job, done before any of
// these is called. What this layer guarantees is that a dead client fails cleanly: after
// mark_dead() (the control connection closed) or once the kernel reports the process gone
// (pidfd), every access returns false; a pid re-used by another process is never touched
// (accesses check the process's pidfd; see dma.cc for the remaining window).
//
// Measured with <build>/bin/bench/bench_dma (CPU time per access; 2 shared vCPUs at load average
// ~8, so wall times were ~2.5x these):
//   64 B read / write      cma ~0.7-0.8 us    shared ~25 ns
//   4 KiB read / write     cma ~0.7-0.8 us    shared ~50-60 ns
//   64 KiB read / write    cma ~3.9-4.3 us    shared ~1.8-1.9 us
//   64-bit fetch-add       cma ~1.3 us        shared ~30 ns
// Of a cross-memory access, the pidfd check is ~180 ns and a bare 64 B process_vm_readv ~450 ns.
//
// Threading: add_shared()/remove_shared()/mark_dead() are the control thread's; read, write and
// the atomics may run on any number of worker threads at once. The set of shared mappings is an
// immutable snapshot swapped atomically, so a worker mid-access keeps its mapping alive even if
// the control thread removes it meanwhile.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "transport/memory.h"

namespace xroce::device {

enum class DmaKind : std::uint8_t { kCrossMemory, kSharedMapping };
const char* to_string(DmaKind kind);  // "cma" / "shared"

// One memfd mapped into the daemon, standing for [app_addr, app_addr + length) in the client.
class SharedMapping {
 public:
  // Maps `memfd` (taking ownership of it). The memfd must be sealed against shrinking
  // (F_SEAL_SHRINK, so the client cannot make the daemon fault with SIGBUS) and at least
  // `length` bytes long; app_addr and length must be page-aligned. Returns nullptr and sets
  // `error` (an errno) otherwise.
  static std::unique_ptr<SharedMapping> map(int memfd, std::uint64_t app_addr, std::uint64_t length,
                                            int& error);
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  std::uint64_t app_addr() const { return app_addr_; }
  std::uint64_t length() const { return length_; }
  bool contains(std::uint64_t addr, std::uint64_t len) const;
  // The daemon's address for `addr` in the client; contains(addr, len) must hold.
  std::uint8_t* at(std::uint64_t addr) const { return base_ + (addr - app_addr_); }

 private:
  SharedMapping(std::uint8_t* base, std::uint64_t app_addr, std::uint64_t length)
      : base_(base), app_addr_(app_addr), length_(length) {}
  std::uint8_t* base_;
  std::uint64_t app_addr_;
  std::uint64_t length_;
};

// A process identified by pid and pinned by a pidfd, so that a re-used pid is never taken for it.
class ClientProcess {
 public:
  // Opens a pidfd for `pid`; if that fails (no such process) the process counts as dead.
  explicit ClientProcess(pid_t pid);
  ~ClientProcess();
  ClientProcess(const ClientProcess&) = delete;
  ClientProcess& operator=(const ClientProcess&) = delete;

  pid_t pid() const { return pid_; }
  // False after mark_dead() or once the pidfd reports the process exited (polls the pidfd:
  // one system call).
  bool alive() const;
  // The cheap check: false after mark_dead() only.
  bool marked_alive() const { return alive_.load(std::memory_order_acquire); }
  void mark_dead() { alive_.store(false, std::memory_order_release); }

 private:
  pid_t pid_;
  int pidfd_ = -1;
  std::atomic<bool> alive_{true};
};

// Cross-memory attach into one process. Thread-safe.
class CrossMemoryAccess final : public transport::MemoryAccess {
 public:
  explicit CrossMemoryAccess(ClientProcess& process) : process_(process) {}

  bool read(std::uint64_t addr, std::span<std::uint8_t> out) override;
  bool write(std::uint64_t addr, std::span<const std::uint8_t> in) override;
  // Serialised with every other atomic through this object (striped locks by address).
  bool atomic_cmp_swap(std::uint64_t addr, std::uint64_t compare, std::uint64_t swap,
                       std::uint64_t* original) override;
  bool atomic_fetch_add(std::uint64_t addr, std::uint64_t add, std::uint64_t* original) override;

 private:
  static constexpr std::size_t kAtomicStripes = 64;
  std::mutex& stripe(std::uint64_t addr);
  bool read_word(std::uint64_t addr, std::uint64_t* value);

  ClientProcess& process_;
  std::array<std::mutex, kAtomicStripes> atomic_locks_;
};

// What `xroce stat` / `link show` print about one shared range.
struct SharedRange {
  std::uint64_t app_addr;
  std::uint64_t length;
};

// The MemoryAccess of one client process (see the top of this file).
class ProcessMemory final : public transport::MemoryAccess {
 public:
  explicit ProcessMemory(pid_t pid);

  pid_t pid() const { return process_.pid(); }

  // Control thread. Maps a memfd the provider made for [app_addr, app_addr + length) (takes
  // ownership of memfd, also on failure). 0 or an errno; on error the region falls back to
  // cross-memory attach, which needs nothing from the caller.
  int add_shared(int memfd, std::uint64_t app_addr, std::uint64_t length);
  // Control thread. Drops the shared mapping that starts at app_addr (at deregistration).
  bool remove_shared(std::uint64_t app_addr);
  // Control thread: the process is known to be gone. Every later access fails. (Cross-memory
  // accesses also notice an exit by themselves, through the pidfd; shared-mapping accesses,
  // which make no system call, rely on this.)
  void mark_dead() { process_.mark_dead(); }
  // Control thread: mark_dead() if the process has exited. Returns whether it is alive.
  bool check_alive();

  // How an access to [addr, addr + len) is served.
  DmaKind kind_of(std::uint64_t addr, std::uint64_t len) const;
  std::vector<SharedRange> shared_ranges() const;

  bool read(std::uint64_t addr, std::span<std::uint8_t> out) override;
  bool write(std::uint64_t addr, std::span<const std::uint8_t> in) override;
  bool atomic_cmp_swap(std::uint64_t addr, std::uint64_t compare, std::uint64_t swap,
                       std::uint64_t* original) override;
  bool atomic_fetch_add(std::uint64_t addr, std::uint64_t add, std::uint64_t* original) override;

 private:
  using Mappings = std::vector<std::shared_ptr<const SharedMapping>>;  // sorted by app_addr
  std::shared_ptr<const SharedMapping> find(std::uint64_t addr, std::uint64_t len) const;

  ClientProcess process_;
  CrossMemoryAccess cross_{process_};
  std::atomic<std::shared_ptr<const Mappings>> mappings_;
};

// What a protection domain holds (device.h's MemoryAccessFactory makes one per PD): a view of
// the one ProcessMemory of its process, so that every PD of a process routes an address the
// same way and cross-memory atomics on a word share one set of locks, whichever PD named it.
class ProcessMemoryView final : public transport::MemoryAccess {
 public:
  explicit ProcessMemoryView(std::shared_ptr<ProcessMemory> memory) : memory_(std::move(memory)) {}
  ProcessMemory& process() { return *memory_; }

  bool read(std::uint64_t addr, std::span<std::uint8_t> out) override {
    return memory_->read(addr, out);
  }
  bool write(std::uint64_t addr, std::span<const std::uint8_t> in) override {
    return memory_->write(addr, in);
  }
  bool atomic_cmp_swap(std::uint64_t addr, std::uint64_t compare, std::uint64_t swap,
                       std::uint64_t* original) override {
    return memory_->atomic_cmp_swap(addr, compare, swap, original);
  }
  bool atomic_fetch_add(std::uint64_t addr, std::uint64_t add, std::uint64_t* original) override {
    return memory_->atomic_fetch_add(addr, add, original);
  }

 private:
  std::shared_ptr<ProcessMemory> memory_;
};

// The daemon's ProcessMemory per client pid (control thread only). Entries live as long as a
// view holds them. Typical use:
//   device::MemoryAccessFactory f = [&dir](int pid) { return dir.view(pid); };
//   reg_mr with a memfd:  dir.find(pid)->add_shared(memfd, addr, length)
//   dereg_mr:             dir.find(pid)->remove_shared(addr)
//   a client connection closed: dir.reap_exited() marks processes that have exited dead.
class ProcessMemoryDirectory {
 public:
  std::unique_ptr<ProcessMemoryView> view(pid_t pid);
  // The live entry for pid, or nullptr.
  std::shared_ptr<ProcessMemory> find(pid_t pid) const;
  // Marks dead every entry whose process has exited (pidfd), so shared-mapping accesses fail
  // too; drops entries no view holds any more.
  void reap_exited();

 private:
  std::map<pid_t, std::weak_ptr<ProcessMemory>> entries_;
};

}  // namespace xroce::device
