// The request handlers of ControlServer: one per control::Op.
#include <net/if.h>
#include <sys/stat.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "daemon/control_body.h"
#include "daemon/control_server.h"
#include "daemon/fd.h"

namespace xroce::daemon {

namespace {

std::string bounded(const char* text, std::size_t capacity) {
  return std::string(text, strnlen(text, capacity));
}

bool valid_device_name(const std::string& name) {
  if (name.empty() || name.size() >= control::kNameBytes) return false;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '_' && c != '-') return false;
  }
  return true;
}

// True if the process's mappings over [addr, addr+length) are all of `memfd` (same inode), at
// the offsets of a mapping of the whole memfd placed at addr: what share_region (provider) made.
bool memfd_backs_range(pid_t pid, uint64_t addr, uint64_t length, int memfd) {
  struct stat st {};
  if (fstat(memfd, &st) != 0) return false;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  uint64_t covered_to = addr;
  const uint64_t end = addr + length;
  std::string line;
  while (std::getline(maps, line) && covered_to < end) {
    std::istringstream in(line);
    uint64_t lo = 0;
    uint64_t hi = 0;
    uint64_t offset = 0;
    uint64_t inode = 0;
    char dash = 0;
    std::string perms;
    std::string device;
    in >> std::hex >> lo >> dash >> hi >> perms >> offset >> device >> std::dec >> inode;
    if (hi <= covered_to) continue;
    if (lo > covered_to || lo < addr) return false;
    if (inode != st.st_ino || offset != lo - addr || perms.size() < 4 || perms[3] != 's') {
      return false;
    }
    covered_to = hi;
  }
  return covered_to >= end;
}

// The daemon writes events only into sockets the client made for the purpose, never into
// whatever else a client might pass.
bool is_socket(int fd) {
  struct stat st {};
  return fd >= 0 && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

const char* port_kind_name(control::PortKind kind) {
  return kind == control::PortKind::udp ? "udp" : "afxdp";
}

}  // namespace

// A real device pins the pages it registers and fails with EFAULT when they are not mapped;
// xroce reaches them later through the process, so it checks that [addr, addr+length) lies in
// the process's mappings, writable where the access flags ask for writes.
bool ControlServer::range_is_mapped(pid_t pid, uint64_t addr, uint64_t length, bool need_write) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  uint64_t covered_to = addr;
  const uint64_t end = addr + length;
  std::string line;
  while (std::getline(maps, line) && covered_to < end) {
    std::istringstream in(line);
    uint64_t lo = 0;
    uint64_t hi = 0;
    char dash = 0;
    std::string perms;
    in >> std::hex >> lo >> dash >> hi >> perms;
    if (hi <= covered_to || lo > covered_to) continue;
    if (perms.size() < 2 || perms[0] != 'r' || (need_write && perms[1] != 'w')) return false;
    covered_to = hi;
  }
  return covered_to >= end;
}

bool ControlServer::writes_memory(uint32_t access) {
  return (access & (device::kAccessLocalWrite | device::kAccessRemoteWrite |
                    device::kAccessRemoteAtomic)) != 0;
}

ControlServer::Reply ControlServer::hello(Client& client, const std::string& body, int passed_fd) {
  control::HelloRequest request{};
  if (!parse(body, request) || !is_socket(passed_fd) || !client.device.empty()) {
    if (passed_fd >= 0) close(passed_fd);
    return {EINVAL, {}};
  }
  const std::string name = bounded(request.ibdev, sizeof(request.ibdev));
  if (devices_.count(name) == 0) {
    close(passed_fd);
    return {ENODEV, {}};
  }
  client.device = name;
  client.event_fd = passed_fd;
  control::HelloReply reply{
      static_cast<uint32_t>(std::distance(devices_.begin(), devices_.find(name)))};
  return {0, bytes_of(reply)};
}

// The channel's fd lives in the application (its own socketpair, made by the provider); the
// daemon keeps the other end to send completion events on, for as long as the context lives.
ControlServer::Reply ControlServer::create_comp_channel(Client& client, int passed_fd) {
  if (!is_socket(passed_fd)) {
    if (passed_fd >= 0) close(passed_fd);
    return {EINVAL, {}};
  }
  if (device_of(client) == nullptr) {
    close(passed_fd);
    return {ENODEV, {}};
  }
  const uint32_t handle = client.next_channel++;
  client.channels.emplace(handle, passed_fd);
  return {0, bytes_of(control::HandleReply{handle})};
}

