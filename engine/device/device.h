// One xroce device: the model a NIC's firmware keeps for a netdev — its port, GID table,
// protection domains, memory regions, CQs, QPs, SRQs and AHs — and who owns each object.
//
// Threading: a Device is owned by the daemon's control thread; nothing here locks.
// Ownership: every object belongs to one client (a verbs context, i.e. one control
// connection); a client can name only its own objects, and release_client() drops them all.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "device/gid_table.h"
#include "device/objects.h"
#include "device/port.h"
#include "transport/memory.h"
#include "wire/result.h"

namespace xroce::device {

using wire::Err;
using wire::Result;

// What the device holds in all, modelled on rxe's rxe_param.h; the model enforces the object
// counts, the transport the rest. The counts are what the daemon can really hold: every QP, CQ
// and SRQ is a shared-memory region the daemon maps, and a process may have at most
// vm.max_map_count (65530 by default) mappings, which kMaxMappedRegions leaves room within.
struct DeviceLimits {
  uint32_t max_pd = 64 * 1024;
  uint32_t max_mr = 256 * 1024;
  uint64_t max_mr_size = uint64_t{1} << 40;
  uint64_t page_size_cap = 0xfffff000;  // 4 KiB and up
  uint32_t max_qp = 0x4000;
  uint32_t max_qp_wr = 0x4000;
  uint32_t max_sge = 32;
  uint32_t max_cq = 0x4000;
  uint32_t max_cqe = (1u << 15) - 1;
  uint32_t max_qp_rd_atom = 128;  // outstanding RDMA READ/atomic per QP, both directions
  uint32_t max_srq = 0x1000;
  uint32_t max_srq_wr = 0x4000;
  uint32_t max_srq_sge = 27;
  uint32_t max_ah = 0x8000;
  uint32_t max_inline_data = queues::kMaxInlineData;
  uint32_t max_msg_bytes = 1u << 31;  // IBA C9-94
  uint16_t max_pkeys = 1;             // the default P_Key only
  uint32_t vendor_id = 0xffffff;      // no IEEE OUI of our own; rxe reports the same
  uint32_t max_mw = 0x10000;          // rxe's RXE_MAX_MW
  uint32_t max_xrcd = 0x10000;
  uint32_t max_advise_sge = 32;
};

// Regions (QP, CQ and SRQ rings, shared-mapping MRs) the daemon maps at most, per device; a
// registration beyond it is reached through the client's mem file instead of a mapping. The
// device limits keep the rings alone well below it.
inline constexpr uint32_t kMaxMappedRegions = 48 * 1024;

// What one client (a verbs context) may hold: a user cannot take the device from the others.
// ibv_query_device tells each context the smaller of this and the device's limits, which one
// process reaches without needing a descriptor per object. Beyond a count, creation fails with
// ENOMEM, as a device out of resources answers; registered bytes are bounded by the caller's
// RLIMIT_MEMLOCK (MrRequest::byte_limit), as the kernel's ib_umem_get bounds pinned pages.
struct ClientQuota {
  uint32_t max_pd = 1024;
  uint32_t max_mr = 64 * 1024;
  uint32_t max_qp = 4096;
  uint32_t max_cq = 4096;
  uint32_t max_srq = 1024;
  uint32_t max_ah = 16 * 1024;
  uint32_t max_mw = 16 * 1024;
  uint32_t max_xrcd = 1024;
};

// How many objects one client holds (and bytes it pinned: see pinned_bytes).
struct OwnedCounts {
  uint32_t pds = 0;
  uint32_t mrs = 0;
  uint32_t qps = 0;
  uint32_t cqs = 0;
  uint32_t srqs = 0;
  uint32_t ahs = 0;
  uint32_t mws = 0;
  uint32_t xrcds = 0;  // domains this client has open
  uint64_t mr_bytes = 0;
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

// Reaches the memory of the client (a verbs context, and the process image behind it) that owns
// a new protection domain (docs/ARCHITECTURE.md decision 5); the daemon supplies
// engine/device/dma's implementation. One is made per protection domain; nullptr means the client
// has none.
using MemoryAccessFactory = std::function<std::unique_ptr<transport::MemoryAccess>(ClientId owner)>;

struct ProtectionDomain {
  ClientId owner = 0;
  int pid = 0;
  std::unique_ptr<transport::MemoryAccess> memory;
  // Issues the lkeys/rkeys the application sees, and is the table the transport checks.
  std::unique_ptr<transport::MemoryRegionTable> regions;
};

struct CqRequest {
  uint32_t cqe;
  uint32_t channel;
  uint32_t comp_vector;
  uint64_t cookie;
};

struct QpRequest {
  uint32_t pd;
  uint32_t send_cq;
  uint32_t recv_cq;
  uint32_t srq;
  uint32_t qp_type;  // ibv_qp_type
  bool sq_sig_all;
  control::QpCap cap;
  uint64_t cookie;
  uint32_t xrcd = 0;     // XRC_RECV
  int doorbell_fd = -1;  // the owner context's doorbell (not owned)
  // The owner context's page and the QP's bit in it (include/xroce/queues.h), or none.
  queues::ContextPage* ready_page = nullptr;
  uint32_t ready_bit = queues::kNoReadyBit;
};

struct SrqRequest {
  uint32_t pd;
  control::SrqAttr attr;
  uint64_t cookie;
  uint32_t xrcd = 0;  // XRC SRQ: its domain and CQ
  uint32_t cq = 0;
  int doorbell_fd = -1;  // the owner context's doorbell (not owned)
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
  uint64_t byte_limit = 0;  // what the client may register in all; 0: no limit
};

// ibv_rereg_mr's changes (ibv_rereg_mr_flags).
struct ReregRequest {
  uint32_t flags;  // kReregTranslation | kReregPd | kReregAccess
  uint32_t pd;
  uint32_t access;
  uint64_t addr;
  uint64_t length;
  uint64_t byte_limit = 0;  // as MrRequest::byte_limit
};
inline constexpr uint32_t kReregTranslation = 1;
inline constexpr uint32_t kReregPd = 2;
inline constexpr uint32_t kReregAccess = 4;

struct MwKeys {
  uint32_t handle;
  uint32_t rkey;
};

// ibv_access_flags in reg_mr: those the device honours, a hint it may ignore, and those it
// knows but lacks the feature for (EOPNOTSUPP, as ib_check_mr_access answers for a feature
// the device lacks): zero-based regions and persistent memory. Any other bit is EINVAL.
inline constexpr uint32_t kAccessLocalWrite = 1;
inline constexpr uint32_t kAccessRemoteWrite = 2;
inline constexpr uint32_t kAccessRemoteRead = 4;
inline constexpr uint32_t kAccessRemoteAtomic = 8;
inline constexpr uint32_t kAccessMwBind = 1u << 4;
inline constexpr uint32_t kAccessZeroBased = 1u << 5;
inline constexpr uint32_t kAccessOnDemand = 1u << 6;
inline constexpr uint32_t kAccessHugetlb = 1u << 7;          // a hint: the buffer is in huge pages
inline constexpr uint32_t kAccessFlushGlobal = 1u << 8;      // rdma-core v45
inline constexpr uint32_t kAccessFlushPersistent = 1u << 9;  // rdma-core v45
inline constexpr uint32_t kAccessSupported =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic |
    kAccessMwBind | kAccessOnDemand | kAccessHugetlb | kAccessFlushGlobal;
// Nothing registered is persistent memory (no FLUSH_PERSISTENT); no zero-based regions.
inline constexpr uint32_t kAccessNotSupported = kAccessZeroBased | kAccessFlushPersistent;
// ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND): implicit ODP, the whole address space.
inline constexpr uint64_t kImplicitOdpLength = ~uint64_t{0};
// What a registration counts against the client's byte limit: its length, or nothing for an
// on-demand region, which pins nothing (the kernel's ib_umem_odp charges no locked pages).
inline constexpr uint64_t pinned_bytes(uint32_t access, uint64_t length) {
  return (access & kAccessOnDemand) != 0 ? 0 : length;
}

// What the device offers beyond ibv_device_attr (ibv_query_device_ex), stated once for
// query_device: device_cap_flags_ex bits (the kernel's IB_UVERBS_DEVICE_*) and the ODP caps.
inline constexpr uint64_t kCapRcRnrNakGen = 1ull << 12;
inline constexpr uint64_t kCapSrqResize = 1ull << 13;
inline constexpr uint64_t kCapPortActiveEvent = 1ull << 10;
inline constexpr uint64_t kCapMemWindow = 1ull << 17;
inline constexpr uint64_t kCapXrc = 1ull << 20;
inline constexpr uint64_t kCapMemWindowType2B = 1ull << 24;
inline constexpr uint64_t kCapFlushGlobal = 1ull << 38;
inline constexpr uint64_t kCapAtomicWrite = 1ull << 40;
// Everything the device does, as a verbs program probes it: no FLUSH_PERSISTENT (nothing
// registered is persistent memory), no memory-management extensions (no fast registration).
inline constexpr uint64_t kDeviceCapFlags = kCapRcRnrNakGen | kCapSrqResize | kCapPortActiveEvent |
                                            kCapMemWindow | kCapXrc | kCapMemWindowType2B |
                                            kCapFlushGlobal | kCapAtomicWrite;
inline constexpr uint32_t kOdpSupport = 1;          // IBV_ODP_SUPPORT
inline constexpr uint32_t kOdpSupportImplicit = 2;  // IBV_ODP_SUPPORT_IMPLICIT
inline constexpr uint32_t kOdpSend = 1u << 0;       // ibv_odp_transport_cap_bits
inline constexpr uint32_t kOdpRecv = 1u << 1;
inline constexpr uint32_t kOdpWrite = 1u << 2;
inline constexpr uint32_t kOdpRead = 1u << 3;
inline constexpr uint32_t kOdpAtomic = 1u << 4;
inline constexpr uint32_t kOdpSrqRecv = 1u << 5;
// Nothing is pinned, so every operation works on ODP regions, explicit or implicit.
inline constexpr uint32_t kOdpGeneralCaps = kOdpSupport | kOdpSupportImplicit;
inline constexpr uint32_t kOdpRcCaps =
    kOdpSend | kOdpRecv | kOdpWrite | kOdpRead | kOdpAtomic | kOdpSrqRecv;
inline constexpr uint32_t kOdpUcCaps = kOdpSend | kOdpRecv | kOdpWrite | kOdpSrqRecv;
inline constexpr uint32_t kOdpUdCaps = kOdpSend | kOdpRecv | kOdpSrqRecv;
inline constexpr uint32_t kOdpXrcCaps = kOdpSend | kOdpWrite | kOdpRead | kOdpAtomic | kOdpSrqRecv;
// Completion timestamps are CLOCK_MONOTONIC nanoseconds: a 1 GHz clock that never wraps.
inline constexpr uint64_t kHcaCoreClockKhz = 1'000'000;
inline constexpr uint64_t kCompletionTimestampMask = ~uint64_t{0};

class Device {
 public:
  // `seed` places the first QPN; `key_bits` gives the memory keys their random bits (see
  // transport::MemoryRegionTable; without it keys are reproducible, for tests).
  Device(std::string name, NetdevState netdev, uint32_t seed, MemoryAccessFactory memory = nullptr,
         transport::KeyBits key_bits = nullptr);

