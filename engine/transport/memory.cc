#include "transport/memory.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <utility>

namespace xroce::transport {

namespace {
// Gap between LocalMemory buffers so an overrun never lands in a neighbour.
constexpr std::uint64_t kBufferGuardBytes = 1 << 20;
constexpr std::uint64_t kBufferAlign = 4096;

bool range_inside(std::uint64_t addr, std::uint64_t len, std::uint64_t base, std::uint64_t size) {
  return addr >= base && len <= size && addr - base <= size - len;
}

// The turn state of one thread: how deep its turns nest and what the outermost keeps.
struct TurnState {
  struct Kept {
    std::uint64_t keeper = 0;  // 0: empty (new_keeper never returns 0)
    std::uint64_t version = 0;
    std::shared_ptr<const void> value;
  };
  unsigned depth = 0;
  std::array<Kept, AccessTurn::kKept> kept{};
  std::size_t next = 0;  // the entry a new keeper takes when none is free
};
thread_local TurnState t_turn;

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

std::optional<MemoryRegionTable::KeySlot> MemoryRegionTable::locate(std::uint32_t key) const {
  const std::uint32_t index = index_of(key);
  if (key_bits_) {
    const auto it = slot_of_index_.find(index);
    if (it == slot_of_index_.end()) return std::nullopt;
    return it->second;
  }
  if (index >= kWindowIndexBase) return KeySlot{true, index - kWindowIndexBase};
  return KeySlot{false, index};
}

std::uint32_t MemoryRegionTable::new_key(KeySlot at, std::uint32_t old_key, std::uint8_t key_byte) {
  if (!key_bits_) {
    const std::uint32_t base = at.window ? kWindowIndexBase : 0;
    return static_cast<std::uint32_t>(at.slot + base) << kKeyBits | key_byte;
  }
  // The slot's last key (if it had one) stops naming it; index 0 is never handed out, so the
  // zero key of a fresh slot names nothing.
  slot_of_index_.erase(index_of(old_key));
  for (;;) {
    const std::uint32_t key = key_bits_();
    const std::uint32_t index = index_of(key);
    if (index != 0 && slot_of_index_.emplace(index, at).second) return key;
  }
}

std::uint32_t MemoryRegionTable::next_region_key(std::size_t slot) {
  const std::uint8_t gen = ++generations_[slot];
  return new_key(KeySlot{false, slot}, regions_[slot].lkey.value(), gen);
}

MemoryRegion MemoryRegionTable::register_region(std::uint64_t addr, std::uint64_t length,
                                                std::uint32_t access,
                                                std::optional<std::uint64_t> iova) {
  std::lock_guard guard(lock_);
  changed();
  std::size_t slot = 0;
  while (slot < regions_.size() && regions_[slot].valid)
    ++slot;
  if (slot == regions_.size()) {
    regions_.emplace_back();
    generations_.push_back(0);
  }
  const std::uint32_t key = next_region_key(slot);
  regions_[slot] = MemoryRegion{iova.value_or(addr), addr,   length, wire::Lkey(key),
                                wire::Rkey(key),     access, true,   0};
  return regions_[slot];
}

MemoryRegion* MemoryRegionTable::region_by_key(std::uint32_t key, bool remote) {
  const std::optional<KeySlot> at = locate(key);
  if (!at || at->window || at->slot >= regions_.size()) return nullptr;
  MemoryRegion& mr = regions_[at->slot];
  if (!mr.valid) return nullptr;
  const std::uint32_t want = remote ? mr.rkey.value() : mr.lkey.value();
  return want == key ? &mr : nullptr;
}

const MemoryRegion* MemoryRegionTable::region_by_key(std::uint32_t key, bool remote) const {
  return const_cast<MemoryRegionTable*>(this)->region_by_key(key, remote);
}

MemoryWindow* MemoryRegionTable::window_by_key(std::uint32_t key) {
  const std::optional<KeySlot> at = locate(key);
  if (!at || !at->window) return nullptr;
  const std::size_t slot = at->slot;
  if (slot >= windows_.size() || !windows_[slot].allocated) return nullptr;
  return windows_[slot].rkey.value() == key ? &windows_[slot] : nullptr;
}

const MemoryWindow* MemoryRegionTable::window_by_key(std::uint32_t key) const {
  return const_cast<MemoryRegionTable*>(this)->window_by_key(key);
}

int MemoryRegionTable::deregister(wire::Lkey lkey) {
  std::lock_guard guard(lock_);
  changed();
  MemoryRegion* mr = region_by_key(lkey.value(), false);
  if (mr == nullptr) return EINVAL;
  if (mr->bound_windows != 0) return EBUSY;
  mr->valid = false;
  return 0;
}

wire::Result<MemoryRegion, int> MemoryRegionTable::reregister(wire::Lkey lkey,
                                                              const Reregistration& change) {
  std::lock_guard guard(lock_);
  changed();
  MemoryRegion* mr = region_by_key(lkey.value(), false);
  if (mr == nullptr) return wire::Err{EINVAL};
  if (mr->bound_windows != 0) return wire::Err{EBUSY};
  if (change.addr) mr->addr = *change.addr;
  if (change.length) mr->length = *change.length;
  if (change.iova) mr->iova = *change.iova;
  if (change.access) mr->access = *change.access;
  // The keys stay (rxe_rereg_user_mr changes access and PD in place; mlx5 keeps the mkey when
  // it can): a peer told the R_Key before the change keeps using it, and gets what the new
  // access or translation allows.
  return *mr;
}

std::optional<MemoryRegion> MemoryRegionTable::find_region(wire::Lkey lkey) const {
  std::lock_guard guard(lock_);
  const MemoryRegion* mr = region_by_key(lkey.value(), false);
  if (mr == nullptr) return std::nullopt;
  return *mr;
}

wire::Result<wire::Rkey, int> MemoryRegionTable::allocate_window(MwType type) {
  if (type != MwType::kType1 && type != MwType::kType2) return wire::Err{EINVAL};
  std::lock_guard guard(lock_);
  changed();
  std::size_t slot = 0;
  while (slot < windows_.size() && windows_[slot].allocated)
    ++slot;
  if (slot == windows_.size()) windows_.emplace_back();
  if (!key_bits_ && slot + kWindowIndexBase >= (1u << 24)) return wire::Err{ENOMEM};
  MemoryWindow& w = windows_[slot];
  // A fresh key byte, so an R_Key of the slot's previous window does not name this one.
  const auto key_byte = static_cast<std::uint8_t>(w.rkey.value() + 1);
  const std::uint32_t key = new_key(KeySlot{true, slot}, w.rkey.value(), key_byte);
  w = MemoryWindow{};
  w.type = type;
  w.allocated = true;
  w.rkey = wire::Rkey(key);
  return w.rkey;
}

int MemoryRegionTable::deallocate_window(wire::Rkey rkey) {
  std::lock_guard guard(lock_);
  changed();
  const std::optional<KeySlot> at = locate(rkey.value());
  if (!at || !at->window) return EINVAL;
  const std::size_t slot = at->slot;
  if (slot >= windows_.size() || !windows_[slot].allocated) return EINVAL;
  MemoryWindow* w = &windows_[slot];
  if (w->bound && w->region < regions_.size()) --regions_[w->region].bound_windows;
  w->allocated = false;
  w->bound = false;
  return 0;
}

std::optional<MemoryWindow> MemoryRegionTable::find_window(wire::Rkey rkey) const {
  std::lock_guard guard(lock_);
  const MemoryWindow* w = window_by_key(rkey.value());
  if (w == nullptr) return std::nullopt;
  return *w;
}

bool MemoryRegionTable::bind_allowed(const MemoryWindow& w, const WindowBind& b,
                                     const MemoryRegion* mr, wire::Qpn qp) const {
  (void)qp;
  constexpr std::uint32_t kWindowAccess =
      access::kRemoteRead | access::kRemoteWrite | access::kRemoteAtomic | access::kZeroBased |
      access::kLocalWrite | access::kFlushGlobal | access::kFlushPersistent;
  if ((b.access & ~kWindowAccess) != 0) return false;
  if (w.type == MwType::kType1 && (b.access & access::kZeroBased) != 0) return false;  // o10-36.2.2
  if (w.type == MwType::kType2 && w.bound) return false;        // o10-37.2.30: only a Free window
  if (w.type == MwType::kType2 && b.length == 0) return false;  // o10-37.2.40
  if (b.length == 0) return true;                               // type 1 unbind
  if (mr == nullptr) return false;
  if ((mr->access & access::kMwBind) == 0) return false;  // C10-73
  const bool writable = (b.access & (access::kRemoteWrite | access::kRemoteAtomic)) != 0;
  if (writable && (mr->access & access::kLocalWrite) == 0) return false;  // C10-74
  return range_inside(b.va, b.length, mr->iova, mr->length);              // C10-75
}

bool MemoryRegionTable::bind_window(const WindowBind& b, wire::Qpn qp) {
  std::lock_guard guard(lock_);
  changed();
  MemoryWindow* w = window_by_key(b.window.value());
  if (w == nullptr) return false;
  MemoryRegion* mr = b.length == 0 ? nullptr : region_by_key(b.region.value(), false);
  if (!bind_allowed(*w, b, mr, qp)) return false;
  if (w->bound) --regions_[w->region].bound_windows;
  w->rkey = wire::Rkey((w->rkey.value() & ~0xFFu) | (b.new_rkey.value() & 0xFFu));
  w->bound = b.length != 0;
  w->va = b.va;
  w->length = b.length;
  w->access = b.access;
  w->qp = qp;
  if (mr != nullptr) {
    w->region = static_cast<std::size_t>(mr - regions_.data());
    ++mr->bound_windows;
  }
  return true;
}

bool MemoryRegionTable::invalidate(wire::Rkey rkey) {
  std::lock_guard guard(lock_);
  changed();
  MemoryWindow* w = window_by_key(rkey.value());
  if (w == nullptr || w->type != MwType::kType2 || !w->bound) return false;
  --regions_[w->region].bound_windows;
  w->bound = false;
  w->length = 0;
  w->access = 0;
  return true;
}

MemoryRegionTable::Resolved MemoryRegionTable::resolve_locked(std::uint32_t key,
                                                              bool remote) const {
  Resolved r;
  const std::optional<KeySlot> at = locate(key);
  if (at && at->window) {
    const MemoryWindow* w = window_by_key(key);
    if (w == nullptr) return r;
    r.kind = Resolved::Kind::kWindow;
    r.window = *w;
    if (w->bound) r.region = regions_[w->region];
    return r;
  }
  const MemoryRegion* mr = region_by_key(key, remote);
  if (mr == nullptr) return r;
  r.kind = Resolved::Kind::kRegion;
  r.region = *mr;
  return r;
}

const MemoryRegionTable::Resolved* MemoryRegionTable::TurnKeys::find(std::uint32_t key,
                                                                     bool remote) const {
  for (std::size_t i = 0; i < used; ++i) {
    if (entries[i].key == key && entries[i].remote == remote) return &entries[i].resolved;
  }
  return nullptr;
}

void MemoryRegionTable::TurnKeys::add(std::uint32_t key, bool remote,
                                      const Resolved& resolved) const {
  std::size_t at = used;
  if (used < kKeys) {
    ++used;
  } else {
    at = next;
    next = (next + 1) % kKeys;
  }
  entries[at] = Entry{key, remote, resolved};
}

MemoryRegionTable::Resolved MemoryRegionTable::resolve(std::uint32_t key, bool remote) const {
  // Read before the table is: what a turn keeps at this version was resolved under the mutex
  // with the version unchanged (changed() counts under the mutex), so it is the table's state
  // at this version.
  const std::uint64_t version = version_.load(std::memory_order_acquire);
  const TurnKeys* keys = nullptr;
  if (AccessTurn::open()) {
    if (const auto* kept = AccessTurn::kept(keeper_, version)) {
      keys = static_cast<const TurnKeys*>(kept->get());
      if (const Resolved* r = keys->find(key, remote)) return *r;
    } else {
      auto fresh = std::make_shared<const TurnKeys>();
      keys = fresh.get();
      AccessTurn::keep(keeper_, version, std::move(fresh));
    }
  }
  std::unique_lock guard(lock_);
  const std::uint64_t now = version_.load(std::memory_order_relaxed);
  Resolved r = resolve_locked(key, remote);
  guard.unlock();
  if (keys != nullptr && now == version && r.kind != Resolved::Kind::kNothing) {
    keys->add(key, remote, r);
  }
  return r;
}

wire::Result<ProcessAddress, MemError> MemoryRegionTable::check_local(wire::Lkey lkey,
                                                                      std::uint64_t va,
                                                                      std::uint64_t len,
                                                                      std::uint32_t need) const {
  const Resolved r = resolve(lkey.value(), false);
  if (r.kind != Resolved::Kind::kRegion) return wire::Err{MemError::kInvalidKey};
  const MemoryRegion& mr = r.region;
  if (!range_inside(va, len, mr.iova, mr.length)) return wire::Err{MemError::kOutOfBounds};
  if ((mr.access & need) != need) return wire::Err{MemError::kAccessDenied};
  return mr.addr + (va - mr.iova);
}

wire::Result<ProcessAddress, MemError> MemoryRegionTable::check_remote(
    wire::Rkey rkey, std::uint64_t va, std::uint64_t len, std::uint32_t need, wire::Qpn qp) const {
  const Resolved r = resolve(rkey.value(), true);
  std::uint64_t iova = va;
  if (r.kind == Resolved::Kind::kWindow) {
    const MemoryWindow& w = r.window;
    // rxe_lookup_mw: a bound window, of this QP if type 2, with the access asked for.
    if (!w.bound || (w.type == MwType::kType2 && w.qp != qp)) {
      return wire::Err{MemError::kInvalidKey};
    }
    if ((w.access & need) != need) return wire::Err{MemError::kAccessDenied};
    const bool zero_based = (w.access & access::kZeroBased) != 0;
    const std::uint64_t first = zero_based ? 0 : w.va;
    if (!range_inside(va, len, first, w.length)) return wire::Err{MemError::kOutOfBounds};
    iova = zero_based ? w.va + va : va;
  } else {
    if (r.kind != Resolved::Kind::kRegion) return wire::Err{MemError::kInvalidKey};
    if ((r.region.access & need) != need) return wire::Err{MemError::kAccessDenied};
  }
  const MemoryRegion& mr = r.region;
  if (!range_inside(iova, len, mr.iova, mr.length)) return wire::Err{MemError::kOutOfBounds};
  return mr.addr + (iova - mr.iova);
}

wire::Result<MemoryRegion, MemError> MemoryRegionTable::remote_region(wire::Rkey rkey,
                                                                      std::uint32_t need,
                                                                      wire::Qpn qp) const {
  const Resolved r = resolve(rkey.value(), true);
  if (r.kind == Resolved::Kind::kWindow) {
    const MemoryWindow& w = r.window;
    if (!w.bound || (w.type == MwType::kType2 && w.qp != qp)) {
      return wire::Err{MemError::kInvalidKey};
    }
    if ((w.access & need) != need) return wire::Err{MemError::kAccessDenied};
    return r.region;
  }
  if (r.kind != Resolved::Kind::kRegion) return wire::Err{MemError::kInvalidKey};
  if ((r.region.access & need) != need) return wire::Err{MemError::kAccessDenied};
  return r.region;
}

// --- AccessTurn ---------------------------------------------------------------------------

AccessTurn::AccessTurn() {
  ++t_turn.depth;
}

AccessTurn::~AccessTurn() {
  if (--t_turn.depth != 0) return;
  for (auto& k : t_turn.kept)
    k = {};
  t_turn.next = 0;
}

std::uint64_t AccessTurn::new_keeper() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool AccessTurn::open() {
  return t_turn.depth != 0;
}

const std::shared_ptr<const void>* AccessTurn::kept(std::uint64_t keeper, std::uint64_t version) {
  if (t_turn.depth == 0) return nullptr;
  for (const auto& k : t_turn.kept) {
    if (k.keeper == keeper) return k.version == version ? &k.value : nullptr;
  }
  return nullptr;
}

void AccessTurn::keep(std::uint64_t keeper, std::uint64_t version,
                      std::shared_ptr<const void> value) {
  if (t_turn.depth == 0) return;
  TurnState::Kept* slot = nullptr;
  for (auto& k : t_turn.kept) {
    if (k.keeper == keeper) {
      slot = &k;
      break;
    }
    if (slot == nullptr && k.keeper == 0) slot = &k;
  }
  if (slot == nullptr) {
    slot = &t_turn.kept[t_turn.next];
    t_turn.next = (t_turn.next + 1) % kKept;
  }
  *slot = {keeper, version, std::move(value)};
}

}  // namespace xroce::transport
