// Registered memory: the abstract "DMA" interface the transport reads and writes through, the
// table of memory regions that guards it (lkey/rkey, bounds, access flags), and LocalMemory, a
// plain-buffer implementation for tests and the simulator. The daemon adds process-memory
// implementations of MemoryAccess (docs/ARCHITECTURE.md decision 5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
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

// The memory regions of one protection domain. Keys carry a slot index and a generation byte,
// so a stale key never matches a re-used slot.
class MemoryRegionTable {
 public:
  explicit MemoryRegionTable(MemoryAccess& memory) : memory_(memory) {}

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

  MemoryAccess& memory_;
  std::vector<MemoryRegion> regions_;
  std::vector<std::uint8_t> generations_;
};

}  // namespace xroce::transport
