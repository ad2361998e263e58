// Registered memory: the abstract "DMA" interface the transport reads and writes through, the
// table of memory regions and memory windows that guards it (lkey/rkey, bounds, access flags,
// translation from the addresses requests name to the process's own), and LocalMemory, a
// plain-buffer implementation for tests and the simulator. The daemon adds process-memory
// implementations of MemoryAccess (docs/ARCHITECTURE.md decision 5).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "transport/verbs.h"
#include "transport/work.h"
#include "wire/result.h"
#include "wire/types.h"

namespace xroce::transport {

// Byte access to one address space. Addresses are the registering process's virtual addresses.
// A false return is an operating failure (the memory went away), never a protection decision:
// protection is MemoryRegionTable's job, done before these are called.
class MemoryAccess {
 public:
  virtual ~MemoryAccess() = default;
  virtual bool read(std::uint64_t addr, std::span<std::uint8_t> out) = 0;
  virtual bool write(std::uint64_t addr, std::span<const std::uint8_t> in) = 0;
  // 64-bit atomics on naturally aligned host-order words; *original receives the old value.
  virtual bool atomic_cmp_swap(std::uint64_t addr, std::uint64_t compare, std::uint64_t swap,
                               std::uint64_t* original) = 0;
  virtual bool atomic_fetch_add(std::uint64_t addr, std::uint64_t add, std::uint64_t* original) = 0;
  // ATOMIC WRITE (oA19-28): the 8 bytes land as one store on a naturally aligned word. The
  // default is a plain write, atomic for every implementation that has no concurrent writer.
  virtual bool atomic_write64(std::uint64_t addr, std::span<const std::uint8_t, 8> value) {
    return write(addr, value);
  }
};

// A worker's turn, as far as memory access goes. While one is open on a thread, what the thread
// looks up may be kept for it, instead of being looked up at every access, by a "keeper" that
// checks what it kept against a version number of its own at each use:
//   device::ProcessMemory keeps its snapshot of the shared mappings, whose every lookup
//     otherwise takes a lock bit and reference counts that all workers reaching one process
//     share (bench_dma's BM_SharedReadThreads: two threads through one process took 18-30
//     times as long per access as one alone);
//   MemoryRegionTable keeps what a key resolved to, whose every check otherwise takes the
//     PD's mutex, which all workers serving one PD share.
// What a turn keeps is let go when the outermost turn on the thread closes, so a mapping a
// deregistration removed outlives the turn that last used it, never more. Outside a turn,
// kept() finds nothing and keep() keeps nothing: every access looks up afresh. Turns nest; a
// turn belongs to the thread that opened it.
class AccessTurn {
 public:
  AccessTurn();
  ~AccessTurn();
  AccessTurn(const AccessTurn&) = delete;
  AccessTurn& operator=(const AccessTurn&) = delete;

  // A number that names one keeper (a ProcessMemory, a MemoryRegionTable) for the life of the
  // process.
  static std::uint64_t new_keeper();
  // What the open turn on this thread keeps for `keeper` at `version`: nullptr outside a turn,
  // and when what it keeps is of another version (the keeper changed since) or nothing.
  static const std::shared_ptr<const void>* kept(std::uint64_t keeper, std::uint64_t version);
  // Keeps `value` for `keeper` at `version` until the outermost turn on this thread closes, in
  // place of what was kept for `keeper` before. Nothing outside a turn. A turn keeps kKept
  // keepers' values at once; one more replaces the oldest. The value is this thread's alone
  // while the turn keeps it.
  static void keep(std::uint64_t keeper, std::uint64_t version, std::shared_ptr<const void> value);
  // Whether a turn is open on this thread.
  static bool open();

  static constexpr std::size_t kKept = 8;
};

// Plain heap buffers at made-up, non-overlapping addresses. Single-threaded.
class LocalMemory final : public MemoryAccess {
 public:
  // Returns the base address of a new zeroed buffer of `bytes` bytes.
  std::uint64_t allocate(std::size_t bytes);
  // Direct view for tests and the workload checker; asserts the range lies in one buffer.
  std::span<std::uint8_t> view(std::uint64_t addr, std::size_t len);

  bool read(std::uint64_t addr, std::span<std::uint8_t> out) override;
  bool write(std::uint64_t addr, std::span<const std::uint8_t> in) override;
  bool atomic_cmp_swap(std::uint64_t addr, std::uint64_t compare, std::uint64_t swap,
                       std::uint64_t* original) override;
  bool atomic_fetch_add(std::uint64_t addr, std::uint64_t add, std::uint64_t* original) override;

 private:
  struct Buffer {
    std::uint64_t base;
    std::vector<std::uint8_t> bytes;
  };
  std::uint8_t* find(std::uint64_t addr, std::size_t len);