ControlServer::Reply ControlServer::query_device(const Client& client) {
  const device::Device* dev = device_of(client);
  if (dev == nullptr) return {ENODEV, {}};
  const device::DeviceLimits& limits = dev->limits();
  control::DeviceAttr attr{};
  std::snprintf(attr.fw_ver, sizeof(attr.fw_ver), "%s", device::kFirmwareVersion);
  attr.node_guid = htobe64(dev->node_guid());
  attr.sys_image_guid = attr.node_guid;
  attr.max_mr_size = limits.max_mr_size;
  attr.page_size_cap = limits.page_size_cap;
  attr.vendor_id = limits.vendor_id;
  attr.max_qp = limits.max_qp;
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
  attr.max_cq = limits.max_cq;
  attr.max_cqe = limits.max_cqe;
  attr.max_mr = limits.max_mr;
  attr.max_pd = limits.max_pd;
  attr.max_qp_rd_atom = limits.max_qp_rd_atom;
  attr.max_qp_init_rd_atom = limits.max_qp_rd_atom;
  attr.max_srq = limits.max_srq;
  attr.max_srq_wr = limits.max_srq_wr;
  attr.max_srq_sge = limits.max_srq_sge;
  attr.max_ah = limits.max_ah;
  attr.atomic_cap = IBV_ATOMIC_HCA;
  attr.max_pkeys = limits.max_pkeys;
  attr.phys_port_cnt = 1;
  return {0, bytes_of(attr)};
}

ControlServer::Reply ControlServer::query_port(const Client& client, const std::string& body) {
  const device::Device* dev = device_of(client);
  control::PortRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request) || request.port_num != 1) return {EINVAL, {}};
  const auto& netdev = dev->netdev();
  const auto rate = device::link_rate_for(netdev.speed_mbps);
  control::PortAttr attr{};
  attr.state = device::port_state(netdev);
  attr.max_mtu = device::kIbMtu4096;
  attr.active_mtu = device::active_ib_mtu(netdev.mtu);
  attr.gid_tbl_len = static_cast<uint32_t>(dev->gids().size());
  attr.port_cap_flags = IBV_PORT_CM_SUP;
  attr.max_msg_sz = dev->limits().max_msg_bytes;
  attr.pkey_tbl_len = dev->limits().max_pkeys;
  attr.active_width = rate.width;
  attr.active_speed = rate.speed;
  attr.phys_state = device::phys_state(netdev);
  attr.link_layer = IBV_LINK_LAYER_ETHERNET;
  return {0, bytes_of(attr)};
}

ControlServer::Reply ControlServer::alloc_pd(const Client& client) {
  device::Device* dev = device_of(client);
  if (dev == nullptr) return {ENODEV, {}};
  auto pd = dev->alloc_pd(client.id, client.pid);
  if (!pd) return {pd.error(), {}};
  return {0, bytes_of(control::HandleReply{*pd})};
}

ControlServer::Reply ControlServer::dealloc_pd(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::HandleRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  return {dev->dealloc_pd(client.id, request.handle), {}};
}

// Registered memory (docs/ARCHITECTURE.md decision 5). With a memfd from the provider the region
// is reached through the daemon's mapping of it; the daemon first checks that the memfd really
// is what the process has mapped over the whole range, so a region always reaches the memory the
// process registered. Without one, or if the memfd cannot be mapped, through cross-memory attach.
ControlServer::Reply ControlServer::reg_mr(Client& client, const std::string& body, int memfd) {
  Fd passed(memfd);
  device::Device* dev = device_of(client);
  control::RegMrRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  // On-demand paging (IBV_ACCESS_ON_DEMAND): nothing is looked at now (implicit ODP names the
  // whole address space); each access later reaches only what the process has mapped then.
  const bool on_demand = (request.access & device::kAccessOnDemand) != 0;
  if (!on_demand && request.length != 0 && request.addr + request.length > request.addr &&
      !range_is_mapped(client.pid, request.addr, request.length, writes_memory(request.access))) {
    return {EFAULT, {}};
  }
  if (on_demand && passed.get() >= 0) close(passed.release());  // reached in place, never re-backed
  auto keys =
      dev->reg_mr(client.id, device::MrRequest{request.pd_handle, request.addr, request.length,
                                               request.iova, request.access, client.pid});
  if (!keys) return {keys.error(), {}};
  auto dma = control::MrDma::kCrossMemory;
  if (passed.get() >= 0 && share_region(client, *keys, request, passed.release()) == 0) {
    dma = control::MrDma::kSharedMapping;
  }
  return {0, bytes_of(control::RegMrReply{keys->handle, keys->lkey, keys->rkey,
                                          static_cast<uint32_t>(dma)})};
}

int ControlServer::share_region(Client& client, const device::MrKeys& keys,
                                const control::RegMrRequest& request, int memfd) {
  Fd owned(memfd);
  const auto served = devices_.find(client.device);
  const auto memory = served->second.memory->find(client.pid);
  if (memory == nullptr) return ESRCH;
  if (!memfd_backs_range(client.pid, request.addr, request.length, owned.get())) return EINVAL;
  if (int err = memory->add_shared(owned.release(), request.addr, request.length)) return err;
  client.shared_mrs.emplace(keys.handle, request.addr);
  return 0;
}

void ControlServer::unshare_region(Client& client, uint32_t mr_handle) {
  const auto it = client.shared_mrs.find(mr_handle);
  if (it == client.shared_mrs.end()) return;
  const auto served = devices_.find(client.device);
  if (served != devices_.end()) {
    if (const auto memory = served->second.memory->find(client.pid))
      memory->remove_shared(it->second);
  }
  client.shared_mrs.erase(it);
}

