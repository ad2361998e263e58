#include "device/device.h"

#include <cerrno>
#include <utility>

namespace xroce::device {

namespace {

// An MR key is the region's index in the upper 24 bits and 8 varying bits below, as rxe
// builds them, so that a stale key for a reused index is unlikely to match.
constexpr uint32_t kMrIndexLimit = 1u << 24;

}  // namespace

Device::Device(std::string name, NetdevState netdev, uint32_t seed)
    : name_(std::move(name)),
      netdev_(std::move(netdev)),
      node_guid_(node_guid_from_mac(netdev_.mac)),
      key_bits_(seed == 0 ? 1 : seed) {}

bool Device::update_netdev(const NetdevState& netdev) {
  if (netdev == netdev_) return false;
  netdev_ = netdev;
  return true;
}

bool Device::update_addresses(const std::vector<IpAddress>& addresses) {
  return gids_.update(addresses);
}

Result<uint32_t, int> Device::alloc_pd(ClientId owner) {
  if (pds_.size() >= limits_.max_pd) return Err{ENOMEM};
  const uint32_t handle = next_pd_++;
  pds_.emplace(handle, owner);
  return handle;
}

int Device::dealloc_pd(ClientId owner, uint32_t pd) {
  auto it = pds_.find(pd);
  if (it == pds_.end() || it->second != owner) return EINVAL;
  for (const auto& [handle, mr] : mrs_) {
    if (mr.pd == pd) return EBUSY;
  }
  pds_.erase(it);
  return 0;
}

uint32_t Device::next_mr_key(uint32_t index) {
  return (index << 8) | static_cast<uint32_t>(key_bits_() & 0xff);
}

Result<MrKeys, int> Device::reg_mr(ClientId owner, const MrRequest& request) {
  auto pd = pds_.find(request.pd);
  if (pd == pds_.end() || pd->second != owner) return Err{EINVAL};
  if ((request.access & ~kAccessSupported) != 0) return Err{EINVAL};
  // IBA 10.6.3.1 via rdma-core: remote write or atomic access requires local write.
  if ((request.access & (kAccessRemoteWrite | kAccessRemoteAtomic)) != 0 &&
      (request.access & kAccessLocalWrite) == 0) {
    return Err{EINVAL};
  }
  if (request.length == 0 || request.length > limits_.max_mr_size) return Err{EINVAL};
  if (request.addr + request.length < request.addr) return Err{EINVAL};
  if (mrs_.size() >= limits_.max_mr || next_mr_ >= kMrIndexLimit) return Err{ENOMEM};

  const uint32_t handle = next_mr_++;
  MemoryRegion mr;
  mr.owner = owner;
  mr.pid = request.pid;
  mr.pd = request.pd;
  mr.addr = request.addr;
  mr.length = request.length;
  mr.iova = request.iova;
  mr.access = request.access;
  mr.lkey = next_mr_key(handle);
  mr.rkey = mr.lkey;
  mrs_.emplace(handle, mr);
  return MrKeys{handle, mr.lkey, mr.rkey};
}

int Device::dereg_mr(ClientId owner, uint32_t mr) {
  auto it = mrs_.find(mr);
  if (it == mrs_.end() || it->second.owner != owner) return EINVAL;
  mrs_.erase(it);
  return 0;
}

void Device::release_client(ClientId owner) {
  std::erase_if(mrs_, [owner](const auto& entry) { return entry.second.owner == owner; });
  std::erase_if(pds_, [owner](const auto& entry) { return entry.second == owner; });
}

}  // namespace xroce::device
