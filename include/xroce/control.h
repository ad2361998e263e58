// The control protocol between xroced and its clients (the provider, the xroce CLI).
//
// Transport: a Unix SOCK_SEQPACKET socket per daemon (one daemon per network namespace), at the
// path the daemon writes into $SYSFS_PATH/class/infiniband/<dev>/xroce_control (and at
// run_dir/control.sock). One request is one datagram: a Header followed by the request body;
// the reply is one datagram: a Header (same op and seq, status = 0 or a positive errno) followed
// by the reply body when status is 0. Bodies are the fixed-size structs below, in host byte
// order (both ends run on the same host); include/xroce/control_message.h encodes them and
// include/xroce/fd_passing.h carries the descriptors some of them come with.
//
// Who is asking. The daemon binds a connection to the process that opened it (its pidfd) and
// honours a request only from that process (the kernel's SCM_CREDENTIALS on each datagram), so
// a connection inherited across fork gets EPERM; and a connection outlives neither its opener
// (exit) nor, once it is a context, the program image it was opened for (exec): the daemon
// closes it. A connection opened with Op::hello is one verbs context, and every object it
// creates belongs to it: other connections cannot name it, and it is released when the
// connection closes (the process exiting or being killed included).
//
// Op::hello carries three file descriptors (SCM_RIGHTS): the daemon's end of the context's event
// socket, on which the daemon sends ibv_get_async_event records (struct AsyncEvent), and the
// caller's own /proc/self/mem and /proc/self/maps, opened by the caller: the daemon reaches the
// context's registered memory only through them, with the access the caller itself had, and
// only for as long as the address space they were opened on lives (never across exec). Its
// reply carries the context's doorbell (an eventfd), shared by all its QPs and SRQs, and its page
// of ready bits (a memfd of one queues::ContextPage, include/xroce/queues.h).
// Op::create_comp_channel carries the daemon's end of a completion channel, on which it will
// send the 8-byte records ibv_get_cq_event() reads (struct CompletionEvent).
//
// Descriptors: a request carries exactly the descriptors its op lists; the daemon closes any it
// does not keep, whatever the request (short, bad magic or version, unknown op, extra fds).
//
// Quotas: each context may hold a bounded number of objects and registered bytes (what
// Op::query_device reports is what this context can get); beyond them a create fails with
// ENOMEM, as on a device out of resources, and a client that floods the socket finds its sends
// blocked (EAGAIN on a non-blocking socket) rather than other clients starved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace xroce::control {

inline constexpr uint32_t kMagic = 0x58524345;  // "XRCE"
inline constexpr uint16_t kVersion = 2;
inline constexpr std::size_t kMaxMessageBytes = 64 * 1024;
inline constexpr std::size_t kNameBytes = 64;    // ibdev names, like IBV_SYSFS_NAME_MAX
inline constexpr std::size_t kIfNameBytes = 16;  // IFNAMSIZ
inline constexpr std::size_t kCpuListBytes = 128;
// File in the device's sysfs-shaped directory naming the control socket.
inline constexpr const char* kControlPathFile = "xroce_control";

