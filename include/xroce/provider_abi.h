// The private rdma-core provider ABI (IBVERBS_PRIVATE_34) as xroce uses it.
//
// rdma-core installs no header for the interface between libibverbs and its provider plugins;
// providers are built inside the rdma-core tree against libibverbs/driver.h. This header
// declares, from rdma-core v44.0's libibverbs/driver.h, init.c and device.c, only what
// libxroce-rdmav34.so touches. Every struct that libibverbs reads or writes through a pointer
// the provider hands it is declared in full, field for field, because layout is the contract:
//   - verbs_device_ops and verbs_match_ent: read by the loader (init.c try_driver/match_*),
//   - verbs_device: allocated by the provider, written by the loader (ops, refcount, sysfs),
//   - verbs_context_ops: read field by field by verbs_set_ops (device.c),
//   - verbs_mr: allocated by the provider, read by ibv_dereg_mr (mr_type, access).
// verbs_sysfs_dev is declared so alloc_device can read the names, and nothing more is assumed.
// The public structs (ibv_device, verbs_context, ibv_mr...) come from <infiniband/verbs.h>,
// which Debian's libibverbs-dev 44.0 installs; the static_asserts below tie our declarations to
// it wherever the public header lets us check.
//
// The loader accepting the provider (ibv_devices listing the device) is the final check; the
// e2e tests do that.
#pragma once

#include <infiniband/verbs.h>
#include <sys/types.h>
#include <time.h>

#include <cstddef>
#include <cstdint>

