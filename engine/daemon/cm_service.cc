#include "daemon/cm_service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <rdma/rdma_user_cm.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cm/gsi.h"
#include "daemon/worker.h"
#include "wire/udp_sport.h"

namespace xroce::daemon {
namespace {

constexpr std::uint64_t kNsPerMs = 1'000'000;
constexpr std::uint8_t kIbMtu1024 = 3;
// ucma options (librdmacm's rdma_cma.h).
constexpr std::uint32_t kOptionLevelId = 0, kOptionIdTos = 0, kOptionIdReuseaddr = 1,
                        kOptionIdAfonly = 2, kOptionIdAckTimeout = 3;
constexpr std::uint32_t kInvalidIbdevIndex = 0xffffffff;

std::uint8_t read_sysctl_u8(const char* path, std::uint8_t fallback) {
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return fallback;
  unsigned v = fallback;
  if (std::fscanf(f, "%u", &v) != 1) v = fallback;
  std::fclose(f);
  return static_cast<std::uint8_t>(v);
}

// The hop limit the kernel gives RoCE v2 packets of this family (the route's default).
std::uint8_t default_hop_limit(bool v4) {
  return v4 ? read_sysctl_u8("/proc/sys/net/ipv4/ip_default_ttl", 64)
            : read_sysctl_u8("/proc/sys/net/ipv6/conf/default/hop_limit", 64);
}

// A sockaddr_in or sockaddr_in6 (by its family) as engine/cm holds it; nullopt for others.
std::optional<cm::SockAddr> sockaddr_of(const void* p) {
  sa_family_t family;
  std::memcpy(&family, p, sizeof family);
  if (family == AF_INET) {
    sockaddr_in in;
    std::memcpy(&in, p, sizeof in);
    return cm::SockAddr{wire::IpAddr::v4(ntohl(in.sin_addr.s_addr)), ntohs(in.sin_port), true};
  }
  if (family == AF_INET6) {
    sockaddr_in6 in6;
    std::memcpy(&in6, p, sizeof in6);
    std::array<std::uint8_t, 16> b;
    std::memcpy(b.data(), &in6.sin6_addr, 16);
    return cm::SockAddr{wire::IpAddr::v6(b), ntohs(in6.sin6_port), false, in6.sin6_scope_id};
  }
  return std::nullopt;
}

// Writes `a` into a sockaddr_in6-sized slot as sockaddr_in or sockaddr_in6.
void put_sockaddr(void* p, const cm::SockAddr& a) {
  if (a.v4) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(a.port);
    in.sin_addr.s_addr = htonl(a.ip.is_v4() ? a.ip.v4_host_order() : 0);
    std::memcpy(p, &in, sizeof in);
  } else {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(a.port);
    in6.sin6_scope_id = a.scope_id;
    std::memcpy(&in6.sin6_addr, a.ip.bytes.data(), 16);
    std::memcpy(p, &in6, sizeof in6);
  }
}

template <typename T>
bool read_cmd(const std::string& in, T& out) {
  // Older librdmacm versions send shorter commands; the rest stays zero (as the kernel reads
  // min(in_len, sizeof)).
  std::memset(&out, 0, sizeof out);
  std::memcpy(&out, in.data(), std::min(in.size(), sizeof out));
  return !in.empty();
}

template <typename T>
std::string bytes_of(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}

void fill_conn(rdma_ucm_conn_param& dst, const cm::ConnParam& src) {
  dst.qp_num = src.qp_num;
  dst.qkey = src.qkey;
  const std::size_t n = std::min<std::size_t>(src.private_data.size(), RDMA_MAX_PRIVATE_DATA);
  std::memcpy(dst.private_data, src.private_data.data(), n);
  dst.private_data_len = static_cast<std::uint8_t>(n);
  dst.srq = src.srq;
  dst.responder_resources = src.responder_resources;
  dst.initiator_depth = src.initiator_depth;
  dst.flow_control = src.flow_control;
  dst.retry_count = src.retry_count;
  dst.rnr_retry_count = src.rnr_retry_count;
  dst.valid = 1;
}

void fill_ud(rdma_ucm_ud_param& dst, const cm::UdParam& src, std::uint8_t sgid_index) {
  dst.qp_num = src.qp_num;
  dst.qkey = src.qkey;
  std::memcpy(dst.ah_attr.grh.dgid, src.dgid.data(), 16);
  dst.ah_attr.grh.sgid_index = sgid_index;
  dst.ah_attr.grh.hop_limit = src.hop_limit;
  dst.ah_attr.grh.traffic_class = src.traffic_class;
  dst.ah_attr.is_global = 1;
  dst.ah_attr.port_num = 1;
  const std::size_t n = std::min<std::size_t>(src.private_data.size(), RDMA_MAX_PRIVATE_DATA);
  std::memcpy(dst.private_data, src.private_data.data(), n);
  dst.private_data_len = static_cast<std::uint8_t>(n);
}

cm::ConnParam conn_of(const rdma_ucm_conn_param& p) {
  cm::ConnParam c;
  c.qp_num = p.qp_num;
  c.qkey = p.qkey;
  c.private_data.assign(
      p.private_data,
      p.private_data + std::min<std::size_t>(p.private_data_len, RDMA_MAX_PRIVATE_DATA));
  c.srq = p.srq != 0;
  c.responder_resources = p.responder_resources;
  c.initiator_depth = p.initiator_depth;
  c.flow_control = p.flow_control;
  c.retry_count = p.retry_count;
  c.rnr_retry_count = p.rnr_retry_count;
  return c;
}

void fill_path(ib_user_path_rec& p, const cm::RouteInfo& r) {
  std::memcpy(p.dgid, r.dgid.data(), 16);
  std::memcpy(p.sgid, r.sgid.data(), 16);
  p.pkey = htons(0xffff);
  p.hop_limit = r.hop_limit;
  p.traffic_class = r.traffic_class;
  p.reversible = 1;
  p.numb_path = 1;
  p.mtu_selector = 2;  // exactly
  p.mtu = r.path_mtu;
  p.rate_selector = 2;
  p.rate = r.rate;
  p.packet_life_time_selector = 2;
  p.packet_life_time = r.packet_life_time;
}

}  // namespace

