// One xroce device: the model a NIC's firmware keeps for a netdev — its port, GID table,
// protection domains and memory regions — and who owns each object.
//
// Threading: a Device is owned by the daemon's control thread; nothing here locks.
// Ownership: every PD and MR belongs to one client (a verbs context, i.e. one control
// connection); a client can name only its own objects, and release_client() drops them all.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "device/gid_table.h"
#include "device/port.h"
#include "wire/result.h"

namespace xroce::device {

using ClientId = uint64_t;
using wire::Err;
using wire::Result;

// What the device advertises (ibv_query_device), modelled on rxe's rxe_param.h; the model
// enforces the PD and MR counts, the transport the rest.
struct DeviceLimits {
  uint32_t max_pd = 64 * 1024;
  uint32_t max_mr = 256 * 1024;
  uint64_t max_mr_size = uint64_t{1} << 40;
  uint64_t page_size_cap = 0xfffff000;  // 4 KiB and up
  uint32_t max_qp = 0x10000;
  uint32_t max_qp_wr = 0x4000;
  uint32_t max_sge = 32;
  uint32_t max_cq = 0x4000;
  uint32_t max_cqe = (1u << 15) - 1;
  uint32_t max_qp_rd_atom = 128;  // outstanding RDMA READ/atomic per QP, both directions
  uint32_t max_srq = 0x4000;
  uint32_t max_srq_wr = 0x4000;
  uint32_t max_srq_sge = 27;
  uint32_t max_ah = 0x8000;
  uint32_t max_msg_bytes = 1u << 31;  // IBA limit, PROTOCOL.md 4.3
  uint16_t max_pkeys = 1;             // the default P_Key only
  uint32_t vendor_id = 0xffffff;      // no IEEE OUI of our own; rxe reports the same
};

inline constexpr const char* kFirmwareVersion = "0.1.0";

struct MemoryRegion {
  ClientId owner = 0;
  int pid = 0;  // the registering process, whose memory the DMA engine will reach
  uint32_t pd = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t iova = 0;
  uint32_t access = 0;  // ibv_access_flags
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

struct MrKeys {
  uint32_t handle;
  uint32_t lkey;
  uint32_t rkey;
};

struct MrRequest {
  uint32_t pd;
  uint64_t addr;
  uint64_t length;
  uint64_t iova;
  uint32_t access;
  int pid;
};

// ibv_access_flags the device accepts in reg_mr; anything else is EINVAL.
inline constexpr uint32_t kAccessLocalWrite = 1;
inline constexpr uint32_t kAccessRemoteWrite = 2;
inline constexpr uint32_t kAccessRemoteRead = 4;
inline constexpr uint32_t kAccessRemoteAtomic = 8;
inline constexpr uint32_t kAccessSupported =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

class Device {
 public:
  Device(std::string name, NetdevState netdev, uint32_t seed);

  const std::string& name() const { return name_; }
  const NetdevState& netdev() const { return netdev_; }
  const GidTable& gids() const { return gids_; }
  const DeviceLimits& limits() const { return limits_; }
  uint64_t node_guid() const { return node_guid_; }

  // Returns true if anything visible (state, MTU, speed, GIDs) changed.
  bool update_netdev(const NetdevState& netdev);
  bool update_addresses(const std::vector<IpAddress>& addresses);

  Result<uint32_t, int> alloc_pd(ClientId owner);
  // 0, or EINVAL (not the caller's PD), or EBUSY (MRs still use it), as uverbs answers.
  int dealloc_pd(ClientId owner, uint32_t pd);
  Result<MrKeys, int> reg_mr(ClientId owner, const MrRequest& request);
  int dereg_mr(ClientId owner, uint32_t mr);
  void release_client(ClientId owner);

  const std::map<uint32_t, MemoryRegion>& memory_regions() const { return mrs_; }
  std::size_t pd_count() const { return pds_.size(); }

 private:
  uint32_t next_mr_key(uint32_t index);

  std::string name_;
  NetdevState netdev_;
  GidTable gids_;
  DeviceLimits limits_;
  uint64_t node_guid_;
  std::map<uint32_t, ClientId> pds_;  // handle -> owner
  std::map<uint32_t, MemoryRegion> mrs_;
  uint32_t next_pd_ = 1;
  uint32_t next_mr_ = 1;
  std::minstd_rand key_bits_;
};

}  // namespace xroce::device
