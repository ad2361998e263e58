// Registered memory of a client process, reached from the daemon (docs/ARCHITECTURE.md decision 5):
// the "DMA engine" behind transport::MemoryAccess, with two implementations chosen per region.
//
//   CrossMemoryAccess  pread/pwrite on the client's own /proc/self/mem, which the client opened
//                      and handed over (include/xroce/control.h, Op::hello). Works on any memory
//                      the process has mapped. One system call per access. Atomics are a read
//                      and a write under a daemon-side lock: atomic against every other xroce
//                      atomic on the same process (IBV_ATOMIC_HCA), NOT against the
//                      application's own CPU stores to that word.
//   SharedMapping      the provider re-backed the region's pages with a memfd
//                      (include/xroce/shared_mr.h) that the daemon maps too. No system call per
//                      access; atomics are real CPU atomics, coherent with the application's.
//
// ProcessMemory is the MemoryAccess of one client process image: it routes each access by
// address — through a SharedMapping when the whole range lies inside one, else through
// cross-memory access — so that an atomic on a word always takes the same path, whichever region
// named it.
//
// Whose rights. The daemon runs as root, but it never reaches a client's memory by pid: it
// reads and writes only through the /proc/self/mem descriptor the client opened on itself, so
// the kernel granted that access to the client (its ptrace check of itself), and the descriptor
// stays bound to the address space it was opened on. After the client exec()s (a setuid program
// included) or exits, every access through it fails; a pid re-used by another process is never
// reached, because no pid is involved.
//
// Protection (keys, bounds, access flags) is MemoryRegionTable's job, done before any of
// these is called. What this layer guarantees is that a dead client fails cleanly: after
// mark_dead() (the control connection closed, the process exited, or its image was replaced by
// exec), every access returns false.
//
// Measured with <build>/bin/bench/bench_dma (CPU time per access, one run, 2 shared vCPUs at load
// average ~17, so wall times were ~8x these):
//   64 B read / write      cma ~2.1-2.4 us    shared ~26 ns
//   4 KiB read / write     cma ~2.4-2.6 us    shared ~70-80 ns
//   64 KiB read / write    cma ~7.4-8.4 us    shared ~0.7-0.8 us
//   64-bit fetch-add       cma ~4.1 us        shared ~28 ns
// A bare 64 B process_vm_readv (the system call used before memory went through the client's
// mem file) took ~2.3 us in the same run: the mem file costs no more. Shared, 64 B, inside a
// worker's turn (BM_SharedReadThreads/32, load average ~1.5): ~11 ns with one thread, ~18 ns
// each with two threads on one ProcessMemory (371-642 ns when every access loaded the snapshot:
// bench/README.md, "One application's QPs on two workers"). The image check the daemon
// makes on each control request (pidfd poll and one byte of maps) ~3.8 us.
//
// Threading: add_shared()/remove_shared()/mark_dead() are the control thread's; read, write and
// the atomics may run on any number of worker threads at once. The set of shared mappings is an
// immutable snapshot swapped atomically, so a worker mid-access keeps its mapping alive even if
// the control thread removes it meanwhile. A worker's turn (transport::AccessTurn) keeps the
// snapshot it loaded for the rest of the turn, checked against a version number at each access:
// loading it takes a lock bit and a reference count on lines every worker shares, which two
// workers reaching one process at once made 18-30 times as costly as one alone (bench_dma,
// BM_SharedReadThreads).
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
#include "xroce/fd.h"

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

// One client process image: the descriptors its process handed over at Op::hello (its own
// /proc/self/mem and /proc/self/maps, opened by itself) and the pidfd of the process the daemon
// bound the connection to.
class ClientImage {
 public:
  ClientImage(pid_t pid, Fd pidfd, Fd mem, Fd maps);
  ClientImage(const ClientImage&) = delete;
  ClientImage& operator=(const ClientImage&) = delete;

  pid_t pid() const { return pid_; }
  int mem_fd() const { return mem_.get(); }
  // The pidfd's inode: with pidfs (Linux 6.9+) it names one process for the life of the system.
  std::uint64_t process_id() const { return process_id_; }
  // False after mark_dead() or once the process exited (polls the pidfd) or its address space
  // is no longer the one the descriptors were opened on (exec: the maps descriptor reads
  // empty). Control thread; a few system calls.
  bool alive() const;
  // The cheap check: false after mark_dead() only.
  bool marked_alive() const { return alive_.load(std::memory_order_acquire); }
  void mark_dead() { alive_.store(false, std::memory_order_release); }
  // The image's /proc/self/maps now (empty once the image is gone). 0 or errno.
  int read_maps(std::string& out) const;

