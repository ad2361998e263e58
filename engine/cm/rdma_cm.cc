#include "cm/rdma_cm.h"

#include <algorithm>
#include <cerrno>

namespace xroce::cm {
namespace {

// 127.0.0.0/8 or ::1.
bool is_loopback(const wire::IpAddr& ip) {
  if (ip.is_v4()) return (ip.v4_host_order() >> 24) == 127;
  static constexpr std::array<std::uint8_t, 16> kV6Loopback{0, 0, 0, 0, 0, 0, 0, 0,
                                                            0, 0, 0, 0, 0, 0, 0, 1};
  return ip.bytes == kV6Loopback;
}

// ibv_qp_state and ibv_qp_attr_mask values (verbs.h), and ibv_access_flags.
constexpr std::uint32_t kQpsInit = 1, kQpsRtr = 2, kQpsRts = 3;
constexpr std::uint32_t kMaskState = 1, kMaskAccess = 8, kMaskPkeyIndex = 16, kMaskPort = 32,
                        kMaskQkey = 64, kMaskAv = 128, kMaskPathMtu = 256, kMaskTimeout = 512,
                        kMaskRetryCnt = 1024, kMaskRnrRetry = 2048, kMaskRqPsn = 4096,
                        kMaskMaxQpRdAtomic = 8192, kMaskMinRnrTimer = 32768, kMaskSqPsn = 65536,
                        kMaskMaxDestRdAtomic = 131072, kMaskDestQpn = 1u << 20;
constexpr std::uint32_t kAccessRemoteWrite = 2, kAccessRemoteRead = 4, kAccessRemoteAtomic = 8;
constexpr std::uint32_t kIbvEventCommEst = 4;
constexpr int kMaxBacklog = 1024;  // ucma's max_backlog
constexpr std::int32_t kStatusTimedOut = -ETIMEDOUT;
// The ephemeral range rdma_cm takes an unbound port from (inet_get_local_port_range).
constexpr std::uint16_t kFirstEphemeralPort = 32768, kLastEphemeralPort = 60999;

EventRecord make_record(std::uint64_t uid, std::uint32_t id, RdmaCmEvent event,
                        std::int32_t status) {
  EventRecord r;
  r.uid = uid;
  r.id = id;
  r.event = event;
  r.status = status;
  return r;
}

ConnParam conn_param_of(std::span<const std::uint8_t> private_data, std::uint32_t qp_num) {
  ConnParam p;
  p.private_data.assign(private_data.begin(), private_data.end());
  p.qp_num = qp_num;
  return p;
}

}  // namespace

const char* to_string(RdmaCmEvent event) {
  static constexpr const char* kNames[] = {
      "ADDR_RESOLVED",   "ADDR_ERROR",       "ROUTE_RESOLVED", "ROUTE_ERROR",
      "CONNECT_REQUEST", "CONNECT_RESPONSE", "CONNECT_ERROR",  "UNREACHABLE",
      "REJECTED",        "ESTABLISHED",      "DISCONNECTED",   "DEVICE_REMOVAL",
      "MULTICAST_JOIN",  "MULTICAST_ERROR",  "ADDR_CHANGE",    "TIMEWAIT_EXIT"};
  const auto i = static_cast<std::size_t>(event);
  return i < std::size(kNames) ? kNames[i] : "?";
}

const char* to_string(IdState state) {
  static constexpr const char* kNames[] = {
      "idle",    "addr_query", "addr_resolved", "route_query", "route_resolved",
      "connect", "disconnect", "addr_bound",    "listen",      "destroying"};
  return kNames[static_cast<std::size_t>(state)];
}

bool SockAddr::any() const {
  if (v4) return ip == wire::IpAddr::v4(0);
  return ip == wire::IpAddr{};
}

RdmaCm::RdmaCm(Resolver& resolver, EndpointConfig endpoint_defaults)
    : resolver_(resolver), endpoint_defaults_(endpoint_defaults), rng_(endpoint_defaults.seed) {}

void RdmaCm::add_device(std::uint32_t index, const CmDeviceInfo& info) {
  Device& d = devices_[index];
  d.info = info;
  EndpointConfig config = endpoint_defaults_;
  config.node_guid = info.node_guid;
  config.seed = static_cast<std::uint32_t>(rng_());
  d.endpoint = std::make_unique<Endpoint>(config);
  // Listeners on any address listen on every device, this one too (cma_listen_on_all).
  for (auto& [handle, id] : ids_) {
    if (id.state == IdState::kListen && id.src.any()) listen_on(id, index);
  }
}

void RdmaCm::remove_device(std::uint64_t now_ns, std::uint32_t index) {
  (void)now_ns;
  for (auto& [handle, id] : ids_) {
    if (id.device == index) {
      queue(id, make_record(id.uid, id.handle, RdmaCmEvent::kDeviceRemoval, 0));
      id.comm_id.reset();
      id.device.reset();
    }
  }
  devices_.erase(index);
}

void RdmaCm::update_device(std::uint32_t index, const CmDeviceInfo& info) {
  const auto it = devices_.find(index);
  if (it != devices_.end()) it->second.info = info;
}

Endpoint* RdmaCm::endpoint(std::uint32_t device) {
  const auto it = devices_.find(device);
  return it == devices_.end() ? nullptr : it->second.endpoint.get();
}

RdmaCm::Id* RdmaCm::find(std::uint64_t file, std::uint32_t handle) {
  const auto it = ids_.find(handle);
  return it == ids_.end() || it->second.file != file ? nullptr : &it->second;
}
const RdmaCm::Id* RdmaCm::find(std::uint64_t file, std::uint32_t handle) const {
  const auto it = ids_.find(handle);
  return it == ids_.end() || it->second.file != file ? nullptr : &it->second;
}

RdmaCm::Id* RdmaCm::find_by_comm(std::uint32_t device, CommId comm_id) {
  for (auto& [handle, id] : ids_) {
    if (id.device == device && id.comm_id == comm_id) return &id;
  }
  return nullptr;
}

// ucma_event_handler: a new connection's events are dropped until the consumer accepts it
// (gives it a uid), except the request itself.
void RdmaCm::queue(Id& id, EventRecord record) {
  if (id.uid == 0 && record.event != RdmaCmEvent::kConnectRequest) return;
  events_[id.file].push_back(std::move(record));
}

std::optional<std::uint32_t> RdmaCm::device_of(const wire::IpAddr& ip) const {
  for (const auto& [index, d] : devices_) {
    if (std::find(d.info.addresses.begin(), d.info.addresses.end(), ip) != d.info.addresses.end())
      return index;
  }
  return std::nullopt;
}

bool RdmaCm::port_in_use(PortSpace ps, const SockAddr& addr, std::uint32_t except) const {
  for (const auto& [handle, id] : ids_) {
    if (handle == except || id.ps != ps || id.src.port != addr.port) continue;
    if (id.state == IdState::kIdle) continue;
    if (id.listener != 0) continue;  // accepted connections share their listener's port
    if (id.src.any() || addr.any() || id.src.ip == addr.ip) return true;
  }
  return false;
}

int RdmaCm::bind_port(Id& id) {
  if (id.src.port != 0) return port_in_use(id.ps, id.src, id.handle) ? EADDRINUSE : 0;
  std::uniform_int_distribution<int> pick(kFirstEphemeralPort, kLastEphemeralPort);
  for (int tries = 0; tries < 1000; ++tries) {
    id.src.port = static_cast<std::uint16_t>(pick(rng_));
    if (!port_in_use(id.ps, id.src, id.handle)) return 0;
  }
  id.src.port = 0;
  return EADDRNOTAVAIL;
}

wire::Result<std::uint32_t, int> RdmaCm::create_id(std::uint64_t file, std::uint64_t uid,
                                                   PortSpace ps) {
  if (ps != PortSpace::kTcp && ps != PortSpace::kIb && ps != PortSpace::kUdp)
    return wire::Err(EINVAL);
  Id id;
  id.file = file;
  id.uid = uid;
  id.handle = next_handle_++;
  id.ps = ps;
  id.seq_num = static_cast<std::uint32_t>(rng_()) & 0xffffff;
  const std::uint32_t handle = id.handle;
  ids_.emplace(handle, std::move(id));
  return handle;
}

int RdmaCm::bind(std::uint64_t file, std::uint32_t handle, const SockAddr& addr) {
  Id* id = find(file, handle);
  if (id == nullptr) return EINVAL;
  if (id->state != IdState::kIdle) return EINVAL;
  std::optional<std::uint32_t> device;
  if (!addr.any()) {
    device = device_of(addr.ip);
    // The kernel (rdma_bind_addr_dst) finds the netdev of a local address, then fails with
    // ENODEV when no RDMA port has its GID, as for the loopback addresses that libfabric binds
    // ("localhost"); an address of no netdev is EADDRNOTAVAIL. Loopback addresses are always
    // local: xroce never has their GIDs.
    if (!device) return is_loopback(addr.ip) ? ENODEV : EADDRNOTAVAIL;
  }
  id->src = addr;
  if (const int err = bind_port(*id); err != 0) {
    id->src = SockAddr{};
    return err;
  }
  id->device = device;
  id->state = IdState::kAddrBound;
  return 0;
}

int RdmaCm::resolve_addr(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle,
                         const std::optional<SockAddr>& src, const SockAddr& dst) {
  (void)now_ns;
  Id* id = find(file, handle);
  if (id == nullptr) return EINVAL;
  if (id->state == IdState::kIdle) {
    // No source, or a wildcard: the wildcard of the destination's family (with the port asked
    // for), as cma_bind_addr() makes one.
    const SockAddr wildcard{dst.v4 ? wire::IpAddr::v4(0) : wire::IpAddr{},
                            src ? src->port : std::uint16_t{0}, dst.v4};
    const SockAddr from = src && !src->any() ? *src : wildcard;
    if (const int err = bind(file, handle, from); err != 0) return err;
  }
  if (id->state != IdState::kAddrBound) return EINVAL;
  id->dst = dst;
  id->state = IdState::kAddrQuery;
  auto route = resolver_.resolve(id->src.ip, dst.ip, dst.scope_id);
  if (route && devices_.count(route->device) == 0) route = wire::Err(ENODEV);
  if (route && id->device && *id->device != route->device) route = wire::Err(EADDRNOTAVAIL);
  if (!route) {
    id->state = IdState::kAddrBound;
    queue(*id, make_record(id->uid, id->handle, RdmaCmEvent::kAddrError, -route.error()));
    return 0;
  }
  if (id->src.any()) {
    id->src.ip = route->src;
    // A link-local source is the one of the interface the link-local destination named.
    if (route->src.is_link_local_v6()) id->src.scope_id = dst.scope_id;
  }
  id->device = route->device;
  id->hop_limit = route->hop_limit;
  id->state = IdState::kAddrResolved;
  queue(*id, make_record(id->uid, id->handle, RdmaCmEvent::kAddrResolved, 0));
  return 0;
}

int RdmaCm::resolve_route(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle) {
  (void)now_ns;
  Id* id = find(file, handle);
  if (id == nullptr || id->state != IdState::kAddrResolved) return EINVAL;
  const Device& d = devices_.at(*id->device);
  id->dgid = id->dst.ip.bytes;
  id->path_mtu = d.info.path_mtu;
  id->state = IdState::kRouteResolved;
  queue(*id, make_record(id->uid, id->handle, RdmaCmEvent::kRouteResolved, 0));
  return 0;
}

wire::Result<RouteInfo, int> RdmaCm::query_route(std::uint64_t file, std::uint32_t handle) const {
  const Id* id = find(file, handle);
  if (id == nullptr) return wire::Err(EINVAL);
  RouteInfo r;
  r.src = id->src;
  r.dst = id->dst;
  r.device = id->device;
  if (id->device) {
    const Device& d = devices_.at(*id->device);
    r.node_guid = d.info.node_guid;
    r.rate = d.info.rate;
  }
  r.sgid = id->src.ip.bytes;
  r.dgid = id->dst.ip.bytes;
  const bool routed = id->state == IdState::kRouteResolved || id->state == IdState::kConnect ||
                      id->state == IdState::kDisconnect;
  r.num_paths = routed ? 1 : 0;
  r.hop_limit = id->hop_limit;
  r.traffic_class = id->tos;
  r.path_mtu = id->path_mtu;
  r.packet_life_time = endpoint_defaults_.packet_life_time;
  return r;
}

void RdmaCm::listen_on(Id& id, std::uint32_t device) {
  Device& d = devices_.at(device);
  const std::uint64_t service = service_id(id.ps, id.src.port);
  if (d.listen_refs[service]++ == 0) (void)d.endpoint->listen(service, service);
}

void RdmaCm::stop_listening(Id& id) {
  const std::uint64_t service = service_id(id.ps, id.src.port);
  for (auto& [index, d] : devices_) {
    if (!id.src.any() && id.device != index) continue;
    auto it = d.listen_refs.find(service);
    if (it != d.listen_refs.end() && --it->second == 0) {
      d.listen_refs.erase(it);
      (void)d.endpoint->stop_listening(service);
    }
  }
}

int RdmaCm::listen(std::uint64_t file, std::uint32_t handle, int backlog) {
  Id* id = find(file, handle);
  if (id == nullptr) return EINVAL;
  if (id->state == IdState::kIdle) {
    if (const int err = bind(file, handle, SockAddr{wire::IpAddr::v4(0), 0, true}); err != 0)
      return err;
  }
  if (id->state == IdState::kListen) {
    id->backlog = backlog > 0 && backlog < kMaxBacklog ? backlog : kMaxBacklog;
    return 0;
  }
  if (id->state != IdState::kAddrBound) return EINVAL;
  for (const auto& [h, other] : ids_) {
    if (h != handle && other.state == IdState::kListen && other.ps == id->ps &&
        other.src.port == id->src.port &&
        (other.src.any() || id->src.any() || other.src.ip == id->src.ip))
      return EADDRINUSE;
  }
  id->backlog = backlog > 0 && backlog < kMaxBacklog ? backlog : kMaxBacklog;
  id->state = IdState::kListen;
  if (id->src.any()) {
    for (auto& [index, d] : devices_)
      listen_on(*id, index);
  } else {
    listen_on(*id, *id->device);
  }
  return 0;
}

int RdmaCm::connect(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle,
                    const ConnParam& param) {
  Id* id = find(file, handle);
  if (id == nullptr || id->state != IdState::kRouteResolved) return EINVAL;
  if (param.private_data.size() > kReqPrivateBytes - kIpHeaderBytes) return EINVAL;
  Device& d = devices_.at(*id->device);
  if (id->ps == PortSpace::kUdp) {
    // UDP port space: service ID resolution (IBA 12.11) instead of a connection.
    if (param.private_data.size() > kSidrReqPrivateBytes - kIpHeaderBytes) return EINVAL;
    std::array<std::uint8_t, kSidrReqPrivateBytes> data{};
    encode_ip_header(IpHeader{id->src.port, id->src.ip, id->dst.ip}, data);
    std::copy(param.private_data.begin(), param.private_data.end(), data.begin() + kIpHeaderBytes);
    SidrReqParams sp;
    sp.peer = MadPeer{id->dst.ip.bytes, id->src.ip.bytes, id->hop_limit, id->tos, 0};
    sp.service_id = service_id(id->ps, id->dst.port);
    sp.private_data =
        std::span<const std::uint8_t>(data.data(), kIpHeaderBytes + param.private_data.size());
    auto comm = d.endpoint->send_sidr_req(now_ns, sp, handle);
    if (!comm) return comm.error();
    id->comm_id = *comm;
    id->dgid = id->dst.ip.bytes;
    id->state = IdState::kConnect;
    return 0;
  }
  ReqParams p;
  p.peer = MadPeer{id->dst.ip.bytes, id->src.ip.bytes, id->hop_limit, id->tos, 0};
  p.service_id = service_id(id->ps, id->dst.port);
  p.qpn = param.qp_num;
  p.starting_psn = id->seq_num;
  p.responder_resources = param.responder_resources;
  p.initiator_depth = param.initiator_depth;
  p.retry_count = std::min<std::uint8_t>(param.retry_count, 7);
  p.rnr_retry_count = std::min<std::uint8_t>(param.rnr_retry_count, 7);
  p.path_mtu = id->path_mtu;
  p.srq = param.srq;
  p.flow_control = param.flow_control != 0;
  p.primary.local_gid = id->src.ip.bytes;
  p.primary.remote_gid = id->dst.ip.bytes;
  p.primary.packet_rate = d.info.rate;
  p.primary.traffic_class = id->tos;
  p.primary.hop_limit = id->hop_limit;
  p.primary.local_ack_timeout = endpoint_defaults_.packet_life_time + 1;
  std::array<std::uint8_t, kReqPrivateBytes> data{};
  encode_ip_header(IpHeader{id->src.port, id->src.ip, id->dst.ip}, data);
  std::copy(param.private_data.begin(), param.private_data.end(), data.begin() + kIpHeaderBytes);
  p.private_data =
      std::span<const std::uint8_t>(data.data(), kIpHeaderBytes + param.private_data.size());
  auto comm = d.endpoint->send_req(now_ns, p, handle);
  if (!comm) return comm.error();
  id->comm_id = *comm;
  id->qp_num = param.qp_num;
  id->responder_resources = param.responder_resources;
  id->initiator_depth = param.initiator_depth;
  id->retry_count = p.retry_count;
  id->dgid = id->dst.ip.bytes;
  id->state = IdState::kConnect;
  return 0;
}

int RdmaCm::accept(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle,
                   std::uint64_t uid, const std::optional<ConnParam>& param) {
  Id* id = find(file, handle);
  if (id == nullptr || id->state != IdState::kConnect || !id->comm_id || !id->device) return EINVAL;
  Endpoint& ep = *devices_.at(*id->device).endpoint;
  if (id->ps == PortSpace::kUdp) {
    if (!param || param->private_data.size() > kSidrRepPrivateBytes) return EINVAL;
    SidrRepParams sp;
    sp.qpn = param->qp_num;
    sp.qkey = kUdpQkey;
    sp.private_data = param->private_data;
    if (const int err = ep.send_sidr_rep(now_ns, *id->comm_id, sp); err != 0) return err;
    id->uid = uid;
    id->qp_num = param->qp_num;
    return 0;
  }
  if (!param) {
    // The active side after CONNECT_RESPONSE (librdmacm's ucma_process_conn_resp): RTU.
    return ep.send_rtu(now_ns, *id->comm_id, {});
  }
  if (param->private_data.size() > kRepPrivateBytes) return EINVAL;
  RepParams p;
  p.qpn = param->qp_num;
  p.starting_psn = id->seq_num;  // the PSN we receive from (see init_qp_attr)
  p.responder_resources = param->responder_resources;
  p.initiator_depth = param->initiator_depth;
  p.target_ack_delay = 15;
  p.rnr_retry_count = std::min<std::uint8_t>(param->rnr_retry_count, 7);
  p.srq = param->srq;
  p.flow_control = param->flow_control != 0;
  p.private_data = param->private_data;
  if (const int err = ep.send_rep(now_ns, *id->comm_id, p); err != 0) return err;
  id->uid = uid;
  id->qp_num = param->qp_num;
  id->responder_resources = param->responder_resources;
  id->initiator_depth = param->initiator_depth;
  return 0;
}

int RdmaCm::reject(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle,
                   std::span<const std::uint8_t> private_data, std::uint8_t reason) {
  Id* id = find(file, handle);
  if (id == nullptr || !id->comm_id || !id->device) return EINVAL;
  const std::uint16_t why =
      reason != 0 ? reason : static_cast<std::uint16_t>(RejReason::kConsumerDefined);
  if (why != static_cast<std::uint16_t>(RejReason::kConsumerDefined) &&
      why != static_cast<std::uint16_t>(RejReason::kVendorOptionNotSupported))
    return EINVAL;
  return devices_.at(*id->device).endpoint->send_rej(now_ns, *id->comm_id, why, {}, private_data);
}

int RdmaCm::disconnect(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle) {
  Id* id = find(file, handle);
  if (id == nullptr || !id->comm_id || !id->device) return EINVAL;
  Endpoint& ep = *devices_.at(*id->device).endpoint;
  // rdma_disconnect: a DREQ, or the DREP if the peer asked first.
  if (ep.send_dreq(now_ns, *id->comm_id, {}) == 0) return 0;
  return ep.send_drep(now_ns, *id->comm_id, {});
}

wire::Result<QpAttrs, int> RdmaCm::init_qp_attr(std::uint64_t file, std::uint32_t handle,
                                                std::uint32_t qp_state) const {
  const Id* id = find(file, handle);
  if (id == nullptr || !id->device) return wire::Err(EINVAL);
  QpAttrs a;
  a.qp_state = qp_state;
  a.port_num = 1;
  switch (qp_state) {
    case kQpsInit:
      if (id->ps == PortSpace::kUdp) {  // cma_ib_init_qp_attr for UD: the port space's Q_Key
        a.mask = kMaskState | kMaskPkeyIndex | kMaskPort | kMaskQkey;
        a.qkey = kUdpQkey;
        return a;
      }
      a.mask = kMaskState | kMaskAccess | kMaskPkeyIndex | kMaskPort;
      // cm_init_qp_init_attr: remote write always, read and atomics when we take reads.
      if (id->comm_id) {
        a.qp_access_flags = kAccessRemoteWrite;
        if (id->responder_resources != 0)
          a.qp_access_flags |= kAccessRemoteRead | kAccessRemoteAtomic;
      }
      return a;
    case kQpsRtr:
      if (!id->comm_id) return wire::Err(EINVAL);
      a.mask = kMaskState | kMaskAv | kMaskPathMtu | kMaskDestQpn | kMaskRqPsn |
               kMaskMaxDestRdAtomic | kMaskMinRnrTimer;
      a.dgid = id->dgid;
      a.hop_limit = id->hop_limit;
      a.traffic_class = id->tos;
      a.flow_label = id->flow_label;
      a.path_mtu = id->path_mtu;
      a.dest_qp_num = id->remote_qpn;
      // The kernel's PSN rule (cm.c, cma.c): the Starting PSN a side puts in its REQ or REP is
      // the PSN it will receive from (rdma_init_qp_attr sets rq_psn = id_priv->seq_num, which
      // cma_connect_ib and cma_accept_ib sent), and the other side sends from it
      // (cm_req_handler and cm_rep_handler take sq_psn from the message).
      a.rq_psn = id->seq_num;
      a.max_dest_rd_atomic = id->responder_resources;
      a.min_rnr_timer = 0;
      return a;
    case kQpsRts:
      if (!id->comm_id) return wire::Err(EINVAL);
      a.mask = kMaskState | kMaskSqPsn | kMaskTimeout | kMaskRetryCnt | kMaskRnrRetry |
               kMaskMaxQpRdAtomic;
      a.sq_psn = id->remote_psn;
      a.timeout = id->ack_timeout.value_or(endpoint_defaults_.packet_life_time + 1);
      a.retry_cnt = id->retry_count;
      a.rnr_retry = id->rnr_retry_count;
      a.max_rd_atomic = id->initiator_depth;
      return a;
    default:
      return wire::Err(EINVAL);
  }
}

int RdmaCm::notify(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle,
                   std::uint32_t event) {
  (void)now_ns;
  Id* id = find(file, handle);
  if (id == nullptr || !id->comm_id || !id->device) return EINVAL;
  if (event != kIbvEventCommEst) return 0;
  Endpoint& ep = *devices_.at(*id->device).endpoint;
  const int err = ep.establish(*id->comm_id);
  drain_endpoint_events(now_ns, *id->device);
  return err == EINVAL ? 0 : err;  // already established: nothing to do
}

int RdmaCm::set_tos(std::uint64_t file, std::uint32_t handle, std::uint8_t tos) {
  Id* id = find(file, handle);
  if (id == nullptr) return EINVAL;
  id->tos = tos;
  return 0;
}

int RdmaCm::set_ack_timeout(std::uint64_t file, std::uint32_t handle, std::uint8_t timeout) {
  Id* id = find(file, handle);
  if (id == nullptr) return EINVAL;
  id->ack_timeout = timeout & 0x1f;
  return 0;
}

int RdmaCm::set_reuseaddr(std::uint64_t file, std::uint32_t handle, bool on) {
  Id* id = find(file, handle);
  if (id == nullptr || id->state != IdState::kIdle) return EINVAL;
  id->reuseaddr = on;
  return 0;
}

wire::Result<std::uint32_t, int> RdmaCm::migrate_id(std::uint64_t from_file, std::uint32_t handle,
                                                    std::uint64_t to_file) {
  Id* id = find(from_file, handle);
  if (id == nullptr) return wire::Err(EINVAL);
  auto& from = events_[from_file];
  auto& to = events_[to_file];
  for (auto it = from.begin(); it != from.end();) {
    if (it->id == handle) {
      to.push_back(*it);
      it = from.erase(it);
    } else {
      ++it;
    }
  }
  id->file = to_file;
  return id->events_reported;
}

std::optional<EventRecord> RdmaCm::get_event(std::uint64_t file) {
  auto it = events_.find(file);
  if (it == events_.end() || it->second.empty()) return std::nullopt;
  EventRecord e = std::move(it->second.front());
  it->second.pop_front();
  // The event counts for the id it is about; a connect request for its listener.
  std::uint32_t counted = e.id;
  if (e.event == RdmaCmEvent::kConnectRequest) {
    const auto conn = ids_.find(e.id);
    if (conn != ids_.end()) counted = conn->second.listener;
    if (auto l = ids_.find(counted); l != ids_.end()) ++l->second.backlog;
  }
  if (auto owner = ids_.find(counted); owner != ids_.end()) ++owner->second.events_reported;
  return e;
}

bool RdmaCm::has_events(std::uint64_t file) const {
  const auto it = events_.find(file);
  return it != events_.end() && !it->second.empty();
}

void RdmaCm::destroy(std::uint64_t now_ns, Id& id) {
  if (id.comm_id && id.device) {
    if (Endpoint* ep = endpoint(*id.device)) ep->destroy(now_ns, *id.comm_id);
  }
  if (id.state == IdState::kListen) stop_listening(id);
  id.state = IdState::kDestroying;
}

wire::Result<std::uint32_t, int> RdmaCm::destroy_id(std::uint64_t now_ns, std::uint64_t file,
                                                    std::uint32_t handle) {
  Id* id = find(file, handle);
  if (id == nullptr) return wire::Err(EINVAL);
  // Its unreported events go; so do the connections its unreported requests made (ucma_free_ctx).
  std::vector<std::uint32_t> orphans;
  auto& q = events_[file];
  for (auto it = q.begin(); it != q.end();) {
    const bool mine =
        it->id == handle || (it->event == RdmaCmEvent::kConnectRequest && ids_.count(it->id) != 0 &&
                             ids_.at(it->id).listener == handle);
    if (!mine) {
      ++it;
      continue;
    }
    if (it->event == RdmaCmEvent::kConnectRequest && it->id != handle) orphans.push_back(it->id);
    it = q.erase(it);
  }
  for (const std::uint32_t o : orphans) {
    destroy(now_ns, ids_.at(o));
    ids_.erase(o);
  }
  destroy(now_ns, *id);
  const std::uint32_t reported = id->events_reported;
  ids_.erase(handle);
  return reported;
}

void RdmaCm::release_file(std::uint64_t now_ns, std::uint64_t file) {
  std::vector<std::uint32_t> handles;
  for (const auto& [h, id] : ids_)
    if (id.file == file) handles.push_back(h);
  for (const std::uint32_t h : handles) {
    if (ids_.count(h) != 0) (void)destroy_id(now_ns, file, h);
  }
  events_.erase(file);
}

void RdmaCm::handle_mad(std::uint64_t now_ns, std::uint32_t device, const MadPeer& from,
                        std::span<const std::uint8_t> mad) {
  Endpoint* ep = endpoint(device);
  if (ep == nullptr) return;
  ep->handle_mad(now_ns, from, mad);
  drain_endpoint_events(now_ns, device);
}

void RdmaCm::handle_timeout(std::uint64_t now_ns) {
  for (auto& [index, d] : devices_) {
    d.endpoint->handle_timeout(now_ns);
    drain_endpoint_events(now_ns, index);
  }
}

std::optional<std::uint64_t> RdmaCm::next_deadline() const {
  std::optional<std::uint64_t> earliest;
  for (const auto& [index, d] : devices_) {
    const auto t = d.endpoint->next_deadline();
    if (t && (!earliest || *t < *earliest)) earliest = t;
  }
  return earliest;
}

std::optional<std::pair<std::uint32_t, OutgoingMad>> RdmaCm::poll_transmit() {
  for (auto& [index, d] : devices_) {
    if (auto m = d.endpoint->poll_transmit()) return std::make_pair(index, std::move(*m));
  }
  return std::nullopt;
}

void RdmaCm::drain_endpoint_events(std::uint64_t now_ns, std::uint32_t device) {
  Endpoint* ep = endpoint(device);
  while (ep != nullptr) {
    auto e = ep->poll_event();
    if (!e) return;
    on_cm_event(now_ns, device, *e);
  }
}

RdmaCm::Id* RdmaCm::listener_for(PortSpace ps, std::uint64_t service, const wire::IpAddr& dst) {
  for (auto& [h, id] : ids_) {
    if (id.state == IdState::kListen && id.ps == ps && id.src.port == port_of(service) &&
        (id.src.any() || id.src.ip == dst))
      return &id;
  }
  return nullptr;
}

RdmaCm::Id RdmaCm::make_passive_id(Id& listener, std::uint32_t device, CommId comm,
                                   const IpHeader& header) {
  Id conn;
  conn.file = listener.file;
  conn.handle = next_handle_++;
  conn.ps = listener.ps;
  conn.state = IdState::kConnect;
  conn.listener = listener.handle;
  conn.device = device;
  conn.comm_id = comm;
  conn.src = SockAddr{header.dst, listener.src.port, header.dst.is_v4()};
  conn.dst = SockAddr{header.src, header.src_port, header.src.is_v4()};
  return conn;
}

void RdmaCm::on_sidr_request(std::uint64_t now_ns, std::uint32_t device, const CmEvent& e) {
  Endpoint& ep = *devices_.at(device).endpoint;
  const SidrReqMsg& req = std::get<SidrReqMsg>(*e.message);
  const auto header = decode_ip_header(req.private_data);
  Id* listener = header && port_space_of(req.service_id) == PortSpace::kUdp
                     ? listener_for(PortSpace::kUdp, req.service_id, header->dst)
                     : nullptr;
  if (listener == nullptr || listener->backlog <= 0) {
    (void)ep.send_sidr_rep(now_ns, e.id, SidrRepParams{SidrStatus::kRejected, 0, 0, {}});
    return;
  }
  --listener->backlog;
  Id conn = make_passive_id(*listener, device, e.id, *header);
  conn.dgid = e.peer.remote_gid;
  conn.hop_limit = e.peer.hop_limit;
  const std::uint32_t handle = conn.handle;
  (void)ep.set_context(e.id, handle);
  ids_.emplace(handle, std::move(conn));
  EventRecord r;
  r.uid = listener->uid;
  r.id = handle;
  r.event = RdmaCmEvent::kConnectRequest;
  UdParam ud;
  const auto data = std::span(req.private_data).subspan(kIpHeaderBytes);
  ud.private_data.assign(data.begin(), data.end());
  r.is_ud = true;
  r.ud = std::move(ud);
  events_[listener->file].push_back(std::move(r));
}

void RdmaCm::on_connect_request(std::uint64_t now_ns, std::uint32_t device, const CmEvent& e) {
  Endpoint& ep = *devices_.at(device).endpoint;
  const ReqMsg& req = std::get<ReqMsg>(*e.message);
  const auto header = decode_ip_header(req.private_data);
  const auto space = port_space_of(req.service_id);
  Id* listener = header && space ? listener_for(*space, req.service_id, header->dst) : nullptr;
  const auto consumer_defined = static_cast<std::uint16_t>(RejReason::kConsumerDefined);
  if (listener == nullptr || listener->backlog <= 0) {
    (void)ep.send_rej(now_ns, e.id, consumer_defined, {}, {});
    ep.destroy(now_ns, e.id);
    return;
  }
  --listener->backlog;
  Id conn = make_passive_id(*listener, device, e.id, *header);
  conn.remote_qpn = req.local_qpn;
  conn.remote_psn = req.starting_psn;
  conn.seq_num = static_cast<std::uint32_t>(rng_()) & 0xffffff;
  // ib_cm reports a REQ's resources from the receiver's side: its initiator depth is our
  // responder resources.
  conn.responder_resources = req.initiator_depth;
  conn.initiator_depth = req.responder_resources;
  conn.retry_count = req.retry_count;
  conn.rnr_retry_count = req.rnr_retry_count;
  conn.path_mtu = std::min(req.path_mtu, devices_.at(device).info.path_mtu);
  conn.dgid = e.peer.remote_gid;
  conn.hop_limit = req.primary.hop_limit;
  conn.tos = req.primary.traffic_class;
  conn.flow_label = req.primary.flow_label;
  const std::uint32_t handle = conn.handle;
  (void)ep.set_context(e.id, handle);
  ids_.emplace(handle, std::move(conn));
  EventRecord r;
  r.uid = listener->uid;
  r.id = handle;
  r.event = RdmaCmEvent::kConnectRequest;
  r.conn = conn_param_of(std::span(req.private_data).subspan(kIpHeaderBytes), req.local_qpn);
  r.conn.responder_resources = req.initiator_depth;
  r.conn.initiator_depth = req.responder_resources;
  r.conn.flow_control = req.end_to_end_flow_control;
  r.conn.retry_count = req.retry_count;
  r.conn.rnr_retry_count = req.rnr_retry_count;
  r.conn.srq = req.srq;
  events_[listener->file].push_back(std::move(r));
}

void RdmaCm::on_cm_event(std::uint64_t now_ns, std::uint32_t device, const CmEvent& e) {
  if (e.type == CmEventType::kReqReceived) {
    on_connect_request(now_ns, device, e);
    return;
  }
  if (e.type == CmEventType::kSidrReqReceived) {
    on_sidr_request(now_ns, device, e);
    return;
  }
  Id* id = find_by_comm(device, e.id);
  if (id == nullptr || id->state == IdState::kDestroying) return;
  EventRecord r = make_record(id->uid, id->handle, RdmaCmEvent::kEstablished, 0);
  switch (e.type) {
    case CmEventType::kRepReceived: {
      const RepMsg& rep = std::get<RepMsg>(*e.message);
      id->remote_qpn = rep.local_qpn;
      id->remote_psn = rep.starting_psn;
      id->responder_resources = std::min(id->responder_resources, rep.initiator_depth);
      id->initiator_depth = std::min(id->initiator_depth, rep.responder_resources);
      id->rnr_retry_count = rep.rnr_retry_count;
      r.event = RdmaCmEvent::kConnectResponse;
      r.conn = conn_param_of(rep.private_data, rep.local_qpn);
      r.conn.responder_resources = rep.initiator_depth;
      r.conn.initiator_depth = rep.responder_resources;
      r.conn.flow_control = rep.end_to_end_flow_control;
      r.conn.rnr_retry_count = rep.rnr_retry_count;
      r.conn.srq = rep.srq;
      break;
    }
    case CmEventType::kRtuReceived:
      r.event = RdmaCmEvent::kEstablished;
      break;
    case CmEventType::kRejReceived: {
      const RejMsg& rej = std::get<RejMsg>(*e.message);
      r.event = RdmaCmEvent::kRejected;
      r.status = rej.reason;
      r.conn = conn_param_of(rej.private_data, 0);
      break;
    }
    case CmEventType::kSidrRepReceived: {
      // cma_sidr_rep_handler: the peer's QP and Q_Key, and the path to it.
      const SidrRepMsg& rep = std::get<SidrRepMsg>(*e.message);
      if (rep.status != SidrStatus::kValid) {
        r.event = RdmaCmEvent::kUnreachable;
        r.status = static_cast<std::int32_t>(rep.status);
        break;
      }
      if (rep.qkey != kUdpQkey) {
        r.event = RdmaCmEvent::kUnreachable;
        r.status = -EINVAL;
        break;
      }
      id->remote_qpn = rep.qpn;
      r.event = RdmaCmEvent::kEstablished;
      UdParam ud;
      ud.qp_num = rep.qpn;
      ud.qkey = rep.qkey;
      ud.dgid = id->dst.ip.bytes;
      ud.sgid = id->src.ip.bytes;
      ud.hop_limit = id->hop_limit;
      ud.traffic_class = id->tos;
      ud.private_data.assign(rep.private_data.begin(), rep.private_data.end());
      r.is_ud = true;
      r.ud = std::move(ud);
      break;
    }
    case CmEventType::kSidrReqError:
    case CmEventType::kReqError:
    case CmEventType::kRepError:
      r.event = RdmaCmEvent::kUnreachable;
      r.status = kStatusTimedOut;
      break;
    case CmEventType::kDreqError:
      r.status = kStatusTimedOut;
      [[fallthrough]];
    case CmEventType::kDreqReceived:
    case CmEventType::kDrepReceived:
      if (id->state != IdState::kConnect) return;
      id->state = IdState::kDisconnect;
      r.event = RdmaCmEvent::kDisconnected;
      break;
    case CmEventType::kTimewaitExit:
      if (id->state != IdState::kDisconnect) return;
      r.event = RdmaCmEvent::kTimewaitExit;
      break;
    default:
      return;  // MRA: the CM waits longer, the consumer learns nothing
  }
  queue(*id, std::move(r));
}

std::vector<IdInfo> RdmaCm::ids() const {
  std::vector<IdInfo> out;
  for (const auto& [h, id] : ids_) {
    out.push_back(IdInfo{id.file, h, id.state, id.ps, id.src, id.dst, id.device, id.comm_id,
                         id.qp_num, id.remote_qpn});
  }
  return out;
}

}  // namespace xroce::cm
