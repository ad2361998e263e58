// Registered memory: the abstract "DMA" interface the transport reads and writes through, the
// table of memory regions that guards it (lkey/rkey, bounds, access flags), and LocalMemory, a
// plain-buffer implementation for tests and the simulator. The daemon adds process-memory
// implementations of MemoryAccess (docs/ARCHITECTURE.md decision 5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "transport/verbs.h"
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

struct MemoryRegion {
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  wire::Lkey lkey;
  wire::Rkey rkey;
  std::uint32_t access = 0;  // access:: flags
  bool valid = false;        // false after deregistration or remote invalidation
};

enum class MemError : std::uint8_t {
  kInvalidKey,    // no such key, or the region was invalidated
  kOutOfBounds,   // range not inside the region
  kAccessDenied,  // the region's access flags forbid the operation
};

// Random bits for new keys, supplied by the caller (this core has no randomness of its own).
using KeyBits = std::function<std::uint32_t()>;

// The memory regions of one protection domain. A key is a 24-bit index and an 8-bit key byte,
// as rxe's (index << 8 | rxe_get_next_key()) and mlx5's mkeys are. Without KeyBits the index is
// the slot and the key byte a generation, so keys are reproducible (simulator, tests) and a
// stale key never matches a re-used slot. With KeyBits (the daemon's, from the kernel's random
// source) index and key byte are both random, so that a remote peer cannot guess the key of a
// live region from any other key: all 32 bits must be guessed.
class MemoryRegionTable {
 public:
  explicit MemoryRegionTable(MemoryAccess& memory, KeyBits key_bits = nullptr)
      : memory_(memory), key_bits_(std::move(key_bits)) {}

  const MemoryRegion& register_region(std::uint64_t addr, std::uint64_t length,
                                      std::uint32_t access);
  bool deregister(wire::Lkey lkey);
  // Remote invalidation (SEND_WITH_INV): the rkey stops working.
  bool invalidate(wire::Rkey rkey);

  // Local access through an SGE: `need` is access::kLocalWrite when the HCA writes the buffer.
  wire::Result<const MemoryRegion*, MemError> check_local(wire::Lkey lkey, std::uint64_t addr,
                                                          std::uint64_t len,
                                                          std::uint32_t need) const;
  // Remote access through an R_Key : bounds and the remote access flag `need`.
  wire::Result<const MemoryRegion*, MemError> check_remote(wire::Rkey rkey, std::uint64_t addr,
                                                           std::uint64_t len,
                                                           std::uint32_t need) const;

  MemoryAccess& memory() { return memory_; }

 private:
  static constexpr std::uint32_t kGenerationBits = 8;
  const MemoryRegion* find(std::uint32_t key, bool remote) const;
  // The slot of a key's index; regions_.size() when none.
  std::size_t slot_of(std::uint32_t key) const;
  std::uint32_t new_key(std::size_t slot, std::uint8_t generation);

  MemoryAccess& memory_;
  KeyBits key_bits_;
  std::vector<MemoryRegion> regions_;
  std::vector<std::uint8_t> generations_;
  std::unordered_map<std::uint32_t, std::size_t> slot_of_index_;  // with key_bits_ only
};

}  // namespace xroce::transport
