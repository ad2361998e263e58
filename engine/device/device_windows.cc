// Device: re-registration, memory windows and ibv_advise_mr.
#include <cerrno>

#include "device/device.h"

namespace xroce::device {

namespace {

// ibv_advise_mr_advice.
constexpr uint32_t kAdvisePrefetch = 0;
constexpr uint32_t kAdvisePrefetchWrite = 1;
constexpr uint32_t kAdvisePrefetchNoFault = 2;

}  // namespace

// ibv_rereg_mr (rxe_rereg_user_mr and mlx5 for translation): the region keeps its handle and
// takes new keys; with a new PD it moves to that PD's key table. Refused with EBUSY while
// windows are bound to it.
Result<MrKeys, int> Device::rereg_mr(ClientId owner, uint32_t handle, const ReregRequest& r) {
  auto it = mrs_.find(handle);
  if (it == mrs_.end() || it->second.owner != owner) return Err{EINVAL};
  const uint32_t known = kReregTranslation | kReregPd | kReregAccess;
  if (r.flags == 0 || (r.flags & ~known) != 0) return Err{EINVAL};
  MemoryRegion& mr = it->second;
  MemoryRegion next = mr;
  if (r.flags & kReregTranslation) {
    if (r.length == 0 || r.length > limits_.max_mr_size || r.addr + r.length < r.addr) {
      return Err{EINVAL};
    }
    next.addr = next.iova = r.addr;
    next.length = r.length;
  }
  if (r.flags & kReregAccess) {
    if ((r.access & (kAccessRemoteWrite | kAccessRemoteAtomic)) != 0 &&
        (r.access & kAccessLocalWrite) == 0) {
      return Err{EINVAL};
    }
    if ((r.access & ~(kAccessSupported | kAccessNotSupported)) != 0) return Err{EINVAL};
    if ((r.access & kAccessNotSupported) != 0) return Err{EOPNOTSUPP};
    next.access = r.access;
  }
  if (r.flags & kReregPd) {
    if (owned_pd(owner, r.pd) == nullptr) return Err{EINVAL};
    next.pd = r.pd;
  }
  OwnedCounts& owned = counts(owner);
  const uint64_t was_pinned = pinned_bytes(mr.access, mr.length);
  const uint64_t pinned = pinned_bytes(next.access, next.length);
  if (r.byte_limit != 0 && owned.mr_bytes - was_pinned + pinned > r.byte_limit) {
    return Err{ENOMEM};
  }
  transport::MemoryRegionTable& from = *pds_.at(mr.pd).regions;
  transport::MemoryRegion region;
  if (next.pd != mr.pd) {
    if (const int err = from.deregister(wire::Lkey(mr.lkey))) return Err{err};
    region =
        pds_.at(next.pd).regions->register_region(next.addr, next.length, next.access, next.iova);
  } else {
    auto changed =
        from.reregister(wire::Lkey(mr.lkey), {next.addr, next.length, next.iova, next.access});
    if (!changed) return Err{changed.error()};
    region = *changed;
  }
  next.lkey = region.lkey.value();
  next.rkey = region.rkey.value();
  owned.mr_bytes = owned.mr_bytes - was_pinned + pinned;
  mr = next;
  return MrKeys{handle, mr.lkey, mr.rkey};
}

Result<MwKeys, int> Device::alloc_mw(ClientId owner, uint32_t pd, uint32_t type) {
  ProtectionDomain* domain = owned_pd(owner, pd);
  if (domain == nullptr) return Err{EINVAL};
  OwnedCounts& owned = counts(owner);
  if (mws_.size() >= limits_.max_mw || owned.mws >= quota_.max_mw) return Err{ENOMEM};
  // ibv_mw_type: 1 and 2 (type 2B, as rxe); anything else EINVAL (rxe_alloc_mw).
  auto rkey = domain->regions->allocate_window(static_cast<transport::MwType>(type));
  if (!rkey) return Err{rkey.error()};
  const uint32_t handle = next_mw_++;
  mws_.emplace(handle, MemoryWindowObject{owner, pd, rkey->value()});
  ++owned.mws;
  return MwKeys{handle, rkey->value()};
}

int Device::dealloc_mw(ClientId owner, uint32_t handle) {
  auto it = mws_.find(handle);
  if (it == mws_.end() || it->second.owner != owner) return EINVAL;
  // A bound window lets go of its region (rxe_mw_cleanup); its R_Key stops working at once.
  const int err = pds_.at(it->second.pd).regions->deallocate_window(wire::Rkey(it->second.rkey));
  if (err != 0) return err;
  mws_.erase(it);
  --counts(owner).mws;
  return 0;
}

int Device::advise_mr(ClientId owner, uint32_t pd, uint32_t advice,
                      std::span<const control::AdviseSge> sges) {
  ProtectionDomain* domain = owned_pd(owner, pd);
  if (domain == nullptr) return EINVAL;
  if (advice != kAdvisePrefetch && advice != kAdvisePrefetchWrite &&
      advice != kAdvisePrefetchNoFault) {
    return EOPNOTSUPP;
  }
  if (sges.empty() || sges.size() > limits_.max_advise_sge) return EINVAL;
  const uint32_t need = advice == kAdvisePrefetchWrite ? kAccessLocalWrite : 0;
  for (const control::AdviseSge& s : sges) {
    if (!domain->regions->check_local(wire::Lkey(s.lkey), s.addr, s.length, need)) return EINVAL;
  }
  return 0;
}

}  // namespace xroce::device