enum class Op : uint16_t {
  hello = 1,            // HelloRequest + fds [event socket, /proc/self/mem, /proc/self/maps]
                        // -> HelloReply + fds [doorbell eventfd, ready-bit page]
  query_device,         // -> DeviceAttr
  query_port,           // PortRequest -> PortAttr
  alloc_pd,             // -> HandleReply
  dealloc_pd,           // HandleRequest -> (empty)
  reg_mr,               // RegMrRequest (+ optional memfd, see MrDma) -> RegMrReply
  dereg_mr,             // HandleRequest -> (empty)
  link_add,             // LinkAddRequest -> (empty); root only
  link_del,             // LinkDelRequest -> (empty); root only
  link_show,            // -> TextReply (JSON array of devices)
  create_comp_channel,  // (+ fd: the daemon's end of the channel) -> HandleReply
  // The data path objects (include/xroce/queues.h). Replies marked "+ fds" carry file
  // descriptors with SCM_RIGHTS, in the order given.
  create_cq,    // CreateCqRequest -> CqReply + fds [ring memfd]
  destroy_cq,   // HandleRequest -> (empty); EBUSY while a QP uses it
  resize_cq,    // ResizeCqRequest -> CqReply + fds [new ring memfd]
  create_qp,    // CreateQpRequest -> CreateQpReply + fds [ring memfd]
  modify_qp,    // ModifyQpRequest -> (empty)
  query_qp,     // HandleRequest -> QueryQpReply
  destroy_qp,   // HandleRequest -> (empty)
  create_srq,   // CreateSrqRequest -> SrqReply + fds [ring memfd]
  modify_srq,   // ModifySrqRequest -> (empty)
  query_srq,    // HandleRequest -> SrqAttr
  destroy_srq,  // HandleRequest -> (empty); EBUSY while a QP uses it
  create_ah,    // CreateAhRequest -> HandleReply
  destroy_ah,   // HandleRequest -> (empty)
  // Observability, for `xroce stat` / `xroce qp show` (any user; no hello needed). A user other
  // than root sees only the objects of its own processes: addresses, keys and PSNs of another
  // user's regions and QPs are not shown, as the kernel shows them only to an admin.
  stat,     // NameRequest -> TextReply: {"device", "counters": {rxe hw_counters names and
            // xroce's, engine/device/counters.h}, "memory_regions": [{..., "dma": "shared"|"cma"}]}
  qp_show,  // NameRequest -> TextReply: [{"qpn", "type", "state", "sq_psn", "rq_psn",
            // "dest_qpn", "peer", "worker", "retransmits", ...}]
  // Congestion control (DCQCN, engine/cc; `xroce cc`). Parameters are named as ConnectX's
  // ecn/roce_rp and ecn/roce_np name them (engine/cc/params.h), the per-priority enables as
  // rp_enable.P / np_enable.P (P = 0..7), and rp_enable / np_enable set all eight. Changes
  // apply at run time to existing QPs.
  cc_show,     // NameRequest -> TextReply: {"device", "profile", "line_rate_mbps", "params":
               // {name: value, ...}, "roce_rp": [names], "roce_np": [names], "rp_enable":
               // [8 x 0|1], "np_enable": [8 x 0|1]}; any user
  cc_set,      // CcSetRequest + text "NAME=VALUE\n..." -> TextReply: {"ok": true, "cc": <as
               // cc_show>} or {"ok": false, "error": "..."} and nothing changed; root only
  cc_profile,  // CcProfileRequest -> TextReply as cc_set (the enables are kept); root only
  // rdma_cm (engine/daemon/cm_service.h): a connection opened with cm_open is one event
  // channel of librdmacm; no hello.
  cm_open,     // (+ fd: the channel's eventfd, readable while it has events) -> HandleReply
               // (the channel's name for cm_command MIGRATE_ID)
  cm_command,  // the ucma write() buffer -> the bytes for its response pointer (maybe none)
  cm_show,     // NameRequest -> TextReply: {"device", "ids": [{"pid", "id", "state", ...}]}
  // The next page of the last TextReply that said `more` (any size of text travels in pages of
  // at most kMaxMessageBytes). ENOENT when nothing is pending.
  text_next,  // (empty) -> TextReply
  // Memory windows, re-registration, XRC domains, SRQ resize, ODP advice.
  alloc_mw,    // AllocMwRequest -> MwReply
  dealloc_mw,  // HandleRequest -> (empty)
  rereg_mr,    // ReregMrRequest -> RegMrReply (the region's keys change)
  open_xrcd,   // OpenXrcdRequest (+ fd of the file naming a shared domain) -> HandleReply
  close_xrcd,  // HandleRequest -> (empty); EBUSY while SRQs or QPs use the domain
  open_qp,     // OpenQpRequest -> CreateQpReply + fds [ring memfd, doorbell eventfd]
  resize_srq,  // ResizeSrqRequest -> SrqReply + fds [new ring memfd]
  advise_mr,   // AdviseMrRequest -> (empty)
  // The device's receive impairment (engine/daemon/rx_impairment.h; `xroce impair`): "loss"
  // (a probability in [0, 1)) and "seed". Applies at once to every worker.
  impair_show,  // NameRequest -> TextReply: {"device", "loss", "seed"}; any user
  impair_set,   // ImpairSetRequest + text "NAME=VALUE\n..." -> TextReply: {"ok": true, "impair":
                // <as impair_show>} or {"ok": false, "error": "..."} and nothing changed; root
};

struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  Op op{};
  uint32_t seq = 0;
  int32_t status = 0;  // replies: 0 or a positive errno, as verbs return them
};