extern "C" {

// ccan/list.h's struct list_node, embedded in verbs_device and verbs_sysfs_dev.
struct xroce_list_node {
  xroce_list_node* next;
  xroce_list_node* prev;
};

// Match kinds of verbs_match_ent (driver.h VERBS_MATCH_*).
enum : uint8_t {
  XROCE_VERBS_MATCH_SENTINEL = 0,
  XROCE_VERBS_MATCH_PCI = 1,
  XROCE_VERBS_MATCH_MODALIAS = 2,
  XROCE_VERBS_MATCH_DRIVER_ID = 3,
};

struct verbs_match_ent {
  void* driver_data;
  union {
    const char* modalias;
    uint64_t driver_id;
  } u;
  uint16_t vendor;
  uint16_t device;
  uint8_t kind;
};

// A device found in (the real or the $SYSFS_PATH) sysfs; owned by libibverbs.
struct verbs_sysfs_dev {
  xroce_list_node entry;
  void* provider_data;
  const verbs_match_ent* match;
  unsigned int flags;
  char sysfs_name[IBV_SYSFS_NAME_MAX];  // the infiniband_verbs entry, e.g. "uverbs0"
  dev_t sysfs_cdev;
  char ibdev_name[IBV_SYSFS_NAME_MAX];  // e.g. "xroce0"
  char ibdev_path[IBV_SYSFS_PATH_MAX];  // $SYSFS_PATH/class/infiniband/<ibdev_name>
  char modalias[512];
  uint64_t node_guid;
  uint32_t driver_id;
  ibv_node_type node_type;
  int ibdev_idx;
  uint32_t num_ports;
  uint32_t abi_ver;
  timespec time_created;
};

struct verbs_device;

struct verbs_device_ops {
  const char* name;
  uint32_t match_min_abi_version;
  uint32_t match_max_abi_version;
  const verbs_match_ent* match_table;
  const verbs_device_ops** static_providers;
  bool (*match_device)(verbs_sysfs_dev* sysfs_dev);
  verbs_context* (*alloc_context)(ibv_device* device, int cmd_fd, void* private_data);
  verbs_context* (*import_context)(ibv_device* device, int cmd_fd);
  verbs_device* (*alloc_device)(verbs_sysfs_dev* sysfs_dev);
  void (*uninit_device)(verbs_device* device);
};

// Allocated by the provider's alloc_device, with `device` first; the loader fills in ops,
// refcount (a C11 atomic_int it alone touches), entry and sysfs.
struct verbs_device {
  ibv_device device;
  const verbs_device_ops* ops;
  int refcount;
  xroce_list_node entry;
  verbs_sysfs_dev* sysfs;
  uint64_t core_support;
};

enum xroce_verbs_mr_type {
  XROCE_IBV_MR_TYPE_MR = 0,
  XROCE_IBV_MR_TYPE_NULL_MR,
  XROCE_IBV_MR_TYPE_IMPORTED_MR,
  XROCE_IBV_MR_TYPE_DMABUF_MR,
};

struct verbs_mr {
  ibv_mr ibv_mr;
  xroce_verbs_mr_type mr_type;
  int access;
};

// driver.h's verbs_qp: what ibv_qp_to_qp_ex() reads (comp_mask & VERBS_QP_EX) to find the
// extended QP. Allocated by the provider.
enum : uint32_t {
  XROCE_VERBS_QP_XRCD = 1 << 0,
  XROCE_VERBS_QP_EX = 1 << 1,
};
struct verbs_qp {
  union {
    ibv_qp qp;
    ibv_qp_ex qp_ex;
  };
  uint32_t comp_mask;
  void* xrcd;  // struct verbs_xrcd*, unused
};

// Every op a provider may supply, in driver.h's (sorted) order. verbs_set_ops copies each
// non-null entry; null entries keep libibverbs' dummies, which fail with EOPNOTSUPP.
struct verbs_context_ops {
  int (*advise_mr)(ibv_pd*, ibv_advise_mr_advice, uint32_t, ibv_sge*, uint32_t);
  ibv_dm* (*alloc_dm)(ibv_context*, ibv_alloc_dm_attr*);
  ibv_mw* (*alloc_mw)(ibv_pd*, ibv_mw_type);
  ibv_mr* (*alloc_null_mr)(ibv_pd*);
  ibv_pd* (*alloc_parent_domain)(ibv_context*, ibv_parent_domain_init_attr*);
  ibv_pd* (*alloc_pd)(ibv_context*);
  ibv_td* (*alloc_td)(ibv_context*, ibv_td_init_attr*);
  void (*async_event)(ibv_context*, ibv_async_event*);
  int (*attach_counters_point_flow)(ibv_counters*, ibv_counter_attach_attr*, ibv_flow*);
  int (*attach_mcast)(ibv_qp*, const ibv_gid*, uint16_t);
  int (*bind_mw)(ibv_qp*, ibv_mw*, ibv_mw_bind*);
  int (*close_xrcd)(ibv_xrcd*);
  void (*cq_event)(ibv_cq*);
  ibv_ah* (*create_ah)(ibv_pd*, ibv_ah_attr*);
  ibv_counters* (*create_counters)(ibv_context*, ibv_counters_init_attr*);
  ibv_cq* (*create_cq)(ibv_context*, int, ibv_comp_channel*, int);
  ibv_cq_ex* (*create_cq_ex)(ibv_context*, ibv_cq_init_attr_ex*);
  ibv_flow* (*create_flow)(ibv_qp*, ibv_flow_attr*);
  ibv_flow_action* (*create_flow_action_esp)(ibv_context*, ibv_flow_action_esp_attr*);
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*);
  ibv_qp* (*create_qp_ex)(ibv_context*, ibv_qp_init_attr_ex*);
  ibv_rwq_ind_table* (*create_rwq_ind_table)(ibv_context*, ibv_rwq_ind_table_init_attr*);
  ibv_srq* (*create_srq)(ibv_pd*, ibv_srq_init_attr*);
  ibv_srq* (*create_srq_ex)(ibv_context*, ibv_srq_init_attr_ex*);
  ibv_wq* (*create_wq)(ibv_context*, ibv_wq_init_attr*);
  int (*dealloc_mw)(ibv_mw*);
  int (*dealloc_pd)(ibv_pd*);
  int (*dealloc_td)(ibv_td*);
  int (*dereg_mr)(verbs_mr*);
  int (*destroy_ah)(ibv_ah*);
  int (*destroy_counters)(ibv_counters*);
  int (*destroy_cq)(ibv_cq*);
  int (*destroy_flow)(ibv_flow*);
  int (*destroy_flow_action)(ibv_flow_action*);
  int (*destroy_qp)(ibv_qp*);
  int (*destroy_rwq_ind_table)(ibv_rwq_ind_table*);
  int (*destroy_srq)(ibv_srq*);
  int (*destroy_wq)(ibv_wq*);
  int (*detach_mcast)(ibv_qp*, const ibv_gid*, uint16_t);
  void (*free_context)(ibv_context*);
  int (*free_dm)(ibv_dm*);
  int (*get_srq_num)(ibv_srq*, uint32_t*);
  ibv_dm* (*import_dm)(ibv_context*, uint32_t);
  ibv_mr* (*import_mr)(ibv_pd*, uint32_t);
  ibv_pd* (*import_pd)(ibv_context*, uint32_t);
  int (*modify_cq)(ibv_cq*, ibv_modify_cq_attr*);
  int (*modify_flow_action_esp)(ibv_flow_action*, ibv_flow_action_esp_attr*);
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int);
  int (*modify_qp_rate_limit)(ibv_qp*, ibv_qp_rate_limit_attr*);
  int (*modify_srq)(ibv_srq*, ibv_srq_attr*, int);
  int (*modify_wq)(ibv_wq*, ibv_wq_attr*);
  ibv_qp* (*open_qp)(ibv_context*, ibv_qp_open_attr*);
  ibv_xrcd* (*open_xrcd)(ibv_context*, ibv_xrcd_init_attr*);
  int (*poll_cq)(ibv_cq*, int, ibv_wc*);
  int (*post_recv)(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**);
  int (*post_send)(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
  int (*post_srq_ops)(ibv_srq*, ibv_ops_wr*, ibv_ops_wr**);
  int (*post_srq_recv)(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**);
  int (*query_device_ex)(ibv_context*, const ibv_query_device_ex_input*, ibv_device_attr_ex*,
                         size_t attr_size);
  int (*query_ece)(ibv_qp*, ibv_ece*);
  int (*query_port)(ibv_context*, uint8_t port_num, ibv_port_attr*);
  int (*query_qp)(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*);
  int (*query_qp_data_in_order)(ibv_qp*, ibv_wr_opcode, uint32_t);
  int (*query_rt_values)(ibv_context*, ibv_values_ex*);
  int (*query_srq)(ibv_srq*, ibv_srq_attr*);
  int (*read_counters)(ibv_counters*, uint64_t*, uint32_t, uint32_t);
  ibv_mr* (*reg_dm_mr)(ibv_pd*, ibv_dm*, uint64_t, size_t, unsigned int);
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd*, uint64_t, size_t, uint64_t, int, int);
  ibv_mr* (*reg_mr)(ibv_pd*, void* addr, size_t length, uint64_t hca_va, int access);
  int (*req_notify_cq)(ibv_cq*, int);
  int (*rereg_mr)(verbs_mr*, int, ibv_pd*, void*, size_t, int);
  int (*resize_cq)(ibv_cq*, int);
  int (*set_ece)(ibv_qp*, ibv_ece*);
  void (*unimport_dm)(ibv_dm*);
  void (*unimport_mr)(ibv_mr*);
  void (*unimport_pd)(ibv_pd*);
};