 private:
  pid_t pid_;
  Fd pidfd_;
  Fd mem_;
  Fd maps_;
  std::uint64_t process_id_ = 0;
  std::atomic<bool> alive_{true};
};

// Cross-memory access into one process image, through its /proc/self/mem. Thread-safe.
class CrossMemoryAccess final : public transport::MemoryAccess {
 public:
  explicit CrossMemoryAccess(ClientImage& image) : image_(image) {}

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

  ClientImage& image_;
  std::array<std::mutex, kAtomicStripes> atomic_locks_;
};

// What `xroce stat` / `link show` print about one shared range.
struct SharedRange {
  std::uint64_t app_addr;
  std::uint64_t length;
};

// The MemoryAccess of one client process image (see the top of this file).
class ProcessMemory final : public transport::MemoryAccess {
 public:
  ProcessMemory(pid_t pid, Fd pidfd, Fd mem, Fd maps);

  pid_t pid() const { return image_.pid(); }
  const ClientImage& image() const { return image_; }

  // Control thread. Maps a memfd the provider made for [app_addr, app_addr + length) (takes
  // ownership of memfd, also on failure). 0 or an errno; on error the region falls back to
  // cross-memory attach, which needs nothing from the caller.
  int add_shared(int memfd, std::uint64_t app_addr, std::uint64_t length);
  // Control thread. Drops the shared mapping that starts at app_addr (at deregistration).
  bool remove_shared(std::uint64_t app_addr);
  // Control thread: the image is known to be gone. Every later access fails. (Cross-memory
  // accesses fail by themselves once the address space is gone; shared-mapping accesses, which
  // make no system call, rely on this.)
  void mark_dead() { image_.mark_dead(); }
  // Control thread: mark_dead() if the process has exited or exec'd. Returns whether it lives.
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
  // The shared mapping that holds all of [addr, addr + len), or nullptr. It stays mapped while
  // `hold` or the thread's open transport::AccessTurn keeps the snapshot it came from.
  const SharedMapping* find(std::uint64_t addr, std::uint64_t len,
                            std::shared_ptr<const Mappings>& hold) const;
  // Control thread: publishes `next` as the set of shared mappings.
  void publish(std::shared_ptr<const Mappings> next);

  ClientImage image_;
  CrossMemoryAccess cross_{image_};
  std::atomic<std::shared_ptr<const Mappings>> mappings_;
  // Counts publish(): what a worker's turn keeps of mappings_ is good while this has not moved.
  // Every access reads it; a line of its own, so a load of mappings_ (which writes its lock bit)
  // does not take it from the other workers.
  alignas(64) std::atomic<std::uint64_t> version_{0};
  const std::uint64_t keeper_ = transport::AccessTurn::new_keeper();
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

// The daemon's ProcessMemory per client (verbs context), control thread only. Contexts of one
// live process image share one ProcessMemory, so every PD of a process routes an address the
// same way and cross-memory atomics on a word share one set of locks. Typical use:
//   hello:                dir.attach(client, pid, pidfd, mem, maps)
//   MemoryAccessFactory:  [&dir](ClientId c, int) { return dir.view(c); }
//   reg_mr with a memfd:  dir.find(client)->add_shared(memfd, addr, length)
//   dereg_mr:             dir.find(client)->remove_shared(addr)
//   connection closed:    dir.detach(client)
class ProcessMemoryDirectory {
 public:
  // The memory of `image`: the one another context of the same live image already has (and
  // `image`'s descriptors are closed), else a new one.
  std::shared_ptr<ProcessMemory> attach(std::uint64_t client, pid_t pid, Fd pidfd, Fd mem, Fd maps);
  void detach(std::uint64_t client);
  // A view for a new PD of `client`, or nullptr if the client has no memory attached.
  std::unique_ptr<ProcessMemoryView> view(std::uint64_t client);
  std::shared_ptr<ProcessMemory> find(std::uint64_t client) const;
  // Marks dead every entry whose process has exited or exec'd, so shared-mapping accesses fail
  // too.
  void reap_exited();

 private:
  std::map<std::uint64_t, std::shared_ptr<ProcessMemory>> clients_;
};

}  // namespace xroce::device