struct HelloRequest {
  char ibdev[kNameBytes];
};

struct HelloReply {
  uint32_t device_index;
};

struct DeviceAttr {
  char fw_ver[kNameBytes];
  uint64_t node_guid;  // network byte order, as ibv_device_attr holds it
  uint64_t sys_image_guid;
  uint64_t max_mr_size;
  uint64_t page_size_cap;
  uint32_t vendor_id;
  uint32_t vendor_part_id;
  uint32_t hw_ver;
  uint32_t max_qp;
  uint32_t max_qp_wr;
  uint32_t device_cap_flags;
  uint32_t max_sge;
  uint32_t max_cq;
  uint32_t max_cqe;
  uint32_t max_mr;
  uint32_t max_pd;
  uint32_t max_qp_rd_atom;
  uint32_t max_qp_init_rd_atom;
  uint32_t max_srq;
  uint32_t max_srq_wr;
  uint32_t max_srq_sge;
  uint32_t max_ah;
  uint32_t atomic_cap;  // ibv_atomic_cap
  uint16_t max_pkeys;
  uint8_t phys_port_cnt;
  uint8_t reserved = 0;
  // ibv_device_attr_ex beyond ibv_device_attr.
  uint64_t device_cap_flags_ex;  // the kernel's 64-bit flags (IB_UVERBS_DEVICE_*)
  uint32_t max_mw;
  uint32_t odp_general_caps;  // ibv_odp_general_caps
  uint32_t odp_rc_caps;       // ibv_odp_transport_cap_bits
  uint32_t odp_uc_caps;
  uint32_t odp_ud_caps;
  uint32_t odp_xrc_caps;
  uint64_t completion_timestamp_mask;
  uint64_t hca_core_clock_khz;
};

struct PortRequest {
  uint32_t port_num;
};

struct PortAttr {
  uint32_t state;       // ibv_port_state
  uint32_t max_mtu;     // ibv_mtu
  uint32_t active_mtu;  // ibv_mtu
  uint32_t gid_tbl_len;
  uint32_t port_cap_flags;
  uint32_t max_msg_sz;
  uint16_t pkey_tbl_len;
  uint8_t active_width;  // IB encoding: 1 = 1X, 2 = 4X, 4 = 8X, 8 = 12X, 16 = 2X
  uint8_t active_speed;  // IB encoding: 1 SDR, 2 DDR, 4 QDR, 8 FDR10, 16 FDR, 32 EDR, 64 HDR
  uint8_t phys_state;    // 5 = LinkUp, 3 = Disabled
  uint8_t link_layer;    // ibv link layer: 2 = Ethernet
  uint8_t reserved[2] = {};
};

struct HandleRequest {
  uint32_t handle;
};

struct HandleReply {
  uint32_t handle;
};

struct RegMrRequest {
  uint32_t pd_handle;
  uint32_t access;  // ibv_access_flags
  uint64_t addr;    // in the caller's address space
  uint64_t length;
  uint64_t iova;
};

struct RegMrReply {
  uint32_t mr_handle;
  uint32_t lkey;
  uint32_t rkey;
  uint32_t dma;  // MrDma: how the daemon reaches the region
};

// How the daemon reaches a registered region (docs/ARCHITECTURE.md decision 5). Op::reg_mr may
// carry one file descriptor (SCM_RIGHTS): a memfd, sealed against shrinking, that now backs the
// whole region in the caller (provider/shared_mr.h). The daemon maps it (kSharedMapping) or, when
// it cannot, closes it and uses cross-memory attach (kCrossMemory); without a descriptor it always
// uses cross-memory attach.
enum class MrDma : uint32_t { kCrossMemory = 0, kSharedMapping = 1 };

enum class PortKind : uint8_t { afxdp = 0, udp = 1 };

struct LinkAddRequest {
  char name[kNameBytes];
  char netdev[kIfNameBytes];
  PortKind port = PortKind::afxdp;
  uint32_t queues = 0;  // 0: one per core
  // The CPUs the device's workers run on, as a CPU list (include/xroce/cpu_list.h): worker i on
  // the i-th CPU of the list, round robin. Empty: wherever the scheduler puts them.
  char cpus[kCpuListBytes] = {};
};

struct LinkDelRequest {
  char name[kNameBytes];
};

