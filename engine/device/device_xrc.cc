// Device: XRC domains (ibv_open_xrcd / ibv_close_xrcd) and ibv_open_qp.
#include <fcntl.h>

#include <cerrno>

#include "device/device.h"

namespace xroce::device {

namespace {

// The memory of an XRC_RECV QP that has named no SRQ: every key check fails first.
class NoMemory final : public transport::MemoryAccess {
 public:
  bool read(uint64_t, std::span<uint8_t>) override { return false; }
  bool write(uint64_t, std::span<const uint8_t>) override { return false; }
  bool atomic_cmp_swap(uint64_t, uint64_t, uint64_t, uint64_t*) override { return false; }
  bool atomic_fetch_add(uint64_t, uint64_t, uint64_t*) override { return false; }
};

}  // namespace

// ibv_open_xrcd (the kernel's ib_uverbs_open_xrcd): a file names a domain shared by every
// context that opens it with that file; O_CREAT makes it if none exists (else EAGAIN), O_EXCL
// refuses an existing one (EINVAL); other oflags are ignored, as there. Without a file, a domain
// of this context.
Result<uint32_t, int> Device::open_xrcd(ClientId owner,
                                        std::optional<std::pair<uint64_t, uint64_t>> file,
                                        uint32_t oflags) {
  OwnedCounts& owned = counts(owner);
  if (owned.xrcds >= quota_.max_xrcd) return Err{ENOMEM};
  if (file) {
    for (auto& [handle, domain] : xrcds_) {
      if (domain->inode_dev != file->first || domain->inode != file->second) continue;
      if (oflags & O_EXCL) return Err{EINVAL};
      if (domain->openers.insert(owner).second) ++owned.xrcds;
      return handle;
    }
    if ((oflags & O_CREAT) == 0) return Err{EAGAIN};
  }
  if (xrcds_.size() >= limits_.max_xrcd) return Err{ENOMEM};
  auto domain = std::make_unique<XrcDomainObject>();
  domain->openers.insert(owner);
  ++owned.xrcds;
  if (file) {
    domain->inode_dev = file->first;
    domain->inode = file->second;
  }
  domain->no_memory = std::make_unique<NoMemory>();
  domain->no_regions = std::make_unique<transport::MemoryRegionTable>(*domain->no_memory);
  const uint32_t handle = next_xrcd_++;
  xrcds_.emplace(handle, std::move(domain));
  return handle;
}

XrcDomainObject* Device::xrcd(ClientId owner, uint32_t handle) {
  auto it = xrcds_.find(handle);
  if (it == xrcds_.end() || it->second->openers.count(owner) == 0) return nullptr;
  return it->second.get();
}

// ibv_close_xrcd: EBUSY while this context's SRQs or QPs of the domain exist (the kernel counts
// the domain's users the same way).
int Device::close_xrcd(ClientId owner, uint32_t handle) {
  if (xrcd(owner, handle) == nullptr) return EINVAL;
  for (const auto& [h, srq] : srqs_)
    if (srq->owner == owner && srq->xrcd == handle) return EBUSY;
  for (const auto& [h, qp] : qps_)
    if (qp->owner == owner && qp->xrcd == handle) return EBUSY;
  leave_xrcd(owner, handle);
  return 0;
}

void Device::leave_xrcd(ClientId owner, uint32_t handle) {
  auto it = xrcds_.find(handle);
  if (it == xrcds_.end()) return;
  if (it->second->openers.erase(owner) != 0) --counts(owner).xrcds;
  if (it->second->openers.empty()) xrcds_.erase(it);
}

void Device::on_xrc_worker(uint32_t xrcd, const std::function<void()>& fn) {
  for (auto& [h, qp] : qps_) {
    if (qp->xrcd == xrcd && qp->type == transport::QpType::kXrcRecv) {
      with_core(*qp, [&](transport::Qp&) { fn(); });
      return;
    }
  }
  fn();
}

// ibv_open_qp: a second handle on an XRC_RECV QP of a domain this context has open, so another
// process of the domain can modify, query and close it (the kernel's shared XRC target QP).
Result<uint32_t, int> Device::open_qp(ClientId owner, uint32_t xrcd_handle, uint32_t qpn,
                                      uint64_t cookie) {
  (void)cookie;
  if (xrcd(owner, xrcd_handle) == nullptr) return Err{EINVAL};
  OwnedCounts& owned = counts(owner);
  if (owned.qps >= quota_.max_qp) return Err{ENOMEM};
  for (const auto& [handle, qp] : qps_) {
    if (qp->qpn.value() == qpn && qp->type == transport::QpType::kXrcRecv &&
        qp->xrcd == xrcd_handle) {
      const uint32_t alias = next_qp_++;
      opened_qps_.emplace(alias, OpenedQp{owner, handle});
      ++owned.qps;  // an opened handle counts as a QP of its context
      return alias;
    }
  }
  return Err{EINVAL};
}

}  // namespace xroce::device
