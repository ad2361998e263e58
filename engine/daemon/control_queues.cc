// The handlers of the data path objects: CQs, QPs, SRQs, AHs. A create hands the object's ring
// memfd to the client once and closes it (the daemon keeps its mapping); QPs and SRQs ring their
// context's doorbell, made at hello.
#include <cerrno>
#include <cstring>

#include "daemon/control_ops.h"
#include "xroce/control_message.h"

namespace xroce::daemon::ops {

namespace {

control::CqReply cq_reply(uint32_t handle, const device::CompletionQueue& cq) {
  control::CqReply reply{};
  reply.handle = handle;
  reply.cqe = cq.cqe;
  reply.slot_count = cq.ring.slot_count();
  reply.region_bytes = cq.region.bytes();
  return reply;
}

template <typename T>
Reply with_region(const T& body, device::SharedRegion& region) {
  Reply reply{0, control::body_bytes(body), {}, {}};
  reply.fds.push_back(region.take_fd());
  return reply;
}

}  // namespace

Reply create_cq(OpContext& ctx, const control::CreateCqRequest& request) {
  device::Device& dev = ctx.device();
  int channel_fd = -1;
  if (request.channel != 0) {
    auto it = ctx.session.channels.find(request.channel);
    if (it == ctx.session.channels.end()) return Reply::error(EINVAL);
    channel_fd = it->second.get();
  }
  auto handle = dev.create_cq(
      ctx.session.id,
      device::CqRequest{request.cqe, request.channel, request.comp_vector, request.cookie});
  if (!handle) return Reply::error(handle.error());
  device::CompletionQueue& cq = *dev.cq(ctx.session.id, *handle);
  cq.channel_fd = channel_fd;
  cq.event_fd = ctx.session.event_socket.get();
  return with_region(cq_reply(*handle, cq), cq.region);
}

Reply destroy_cq(OpContext& ctx, const control::HandleRequest& request) {
  return Reply::error(ctx.device().destroy_cq(ctx.session.id, request.handle));
}

Reply resize_cq(OpContext& ctx, const control::ResizeCqRequest& request) {
  device::Device& dev = ctx.device();
  if (int err = dev.resize_cq(ctx.session.id, request.handle, request.cqe)) {
    return Reply::error(err);
  }
  device::CompletionQueue& cq = *dev.cq(ctx.session.id, request.handle);
  return with_region(cq_reply(request.handle, cq), cq.region);
}

// A QP whose every ring is its own gets a ready bit (include/xroce/queues.h); one on an SRQ, or
// an XRC target (which other contexts open), keeps the per-ring protocol.
Reply create_qp(OpContext& ctx, const control::CreateQpRequest& request) {
  constexpr uint32_t kQpTypeXrcRecv = 10;  // IBV_QPT_XRC_RECV
  device::Device& dev = ctx.device();
  device::QpRequest r{request.pd,      request.send_cq,           request.recv_cq, request.srq,
                      request.qp_type, request.sq_sig_all != 0,   request.cap,     request.cookie,
                      request.xrcd,    ctx.session.doorbell.get()};
  if (request.srq == 0 && request.qp_type != kQpTypeXrcRecv && ctx.session.ready_page()) {
    r.ready_page = ctx.session.ready_page();
    r.ready_bit = ctx.session.take_ready_bit();
  }
  const bool has_bit = r.ready_bit != queues::kNoReadyBit;
  auto handle = dev.create_qp(ctx.session.id, r);
  if (!handle) {
    if (has_bit) ctx.session.return_ready_bit(r.ready_bit);
    return Reply::error(handle.error());
  }
  if (has_bit) ctx.session.ready_bits[*handle] = r.ready_bit;
  device::QueuePair& qp = *dev.qp(ctx.session.id, *handle);
  qp.event_fd = ctx.session.event_socket.get();
  return qp_reply(qp, *handle);
}

// An XRC target QP's rings may be handed again, to each context that opens it (ibv_open_qp):
// its region keeps its descriptor; every other region's goes with its one reply.
Reply qp_reply(device::QueuePair& qp, uint32_t handle) {
  control::CreateQpReply reply{};
  reply.handle = handle;
  reply.qpn = qp.qpn.value();
  reply.cap = qp.cap;
  reply.send_slots = qp.layout.send_slots;
  reply.send_slot_bytes = qp.layout.send_slot_bytes;
  reply.recv_slots = qp.layout.recv_slots;
  reply.recv_slot_bytes = qp.layout.recv_slot_bytes;
  reply.recv_offset = qp.layout.recv_offset;
  reply.region_bytes = qp.region.bytes();
  if (qp.type != transport::QpType::kXrcRecv) return with_region(reply, qp.region);
  Reply shared{0, control::body_bytes(reply), {}, {}};
  shared.fds.push_back(qp.region.share_fd());
  if (!shared.fds.back().valid()) return Reply::error(EMFILE);
  return shared;
}

Reply modify_qp(OpContext& ctx, const control::ModifyQpRequest& request) {
  return Reply::error(
      ctx.device().modify_qp(ctx.session.id, request.handle, request.attr, request.mask));
}

Reply query_qp(OpContext& ctx, const control::HandleRequest& request) {
  auto reply = ctx.device().query_qp(ctx.session.id, request.handle);
  if (!reply) return Reply::error(reply.error());
  return {0, control::body_bytes(*reply), {}, {}};
}

Reply destroy_qp(OpContext& ctx, const control::HandleRequest& request) {
  const int err = ctx.device().destroy_qp(ctx.session.id, request.handle);
  const auto bit = ctx.session.ready_bits.find(request.handle);
  if (err == 0 && bit != ctx.session.ready_bits.end()) {
    ctx.session.return_ready_bit(bit->second);
    ctx.session.ready_bits.erase(bit);
  }
  return Reply::error(err);
}

Reply create_srq(OpContext& ctx, const control::CreateSrqRequest& request) {
  constexpr uint32_t kSrqTypeBasic = 0;  // ibv_srq_type
  constexpr uint32_t kSrqTypeXrc = 1;
  if (request.srq_type != kSrqTypeBasic && request.srq_type != kSrqTypeXrc) {
    return Reply::error(EINVAL);
  }
  if ((request.srq_type == kSrqTypeXrc) != (request.xrcd != 0)) return Reply::error(EINVAL);
  device::Device& dev = ctx.device();
  auto handle = dev.create_srq(
      ctx.session.id,
      device::SrqRequest{request.pd,
                         control::SrqAttr{request.max_wr, request.max_sge, request.srq_limit},
                         request.cookie, request.xrcd, request.cq, ctx.session.doorbell.get()});
  if (!handle) return Reply::error(handle.error());
  device::SharedReceiveQueue& srq = *dev.srq(ctx.session.id, *handle);
  srq.event_fd = ctx.session.event_socket.get();
  return srq_reply(srq, *handle);
}

Reply srq_reply(device::SharedReceiveQueue& srq, uint32_t handle) {
  control::SrqReply reply{};
  reply.handle = handle;
  reply.attr = srq.attr;
  reply.slots = srq.ring.slot_count();
  reply.slot_bytes = srq.ring.slot_bytes();
  reply.srqn = handle;
  reply.region_bytes = srq.region.bytes();
  return with_region(reply, srq.region);
}

Reply modify_srq(OpContext& ctx, const control::ModifySrqRequest& request) {
  return Reply::error(
      ctx.device().modify_srq(ctx.session.id, request.handle, request.attr, request.mask));
}

Reply query_srq(OpContext& ctx, const control::HandleRequest& request) {
  auto attr = ctx.device().query_srq(ctx.session.id, request.handle);
  if (!attr) return Reply::error(attr.error());
  return {0, control::body_bytes(*attr), {}, {}};
}

Reply destroy_srq(OpContext& ctx, const control::HandleRequest& request) {
  return Reply::error(ctx.device().destroy_srq(ctx.session.id, request.handle));
}

Reply create_ah(OpContext& ctx, const control::CreateAhRequest& request) {
  auto handle = ctx.device().create_ah(ctx.session.id, request.pd, request.attr);
  if (!handle) return Reply::error(handle.error());
  return {0, control::body_bytes(control::HandleReply{*handle}), {}, {}};
}

Reply destroy_ah(OpContext& ctx, const control::HandleRequest& request) {
  return Reply::error(ctx.device().destroy_ah(ctx.session.id, request.handle));
}

}  // namespace xroce::daemon::ops
