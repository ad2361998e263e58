// The request handlers of ControlServer for memory windows, re-registration, XRC domains,
// ibv_open_qp, SRQ resize and ibv_advise_mr.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <span>

#include "daemon/control_body.h"
#include "daemon/control_server.h"
#include "daemon/fd.h"

namespace xroce::daemon {

ControlServer::Reply ControlServer::alloc_mw(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::AllocMwRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  auto keys = dev->alloc_mw(client.id, request.pd, request.type);
  if (!keys) return {keys.error(), {}};
  return {0, bytes_of(control::MwReply{keys->handle, keys->rkey})};
}

ControlServer::Reply ControlServer::dealloc_mw(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::HandleRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  return {dev->dealloc_mw(client.id, request.handle), {}};
}

// ibv_rereg_mr. A region that moves (CHANGE_TRANSLATION) leaves its shared mapping behind and is
// reached by cross-memory attach from then on; the new range must be mapped as reg_mr requires.
ControlServer::Reply ControlServer::rereg_mr(Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::ReregMrRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  const bool moves = (request.flags & device::kReregTranslation) != 0;
  if (moves && request.length != 0 && request.addr + request.length > request.addr) {
    const uint32_t access = (request.flags & device::kReregAccess) != 0
                                ? request.access
                                : region_access(*dev, request.mr_handle);
    if (!range_is_mapped(client.pid, request.addr, request.length, writes_memory(access))) {
      return {EFAULT, {}};
    }
  }
  auto keys = dev->rereg_mr(client.id, request.mr_handle,
                            device::ReregRequest{request.flags, request.pd, request.access,
                                                 request.addr, request.length});
  if (!keys) return {keys.error(), {}};
  if (moves) unshare_region(client, request.mr_handle);
  const bool shared = client.shared_mrs.count(request.mr_handle) != 0;
  const auto dma = shared ? control::MrDma::kSharedMapping : control::MrDma::kCrossMemory;
  return {0, bytes_of(control::RegMrReply{keys->handle, keys->lkey, keys->rkey,
                                          static_cast<uint32_t>(dma)})};
}

uint32_t ControlServer::region_access(const device::Device& dev, uint32_t mr_handle) {
  const auto& mrs = dev.memory_regions();
  auto it = mrs.find(mr_handle);
  return it == mrs.end() ? 0 : it->second.access;
}

// ibv_open_xrcd: a passed descriptor names a shared domain by its file's inode (the kernel's
// xrcd_table keys on the inode the same way); the caller proves it may open the file by
// having opened it.
ControlServer::Reply ControlServer::open_xrcd(const Client& client, const std::string& body,
                                              int passed_fd) {
  Fd file(passed_fd);
  device::Device* dev = device_of(client);
  control::OpenXrcdRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  std::optional<std::pair<uint64_t, uint64_t>> inode;
  if (file.get() >= 0) {
    struct stat st {};
    if (fstat(file.get(), &st) != 0) return {EBADF, {}};
    inode = std::make_pair(static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
  }
  auto handle = dev->open_xrcd(client.id, inode, request.oflags);
  if (!handle) return {handle.error(), {}};
  return {0, bytes_of(control::HandleReply{*handle})};
}

ControlServer::Reply ControlServer::close_xrcd(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::HandleRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  return {dev->close_xrcd(client.id, request.handle), {}};
}

// ibv_open_qp: the opened handle shares the QP's rings (an XRC target has no queues the
// application posts to, but the provider maps what every QP has).
ControlServer::Reply ControlServer::open_qp(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::OpenQpRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  if (request.qp_type != static_cast<uint32_t>(transport::QpType::kXrcRecv)) return {EINVAL, {}};
  auto handle = dev->open_qp(client.id, request.xrcd, request.qpn, request.cookie);
  if (!handle) return {handle.error(), {}};
  return qp_reply(*dev->qp(client.id, *handle), *handle);
}

ControlServer::Reply ControlServer::resize_srq(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::ResizeSrqRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  if (const int err = dev->resize_srq(client.id, request.handle, request.max_wr)) return {err, {}};
  return srq_reply(*dev->srq(client.id, request.handle), request.handle);
}

ControlServer::Reply ControlServer::advise_mr(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::AdviseMrRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request) || request.num_sge > control::kMaxAdviseSge) return {EINVAL, {}};
  const std::span<const control::AdviseSge> sges(request.sge, request.num_sge);
  return {dev->advise_mr(client.id, request.pd, request.advice, sges), {}};
}

}  // namespace xroce::daemon