  const std::string& name() const { return name_; }
  const NetdevState& netdev() const { return netdev_; }
  // The port's active IB MTU (ibv_query_port, and the bound of every QP's packets): the largest
  // whose packets fit the netdev's MTU and the largest frame the data path carries.
  uint32_t active_mtu() const;
  // The largest Ethernet frame the data path's ports carry, 0 for no limit of their own (an
  // AF_XDP port without multi-buffer carries one UMEM chunk: 3,840 bytes).
  void set_port_frame_limit(std::size_t bytes) { port_frame_limit_ = bytes; }
  const GidTable& gids() const { return gids_; }
  const DeviceLimits& limits() const { return limits_; }
  const ClientQuota& client_quota() const { return quota_; }
  OwnedCounts owned_counts(ClientId owner) const;
  // Rings the daemon maps for this device (QPs, CQs, SRQs): with the MRs it maps, at most
  // kMaxMappedRegions.
  std::size_t mapped_rings() const { return qps_.size() + cqs_.size() + srqs_.size(); }
  uint64_t node_guid() const { return node_guid_; }

  // Returns true if anything visible (state, MTU, speed, GIDs) changed.
  bool update_netdev(const NetdevState& netdev);
  bool update_addresses(const std::vector<IpAddress>& addresses);

  // `pid` is the process whose memory the PD's regions describe.
  Result<uint32_t, int> alloc_pd(ClientId owner, int pid);
  // 0, or EINVAL (not the caller's PD), or EBUSY (MRs still use it), as uverbs answers.
  int dealloc_pd(ClientId owner, uint32_t pd);
  Result<MrKeys, int> reg_mr(ClientId owner, const MrRequest& request);
  int dereg_mr(ClientId owner, uint32_t mr);
  // device_windows.cc: ibv_rereg_mr, memory windows, ibv_advise_mr.
  Result<MrKeys, int> rereg_mr(ClientId owner, uint32_t mr, const ReregRequest& request);
  Result<MwKeys, int> alloc_mw(ClientId owner, uint32_t pd, uint32_t type);
  int dealloc_mw(ClientId owner, uint32_t mw);
  // 0, or EINVAL for an SGE no region of the PD covers with LOCAL_WRITE... as a prefetch would
  // need (the pages themselves are reached on access: nothing is pinned, nothing faulted).
  int advise_mr(ClientId owner, uint32_t pd, uint32_t advice,
                std::span<const control::AdviseSge> sges);
  // device_xrc.cc: XRC domains and ibv_open_qp. `file` is the (st_dev, st_ino) of the file
  // naming a shared domain, nullopt for a private one; oflags as ibv_xrcd_init_attr.
  Result<uint32_t, int> open_xrcd(ClientId owner, std::optional<std::pair<uint64_t, uint64_t>> file,
                                  uint32_t oflags);
  int close_xrcd(ClientId owner, uint32_t xrcd);
  XrcDomainObject* xrcd(ClientId owner, uint32_t handle);
  Result<uint32_t, int> open_qp(ClientId owner, uint32_t xrcd, uint32_t qpn, uint64_t cookie);
  int resize_srq(ClientId owner, uint32_t srq, uint32_t max_wr);

