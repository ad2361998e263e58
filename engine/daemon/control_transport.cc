// The handlers for memory windows, XRC domains, ibv_open_qp, SRQ resize and ibv_advise_mr
// (ibv_rereg_mr is with reg_mr in control_handlers.cc). Every object is the context's that made
// it: Device refuses another context's handle with EINVAL, and counts each against the
// context's quota (device::ClientQuota).
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <optional>
#include <span>
#include <utility>

#include "daemon/control_ops.h"
#include "xroce/control_message.h"

namespace xroce::daemon::ops {

Reply alloc_mw(OpContext& ctx, const control::AllocMwRequest& request) {
  auto keys = ctx.device().alloc_mw(ctx.session.id, request.pd, request.type);
  if (!keys) return Reply::error(keys.error());
  return {0, control::body_bytes(control::MwReply{keys->handle, keys->rkey}), {}, {}};
}

Reply dealloc_mw(OpContext& ctx, const control::HandleRequest& request) {
  return Reply::error(ctx.device().dealloc_mw(ctx.session.id, request.handle));
}

// ibv_open_xrcd: a passed descriptor names a shared domain by its file's inode (the kernel's
// xrcd_table keys on the inode the same way); the caller proves it may open the file by having
// opened it. An O_PATH descriptor proves nothing (the kernel's fdget refuses it: EBADF).
Reply open_xrcd(OpContext& ctx, const control::OpenXrcdRequest& request) {
  Fd file = ctx.message.take(0);
  std::optional<std::pair<uint64_t, uint64_t>> inode;
  if (file.valid()) {
    const int status = fcntl(file.get(), F_GETFL);
    struct stat st {};
    if (status < 0 || (status & O_PATH) != 0 || fstat(file.get(), &st) != 0) {
      return Reply::error(EBADF);
    }
    inode = std::make_pair(static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
  }
  auto handle = ctx.device().open_xrcd(ctx.session.id, inode, request.oflags);
  if (!handle) return Reply::error(handle.error());
  return {0, control::body_bytes(control::HandleReply{*handle}), {}, {}};
}

Reply close_xrcd(OpContext& ctx, const control::HandleRequest& request) {
  return Reply::error(ctx.device().close_xrcd(ctx.session.id, request.handle));
}

// ibv_open_qp: the opened handle shares the QP's rings (an XRC target has no queues the
// application posts to, but the provider maps what every QP has). Only a context that has the
// QP's domain open may open it.
Reply open_qp(OpContext& ctx, const control::OpenQpRequest& request) {
  if (request.qp_type != static_cast<uint32_t>(transport::QpType::kXrcRecv)) {
    return Reply::error(EINVAL);
  }
  device::Device& dev = ctx.device();
  auto handle = dev.open_qp(ctx.session.id, request.xrcd, request.qpn, request.cookie);
  if (!handle) return Reply::error(handle.error());
  return qp_reply(*dev.qp(ctx.session.id, *handle), *handle);
}

Reply resize_srq(OpContext& ctx, const control::ResizeSrqRequest& request) {
  device::Device& dev = ctx.device();
  if (const int err = dev.resize_srq(ctx.session.id, request.handle, request.max_wr)) {
    return Reply::error(err);
  }
  return srq_reply(*dev.srq(ctx.session.id, request.handle), request.handle);
}

Reply advise_mr(OpContext& ctx, const control::AdviseMrRequest& request) {
  if (request.num_sge > control::kMaxAdviseSge) return Reply::error(EINVAL);
  const std::span<const control::AdviseSge> sges(request.sge, request.num_sge);
  return Reply::error(ctx.device().advise_mr(ctx.session.id, request.pd, request.advice, sges));
}

}  // namespace xroce::daemon::ops