  std::vector<Buffer> buffers_;  // sorted by base (allocation order)
  std::uint64_t next_base_ = 0x10000000;
};

// A registered region: `length` bytes that requests name from `iova` on (ibv_reg_mr_iova; the
// buffer's own address for ibv_reg_mr) and that live at `addr` in the registering process.
struct MemoryRegion {
  std::uint64_t iova = 0;
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  wire::Lkey lkey;
  wire::Rkey rkey;
  std::uint32_t access = 0;  // access:: flags
  bool valid = false;        // false after deregistration
  std::uint32_t bound_windows = 0;
};

// A memory window (IBA 10.6.7): a remote-access view of part of a region, under its own R_Key.
// Type 1 windows are bound with ibv_bind_mw, type 2 with IBV_WR_BIND_MW (type 2B: reachable
// only through the QP that bound it, C10-72) and invalidated by LOCAL_INV or SEND_WITH_INV.
struct MemoryWindow {
  MwType type = MwType::kType1;
  wire::Rkey rkey;
  bool allocated = false;
  bool bound = false;        // type 2: Valid (bound) vs Free; type 1: bound to a non-empty range
  std::uint32_t region = 0;  // slot of the region it is bound to
  std::uint64_t va = 0;      // first iova of the window inside the region
  std::uint64_t length = 0;
  std::uint32_t access = 0;  // remote access flags, plus access::kZeroBased
  wire::Qpn qp;              // type 2: the QP that bound it
};

enum class MemError : std::uint8_t {
  kInvalidKey,    // no such key, the region was deregistered, or the window is not bound here
  kOutOfBounds,   // range not inside the region or window
  kAccessDenied,  // the region's or window's access flags forbid the operation
};

// Where a checked access lands in the registering process.
using ProcessAddress = std::uint64_t;

// Random bits for new keys, supplied by the caller (this core has no randomness of its own).
using KeyBits = std::function<std::uint32_t()>;

// The memory regions and memory windows of one protection domain. A key is a 24-bit index and an
// 8-bit key byte in the low bits, as rxe's rxe_mr/rxe_mw keys (index << 8 | key byte) and mlx5's
// mkeys are. A region's key byte is a generation count, so a stale key never matches a re-used
// slot; a window's is the consumer's (ibv_inc_rkey) from its last bind.
//
// Without KeyBits the index is the slot (regions below kWindowIndexBase, windows from it), so
// keys are reproducible (simulator, tests). With KeyBits (the daemon's, from the kernel's random
// source) every index is random, as is a region's key byte, so that a remote peer cannot guess a
// live region's or window's key from any other key: all 32 bits of a region's key must be
// guessed, and the 24 index bits of a window's (its key byte is the consumer's choice).
//
// Threading: the control thread registers, deregisters and allocates, workers check, bind and
// invalidate; one mutex serialises them (no call does I/O). Every change counts a version, so
// that inside a worker's AccessTurn a check reuses what the turn resolved the key to before, at
// the same version, without the mutex that every worker serving the PD shares.
class MemoryRegionTable {
 public:
  explicit MemoryRegionTable(MemoryAccess& memory, KeyBits key_bits = nullptr)
      : memory_(memory), key_bits_(std::move(key_bits)) {}

  // `iova` defaults to `addr` (ibv_reg_mr).
  MemoryRegion register_region(std::uint64_t addr, std::uint64_t length, std::uint32_t access,
                               std::optional<std::uint64_t> iova = std::nullopt);
  // 0; EINVAL for an unknown key; EBUSY while windows are bound to it (rxe_dereg_mr).
  int deregister(wire::Lkey lkey);
  // ibv_rereg_mr on the translation and/or access: the region keeps its slot and takes a new
  // key byte. EINVAL for an unknown key, EBUSY while windows are bound to it.
  struct Reregistration {
    std::optional<std::uint64_t> addr, length, iova;
    std::optional<std::uint32_t> access;
  };
  wire::Result<MemoryRegion, int> reregister(wire::Lkey lkey, const Reregistration& change);
  std::optional<MemoryRegion> find_region(wire::Lkey lkey) const;

  // ibv_alloc_mw / ibv_dealloc_mw. A type 1 window starts bound to nothing; type 2 Free.
  wire::Result<wire::Rkey, int> allocate_window(MwType type);
  // By the window's index: any R_Key it had (its owner deallocates it, whatever key it holds).
  int deallocate_window(wire::Rkey rkey);
  std::optional<MemoryWindow> find_window(wire::Rkey rkey) const;