void ControlServer::release_shared_regions(Client& client) {
  while (!client.shared_mrs.empty())
    unshare_region(client, client.shared_mrs.begin()->first);
}

ControlServer::Reply ControlServer::dereg_mr(Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::HandleRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  const int err = dev->dereg_mr(client.id, request.handle);
  // After the keys are gone, so no new access finds the mapping (one in flight keeps it alive).
  if (err == 0) unshare_region(client, request.handle);
  return {err, {}};
}

ControlServer::Reply ControlServer::link_add(const Client& client, const std::string& body) {
  control::LinkAddRequest request{};
  if (client.uid != 0) return {EPERM, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  const std::string name = bounded(request.name, sizeof(request.name));
  const std::string netdev_name = bounded(request.netdev, sizeof(request.netdev));
  if (!valid_device_name(name)) return {EINVAL, {}};
  if (devices_.count(name) != 0) return {EEXIST, {}};
  for (const auto& [other, served] : devices_) {
    if (served.model->netdev().name == netdev_name) return {EBUSY, {}};
  }
  auto state = read_netdev(netdev_name);
  if (!state) return {state.error(), {}};

  ServedDevice served;
  served.memory = std::make_shared<device::ProcessMemoryDirectory>();
  served.model = std::make_unique<device::Device>(
      name, *state, static_cast<uint32_t>(getpid()),
      [directory = served.memory](int pid) -> std::unique_ptr<transport::MemoryAccess> {
        return directory->view(pid);
      });
  served.model->update_addresses(read_addresses(netdev_name));
  served.port = request.port;
  served.queues = request.queues;
  auto runner = start_datapath(
      *served.model,
      request.port == control::PortKind::udp ? DatapathPort::kUdp : DatapathPort::kAfXdp,
      request.queues, &loopback_);
  if (!runner) {
    std::fprintf(stderr, "xroced: %s: cannot start the data path: %s\n", name.c_str(),
                 runner.error().c_str());
    return {EOPNOTSUPP, {}};
  }
  served.runner = std::move(*runner);
  served.model->set_runner(served.runner.get());
  served.cc.line_rate_mbps = line_rate_mbps(netdev_name);
  push_cc(served);  // before any QP: a QP's reaction point takes the line rate when it connects
  served.uverbs = create_device_node();
  if (served.uverbs.empty()) return {errno != 0 ? errno : EIO, {}};
  if (int err = tree_.write_device(*served.model, served.uverbs, paths_.control_socket)) {
    tree_.remove_device(name, served.uverbs);
    remove_device_node(served.uverbs);
    return {err, {}};
  }
  auto& added = devices_.emplace(name, std::move(served)).first->second;
  cm_.add_device(name, *added.model, *added.runner);
  served_any_ = true;
  return {0, {}};
}

ControlServer::Reply ControlServer::link_del(const Client& client, const std::string& body) {
  control::LinkDelRequest request{};
  if (client.uid != 0) return {EPERM, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  const std::string name = bounded(request.name, sizeof(request.name));
  auto it = devices_.find(name);
  if (it == devices_.end()) return {ENODEV, {}};
  send_event(name, 0, IBV_EVENT_DEVICE_FATAL);
  for (auto& [fd, c] : clients_) {
    if (c.device != name) continue;
    // The device is gone: its contexts keep their connections (so their verbs fail with
    // ENODEV rather than hang) but own nothing any more.
    release_shared_regions(c);
    it->second.model->release_client(c.id);
    c.device.clear();
  }
  cm_.remove_device(name);  // its ids get DEVICE_REMOVAL
  tree_.remove_device(name, it->second.uverbs);
  remove_device_node(it->second.uverbs);
  devices_.erase(it);
  return {0, {}};
}

ControlServer::Reply ControlServer::link_show() {
  nlohmann::json out = nlohmann::json::array();
  int index = 0;
  for (const auto& [name, served] : devices_) {
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
      regions.push_back({{"handle", handle},
                         {"pid", mr.pid},
                         {"addr", mr.addr},
                         {"length", mr.length},
                         {"access", mr.access},
                         {"lkey", mr.lkey},
                         {"rkey", mr.rkey}});
    }
    int contexts = 0;
    for (const auto& [fd, c] : clients_)
      contexts += c.device == name ? 1 : 0;
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
                   {"mtu", device::ib_mtu_bytes(device::active_ib_mtu(netdev.mtu))},
                   {"port_kind", port_kind_name(served.port)},
                   {"queues", served.queues},
                   {"datapath", served.runner ? served.runner->datapath().status().port_mode
                                              : std::string("none")},
                   {"workers", served.runner ? served.runner->datapath().worker_count() : 0},
                   {"contexts", contexts},
                   {"pds", dev.pd_count()},
                   {"mrs", dev.memory_regions().size()},
                   {"memory_regions", regions},
                   {"gids", gids}});
  }
  const std::string text = out.dump();
  control::TextReply head{static_cast<uint32_t>(text.size())};
  return {0, bytes_of(head) + text};
}

}  // namespace xroce::daemon