// Replies carrying text: the length of this page, then that many bytes (not NUL-terminated).
// `more` != 0 when the text goes on: Op::text_next returns the next page.
struct TextReply {
  uint32_t length;
  uint32_t more;
};

// What the daemon writes on a context's event socket, laid out as the kernel's
// struct ib_uverbs_async_event_desc, because libibverbs' ibv_get_async_event() reads exactly that
// from context->async_fd.
struct AsyncEvent {
  uint64_t element;     // the object's user pointer, or the port number
  uint32_t event_type;  // ibv_event_type
  uint32_t reserved = 0;
};

// What the daemon writes on a completion channel: the kernel's
// struct ib_uverbs_comp_event_desc, the CQ's user pointer that ibv_get_cq_event() returns.
struct CompletionEvent {
  uint64_t cq_handle;
};

// ---- Data path objects ----------------------------------------------------------------------
// `cookie` fields hold the provider's ibv_cq / ibv_qp / ibv_srq pointer: the daemon echoes it in
// CompletionEvent::cq_handle and AsyncEvent::element, which libibverbs hands back to the app.

struct CreateCqRequest {
  uint32_t cqe;          // at least this many entries (ibv_create_cq)
  uint32_t channel;      // create_comp_channel handle, 0 = none
  uint32_t comp_vector;  // < num_comp_vectors (1)
  uint32_t reserved = 0;
  uint64_t cookie;
};

struct ResizeCqRequest {
  uint32_t handle;
  uint32_t cqe;
};

struct CqReply {
  uint32_t handle;
  uint32_t cqe;         // ibv_cq.cqe: the entries the application may rely on
  uint32_t slot_count;  // ring slots (power of two, > cqe)
  uint32_t reserved = 0;
  uint64_t region_bytes;
};

// ibv_ah_attr with a global route (RoCE always has one).
struct AhAttr {
  uint8_t dgid[16];
  uint32_t flow_label;
  uint8_t sgid_index;
  uint8_t hop_limit;
  uint8_t traffic_class;
  uint8_t sl;
  uint8_t is_global;
  uint8_t port_num;
  uint8_t static_rate;
  uint8_t src_path_bits;
  uint16_t dlid;
  uint8_t reserved[2] = {};
};

struct QpCap {
  uint32_t max_send_wr;
  uint32_t max_recv_wr;
  uint32_t max_send_sge;
  uint32_t max_recv_sge;
  uint32_t max_inline_data;
};

struct CreateQpRequest {
  uint32_t pd;       // 0 for XRC_RECV
  uint32_t send_cq;  // 0 for XRC_RECV
  uint32_t recv_cq;  // 0 for XRC_RECV (and optional for XRC_SEND)
  uint32_t srq;      // 0 = none
  uint32_t qp_type;  // ibv_qp_type: RC, UC, UD, XRC_SEND, XRC_RECV
  uint32_t sq_sig_all;
  QpCap cap;
  uint64_t cookie;
  uint32_t xrcd;  // XRC_RECV: the XRC domain (open_xrcd handle)
  uint32_t reserved = 0;
};

struct CreateQpReply {
  uint32_t handle;
  uint32_t qpn;
  QpCap cap;  // what the device gave (>= what was asked)
  uint32_t send_slots;
  uint32_t send_slot_bytes;
  uint32_t recv_slots;  // 0 on an SRQ
  uint32_t recv_slot_bytes;
  uint64_t recv_offset;
  uint64_t region_bytes;
};

// The ibv_qp_attr fields xroce keeps, with ibv_qp_attr_mask numbering for `mask`.
struct QpAttr {
  uint32_t qp_state;  // ibv_qp_state
  uint32_t cur_qp_state;
  uint32_t path_mtu;  // ibv_mtu
  uint32_t qkey;
  uint32_t rq_psn;
  uint32_t sq_psn;
  uint32_t dest_qp_num;
  uint32_t qp_access_flags;
  uint16_t pkey_index;
  uint8_t en_sqd_async_notify;
  uint8_t sq_draining;
  uint8_t max_rd_atomic;
  uint8_t max_dest_rd_atomic;
  uint8_t min_rnr_timer;
  uint8_t port_num;
  uint8_t timeout;
  uint8_t retry_cnt;
  uint8_t rnr_retry;
  uint8_t reserved = 0;
  AhAttr ah_attr;
};

struct ModifyQpRequest {
  uint32_t handle;
  uint32_t mask;  // ibv_qp_attr_mask
  QpAttr attr;
};