  // IBV_WR_BIND_MW / ibv_bind_mw, executed by `qp` in send-queue order. False for every bind
  // C10-72..C10-75 and o10-36/o10-37 refuse (the WR completes with IBV_WC_MW_BIND_ERR).
  bool bind_window(const WindowBind& bind, wire::Qpn qp);
  // LOCAL_INV and SEND_WITH_INV: only a bound type 2 window can be invalidated (o10-37.2.26;
  // regions registered with ibv_reg_mr cannot, as in rxe and mlx5). False otherwise.
  bool invalidate(wire::Rkey rkey);

  // Local access through an SGE: `need` is access::kLocalWrite when the HCA writes the buffer.
  wire::Result<ProcessAddress, MemError> check_local(wire::Lkey lkey, std::uint64_t va,
                                                     std::uint64_t len, std::uint32_t need) const;
  // Remote access through an R_Key by QP `qp`: keys, bounds (of the window too) and the remote
  // access flags `need`. For a zero-based window `va` is an offset into the window.
  wire::Result<ProcessAddress, MemError> check_remote(wire::Rkey rkey, std::uint64_t va,
                                                      std::uint64_t len, std::uint32_t need,
                                                      wire::Qpn qp = wire::Qpn()) const;
  // The whole region an R_Key reaches (FLUSH with selectivity "memory region"), after the same
  // checks as check_remote.
  wire::Result<MemoryRegion, MemError> remote_region(wire::Rkey rkey, std::uint32_t need,
                                                     wire::Qpn qp = wire::Qpn()) const;

  MemoryAccess& memory() { return memory_; }

 private:
  static constexpr std::uint32_t kKeyBits = 8;
  static constexpr std::uint32_t kWindowIndexBase = 1u << 23;
  static constexpr std::uint32_t index_of(std::uint32_t key) { return key >> kKeyBits; }
  // The slot a key's index names, in the region table or the window table.
  struct KeySlot {
    bool window = false;
    std::size_t slot = 0;
  };
  std::optional<KeySlot> locate(std::uint32_t key) const;
  // A key for `at` whose index no live key uses; `key_byte` is used as given without KeyBits.
  std::uint32_t new_key(KeySlot at, std::uint32_t old_key, std::uint8_t key_byte);

  MemoryRegion* region_by_key(std::uint32_t key, bool remote);
  const MemoryRegion* region_by_key(std::uint32_t key, bool remote) const;
  MemoryWindow* window_by_key(std::uint32_t key);
  const MemoryWindow* window_by_key(std::uint32_t key) const;
  std::uint32_t next_region_key(std::size_t slot);
  // What a key names, copied out of the table: a region (lkey or rkey as `remote` says), a
  // window and the region it is bound to, or nothing.
  struct Resolved {
    enum class Kind : std::uint8_t { kNothing, kRegion, kWindow } kind = Kind::kNothing;
    MemoryRegion region;
    MemoryWindow window;
  };
  // What one turn of one thread resolved at one version of the table: the last kKeys keys, one
  // allocation per turn however many keys it checks. Only that thread touches it (mutable: the
  // turn holds it as a const value).
  struct TurnKeys {
    static constexpr std::size_t kKeys = 4;
    struct Entry {
      std::uint32_t key = 0;
      bool remote = false;
      Resolved resolved;
    };
    mutable std::array<Entry, kKeys> entries;
    mutable std::size_t used = 0;
    mutable std::size_t next = 0;  // the entry the next key replaces once all are used
    const Resolved* find(std::uint32_t key, bool remote) const;
    void add(std::uint32_t key, bool remote, const Resolved& resolved) const;
  };
  Resolved resolve_locked(std::uint32_t key, bool remote) const;
  // resolve_locked under the mutex, or what this thread's turn kept of it at this version.
  Resolved resolve(std::uint32_t key, bool remote) const;
  // Under the mutex, with every change (first thing in the change's critical section): what
  // turns kept at the version before is not used again. Safe before the change too, as a turn
  // fills what it keeps under the mutex, reading the version there.
  void changed() { version_.fetch_add(1, std::memory_order_release); }
  bool bind_allowed(const MemoryWindow& w, const WindowBind& b, const MemoryRegion* mr,
                    wire::Qpn qp) const;

  MemoryAccess& memory_;
  KeyBits key_bits_;
  mutable std::mutex lock_;
  // Counts changes (changed()). Every check reads it; a line of its own, away from the mutex.
  alignas(64) std::atomic<std::uint64_t> version_{0};
  const std::uint64_t keeper_ = AccessTurn::new_keeper();
  std::vector<MemoryRegion> regions_;
  std::vector<std::uint8_t> generations_;
  std::vector<MemoryWindow> windows_;
  std::unordered_map<std::uint32_t, KeySlot> slot_of_index_;  // with key_bits_ only
};

}  // namespace xroce::transport