  // Errors as uverbs gives them: EINVAL for a bad handle or attribute (including another
  // client's handle), ENOMEM beyond the device's limits or the client's quota, EBUSY
  // destroying an object in use.
  Result<uint32_t, int> create_cq(ClientId owner, const CqRequest& request);
  int resize_cq(ClientId owner, uint32_t cq, uint32_t cqe);
  int destroy_cq(ClientId owner, uint32_t cq);
  Result<uint32_t, int> create_qp(ClientId owner, const QpRequest& request);
  int modify_qp(ClientId owner, uint32_t qp, const control::QpAttr& attr, uint32_t mask);
  Result<control::QueryQpReply, int> query_qp(ClientId owner, uint32_t qp);
  int destroy_qp(ClientId owner, uint32_t qp);
  Result<uint32_t, int> create_srq(ClientId owner, const SrqRequest& request);
  int modify_srq(ClientId owner, uint32_t srq, const control::SrqAttr& attr, uint32_t mask);
  Result<control::SrqAttr, int> query_srq(ClientId owner, uint32_t srq) const;
  int destroy_srq(ClientId owner, uint32_t srq);
  Result<uint32_t, int> create_ah(ClientId owner, uint32_t pd, const control::AhAttr& attr);
  int destroy_ah(ClientId owner, uint32_t ah);

