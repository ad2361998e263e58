#include "device/device.h"

#include <algorithm>
#include <cerrno>
#include <span>
#include <utility>

#include "wire/frame_layout.h"

namespace xroce::device {

namespace {

// QPNs 0 and 1 are the special QPs (IBA 10.2.5); rxe starts ordinary QPs at 16.
constexpr uint32_t kFirstQpn = 0x11;
constexpr uint32_t kQpnSpace = 1u << 24;

// The memory of a PD when the daemon gives no way to reach client memory: every access is an
// operating failure (the transport completes with a local error), never a silent success.
class UnreachableMemory final : public transport::MemoryAccess {
 public:
  bool read(uint64_t, std::span<uint8_t>) override { return false; }
  bool write(uint64_t, std::span<const uint8_t>) override { return false; }
  bool atomic_cmp_swap(uint64_t, uint64_t, uint64_t, uint64_t*) override { return false; }
  bool atomic_fetch_add(uint64_t, uint64_t, uint64_t*) override { return false; }
};

}  // namespace

uint32_t Device::active_mtu() const {
  // A frame's Ethernet header and a VLAN tag are outside the netdev's MTU.
  constexpr std::size_t kLinkHeaderBytes = wire::kEthHeaderBytes + wire::kVlanTagBytes;
  uint32_t mtu = netdev_.mtu;
  if (port_frame_limit_ != 0) {
    const std::size_t room =
        port_frame_limit_ > kLinkHeaderBytes ? port_frame_limit_ - kLinkHeaderBytes : 0;
    mtu = static_cast<uint32_t>(std::min<std::size_t>(mtu, room));
  }
  return active_ib_mtu(mtu);
}

void Device::set_port_receive_frames(std::size_t frames) {
  const std::size_t quarter = frames == 0 ? kInflightBudgetPsns : frames / 4;
  inflight_budget_->set_limit_psns(static_cast<uint32_t>(
      std::clamp<std::size_t>(quarter, transport::InflightBudget::kGrantPsns, UINT32_MAX)));
}

Device::Device(std::string name, NetdevState netdev, uint32_t seed, MemoryAccessFactory memory,
               transport::KeyBits key_bits)
    : name_(std::move(name)),
      netdev_(std::move(netdev)),
      node_guid_(node_guid_from_mac(netdev_.mac)),
      memory_(std::move(memory)),
      key_bits_(std::move(key_bits)),
      qpn_cursor_(seed % (kQpnSpace - kFirstQpn)) {}

bool Device::update_netdev(const NetdevState& netdev) {
  if (netdev == netdev_) return false;
  netdev_ = netdev;
  return true;
}

bool Device::update_addresses(const std::vector<IpAddress>& addresses) {
  return gids_.update(addresses);
}

OwnedCounts Device::owned_counts(ClientId owner) const {
  const auto it = owned_.find(owner);
  return it == owned_.end() ? OwnedCounts{} : it->second;
}

Result<uint32_t, int> Device::alloc_pd(ClientId owner, int pid) {
  if (pds_.size() >= limits_.max_pd || counts(owner).pds >= quota_.max_pd) return Err{ENOMEM};
  ProtectionDomain pd;
  pd.owner = owner;
  pd.pid = pid;
  pd.memory = memory_ ? memory_(owner) : nullptr;
  if (pd.memory == nullptr) pd.memory = std::make_unique<UnreachableMemory>();
  pd.regions = std::make_unique<transport::MemoryRegionTable>(*pd.memory, key_bits_);
  const uint32_t handle = next_pd_++;
  pds_.emplace(handle, std::move(pd));
  ++counts(owner).pds;
  return handle;
}

ProtectionDomain* Device::owned_pd(ClientId owner, uint32_t pd) {
  auto it = pds_.find(pd);
  return it == pds_.end() || it->second.owner != owner ? nullptr : &it->second;
}

int Device::dealloc_pd(ClientId owner, uint32_t pd) {
  if (owned_pd(owner, pd) == nullptr) return EINVAL;
  for (const auto& [handle, mr] : mrs_)
    if (mr.pd == pd) return EBUSY;
  for (const auto& [handle, qp] : qps_)
    if (qp->pd == pd) return EBUSY;
  for (const auto& [handle, srq] : srqs_)
    if (srq->pd == pd) return EBUSY;
  for (const auto& [handle, ah] : ahs_)
    if (ah.pd == pd) return EBUSY;
  for (const auto& [handle, mw] : mws_)
    if (mw.pd == pd) return EBUSY;
  pds_.erase(pd);
  --counts(owner).pds;
  return 0;
}

Result<MrKeys, int> Device::reg_mr(ClientId owner, const MrRequest& request) {
  ProtectionDomain* pd = owned_pd(owner, request.pd);
  if (pd == nullptr) return Err{EINVAL};
  // In ib_check_mr_access's order: a bad combination, then unknown bits, then a missing feature.
  // IBA 10.6.3.1 via rdma-core: remote write or atomic access requires local write.
  if ((request.access & (kAccessRemoteWrite | kAccessRemoteAtomic)) != 0 &&
      (request.access & kAccessLocalWrite) == 0) {
    return Err{EINVAL};
  }
  if ((request.access & ~(kAccessSupported | kAccessNotSupported)) != 0) return Err{EINVAL};
  if ((request.access & kAccessNotSupported) != 0) return Err{EOPNOTSUPP};
  // Implicit ODP (the whole address space) is the one region longer than max_mr_size.
  const bool implicit = (request.access & kAccessOnDemand) != 0 && request.addr == 0 &&
                        request.length == kImplicitOdpLength;
  if (request.length == 0 || (request.length > limits_.max_mr_size && !implicit)) {
    return Err{EINVAL};
  }
  if (request.addr + request.length < request.addr) return Err{EINVAL};
  if (!implicit && request.iova + request.length < request.iova) return Err{EINVAL};
  OwnedCounts& owned = counts(owner);
  if (mrs_.size() >= limits_.max_mr || owned.mrs >= quota_.max_mr) return Err{ENOMEM};
  const uint64_t pinned = pinned_bytes(request.access, request.length);
  if (request.byte_limit != 0 && owned.mr_bytes + pinned > request.byte_limit) return Err{ENOMEM};

  const uint32_t handle = next_mr_++;
  MemoryRegion mr;
  mr.owner = owner;
  mr.pid = request.pid;
  mr.pd = request.pd;
  mr.addr = request.addr;
  mr.length = request.length;
  mr.iova = request.iova;
  mr.access = request.access;
  // Requests name the region from its iova (the application's address for ibv_reg_mr); the
  // table translates to where the bytes are, and issues the keys the app gets and it checks.
  const transport::MemoryRegion region =
      pd->regions->register_region(request.addr, request.length, request.access, request.iova);
  mr.lkey = region.lkey.value();
  mr.rkey = region.rkey.value();
  mrs_.emplace(handle, mr);
  ++owned.mrs;
  owned.mr_bytes += pinned;
  return MrKeys{handle, mr.lkey, mr.rkey};
}

int Device::dereg_mr(ClientId owner, uint32_t mr) {
  auto it = mrs_.find(mr);
  if (it == mrs_.end() || it->second.owner != owner) return EINVAL;
  // EBUSY while memory windows are bound to it (rxe_dereg_mr); the region stays registered.
  const int err = pds_.at(it->second.pd).regions->deregister(wire::Lkey(it->second.lkey));
  if (err == EBUSY) return err;
  OwnedCounts& owned = counts(owner);
  --owned.mrs;
  owned.mr_bytes -= pinned_bytes(it->second.access, it->second.length);
  mrs_.erase(it);
  return 0;
}

void Device::release_client(ClientId owner) {
  // Users before what they use: QPs, then SRQs, CQs and AHs, MRs, and PDs last.
  std::erase_if(opened_qps_, [owner](const auto& entry) { return entry.second.owner == owner; });
  for (const auto& [handle, qp] : qps_) {
    if (qp->owner != owner) continue;
    // Other contexts' handles on it go with it (and stop counting against their quota).
    std::erase_if(opened_qps_, [this, h = handle](const auto& entry) {
      if (entry.second.target != h) return false;
      --counts(entry.second.owner).qps;
      return true;
    });
    if (qp->xrcd != 0) --xrcds_.at(qp->xrcd)->qps;
    if (qp->hosted) runner_->unhost(*qp);
  }
  for (const auto& [handle, srq] : srqs_) {
    if (srq->owner == owner) forget_xrc_srq(*srq, handle);
  }
  std::erase_if(qps_, [owner](const auto& entry) { return entry.second->owner == owner; });
  std::erase_if(srqs_, [owner](const auto& entry) { return entry.second->owner == owner; });
  std::erase_if(cqs_, [owner](const auto& entry) { return entry.second->owner == owner; });
  std::erase_if(ahs_, [owner](const auto& entry) { return entry.second.owner == owner; });
  std::erase_if(mws_, [owner](const auto& entry) { return entry.second.owner == owner; });
  std::erase_if(mrs_, [owner](const auto& entry) { return entry.second.owner == owner; });
  std::erase_if(pds_, [owner](const auto& entry) { return entry.second.owner == owner; });
  std::vector<uint32_t> domains;
  for (const auto& [handle, domain] : xrcds_)
    if (domain->openers.count(owner) != 0) domains.push_back(handle);
  for (uint32_t handle : domains)
    leave_xrcd(owner, handle);
  owned_.erase(owner);
}

}  // namespace xroce::device
