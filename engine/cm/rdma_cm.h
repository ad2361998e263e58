// rdma_cm over the IB CM, for the IP-addressed port spaces (the kernel's drivers/infiniband/
// core/cma.c with ucma.c's per-file event queues): ids bound to IP addresses and ports,
// address and route resolution, listening with a backlog, connect/accept/reject/disconnect
// mapped onto an Endpoint per device, and the events librdmacm expects, in the kernel's order
// and with its statuses (cma_ib_handler). Sans-I/O: time is a parameter, routes come from a
// Resolver, MADs leave through each device's Endpoint (drain with poll_transmit).
//
// Ownership: every id belongs to one file (a process's event channel); operations name the
// file and fail with EINVAL for another file's id, as ucma_get_ctx does. release_file() is the
// channel closing or its process dying: every id goes as rdma_destroy_id would take it (DREQ
// for a connection, REJ during a handshake).
//
// Calling order: like Endpoint. After any call, drain poll_transmit(); events wait in their
// file's queue for get_event().
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cm/endpoint.h"
#include "cm/ip_service.h"

namespace xroce::cm {

// librdmacm's enum rdma_cm_event_type values (the ucma ABI).
enum class RdmaCmEvent : std::uint32_t {
  kAddrResolved = 0,
  kAddrError = 1,
  kRouteResolved = 2,
  kRouteError = 3,
  kConnectRequest = 4,
  kConnectResponse = 5,
  kConnectError = 6,
  kUnreachable = 7,
  kRejected = 8,
  kEstablished = 9,
  kDisconnected = 10,
  kDeviceRemoval = 11,
  kMulticastJoin = 12,
  kMulticastError = 13,
  kAddrChange = 14,
  kTimewaitExit = 15,
};
const char* to_string(RdmaCmEvent event);

struct SockAddr {
  wire::IpAddr ip;  // IPv4-mapped for IPv4; all zeros (v4) or :: (v6) is "any"
  std::uint16_t port = 0;
  bool v4 = true;
  // IPv6 link-local addresses: the interface they belong to (sin6_scope_id); 0 otherwise.
  std::uint32_t scope_id = 0;
  bool any() const;
  bool operator==(const SockAddr&) const = default;
};

// A device the CM can use: its GIDs are its IP addresses.
struct CmDeviceInfo {
  std::uint64_t node_guid = 0;  // as ibv_get_device_guid gives it (wire order value)
  std::vector<wire::IpAddr> addresses;
  std::uint8_t path_mtu = 3;  // ibv_mtu of the port
  std::uint8_t rate = 3;      // IB rate encoding of the port
  std::uint8_t max_rd_atomic = 16;
};

// Where a destination is reached from: the source address the route picks and the device that
// owns it, or an errno (ENETUNREACH, EHOSTUNREACH, EADDRNOTAVAIL).
struct Route {
  wire::IpAddr src;
  std::uint32_t device = 0;
  std::uint8_t hop_limit = 64;
};
class Resolver {
 public:
  virtual ~Resolver() = default;
  // `dst_scope_id`: the interface of an IPv6 link-local `dst` (its sin6_scope_id), else 0.
  virtual wire::Result<Route, int> resolve(const wire::IpAddr& src, const wire::IpAddr& dst,
                                           std::uint32_t dst_scope_id) = 0;
};

// The conn param of the ucma ABI (struct rdma_ucm_conn_param, without the pointer).
struct ConnParam {
  std::uint32_t qp_num = 0;
  std::uint32_t qkey = 0;
  std::vector<std::uint8_t> private_data;
  bool srq = false;
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t flow_control = 0;
  std::uint8_t retry_count = 7;
  std::uint8_t rnr_retry_count = 7;
};

// The UD parameters of an event for a UDP port space id (struct rdma_ucm_ud_param): where the
// peer's QP is, for the address handle the consumer makes from it.
struct UdParam {
  std::uint32_t qp_num = 0;
  std::uint32_t qkey = 0;
  Gid dgid{};
  Gid sgid{};  // ours: the daemon turns it into a GID index
  std::uint8_t hop_limit = 0;
  std::uint8_t traffic_class = 0;
  std::vector<std::uint8_t> private_data;
};

// RDMA_UDP_QKEY: the Q_Key rdma_cm gives UDP port space QPs (cma_set_qkey).
inline constexpr std::uint32_t kUdpQkey = 0x01234567;

// An event as GET_EVENT returns it (struct rdma_ucm_event_resp).
struct EventRecord {
  std::uint64_t uid = 0;
  std::uint32_t id = 0;  // the id's handle (for CONNECT_REQUEST: the new id)
  RdmaCmEvent event = RdmaCmEvent::kAddrResolved;
  std::int32_t status = 0;
  ConnParam conn;
  bool is_ud = false;  // an id of the UDP port space: `ud` instead of `conn`
  UdParam ud;
};

// The ibv_qp_attr fields rdma_init_qp_attr fills, with ibv_qp_attr_mask bits in `mask`.
struct QpAttrs {
  std::uint32_t mask = 0;
  std::uint32_t qp_state = 0;
  std::uint32_t qp_access_flags = 0;
  std::uint16_t pkey_index = 0;
  std::uint8_t port_num = 1;
  std::uint32_t qkey = 0;
  std::uint32_t path_mtu = 0;
  std::uint32_t dest_qp_num = 0;
  std::uint32_t rq_psn = 0;
  std::uint32_t sq_psn = 0;
  std::uint8_t max_dest_rd_atomic = 0;
  std::uint8_t max_rd_atomic = 0;
  std::uint8_t min_rnr_timer = 0;
  std::uint8_t timeout = 0;
  std::uint8_t retry_cnt = 0;
  std::uint8_t rnr_retry = 0;
  // The address vector (ah_attr with a GRH).
  Gid dgid{};
  std::uint8_t sgid_index = 0;
  std::uint8_t hop_limit = 0;
  std::uint8_t traffic_class = 0;
  std::uint32_t flow_label = 0;
};

// What QUERY_ROUTE answers.
struct RouteInfo {
  SockAddr src;
  SockAddr dst;
  std::optional<std::uint32_t> device;  // bound to a device
  std::uint64_t node_guid = 0;
  std::uint32_t num_paths = 0;
  Gid sgid{};
  Gid dgid{};
  std::uint8_t hop_limit = 0;
  std::uint8_t traffic_class = 0;
  std::uint8_t path_mtu = 0;
  std::uint8_t rate = 0;
  std::uint8_t packet_life_time = 0;
};

enum class IdState : std::uint8_t {
  kIdle,
  kAddrQuery,
  kAddrResolved,
  kRouteQuery,
  kRouteResolved,
  kConnect,
  kDisconnect,
  kAddrBound,
  kListen,
  kDestroying,
};
const char* to_string(IdState state);

// One id, as `xroce cm show` prints it.
struct IdInfo {
  std::uint64_t file = 0;
  std::uint32_t handle = 0;
  IdState state = IdState::kIdle;
  PortSpace ps = PortSpace::kTcp;
  SockAddr src;
  SockAddr dst;
  std::optional<std::uint32_t> device;
  std::optional<CommId> comm_id;
  std::uint32_t qp_num = 0;
  std::uint32_t remote_qpn = 0;
};

class RdmaCm {
 public:
  RdmaCm(Resolver& resolver, EndpointConfig endpoint_defaults);