wire::Result<cm::Route, int> KernelRouteResolver::resolve(const wire::IpAddr& src,
                                                          const wire::IpAddr& dst,
                                                          std::uint32_t dst_scope_id) {
  const bool v4 = dst.is_v4();
  const int fd = socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return wire::Err(errno);
  sockaddr_storage to{}, from{};
  socklen_t len = 0;
  const bool bound_src = !(src == wire::IpAddr::v4(0) || src == wire::IpAddr{});
  if (v4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&to);
    in->sin_family = AF_INET;
    in->sin_port = htons(4791);
    in->sin_addr.s_addr = htonl(dst.v4_host_order());
    len = sizeof(sockaddr_in);
    if (bound_src) {
      sockaddr_in me{};
      me.sin_family = AF_INET;
      me.sin_addr.s_addr = htonl(src.v4_host_order());
      (void)::bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof me);
    }
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&to);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(4791);
    std::memcpy(&in6->sin6_addr, dst.bytes.data(), 16);
    in6->sin6_scope_id = dst_scope_id;  // a link-local destination is reached on its interface
    len = sizeof(sockaddr_in6);
  }
  int err = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), len) != 0) err = errno;
  socklen_t from_len = sizeof from;
  if (err == 0 && getsockname(fd, reinterpret_cast<sockaddr*>(&from), &from_len) != 0) err = errno;
  close(fd);
  if (err != 0) return wire::Err(err == ENETUNREACH ? ENETUNREACH : EHOSTUNREACH);
  cm::Route route;
  if (v4) {
    route.src = wire::IpAddr::v4(ntohl(reinterpret_cast<sockaddr_in*>(&from)->sin_addr.s_addr));
  } else {
    std::array<std::uint8_t, 16> b;
    std::memcpy(b.data(), &reinterpret_cast<sockaddr_in6*>(&from)->sin6_addr, 16);
    route.src = wire::IpAddr::v6(b);
  }
  const auto device = device_of_(route.src);
  if (!device) return wire::Err(EADDRNOTAVAIL);  // the route leaves through no xroce device
  route.device = *device;
  route.hop_limit = default_hop_limit(v4);
  return route;
}

