// The request handlers of ControlServer for the data path objects: CQs, QPs, SRQs, AHs.
#include <cerrno>
#include <cstring>

#include "daemon/control_body.h"
#include "daemon/control_server.h"

namespace xroce::daemon {

namespace {

control::CqReply cq_reply(uint32_t handle, const device::CompletionQueue& cq) {
  control::CqReply reply{};
  reply.handle = handle;
  reply.cqe = cq.cqe;
  reply.slot_count = cq.ring.slot_count();
  reply.region_bytes = cq.region.bytes();
  return reply;
}

}  // namespace

ControlServer::Reply ControlServer::create_cq(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::CreateCqRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  int channel_fd = -1;
  if (request.channel != 0) {
    auto it = client.channels.find(request.channel);
    if (it == client.channels.end()) return {EINVAL, {}};
    channel_fd = it->second;
  }
  auto handle = dev->create_cq(client.id, device::CqRequest{request.cqe, request.channel,
                                                            request.comp_vector, request.cookie});
  if (!handle) return {handle.error(), {}};
  device::CompletionQueue& cq = *dev->cq(client.id, *handle);
  cq.channel_fd = channel_fd;
  cq.event_fd = client.event_fd;
  return {0, bytes_of(cq_reply(*handle, cq)), {cq.region.fd()}};
}

ControlServer::Reply ControlServer::destroy_cq(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::HandleRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  return {dev->destroy_cq(client.id, request.handle), {}};
}

ControlServer::Reply ControlServer::resize_cq(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::ResizeCqRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  if (int err = dev->resize_cq(client.id, request.handle, request.cqe)) return {err, {}};
  const device::CompletionQueue& cq = *dev->cq(client.id, request.handle);
  return {0, bytes_of(cq_reply(request.handle, cq)), {cq.region.fd()}};
}

ControlServer::Reply ControlServer::create_qp(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::CreateQpRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  device::QpRequest r{request.pd,  request.send_cq, request.recv_cq,
                      request.srq, request.qp_type, request.sq_sig_all != 0,
                      request.cap, request.cookie,  request.xrcd};
  auto handle = dev->create_qp(client.id, r);
  if (!handle) return {handle.error(), {}};
  device::QueuePair& qp = *dev->qp(client.id, *handle);
  qp.event_fd = client.event_fd;
  return qp_reply(qp, *handle);
}

ControlServer::Reply ControlServer::qp_reply(const device::QueuePair& qp, uint32_t handle) {
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
  return {0, bytes_of(reply), {qp.region.fd(), qp.doorbell.fd()}};
}

ControlServer::Reply ControlServer::modify_qp(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::ModifyQpRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  return {dev->modify_qp(client.id, request.handle, request.attr, request.mask), {}};
}

ControlServer::Reply ControlServer::query_qp(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::HandleRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  auto reply = dev->query_qp(client.id, request.handle);
  if (!reply) return {reply.error(), {}};
  return {0, bytes_of(*reply)};
}

ControlServer::Reply ControlServer::destroy_qp(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::HandleRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  return {dev->destroy_qp(client.id, request.handle), {}};
}

ControlServer::Reply ControlServer::create_srq(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::CreateSrqRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  constexpr uint32_t kSrqTypeBasic = 0;  // ibv_srq_type
  constexpr uint32_t kSrqTypeXrc = 1;
  if (request.srq_type != kSrqTypeBasic && request.srq_type != kSrqTypeXrc) return {EINVAL, {}};
  if ((request.srq_type == kSrqTypeXrc) != (request.xrcd != 0)) return {EINVAL, {}};
  auto handle = dev->create_srq(
      client.id,
      device::SrqRequest{request.pd,
                         control::SrqAttr{request.max_wr, request.max_sge, request.srq_limit},
                         request.cookie, request.xrcd, request.cq});
  if (!handle) return {handle.error(), {}};
  device::SharedReceiveQueue& srq = *dev->srq(client.id, *handle);
  srq.event_fd = client.event_fd;
  return srq_reply(srq, *handle);
}

ControlServer::Reply ControlServer::srq_reply(const device::SharedReceiveQueue& srq,
                                              uint32_t handle) {
  control::SrqReply reply{};
  reply.handle = handle;
  reply.attr = srq.attr;
  reply.slots = srq.ring.slot_count();
  reply.slot_bytes = srq.ring.slot_bytes();
  reply.srqn = handle;
  reply.region_bytes = srq.region.bytes();
  return {0, bytes_of(reply), {srq.region.fd(), srq.doorbell.fd()}};
}

ControlServer::Reply ControlServer::modify_srq(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::ModifySrqRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  return {dev->modify_srq(client.id, request.handle, request.attr, request.mask), {}};
}

ControlServer::Reply ControlServer::query_srq(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::HandleRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  auto attr = dev->query_srq(client.id, request.handle);
  if (!attr) return {attr.error(), {}};
  return {0, bytes_of(*attr)};
}

ControlServer::Reply ControlServer::destroy_srq(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::HandleRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  return {dev->destroy_srq(client.id, request.handle), {}};
}

ControlServer::Reply ControlServer::create_ah(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::CreateAhRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  auto handle = dev->create_ah(client.id, request.pd, request.attr);
  if (!handle) return {handle.error(), {}};
  return {0, bytes_of(control::HandleReply{*handle})};
}

ControlServer::Reply ControlServer::destroy_ah(const Client& client, const std::string& body) {
  device::Device* dev = device_of(client);
  control::HandleRequest request{};
  if (dev == nullptr) return {ENODEV, {}};
  if (!parse(body, request)) return {EINVAL, {}};
  return {dev->destroy_ah(client.id, request.handle), {}};
}

}  // namespace xroce::daemon