  // Devices come and go with `xroce link add/del`; removal sends DEVICE_REMOVAL to the ids on
  // it (they keep existing until destroyed, as the kernel's).
  void add_device(std::uint32_t index, const CmDeviceInfo& info);
  void remove_device(std::uint64_t now_ns, std::uint32_t index);
  // The device's addresses or port changed (its endpoint and connections stay).
  void update_device(std::uint32_t index, const CmDeviceInfo& info);
  Endpoint* endpoint(std::uint32_t device);

  // ---- The ucma commands. 0 or errno.
  wire::Result<std::uint32_t, int> create_id(std::uint64_t file, std::uint64_t uid, PortSpace ps);
  // Returns events_reported.
  wire::Result<std::uint32_t, int> destroy_id(std::uint64_t now_ns, std::uint64_t file,
                                              std::uint32_t handle);
  int bind(std::uint64_t file, std::uint32_t handle, const SockAddr& addr);
  int resolve_addr(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle,
                   const std::optional<SockAddr>& src, const SockAddr& dst);
  int resolve_route(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle);
  wire::Result<RouteInfo, int> query_route(std::uint64_t file, std::uint32_t handle) const;
  int listen(std::uint64_t file, std::uint32_t handle, int backlog);
  int connect(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle,
              const ConnParam& param);
  int accept(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle, std::uint64_t uid,
             const std::optional<ConnParam>& param);
  int reject(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle,
             std::span<const std::uint8_t> private_data, std::uint8_t reason);
  int disconnect(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle);
  wire::Result<QpAttrs, int> init_qp_attr(std::uint64_t file, std::uint32_t handle,
                                          std::uint32_t qp_state) const;
  int notify(std::uint64_t now_ns, std::uint64_t file, std::uint32_t handle, std::uint32_t event);
  int set_tos(std::uint64_t file, std::uint32_t handle, std::uint8_t tos);
  int set_reuseaddr(std::uint64_t file, std::uint32_t handle, bool on);
  // RDMA_OPTION_ID_ACK_TIMEOUT: the QP's local ACK timeout (rdma_set_ack_timeout).
  int set_ack_timeout(std::uint64_t file, std::uint32_t handle, std::uint8_t timeout);
  // Moves an id and its queued events to another file of the same owner; events_reported.
  wire::Result<std::uint32_t, int> migrate_id(std::uint64_t from_file, std::uint32_t handle,
                                              std::uint64_t to_file);
  // The next event of `file`, or nullopt (the caller blocks or answers EAGAIN).
  std::optional<EventRecord> get_event(std::uint64_t file);
  bool has_events(std::uint64_t file) const;
  void release_file(std::uint64_t now_ns, std::uint64_t file);

