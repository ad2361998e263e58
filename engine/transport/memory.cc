#include "transport/memory.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace xroce::transport {

namespace {
// Gap between LocalMemory buffers so an overrun never lands in a neighbour.
constexpr std::uint64_t kBufferGuardBytes = 1 << 20;
constexpr std::uint64_t kBufferAlign = 4096;

bool range_inside(std::uint64_t addr, std::uint64_t len, std::uint64_t base, std::uint64_t size) {
  return addr >= base && len <= size && addr - base <= size - len;
}
}  // namespace

std::uint64_t LocalMemory::allocate(std::size_t bytes) {
  const std::uint64_t base = next_base_;
  buffers_.push_back(Buffer{base, std::vector<std::uint8_t>(bytes, 0)});
  next_base_ = (base + bytes + kBufferGuardBytes + kBufferAlign - 1) & ~(kBufferAlign - 1);
  return base;
}

std::uint8_t* LocalMemory::find(std::uint64_t addr, std::size_t len) {
  auto it = std::upper_bound(buffers_.begin(), buffers_.end(), addr,
                             [](std::uint64_t a, const Buffer& b) { return a < b.base; });
  if (it == buffers_.begin()) return nullptr;
  --it;
  if (!range_inside(addr, len, it->base, it->bytes.size())) return nullptr;
  return it->bytes.data() + (addr - it->base);
}

std::span<std::uint8_t> LocalMemory::view(std::uint64_t addr, std::size_t len) {
  std::uint8_t* p = find(addr, len);
  assert(p != nullptr);
  return {p, len};
}

bool LocalMemory::read(std::uint64_t addr, std::span<std::uint8_t> out) {
  const std::uint8_t* p = find(addr, out.size());
  if (p == nullptr) return false;
  if (!out.empty()) std::memcpy(out.data(), p, out.size());
  return true;
}

bool LocalMemory::write(std::uint64_t addr, std::span<const std::uint8_t> in) {
  std::uint8_t* p = find(addr, in.size());
  if (p == nullptr) return false;
  if (!in.empty()) std::memcpy(p, in.data(), in.size());
  return true;
}

bool LocalMemory::atomic_cmp_swap(std::uint64_t addr, std::uint64_t compare, std::uint64_t swap,
                                  std::uint64_t* original) {
  std::uint8_t* p = find(addr, 8);
  if (p == nullptr) return false;
  std::memcpy(original, p, 8);
  if (*original == compare) std::memcpy(p, &swap, 8);
  return true;
}

bool LocalMemory::atomic_fetch_add(std::uint64_t addr, std::uint64_t add, std::uint64_t* original) {
  std::uint8_t* p = find(addr, 8);
  if (p == nullptr) return false;
  std::memcpy(original, p, 8);
  const std::uint64_t sum = *original + add;
  std::memcpy(p, &sum, 8);
  return true;
}

const MemoryRegion& MemoryRegionTable::register_region(std::uint64_t addr, std::uint64_t length,
                                                       std::uint32_t access) {
  std::size_t slot = 0;
  while (slot < regions_.size() && regions_[slot].valid)
    ++slot;
  if (slot == regions_.size()) {
    regions_.emplace_back();
    generations_.push_back(0);
  }
  const std::uint8_t gen = ++generations_[slot];
  const std::uint32_t key = new_key(slot, gen);
  regions_[slot] = MemoryRegion{addr, length, wire::Lkey(key), wire::Rkey(key), access, true};
  return regions_[slot];
}

std::uint32_t MemoryRegionTable::new_key(std::size_t slot, std::uint8_t generation) {
  if (!key_bits_) return static_cast<std::uint32_t>(slot) << kGenerationBits | generation;
  slot_of_index_.erase(regions_[slot].lkey.value() >> kGenerationBits);  // its last key, if any
  for (;;) {
    const std::uint32_t key = key_bits_();
    const std::uint32_t index = key >> kGenerationBits;
    // Index 0 is never used, so the zero key names nothing.
    if (index != 0 && slot_of_index_.emplace(index, slot).second) return key;
  }
}

std::size_t MemoryRegionTable::slot_of(std::uint32_t key) const {
  const std::uint32_t index = key >> kGenerationBits;
  if (!key_bits_) return index;
  const auto it = slot_of_index_.find(index);
  return it == slot_of_index_.end() ? regions_.size() : it->second;
}

const MemoryRegion* MemoryRegionTable::find(std::uint32_t key, bool remote) const {
  const std::size_t slot = slot_of(key);
  if (slot >= regions_.size()) return nullptr;
  const MemoryRegion& mr = regions_[slot];
  if (!mr.valid) return nullptr;
  const std::uint32_t want = remote ? mr.rkey.value() : mr.lkey.value();
  return want == key ? &mr : nullptr;
}

bool MemoryRegionTable::deregister(wire::Lkey lkey) {
  const MemoryRegion* mr = find(lkey.value(), false);
  if (mr == nullptr) return false;
  regions_[slot_of(lkey.value())].valid = false;
  return true;
}

bool MemoryRegionTable::invalidate(wire::Rkey rkey) {
  const MemoryRegion* mr = find(rkey.value(), true);
  if (mr == nullptr) return false;
  regions_[slot_of(rkey.value())].valid = false;
  return true;
}

wire::Result<const MemoryRegion*, MemError> MemoryRegionTable::check_local(
    wire::Lkey lkey, std::uint64_t addr, std::uint64_t len, std::uint32_t need) const {
  const MemoryRegion* mr = find(lkey.value(), false);
  if (mr == nullptr) return wire::Err{MemError::kInvalidKey};
  if (!range_inside(addr, len, mr->addr, mr->length)) return wire::Err{MemError::kOutOfBounds};
  if ((mr->access & need) != need) return wire::Err{MemError::kAccessDenied};
  return mr;
}

wire::Result<const MemoryRegion*, MemError> MemoryRegionTable::check_remote(
    wire::Rkey rkey, std::uint64_t addr, std::uint64_t len, std::uint32_t need) const {
  const MemoryRegion* mr = find(rkey.value(), true);
  if (mr == nullptr) return wire::Err{MemError::kInvalidKey};
  if (!range_inside(addr, len, mr->addr, mr->length)) return wire::Err{MemError::kOutOfBounds};
  if ((mr->access & need) != need) return wire::Err{MemError::kAccessDenied};
  return mr;
}

}  // namespace xroce::transport