CmService::CmService()
    : resolver_([this](const wire::IpAddr& ip) { return device_of(ip); }),
      cm_(resolver_, cm::EndpointConfig{0, 20, 15, 16, 24, static_cast<std::uint32_t>(getpid())}) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

CmService::~CmService() {
  for (auto& [id, f] : files_) {
    if (f.event_fd >= 0) close(f.event_fd);
  }
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::optional<std::uint32_t> CmService::device_of(const wire::IpAddr& ip) const {
  for (const auto& [name, d] : devices_) {
    const auto& gids = d.model->gids();
    if (gids.find(ip.bytes)) return d.index;
  }
  return std::nullopt;
}

std::uint8_t CmService::sgid_index_of(const cm::Gid& gid) const {
  for (const auto& [name, d] : devices_) {
    if (auto idx = d.model->gids().find(gid)) return static_cast<std::uint8_t>(*idx);
  }
  return 0;
}

const CmService::ServedDevice* CmService::served(std::uint32_t index) const {
  for (const auto& [name, d] : devices_) {
    if (d.index == index) return &d;
  }
  return nullptr;
}

void CmService::refresh_addresses() {
  for (const auto& [name, d] : devices_) {
    std::vector<wire::IpAddr> addrs;
    const auto& gids = d.model->gids();
    for (std::size_t i = 0; i < gids.size(); ++i) {
      const auto& g = gids.at(i);
      if (std::any_of(g.begin(), g.end(), [](std::uint8_t b) { return b != 0; }))
        addrs.push_back(wire::IpAddr::v6(g));
    }
    cm::CmDeviceInfo info;
    info.node_guid = d.model->node_guid();
    info.addresses = std::move(addrs);
    info.path_mtu = kIbMtu1024;
    cm_.update_device(d.index, info);
  }
}

void CmService::add_device(const std::string& name, device::Device& model, DatapathRunner& runner) {
  ServedDevice d;
  d.index = next_index_++;
  d.model = &model;
  d.runner = &runner;
  const std::uint32_t index = d.index;
  devices_[name] = d;
  cm::CmDeviceInfo info;
  info.node_guid = model.node_guid();
  info.path_mtu = kIbMtu1024;
  cm_.add_device(index, info);
  refresh_addresses();
  Datapath& dp = runner.datapath();
  for (std::uint32_t w = 0; w < dp.worker_count(); ++w) {
    dp.worker(w).call([this, index](Worker& worker) {
      worker.set_gsi_sink_on_worker(
          [this, index](wire::Bytes frame) { deliver_mad_on_worker(index, frame); });
      return 0;
    });
  }
}

void CmService::remove_device(const std::string& name) {
  const auto it = devices_.find(name);
  if (it == devices_.end()) return;
  Datapath& dp = it->second.runner->datapath();
  for (std::uint32_t w = 0; w < dp.worker_count(); ++w) {
    dp.worker(w).call([](Worker& worker) {
      worker.set_gsi_sink_on_worker(nullptr);
      return 0;
    });
  }
  cm_.remove_device(monotonic_now_ns(), it->second.index);
  devices_.erase(it);
  sync_readiness();
}

void CmService::deliver_mad_on_worker(std::uint32_t device, wire::Bytes frame) {
  {
    std::lock_guard<std::mutex> guard(inbound_lock_);
    inbound_.push_back(InboundFrame{device, std::vector<std::uint8_t>(frame.begin(), frame.end())});
  }
  const std::uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

int CmService::next_timeout_ms() const {
  const auto deadline = cm_.next_deadline();
  if (!deadline) return -1;
  const std::uint64_t now = monotonic_now_ns();
  if (*deadline <= now) return 0;
  return static_cast<int>(
      std::min<std::uint64_t>((*deadline - now + kNsPerMs - 1) / kNsPerMs, 60'000));
}

void CmService::run_pending() {
  std::uint64_t drained;
  while (read(wake_fd_, &drained, sizeof drained) > 0) {
  }
  std::vector<InboundFrame> frames;
  {
    std::lock_guard<std::mutex> guard(inbound_lock_);
    frames.swap(inbound_);
  }
  const std::uint64_t now = monotonic_now_ns();
  refresh_addresses();
  for (const auto& f : frames) {
    auto decoded = wire::decode_frame(f.bytes);
    if (!decoded || !decoded->icrc_ok || !cm::is_gsi_mad(*decoded)) {
      ++gsi_dropped_;
      continue;
    }
    cm_.handle_mad(now, f.device, cm::peer_of(*decoded), decoded->payload.first(cm::kMadBytes));
  }
  cm_.handle_timeout(now);
  send_pending_mads();
  sync_readiness();
}

void CmService::send_pending_mads() {
  while (auto out = cm_.poll_transmit()) {
    auto* d = const_cast<ServedDevice*>(served(out->first));
    if (d == nullptr) continue;
    wire::FrameAddress addr;
    const auto& mac = d->model->netdev().mac;
    std::copy(mac.begin(), mac.end(), addr.src_mac.begin());
    addr.src_ip = wire::IpAddr::v6(out->second.to.local_gid);
    addr.dst_ip = wire::IpAddr::v6(out->second.to.remote_gid);
    addr.hop_limit = default_hop_limit(addr.dst_ip.is_v4());
    addr.traffic_class = out->second.to.traffic_class;
    addr.flow_label = addr.dst_ip.is_v4() ? 0 : out->second.to.flow_label;
    addr.udp_src_port = wire::udp_sport_at_create(wire::Qpn(cm::kGsiQpn));
    const wire::TransportHeaders hdr = cm::gsi_headers(d->gsi_psn++ & 0xffffff);
    auto mad = std::make_shared<cm::MadBuffer>(out->second.mad);
    d->runner->datapath().worker(0).post_command([addr, hdr, mad](Worker& w) {
      w.send_packet_on_worker(addr, hdr, wire::Bytes(mad->data(), mad->size()));
    });
  }
}

void CmService::sync_readiness() {
  for (auto& [id, f] : files_) {
    const bool want = cm_.has_events(id);
    if (want == f.readable || f.event_fd < 0) continue;
    std::uint64_t v = 1;
    if (want) {
      (void)!write(f.event_fd, &v, sizeof v);
    } else {
      // We wrote 1 and nobody else reads it: the read returns at once, even on a blocking fd.
      (void)!read(f.event_fd, &v, sizeof v);
    }
    f.readable = want;
  }
}

int CmService::open_file(std::uint64_t client, pid_t pid, int event_fd) {
  if (event_fd < 0) return EINVAL;
  if (files_.count(client) != 0) {
    close(event_fd);
    return EBUSY;
  }
  files_[client] = File{pid, event_fd, false};
  return 0;
}

void CmService::close_file(std::uint64_t client) {
  const auto it = files_.find(client);
  if (it == files_.end()) return;
  cm_.release_file(monotonic_now_ns(), client);
  if (it->second.event_fd >= 0) close(it->second.event_fd);
  files_.erase(it);
  send_pending_mads();
  sync_readiness();
}

int CmService::command(std::uint64_t client, const std::string& buf, std::string& response) {
  if (files_.count(client) == 0) return EBADF;
  rdma_ucm_cmd_hdr hdr;
  if (buf.size() < sizeof hdr) return EINVAL;
  std::memcpy(&hdr, buf.data(), sizeof hdr);
  if (buf.size() < sizeof hdr + hdr.in) return EINVAL;
  const std::string in = buf.substr(sizeof hdr, hdr.in);
  const std::string extra = buf.substr(sizeof hdr + hdr.in);
  refresh_addresses();
  const int err = dispatch(client, hdr.cmd, in, extra, response);
  if (err == 0 && response.size() > hdr.out) return ENOSPC;
  send_pending_mads();
  sync_readiness();
  return err;
}

int CmService::dispatch(std::uint64_t file, std::uint32_t cmd, const std::string& in,
                        const std::string& extra, std::string& response) {
  const std::uint64_t now = monotonic_now_ns();
  switch (cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID: {
      rdma_ucm_create_id c;
      if (!read_cmd(in, c)) return EINVAL;
      auto id = cm_.create_id(file, c.uid, static_cast<cm::PortSpace>(c.ps));
      if (!id) return id.error();
      rdma_ucm_create_id_resp r{};
      r.id = *id;
      response = bytes_of(r);
      return 0;
    }
    case RDMA_USER_CM_CMD_DESTROY_ID:
    case RDMA_USER_CM_CMD_LEAVE_MCAST: {
      rdma_ucm_destroy_id c;
      if (!read_cmd(in, c)) return EINVAL;
      if (cmd == RDMA_USER_CM_CMD_LEAVE_MCAST) return ENOSYS;
      auto reported = cm_.destroy_id(now, file, c.id);
      if (!reported) return reported.error();
      rdma_ucm_destroy_id_resp r{};
      r.events_reported = *reported;
      response = bytes_of(r);
      return 0;
    }
    case RDMA_USER_CM_CMD_BIND_IP: {
      rdma_ucm_bind_ip c;
      if (!read_cmd(in, c)) return EINVAL;
      auto addr = sockaddr_of(&c.addr);
      if (!addr) return EAFNOSUPPORT;
      return cm_.bind(file, c.id, *addr);
    }
    case RDMA_USER_CM_CMD_BIND: {
      // AF_IB (librdmacm's first probe) is not served: librdmacm then uses the IP commands.
      rdma_ucm_bind c;
      if (!read_cmd(in, c)) return EINVAL;
      auto addr = sockaddr_of(&c.addr);
      if (!addr) return EAFNOSUPPORT;
      return cm_.bind(file, c.id, *addr);
    }
    case RDMA_USER_CM_CMD_RESOLVE_IP: {
      rdma_ucm_resolve_ip c;
      if (!read_cmd(in, c)) return EINVAL;
      auto dst = sockaddr_of(&c.dst_addr);
      if (!dst) return EAFNOSUPPORT;
      auto src = sockaddr_of(&c.src_addr);
      return cm_.resolve_addr(now, file, c.id, src, *dst);
    }
    case RDMA_USER_CM_CMD_RESOLVE_ADDR: {
      rdma_ucm_resolve_addr c;
      if (!read_cmd(in, c)) return EINVAL;
      auto dst = sockaddr_of(&c.dst_addr);
      if (!dst) return EAFNOSUPPORT;
      std::optional<cm::SockAddr> src;
      if (c.src_size != 0) src = sockaddr_of(&c.src_addr);
      return cm_.resolve_addr(now, file, c.id, src, *dst);
    }
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE: {
      rdma_ucm_resolve_route c;
      if (!read_cmd(in, c)) return EINVAL;
      return cm_.resolve_route(now, file, c.id);
    }
    case RDMA_USER_CM_CMD_QUERY_ROUTE: {
      rdma_ucm_query c;
      if (!read_cmd(in, c)) return EINVAL;
      auto info = cm_.query_route(file, c.id);
      if (!info) return info.error();
      rdma_ucm_query_route_resp r{};
      put_sockaddr(&r.src_addr, info->src);
      put_sockaddr(&r.dst_addr, info->dst);
      r.ibdev_index = kInvalidIbdevIndex;
      if (info->device) {
        r.node_guid = htobe64(info->node_guid);
        r.port_num = 1;
        r.num_paths = info->num_paths;
        fill_path(r.ib_route[0], *info);
      }
      response = bytes_of(r);
      return 0;
    }
    case RDMA_USER_CM_CMD_CONNECT: {
      rdma_ucm_connect c;
      if (!read_cmd(in, c)) return EINVAL;
      if (!c.conn_param.valid) return EINVAL;
      return cm_.connect(now, file, c.id, conn_of(c.conn_param));
    }
    case RDMA_USER_CM_CMD_LISTEN: {
      rdma_ucm_listen c;
      if (!read_cmd(in, c)) return EINVAL;
      return cm_.listen(file, c.id, static_cast<int>(c.backlog));
    }
    case RDMA_USER_CM_CMD_ACCEPT: {
      rdma_ucm_accept c;
      if (!read_cmd(in, c)) return EINVAL;
      std::optional<cm::ConnParam> param;
      if (c.conn_param.valid) param = conn_of(c.conn_param);
      return cm_.accept(now, file, c.id, c.uid, param);
    }
    case RDMA_USER_CM_CMD_REJECT: {
      rdma_ucm_reject c;
      if (!read_cmd(in, c)) return EINVAL;
      const std::size_t n = std::min<std::size_t>(c.private_data_len, RDMA_MAX_PRIVATE_DATA);
      return cm_.reject(now, file, c.id, std::span(c.private_data, n), c.reason);
    }
    case RDMA_USER_CM_CMD_DISCONNECT: {
      rdma_ucm_disconnect c;
      if (!read_cmd(in, c)) return EINVAL;
      return cm_.disconnect(now, file, c.id);
    }
    case RDMA_USER_CM_CMD_INIT_QP_ATTR: {
      rdma_ucm_init_qp_attr c;
      if (!read_cmd(in, c)) return EINVAL;
      auto a = cm_.init_qp_attr(file, c.id, c.qp_state);
      if (!a) return a.error();
      ib_uverbs_qp_attr r{};
      r.qp_attr_mask = a->mask;
      r.qp_state = a->qp_state;
      r.path_mtu = a->path_mtu;
      r.qkey = a->qkey;
      r.rq_psn = a->rq_psn;
      r.sq_psn = a->sq_psn;
      r.dest_qp_num = a->dest_qp_num;
      r.qp_access_flags = a->qp_access_flags;
      std::memcpy(r.ah_attr.grh.dgid, a->dgid.data(), 16);
      r.ah_attr.grh.flow_label = a->flow_label;
      r.ah_attr.grh.hop_limit = a->hop_limit;
      r.ah_attr.grh.traffic_class = a->traffic_class;
      r.ah_attr.is_global = 1;
      r.ah_attr.port_num = 1;
      // The QP's source GID: the index of the id's address in its device's GID table.
      for (const auto& info : cm_.ids()) {
        if (info.handle != c.id || !info.device) continue;
        if (const ServedDevice* d = served(*info.device)) {
          if (auto idx = d->model->gids().find(info.src.ip.bytes))
            r.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(*idx);
        }
      }
      r.pkey_index = a->pkey_index;
      r.port_num = a->port_num;
      r.max_rd_atomic = a->max_rd_atomic;
      r.max_dest_rd_atomic = a->max_dest_rd_atomic;
      r.min_rnr_timer = a->min_rnr_timer;
      r.timeout = a->timeout;
      r.retry_cnt = a->retry_cnt;
      r.rnr_retry = a->rnr_retry;
      response = bytes_of(r);
      return 0;
    }
    case RDMA_USER_CM_CMD_GET_EVENT: {
      auto e = cm_.get_event(file);
      if (!e) return EAGAIN;  // the preload waits on the channel's eventfd, then asks again
      rdma_ucm_event_resp r{};
      r.uid = e->uid;
      r.id = e->id;
      r.event = static_cast<std::uint32_t>(e->event);
      r.status = static_cast<std::uint32_t>(e->status);
      if (e->is_ud) {
        fill_ud(r.param.ud, e->ud, sgid_index_of(e->ud.sgid));
      } else {
        fill_conn(r.param.conn, e->conn);
        if (e->conn.private_data.empty() && e->conn.qp_num == 0) r.param.conn.valid = 0;
      }
      response = bytes_of(r);
      return 0;
    }
    case RDMA_USER_CM_CMD_SET_OPTION: {
      rdma_ucm_set_option c;
      if (!read_cmd(in, c)) return EINVAL;
      if (extra.size() != c.optlen) return EINVAL;
      if (c.level != kOptionLevelId) return ENOSYS;
      switch (c.optname) {
        case kOptionIdTos:
          if (c.optlen != 1) return EINVAL;
          return cm_.set_tos(file, c.id, static_cast<std::uint8_t>(extra[0]));
        case kOptionIdReuseaddr:
        case kOptionIdAfonly: {
          if (c.optlen != sizeof(int)) return EINVAL;
          int v;
          std::memcpy(&v, extra.data(), sizeof v);
          return c.optname == kOptionIdReuseaddr ? cm_.set_reuseaddr(file, c.id, v != 0) : 0;
        }
        case kOptionIdAckTimeout:
          if (c.optlen != 1) return EINVAL;
          return cm_.set_ack_timeout(file, c.id, static_cast<std::uint8_t>(extra[0]));
        default:
          return ENOSYS;
      }
    }
    case RDMA_USER_CM_CMD_NOTIFY: {
      rdma_ucm_notify c;
      if (!read_cmd(in, c)) return EINVAL;
      return cm_.notify(now, file, c.id, c.event);
    }
    case RDMA_USER_CM_CMD_MIGRATE_ID: {
      // The preload puts the daemon's handle of the target channel in `fd`; both channels must
      // belong to the same process (ucma_migrate_id takes an fd of the caller's own table).
      rdma_ucm_migrate_id c;
      if (!read_cmd(in, c)) return EINVAL;
      // The command is written on the destination channel; `fd` names the source.
      const auto src = files_.find(c.fd);
      if (src == files_.end() || src->second.pid != files_.at(file).pid) return EBADF;
      auto reported = cm_.migrate_id(c.fd, c.id, file);
      if (!reported) return reported.error();
      rdma_ucm_migrate_resp r{};
      r.events_reported = *reported;
      response = bytes_of(r);
      return 0;
    }
    default:
      return ENOSYS;  // QUERY (AF_IB only), GET_OPTION, multicast
  }
}

std::string CmService::show(const std::string& name) const {
  const auto it = devices_.find(name);
  if (it == devices_.end()) return {};
  nlohmann::ordered_json ids = nlohmann::ordered_json::array();
  for (const auto& info : cm_.ids()) {
    // Ids on no device yet (bound to no address, or listening on any: that listens on every
    // device, as cma_listen_on_all) show under every device.
    if (info.device && *info.device != it->second.index) continue;
    const auto f = files_.find(info.file);
    nlohmann::ordered_json j;
    j["pid"] = f == files_.end() ? 0 : f->second.pid;
    j["id"] = info.handle;
    j["state"] = cm::to_string(info.state);
    j["role"] = info.state == cm::IdState::kListen ? "listener" : "connection";
    j["local"] = wire::to_string(info.src.ip) + ":" + std::to_string(info.src.port);
    j["remote"] = info.dst.ip == wire::IpAddr{} && info.dst.port == 0
                      ? ""
                      : wire::to_string(info.dst.ip) + ":" + std::to_string(info.dst.port);
    j["qpn"] = info.qp_num;
    j["remote_qpn"] = info.remote_qpn;
    if (info.comm_id) {
      j["comm_id"] = *info.comm_id;
      if (const cm::Endpoint* ep = const_cast<cm::RdmaCm&>(cm_).endpoint(it->second.index)) {
        if (auto s = ep->state_of(*info.comm_id)) j["cm_state"] = cm::to_string(*s);
      }
    }
    ids.push_back(j);
  }
  nlohmann::ordered_json out;
  out["device"] = name;
  out["ids"] = ids;
  return out.dump();
}

std::optional<CmStat> CmService::stat(const std::string& name) const {
  const auto it = devices_.find(name);
  if (it == devices_.end()) return std::nullopt;
  const cm::Endpoint* ep = const_cast<cm::RdmaCm&>(cm_).endpoint(it->second.index);
  if (ep == nullptr) return std::nullopt;
  const cm::CmCounters& c = ep->counters();
  CmStat s;
  s.mads_sent = c.mads_sent;
  s.mads_received = c.mads_received + gsi_dropped_;
  s.mads_retried = c.mads_retried;
  s.mads_dropped = c.mads_dropped + gsi_dropped_;
  s.timeouts = c.timeouts;
  for (std::uint16_t r = 0; r <= cm::kMaxRejReason; ++r) {
    const char* n = cm::rej_reason_name(r);
    const std::string key = n != nullptr ? n : "other";
    if (c.rej_sent[r] != 0) s.rej_sent[key] += c.rej_sent[r];
    if (c.rej_received[r] != 0) s.rej_received[key] += c.rej_received[r];
  }
  return s;
}

}  // namespace xroce::daemon