  // ---- Network and time.
  void handle_mad(std::uint64_t now_ns, std::uint32_t device, const MadPeer& from,
                  std::span<const std::uint8_t> mad);
  void handle_timeout(std::uint64_t now_ns);
  std::optional<std::uint64_t> next_deadline() const;
  // MADs to send: the device they leave from and the MAD.
  std::optional<std::pair<std::uint32_t, OutgoingMad>> poll_transmit();

  std::vector<IdInfo> ids() const;

 private:
  struct Id {
    std::uint64_t file = 0;
    std::uint64_t uid = 0;
    std::uint32_t handle = 0;
    PortSpace ps = PortSpace::kTcp;
    IdState state = IdState::kIdle;
    SockAddr src;
    SockAddr dst;
    std::optional<std::uint32_t> device;
    std::optional<CommId> comm_id;
    std::uint32_t events_reported = 0;
    int backlog = 0;
    std::uint32_t listener = 0;  // for ids made by a connect request
    bool reuseaddr = false;
    std::uint8_t tos = 0;
    std::optional<std::uint8_t> ack_timeout;
    std::uint8_t hop_limit = 64;
    std::uint32_t seq_num = 0;  // the Starting PSN of our REQ or REP: the PSN we receive from
    std::uint32_t qp_num = 0;
    std::uint32_t remote_qpn = 0;
    std::uint32_t remote_psn = 0;  // the Starting PSN of the peer's: the PSN we send from
    std::uint8_t responder_resources = 0;
    std::uint8_t initiator_depth = 0;
    std::uint8_t retry_count = 7;
    std::uint8_t rnr_retry_count = 7;
    std::uint8_t path_mtu = 3;
    Gid dgid{};
    std::uint32_t flow_label = 0;
  };
  struct Device {
    CmDeviceInfo info;
    std::unique_ptr<Endpoint> endpoint;
    std::map<std::uint64_t, int> listen_refs;  // service ID -> ids listening through it
  };

  Id* find(std::uint64_t file, std::uint32_t handle);
  const Id* find(std::uint64_t file, std::uint32_t handle) const;
  Id* find_by_comm(std::uint32_t device, CommId comm_id);
  void queue(Id& id, EventRecord record);
  int bind_port(Id& id);
  bool port_in_use(PortSpace ps, const SockAddr& addr, std::uint32_t except) const;
  std::optional<std::uint32_t> device_of(const wire::IpAddr& ip) const;
  void listen_on(Id& id, std::uint32_t device);
  void stop_listening(Id& id);
  void drain_endpoint_events(std::uint64_t now_ns, std::uint32_t device);
  void on_cm_event(std::uint64_t now_ns, std::uint32_t device, const CmEvent& event);
  void on_connect_request(std::uint64_t now_ns, std::uint32_t device, const CmEvent& event);
  void on_sidr_request(std::uint64_t now_ns, std::uint32_t device, const CmEvent& event);
  Id* listener_for(PortSpace ps, std::uint64_t service_id, const wire::IpAddr& dst);
  Id make_passive_id(Id& listener, std::uint32_t device, CommId comm, const IpHeader& header);
  void destroy(std::uint64_t now_ns, Id& id);

  Resolver& resolver_;
  EndpointConfig endpoint_defaults_;
  std::mt19937 rng_;
  std::uint32_t next_handle_ = 1;
  std::map<std::uint32_t, Device> devices_;
  std::map<std::uint32_t, Id> ids_;  // by handle (unique across files, as ucma's idr)
  std::map<std::uint64_t, std::deque<EventRecord>> events_;  // by file
  std::map<std::uint64_t, std::uint32_t> service_listener_;  // service ID -> listening id
};

}  // namespace xroce::cm
