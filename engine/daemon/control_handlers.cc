// The handlers of the context ops (include/xroce/control.h): hello, attributes, PDs, MRs,
// completion channels, and the device ops behind `xroce link`.
#include <sys/stat.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "daemon/control_ops.h"
#include "xroce/control_message.h"
#include "xroce/cpu_list.h"
#include "xroce/proc_maps.h"

namespace xroce::daemon {

namespace {

constexpr unsigned kCapIpcLock = 14;  // linux/capability.h CAP_IPC_LOCK
constexpr uint32_t kWriteAccess =
    device::kAccessLocalWrite | device::kAccessRemoteWrite | device::kAccessRemoteAtomic;

const char* port_kind_name(control::PortKind kind) {
  return kind == control::PortKind::udp ? "udp" : "afxdp";
}

// True if the process's mappings over [addr, addr+length) are all of `memfd` (same inode), at
// the offsets of a mapping of the whole memfd placed at addr: what share_region (provider) made.
bool memfd_backs_range(const std::string& maps, uint64_t addr, uint64_t length, int memfd) {
  struct stat st {};
  if (fstat(memfd, &st) != 0) return false;
  return proc::covers(maps, addr, length, [&](const proc::Mapping& m) {
    return m.start >= addr && m.inode == st.st_ino && m.offset == m.start - addr && m.shared();
  });
}

// Reads the caller's own maps into `maps` and checks that [addr, addr+length) is memory it can
// read (and write, where `access` asks for writes). A range the device refuses anyway (empty,
// wrapping) passes here, to be refused with EINVAL there.
bool caller_maps(const device::ProcessMemory& memory, uint64_t addr, uint64_t length,
                 uint32_t access, std::string& maps) {
  if (memory.image().read_maps(maps) != 0) return false;
  if (length == 0 || addr + length <= addr) return true;
  const bool writes = (access & kWriteAccess) != 0;
  return proc::covers(maps, addr, length, [writes](const proc::Mapping& m) {
    return m.readable() && (!writes || m.writable());
  });
}

// What the caller may register in all: its RLIMIT_MEMLOCK, unless it has CAP_IPC_LOCK, as the
// kernel's ib_umem_get charges pinned pages. 0 means no limit. Read from /proc (prlimit() on
// another process would need CAP_SYS_RESOURCE, which the daemon may not have); a limit that
// cannot be read refuses the registration (1 byte).
uint64_t registration_limit_bytes(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream status(dir + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const uint64_t caps = std::strtoull(line.c_str() + 7, nullptr, 16);
    if ((caps & (uint64_t{1} << kCapIpcLock)) != 0) return 0;
  }
  std::ifstream limits(dir + "/limits");
  for (std::string line; std::getline(limits, line);) {
    // "Max locked memory         8388608              8388608              bytes"
    if (line.rfind("Max locked memory", 0) != 0) continue;
    std::istringstream fields(line.substr(17));
    std::string soft;
    fields >> soft;
    if (soft == "unlimited") return 0;
    const uint64_t bytes = std::strtoull(soft.c_str(), nullptr, 10);
    return bytes == 0 ? 1 : bytes;
  }
  return 1;
}

// Registered regions of the context's device that the daemon maps.
std::size_t shared_mappings(const OpContext& ctx) {
  std::size_t count = 0;
  for (const auto& [fd, s] : ctx.sessions.by_connection())
    count += s->device == ctx.session.device ? s->shared_mrs.size() : 0;
  return count;
}

}  // namespace

void release_context(Devices& devices, Session& session) {
  ServedDevice* served = devices.find(session.device);
  if (served != nullptr) {
    // Shared mappings first, while the PDs still hold the process's memory.
    if (const auto memory = served->memory->find(session.id)) {
      for (const auto& [handle, addr] : session.shared_mrs)
        memory->remove_shared(addr);
    }
    served->model->release_client(session.id);
    served->memory->detach(session.id);
  }
  session.shared_mrs.clear();
  session.device.clear();
}

namespace ops {

// A context: the event socket and the caller's own image (engine/device/dma.h), checked to be
// what they claim; the reply carries the context's doorbell and its page of ready bits
// (include/xroce/queues.h).
Reply hello(OpContext& ctx, const control::HelloRequest& request) {
  Fd event = ctx.message.take(0);
  Fd mem = ctx.message.take(1);
  Fd maps = ctx.message.take(2);
  if (!is_socket(event.get()) || !is_image_of(ctx.session.peer.pid(), mem.get(), maps.get())) {
    return Reply::error(EINVAL);
  }
  const std::string name = control::bounded_name(request.ibdev, sizeof(request.ibdev));
  ServedDevice* served = ctx.devices.find(name);
  if (served == nullptr) return Reply::error(ENODEV);
  auto doorbell = device::create_doorbell();
  if (!doorbell) return Reply::error(doorbell.error());
  auto page = device::SharedRegion::create("xroce-context", sizeof(queues::ContextPage));
  if (!page) return Reply::error(page.error());
  new (page->base()) queues::ContextPage{};
  Fd pidfd = ctx.session.peer.dup_pidfd();
  if (!pidfd.valid()) return Reply::error(errno);
  served->memory->attach(ctx.session.id, ctx.session.peer.pid(), std::move(pidfd), std::move(mem),
                         std::move(maps));
  ctx.session.device = name;
  ctx.session.event_socket = std::move(event);
  ctx.session.doorbell = std::move(*doorbell);
  ctx.session.page = std::move(*page);
  Reply reply{0, control::body_bytes(control::HelloReply{ctx.devices.index_of(name)}), {}, {}};
  reply.fds.emplace_back(fcntl(ctx.session.doorbell.get(), F_DUPFD_CLOEXEC, 0));
  if (!reply.fds.back().valid()) return Reply::error(errno);
  reply.fds.push_back(ctx.session.page.take_fd());
  return reply;
}

// The channel's fd lives in the application (its own socketpair, made by the provider); the
// daemon keeps the other end to send completion events on, for as long as the context lives.
Reply create_comp_channel(OpContext& ctx) {
  Fd channel = ctx.message.take(0);
  if (!is_socket(channel.get())) return Reply::error(EINVAL);
  if (ctx.session.channels.size() >= Sessions::kMaxChannelsPerContext) return Reply::error(EMFILE);
  const uint32_t handle = ctx.session.next_channel++;
  ctx.session.channels.emplace(handle, std::move(channel));
  return {0, control::body_bytes(control::HandleReply{handle}), {}, {}};
}

Reply query_device(OpContext& ctx) {
  const device::Device& dev = ctx.device();
  const device::DeviceLimits& limits = dev.limits();
  // What this context can get: the device's limits within the context's quota.
  const device::ClientQuota& quota = dev.client_quota();
  control::DeviceAttr attr{};
  std::snprintf(attr.fw_ver, sizeof(attr.fw_ver), "%s", device::kFirmwareVersion);
  attr.node_guid = htobe64(dev.node_guid());
  attr.sys_image_guid = attr.node_guid;
  attr.max_mr_size = limits.max_mr_size;
  attr.page_size_cap = limits.page_size_cap;
  attr.vendor_id = limits.vendor_id;
  attr.max_qp = std::min(limits.max_qp, quota.max_qp);
  attr.max_qp_wr = limits.max_qp_wr;
  attr.device_cap_flags = static_cast<uint32_t>(device::kDeviceCapFlags);
  attr.device_cap_flags_ex = device::kDeviceCapFlags;
  attr.max_mw = limits.max_mw;
  attr.odp_general_caps = device::kOdpGeneralCaps;
  attr.odp_rc_caps = device::kOdpRcCaps;
  attr.odp_uc_caps = device::kOdpUcCaps;
  attr.odp_ud_caps = device::kOdpUdCaps;
  attr.odp_xrc_caps = device::kOdpXrcCaps;
  attr.completion_timestamp_mask = device::kCompletionTimestampMask;
  attr.hca_core_clock_khz = device::kHcaCoreClockKhz;
  attr.max_sge = limits.max_sge;
  attr.max_cq = std::min(limits.max_cq, quota.max_cq);
  attr.max_cqe = limits.max_cqe;
  attr.max_mr = std::min(limits.max_mr, quota.max_mr);
  attr.max_pd = std::min(limits.max_pd, quota.max_pd);
  attr.max_qp_rd_atom = limits.max_qp_rd_atom;
  attr.max_qp_init_rd_atom = limits.max_qp_rd_atom;
  attr.max_srq = std::min(limits.max_srq, quota.max_srq);
  attr.max_srq_wr = limits.max_srq_wr;
  attr.max_srq_sge = limits.max_srq_sge;
  attr.max_ah = std::min(limits.max_ah, quota.max_ah);
  attr.atomic_cap = IBV_ATOMIC_HCA;
  attr.max_pkeys = limits.max_pkeys;
  attr.phys_port_cnt = 1;
  return {0, control::body_bytes(attr), {}, {}};
}

Reply query_port(OpContext& ctx, const control::PortRequest& request) {
  const device::Device& dev = ctx.device();
  if (request.port_num != 1) return Reply::error(EINVAL);
  const auto& netdev = dev.netdev();
  const auto rate = device::link_rate_for(netdev.speed_mbps);
  control::PortAttr attr{};
  attr.state = device::port_state(netdev);
  attr.max_mtu = device::kIbMtu4096;
  attr.active_mtu = dev.active_mtu();
  attr.gid_tbl_len = static_cast<uint32_t>(dev.gids().size());
  attr.port_cap_flags = IBV_PORT_CM_SUP;
  attr.max_msg_sz = dev.limits().max_msg_bytes;
  attr.pkey_tbl_len = dev.limits().max_pkeys;
  attr.active_width = rate.width;
  attr.active_speed = rate.speed;
  attr.phys_state = device::phys_state(netdev);
  attr.link_layer = IBV_LINK_LAYER_ETHERNET;
  return {0, control::body_bytes(attr), {}, {}};
}

Reply alloc_pd(OpContext& ctx) {
  auto pd = ctx.device().alloc_pd(ctx.session.id, ctx.session.peer.pid());
  if (!pd) return Reply::error(pd.error());
  return {0, control::body_bytes(control::HandleReply{*pd}), {}, {}};
}

Reply dealloc_pd(OpContext& ctx, const control::HandleRequest& request) {
  return Reply::error(ctx.device().dealloc_pd(ctx.session.id, request.handle));
}

// Registered memory (docs/ARCHITECTURE.md decision 5). A real device pins the pages it registers
// and fails with EFAULT when they are not mapped; xroce reaches them later through the caller's own
// /proc/self/mem, so it checks, in the caller's own maps, that [addr, addr+length) is memory the
// caller can read (and write, where the access flags ask for writes). Only the caller itself
// gets here (the session's opener, its image alive): a refusal tells it nothing it could not
// read in its own /proc/self/maps. With a memfd from the provider the region is reached through
// the daemon's mapping of it, once the daemon has checked the memfd really is what the caller
// has mapped over the whole range; without one, or if it cannot be mapped, through the mem file.
// On-demand paging (IBV_ACCESS_ON_DEMAND): nothing is looked at now (implicit ODP names the
// whole address space); each access later reaches only what the process has mapped then.
Reply reg_mr(OpContext& ctx, const control::RegMrRequest& request) {
  Fd memfd = ctx.message.take(0);
  const auto memory = ctx.served->memory->find(ctx.session.id);
  if (memory == nullptr) return Reply::error(EFAULT);
  const bool on_demand = (request.access & device::kAccessOnDemand) != 0;
  if (on_demand) memfd.reset();  // reached in place, never re-backed
  std::string maps;
  if (!on_demand && !caller_maps(*memory, request.addr, request.length, request.access, maps)) {
    return Reply::error(EFAULT);
  }
  auto keys = ctx.device().reg_mr(
      ctx.session.id, device::MrRequest{request.pd_handle, request.addr, request.length,
                                        request.iova, request.access, ctx.session.peer.pid(),
                                        registration_limit_bytes(ctx.session.peer.pid())});
  if (!keys) return Reply::error(keys.error());
  auto dma = control::MrDma::kCrossMemory;
  if (memfd.valid() && memfd_backs_range(maps, request.addr, request.length, memfd.get()) &&
      ctx.device().mapped_rings() + shared_mappings(ctx) < device::kMaxMappedRegions &&
      memory->add_shared(memfd.release(), request.addr, request.length) == 0) {
    ctx.session.shared_mrs.emplace(keys->handle, request.addr);
    dma = control::MrDma::kSharedMapping;
  }
  return {0,
          control::body_bytes(control::RegMrReply{keys->handle, keys->lkey, keys->rkey,
                                                  static_cast<uint32_t>(dma)}),
          {},
          {}};
}

// The region stops being reached through the daemon's mapping of its memfd. Called after its
// keys are gone or changed, so no new access finds the mapping (one in flight keeps it alive).
void unshare_region(OpContext& ctx, uint32_t mr_handle) {
  const auto shared = ctx.session.shared_mrs.find(mr_handle);
  if (shared == ctx.session.shared_mrs.end()) return;
  if (const auto memory = ctx.served->memory->find(ctx.session.id))
    memory->remove_shared(shared->second);
  ctx.session.shared_mrs.erase(shared);
}

Reply dereg_mr(OpContext& ctx, const control::HandleRequest& request) {
  const int err = ctx.device().dereg_mr(ctx.session.id, request.handle);
  if (err == 0) unshare_region(ctx, request.handle);
  return Reply::error(err);
}

// ibv_rereg_mr. A region that moves (CHANGE_TRANSLATION) leaves its shared mapping behind and is
// reached through the caller's mem file from then on; the new range is checked in the caller's
// maps as reg_mr checks it, and the registration limit applies to its new length.
Reply rereg_mr(OpContext& ctx, const control::ReregMrRequest& request) {
  device::Device& dev = ctx.device();
  const auto memory = ctx.served->memory->find(ctx.session.id);
  if (memory == nullptr) return Reply::error(EFAULT);
  const bool moves = (request.flags & device::kReregTranslation) != 0;
  if (moves) {
    const auto& regions = dev.memory_regions();
    const auto it = regions.find(request.mr_handle);
    uint32_t access = 0;
    if (it != regions.end() && it->second.owner == ctx.session.id) access = it->second.access;
    if ((request.flags & device::kReregAccess) != 0) access = request.access;
    std::string maps;
    if ((access & device::kAccessOnDemand) == 0 &&
        !caller_maps(*memory, request.addr, request.length, access, maps)) {
      return Reply::error(EFAULT);
    }
  }
  auto keys = dev.rereg_mr(
      ctx.session.id, request.mr_handle,
      device::ReregRequest{request.flags, request.pd, request.access, request.addr, request.length,
                           registration_limit_bytes(ctx.session.peer.pid())});
  if (!keys) return Reply::error(keys.error());
  if (moves) unshare_region(ctx, request.mr_handle);
  const bool shared = ctx.session.shared_mrs.count(request.mr_handle) != 0;
  const auto dma = shared ? control::MrDma::kSharedMapping : control::MrDma::kCrossMemory;
  return {0,
          control::body_bytes(control::RegMrReply{keys->handle, keys->lkey, keys->rkey,
                                                  static_cast<uint32_t>(dma)}),
          {},
          {}};
}

Reply link_add(OpContext& ctx, const control::LinkAddRequest& request) {
  return Reply::error(ctx.devices.add(request));
}

// The device goes as a NIC that is removed: its contexts are closed, and each client's provider
// reports IBV_EVENT_DEVICE_FATAL and flushes its outstanding work (provider/device_death.cc).
Reply link_del(OpContext& ctx, const control::LinkDelRequest& request) {
  const std::string name = control::bounded_name(request.name, sizeof(request.name));
  if (ctx.devices.find(name) == nullptr) return Reply::error(ENODEV);
  for (auto& [fd, session] : ctx.sessions.by_connection()) {
    if (session->device != name) continue;
    release_context(ctx.devices, *session);
    session->closing = true;
  }
  ctx.devices.remove(name);
  return Reply::error(0);
}

// Every user sees every device; of its regions and contexts, only its own (root: all).
Reply link_show(OpContext& ctx) {
  nlohmann::json out = nlohmann::json::array();
  int index = 0;
  const uid_t viewer = ctx.sender.uid;
  for (const auto& [name, served] : ctx.devices.all()) {
    const auto& dev = *served.model;
    const auto& netdev = dev.netdev();
    nlohmann::json gids = nlohmann::json::array();
    for (std::size_t i = 0; i < dev.gids().size(); ++i) {
      if (device::is_zero(dev.gids().at(i))) continue;
      gids.push_back(
          {{"index", i}, {"gid", device::gid_display_text(dev.gids().at(i))}, {"type", "RoCE v2"}});
    }
    nlohmann::json regions = nlohmann::json::array();
    for (const auto& [handle, mr] : dev.memory_regions()) {
      if (!visible_to(ctx.sessions, viewer, mr.owner)) continue;
      regions.push_back({{"handle", handle},
                         {"pid", mr.pid},
                         {"addr", mr.addr},
                         {"length", mr.length},
                         {"access", mr.access},
                         {"lkey", mr.lkey},
                         {"rkey", mr.rkey}});
    }
    int contexts = 0;
    std::size_t pds = 0;
    for (const auto& [fd, s] : ctx.sessions.by_connection()) {
      if (s->device != name || !visible_to(ctx.sessions, viewer, s->id)) continue;
      ++contexts;
      pds += dev.owned_counts(s->id).pds;
    }
    const bool active = device::port_state(netdev) == device::kPortActive;
    out.push_back({{"ifindex", index++},
                   {"ifname", name},
                   {"port", 1},
                   {"state", active ? "ACTIVE" : "DOWN"},
                   {"physical_state", active ? "LINK_UP" : "DISABLED"},
                   {"netdev", netdev.name},
                   {"netdev_index", netdev.ifindex},
                   {"netdev_up", netdev.up},
                   {"netdev_carrier", netdev.carrier},
                   {"uverbs", served.uverbs},
                   {"mtu", device::ib_mtu_bytes(dev.active_mtu())},
                   {"port_kind", port_kind_name(served.port)},
                   {"queues", served.queues},
                   {"cpus", format_cpu_list(served.cpus)},
                   {"datapath", served.runner ? served.runner->datapath().status().port_mode
                                              : std::string("none")},
                   {"workers", served.runner ? served.runner->datapath().worker_count() : 0},
                   {"contexts", contexts},
                   {"pds", pds},
                   {"mrs", regions.size()},
                   {"memory_regions", regions},
                   {"gids", gids}});
  }
  return {0, {}, out.dump(), {}};
}

// The next page of the session's pending text.
Reply text_next(OpContext& ctx) {
  if (ctx.session.pending_text.empty()) return Reply::error(ENOENT);
  return {0, take_text_page(ctx.session), {}, {}};
}

}  // namespace ops
}  // namespace xroce::daemon