  // The owner's object, or nullptr (not found, or someone else's).
  CompletionQueue* cq(ClientId owner, uint32_t handle);
  QueuePair* qp(ClientId owner, uint32_t handle);
  SharedReceiveQueue* srq(ClientId owner, uint32_t handle);
  const AddressHandle* ah(uint32_t handle) const;

  void release_client(ClientId owner);

  // From now on new QPs run on `runner` (not owned; nullptr: the device keeps them).
  void set_runner(QpRunner* runner) { runner_ = runner; }
  // Runs fn on the QP's transport core, wherever it lives.
  void with_core(QueuePair& qp, const std::function<void(transport::Qp&)>& fn);

  // Request PSNs all of this device's RC QPs may have unacknowledged together: a quarter of
  // the frames a peer's port holds received, so that a peer whose worker falls behind for a
  // while still has room for its own requests' ACKs and responses and other devices' traffic
  // instead of dropping and making every QP go back N at once. A device assumes its peers' ports
  // are of its own kind and size (set_port_receive_frames); kInflightBudgetPsns until its port
  // tells, and where it cannot: a quarter of an AF_XDP port's receive ring at a 4096-byte MTU
  // (AfXdpPortConfig::umem_frames / 2 = 2,048 chunks of 4 KiB, and such a frame takes two: 1,024
  // frames). Measured there between two namespaces (ib_write_bw -q 1000, 4096-byte MTU): 512 once
  // let the peer's ring drop (157 frames in one run), 256 did not; one QP's window (128) is below
  // it.
  static constexpr std::uint32_t kInflightBudgetPsns = 256;
  // The data path's ports hold `frames` of their largest received (Datapath::receive_frames, 0:
  // not known): the in-flight budget becomes a quarter of that, at least a grant.
  void set_port_receive_frames(std::size_t frames);
  // What all of this device's RC QPs may have unacknowledged together (kInflightBudgetPsns,
  // set_port_receive_frames).
  transport::InflightBudget& inflight_budget() { return *inflight_budget_; }
  const std::map<uint32_t, MemoryRegion>& memory_regions() const { return mrs_; }
  const std::map<uint32_t, std::unique_ptr<QueuePair>>& queue_pairs() const { return qps_; }
  std::size_t pd_count() const { return pds_.size(); }
  std::size_t cq_count() const { return cqs_.size(); }