struct QueryQpReply {
  QpAttr attr;
  QpCap cap;
  uint32_t qp_type;
  uint32_t sq_sig_all;
};

struct CreateSrqRequest {
  uint32_t pd;
  uint32_t max_wr;
  uint32_t max_sge;
  uint32_t srq_limit;
  uint64_t cookie;
  uint32_t srq_type;  // ibv_srq_type: IBV_SRQT_BASIC or IBV_SRQT_XRC
  uint32_t xrcd;      // XRC: the XRC domain
  uint32_t cq;        // XRC: the CQ its receive completions go to
  uint32_t reserved = 0;
};

struct SrqAttr {
  uint32_t max_wr;
  uint32_t max_sge;
  uint32_t srq_limit;
};

struct SrqReply {
  uint32_t handle;
  SrqAttr attr;  // what the device gave
  uint32_t slots;
  uint32_t slot_bytes;
  uint32_t srqn;  // the SRQ number (ibv_get_srq_num), what an XRCETH names
  uint64_t region_bytes;
};

struct ModifySrqRequest {
  uint32_t handle;
  uint32_t mask;  // ibv_srq_attr_mask: IBV_SRQ_MAX_WR = 1, IBV_SRQ_LIMIT = 2
  SrqAttr attr;
};

// Names a device (NUL-terminated).
struct NameRequest {
  char name[kNameBytes];
};

// Op::cc_set: the device, then `length` bytes of assignments, one NAME=VALUE per line.
struct CcSetRequest {
  char name[kNameBytes];
  uint32_t length;
};

// Op::impair_set: as CcSetRequest, `length` bytes of "NAME=VALUE\n" text follow.
struct ImpairSetRequest {
  char name[kNameBytes];
  uint32_t length;
};

// Op::cc_profile: "connectx" or "paper" (NUL-terminated).
struct CcProfileRequest {
  char name[kNameBytes];
  char profile[16];
};

struct AllocMwRequest {
  uint32_t pd;
  uint32_t type;  // ibv_mw_type
};

struct MwReply {
  uint32_t handle;
  uint32_t rkey;  // the window's R_Key until its first bind
};

// ibv_rereg_mr: `flags` is ibv_rereg_mr_flags (CHANGE_TRANSLATION 1, CHANGE_PD 2,
// CHANGE_ACCESS 4); the fields the flags do not name are ignored.
struct ReregMrRequest {
  uint32_t mr_handle;
  uint32_t flags;
  uint32_t pd;
  uint32_t access;
  uint64_t addr;
  uint64_t length;
};

// ibv_open_xrcd: with an fd (passed with the request) the domain is the one of that file's
// inode, shared by every context that opens it; `oflags` as ibv_xrcd_init_attr (O_CREAT,
// O_EXCL). Without one, a domain of this context alone.
struct OpenXrcdRequest {
  uint32_t oflags;
  uint32_t reserved = 0;
};

// ibv_open_qp: another handle on an XRC_RECV QP of a domain this context has open.
struct OpenQpRequest {
  uint32_t xrcd;
  uint32_t qpn;
  uint32_t qp_type;  // IBV_QPT_XRC_RECV
  uint32_t reserved = 0;
  uint64_t cookie;
};

struct ResizeSrqRequest {
  uint32_t handle;
  uint32_t max_wr;
};

// ibv_advise_mr: the SGEs are checked against the PD's regions (what a device prefetching would
// reach); up to kMaxAdviseSge of them.
inline constexpr uint32_t kMaxAdviseSge = 32;
struct AdviseSge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};
struct AdviseMrRequest {
  uint32_t pd;
  uint32_t advice;  // ibv_advise_mr_advice
  uint32_t flags;
  uint32_t num_sge;
  AdviseSge sge[kMaxAdviseSge];
};

struct CreateAhRequest {
  uint32_t pd;
  AhAttr attr;
};

static_assert(std::is_trivially_copyable_v<QpAttr> && std::is_trivially_copyable_v<AhAttr>);
static_assert(sizeof(AsyncEvent) == 16);
static_assert(sizeof(CompletionEvent) == 8);
static_assert(sizeof(Header) == 16);
static_assert(std::is_trivially_copyable_v<DeviceAttr> && std::is_trivially_copyable_v<PortAttr>);

}  // namespace xroce::control