// Placed by libxroce-rdmav34.so right after the verbs_device of each of its devices, for
// libxroce-preload.so: the entry points libibverbs does not route through the provider
// (docs/ARCHITECTURE.md decision 3). The preload recognises an xroce device by ops->name == "xroce"
// and this magic.
inline constexpr uint64_t kXroceDeviceExtensionMagic = 0x78726f6365657874;  // "xroceext"
struct xroce_device_extension {
  uint64_t magic;
  ibv_comp_channel* (*create_comp_channel)(ibv_context* context);
};

// Exported by libibverbs.so.1 under the version node IBVERBS_PRIVATE_34.
void verbs_register_driver_34(const verbs_device_ops* ops);
void* _verbs_init_and_alloc_context(ibv_device* device, int cmd_fd, size_t alloc_size,
                                    verbs_context* context_offset, uint32_t driver_id);
void verbs_uninit_context(verbs_context* context);
void verbs_set_ops(verbs_context* vctx, const verbs_context_ops* ops);
// Sets the CQ's context, channel (taking a reference), cq_context, event counters, mutex and
// cond, as ibv_create_cq does after the provider's create_cq; create_cq_ex must call it itself.
void verbs_init_cq(ibv_cq* cq, ibv_context* context, ibv_comp_channel* channel, void* cq_context);

}  // extern "C"

namespace xroce::abi {

// driver.h's RDMA_DRIVER_UNKNOWN: we are no kernel driver, so the loader matches us by name.
inline constexpr uint32_t kDriverIdUnknown = 0;

// verbs_init_and_alloc_context(): calloc a provider context of `alloc_size` bytes that embeds
// verbs_context at byte `context_offset` (use offsetof), and let libibverbs initialise that
// part. Takes ownership of cmd_fd (closed on failure).
inline void* init_and_alloc_context(ibv_device* device, int cmd_fd, std::size_t alloc_size,
                                    std::size_t context_offset) {
  return _verbs_init_and_alloc_context(device, cmd_fd, alloc_size,
                                       reinterpret_cast<verbs_context*>(context_offset),
                                       kDriverIdUnknown);
}

}  // namespace xroce::abi

// Checks against the public header and against the v44.0 layout, computed by hand for x86-64.
static_assert(sizeof(void*) == 8, "layouts below are the LP64 ones");
static_assert(sizeof(verbs_context_ops) == 76 * sizeof(void*),
              "driver.h v44.0 declares 76 ops in verbs_context_ops");
static_assert(offsetof(verbs_device, device) == 0, "ibv_device must be first");
static_assert(offsetof(verbs_device, ops) == sizeof(ibv_device));
static_assert(offsetof(verbs_device, entry) == sizeof(ibv_device) + 16);
static_assert(sizeof(verbs_device) == sizeof(ibv_device) + 48);
static_assert(offsetof(verbs_mr, ibv_mr) == 0);
static_assert(offsetof(ibv_qp_ex, qp_base) == 0 &&
              offsetof(verbs_qp, comp_mask) == sizeof(ibv_qp_ex));
static_assert(sizeof(verbs_mr) == sizeof(ibv_mr) + 8);
static_assert(offsetof(verbs_match_ent, u) == 8 && offsetof(verbs_match_ent, kind) == 20);
static_assert(sizeof(verbs_match_ent) == 24);
static_assert(offsetof(verbs_device_ops, match_table) == 16);
static_assert(sizeof(verbs_device_ops) == 72);
static_assert(offsetof(verbs_sysfs_dev, sysfs_name) == 36);
static_assert(offsetof(verbs_sysfs_dev, ibdev_name) == 36 + IBV_SYSFS_NAME_MAX + 4 + 8);
static_assert(sizeof(ibv_device) == 664);