 private:
  ProtectionDomain* owned_pd(ClientId owner, uint32_t pd);
  uint32_t next_qpn();
  // Tells the provider not to ring for posts to a new SRQ ring where workers run the QPs.
  void skip_srq_doorbells(const queues::Ring& ring) const;
  // The client's counts, created on first use.
  OwnedCounts& counts(ClientId owner) { return owned_[owner]; }
  // A client's part in a domain ends (close_xrcd, release_client): the domain goes with its
  // last opener.
  void leave_xrcd(ClientId owner, uint32_t handle);
  int check_qp_request(ClientId owner, const QpRequest& r);
  void forget_xrc_srq(SharedReceiveQueue& srq, uint32_t handle);
  // Runs fn where the XRC domain's target QPs run (their worker), or here if it has none.
  void on_xrc_worker(uint32_t xrcd, const std::function<void()>& fn);

  std::string name_;
  NetdevState netdev_;
  std::size_t port_frame_limit_ = 0;
  GidTable gids_;
  DeviceLimits limits_;
  ClientQuota quota_;
  std::map<ClientId, OwnedCounts> owned_;
  uint64_t node_guid_;
  MemoryAccessFactory memory_;
  transport::KeyBits key_bits_;
  std::shared_ptr<transport::InflightBudget> inflight_budget_ =
      std::make_shared<transport::InflightBudget>(kInflightBudgetPsns);
  QpRunner* runner_ = nullptr;
  std::map<uint32_t, ProtectionDomain> pds_;
  std::map<uint32_t, MemoryRegion> mrs_;
  std::map<uint32_t, std::unique_ptr<CompletionQueue>> cqs_;
  std::map<uint32_t, std::unique_ptr<QueuePair>> qps_;
  std::map<uint32_t, std::unique_ptr<SharedReceiveQueue>> srqs_;
  std::map<uint32_t, AddressHandle> ahs_;
  struct MemoryWindowObject {
    ClientId owner = 0;
    uint32_t pd = 0;
    uint32_t rkey = 0;  // its index in the PD's key table
  };
  std::map<uint32_t, MemoryWindowObject> mws_;
  std::map<uint32_t, std::unique_ptr<XrcDomainObject>> xrcds_;
  // Handles ibv_open_qp gave: another client's name for an XRC_RECV QP of a shared domain.
  struct OpenedQp {
    ClientId owner = 0;
    uint32_t target = 0;  // the QP's own handle
  };
  std::map<uint32_t, OpenedQp> opened_qps_;
  uint32_t next_mw_ = 1;
  uint32_t next_xrcd_ = 1;
  uint32_t next_pd_ = 1;
  uint32_t next_mr_ = 1;
  uint32_t next_cq_ = 1;
  uint32_t next_qp_ = 1;
  uint32_t next_srq_ = 1;
  uint32_t next_ah_ = 1;
  uint32_t qpn_cursor_ = 0;
};

}  // namespace xroce::device
