#include "provider/verbs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>

#include "provider/queues.h"
#include "provider/windows_xrc.h"
#include "provider/xroce.h"
#include "xroce/shared_mr.h"

namespace xroce::provider {

namespace {

// Outstanding RDMA READ/atomic responder resources over all QPs, rxe's RXE_MAX_RES_RD_ATOM.
constexpr int kMaxResponderResources = 0x3f000;
// One virtual lane: what rxe reports (ibv_devinfo prints "1 (1)").
constexpr uint8_t kMaxVlNum = 1;

int query_device_ex(ibv_context* ctx, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t attr_size) {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  if (attr_size < sizeof(attr->orig_attr)) return EINVAL;
  control::DeviceAttr dev{};
  if (int err = call(ctx, control::Op::query_device, nullptr, 0, &dev, sizeof(dev))) return err;

  ibv_device_attr_ex ex{};
  ibv_device_attr& a = ex.orig_attr;
  std::memcpy(a.fw_ver, dev.fw_ver, std::min(sizeof(a.fw_ver), sizeof(dev.fw_ver)));
  a.fw_ver[sizeof(a.fw_ver) - 1] = '\0';
  a.node_guid = dev.node_guid;
  a.sys_image_guid = dev.sys_image_guid;
  a.max_mr_size = dev.max_mr_size;
  a.page_size_cap = dev.page_size_cap;
  a.vendor_id = dev.vendor_id;
  a.vendor_part_id = dev.vendor_part_id;
  a.hw_ver = dev.hw_ver;
  a.max_qp = static_cast<int>(dev.max_qp);
  a.max_qp_wr = static_cast<int>(dev.max_qp_wr);
  a.device_cap_flags = dev.device_cap_flags;
  a.max_sge = static_cast<int>(dev.max_sge);
  a.max_sge_rd = static_cast<int>(dev.max_sge);
  a.max_cq = static_cast<int>(dev.max_cq);
  a.max_cqe = static_cast<int>(dev.max_cqe);
  a.max_mr = static_cast<int>(dev.max_mr);
  a.max_pd = static_cast<int>(dev.max_pd);
  a.max_qp_rd_atom = static_cast<int>(dev.max_qp_rd_atom);
  a.max_res_rd_atom = kMaxResponderResources;
  a.max_qp_init_rd_atom = static_cast<int>(dev.max_qp_init_rd_atom);
  a.atomic_cap = static_cast<ibv_atomic_cap>(dev.atomic_cap);
  a.max_srq = static_cast<int>(dev.max_srq);
  a.max_srq_wr = static_cast<int>(dev.max_srq_wr);
  a.max_srq_sge = static_cast<int>(dev.max_srq_sge);
  a.max_ah = static_cast<int>(dev.max_ah);
  a.max_pkeys = dev.max_pkeys;
  a.local_ca_ack_delay = 15;
  a.phys_port_cnt = dev.phys_port_cnt;
  a.max_mw = static_cast<int>(dev.max_mw);
  // The same count as phys_port_cnt (which saturates at 255): rdma-core's providers get both
  // from the kernel through ibv_cmd_query_device_any, and pyverbs' test_phys_port_cnt_ex
  // checks they agree.
  ex.phys_port_cnt_ex = dev.phys_port_cnt;
  ex.max_dm_size = 0;
  ex.device_cap_flags_ex = dev.device_cap_flags_ex;
  ex.odp_caps.general_caps = dev.odp_general_caps;
  ex.odp_caps.per_transport_caps.rc_odp_caps = dev.odp_rc_caps;
  ex.odp_caps.per_transport_caps.uc_odp_caps = dev.odp_uc_caps;
  ex.odp_caps.per_transport_caps.ud_odp_caps = dev.odp_ud_caps;
  ex.xrc_odp_caps = dev.odp_xrc_caps;
  ex.completion_timestamp_mask = dev.completion_timestamp_mask;
  ex.hca_core_clock = dev.hca_core_clock_khz;
  // Copy no more than the caller's struct holds: ibv_query_device passes only orig_attr.
  std::memcpy(attr, &ex, std::min(attr_size, sizeof(ex)));
  return 0;
}

int query_port(ibv_context* ctx, uint8_t port_num, ibv_port_attr* attr) {
  control::PortRequest request{port_num};
  control::PortAttr port{};
  if (int err =
          call(ctx, control::Op::query_port, &request, sizeof(request), &port, sizeof(port))) {
    return err;
  }
  attr->state = static_cast<ibv_port_state>(port.state);
  attr->max_mtu = static_cast<ibv_mtu>(port.max_mtu);
  attr->active_mtu = static_cast<ibv_mtu>(port.active_mtu);
  attr->gid_tbl_len = static_cast<int>(port.gid_tbl_len);
  attr->port_cap_flags = port.port_cap_flags;
  attr->max_msg_sz = port.max_msg_sz;
  attr->pkey_tbl_len = port.pkey_tbl_len;
  attr->active_width = port.active_width;
  attr->active_speed = port.active_speed;
  attr->phys_state = port.phys_state;
  attr->link_layer = port.link_layer;
  attr->max_vl_num = kMaxVlNum;
  return 0;
}

ibv_pd* alloc_pd(ibv_context* ctx) {
  control::HandleReply reply{};
  if (int err = call(ctx, control::Op::alloc_pd, nullptr, 0, &reply, sizeof(reply))) {
    errno = err;
    return nullptr;
  }
  auto* pd = new (std::nothrow) Pd{};
  if (pd == nullptr) {
    control::HandleRequest release{reply.handle};
    (void)call(ctx, control::Op::dealloc_pd, &release, sizeof(release), nullptr, 0);
    errno = ENOMEM;
    return nullptr;
  }
  pd->pd.handle = reply.handle;
  return &pd->pd;
}

int dealloc_pd(ibv_pd* ibpd) {
  control::HandleRequest request{ibpd->handle};
  if (int err =
          call(ibpd->context, control::Op::dealloc_pd, &request, sizeof(request), nullptr, 0)) {
    return err;
  }
  delete reinterpret_cast<Pd*>(ibpd);
  return 0;
}

// Registered memory (docs/ARCHITECTURE.md decision 5): the buffer is re-backed with a memfd that
// goes to the daemon with the request, so the daemon maps the very pages (no system call per
// access, true CPU atomics), whenever shared_mr.h can do that — whole pages of private anonymous
// memory. Any other buffer (a part of a page, a file mapping, the stack, an already shared
// range), or XROCE_MR_DMA=cma in the environment, is registered without one and reached by
// cross-memory attach.
bool wants_shared_mapping() {
  const char* env = std::getenv("XROCE_MR_DMA");
  return env == nullptr || std::strcmp(env, "cma") != 0;
}

struct SharedBacking {
  int memfd = -1;
  unsigned long inode = 0;
};

SharedBacking try_share(void* addr, size_t length) {
  SharedBacking b;
  if (!wants_shared_mapping()) return b;
  b.memfd = control::share_region(addr, length);
  if (b.memfd < 0) return SharedBacking{};
  struct stat st {};
  if (fstat(b.memfd, &st) == 0) b.inode = st.st_ino;
  return b;
}

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t hca_va, int access) {
  control::RegMrRequest request{};
  request.pd_handle = pd->handle;
  request.access = static_cast<uint32_t>(access);
  request.addr = reinterpret_cast<uint64_t>(addr);
  request.length = length;
  request.iova = hca_va;
  // An ODP region is reached in place, page by page as it is touched; it is never re-backed.
  const bool on_demand = (access & IBV_ACCESS_ON_DEMAND) != 0;
  const SharedBacking backing = on_demand ? SharedBacking{} : try_share(addr, length);
  control::RegMrReply reply{};
  const int err = call(pd->context, control::Op::reg_mr, &request, sizeof(request), &reply,
                       sizeof(reply), backing.memfd);
  if (backing.memfd >= 0) close(backing.memfd);  // the daemon has its own copy now, or none
  const bool shared =
      err == 0 && reply.dma == static_cast<uint32_t>(control::MrDma::kSharedMapping);
  // The daemon did not map it (or the registration failed): give the application its private
  // pages back, as they were before.
  if (backing.memfd >= 0 && !shared) (void)control::unshare_region(addr, length, backing.inode);
  if (err != 0) {
    errno = err;
    return nullptr;
  }
  auto* mr = new (std::nothrow) Mr{};
  if (mr == nullptr) {
    control::HandleRequest release{reply.mr_handle};
    (void)call(pd->context, control::Op::dereg_mr, &release, sizeof(release), nullptr, 0);
    if (shared) (void)control::unshare_region(addr, length, backing.inode);
    errno = ENOMEM;
    return nullptr;
  }
  mr->vmr.mr_type = XROCE_IBV_MR_TYPE_MR;
  mr->vmr.access = access;
  mr->vmr.ibv_mr.handle = reply.mr_handle;
  mr->vmr.ibv_mr.lkey = reply.lkey;
  mr->vmr.ibv_mr.rkey = reply.rkey;
  mr->shared = shared;
  mr->addr = addr;
  mr->length = length;
  mr->memfd_inode = backing.inode;
  return &mr->vmr.ibv_mr;
}

int dereg_mr(verbs_mr* vmr) {
  control::HandleRequest request{vmr->ibv_mr.handle};
  if (int err =
          call(vmr->ibv_mr.context, control::Op::dereg_mr, &request, sizeof(request), nullptr, 0)) {
    return err;
  }
  auto* mr = reinterpret_cast<Mr*>(vmr);
  // The daemon has dropped its mapping: the pages become private again (a later registration
  // can share them anew). Skipped by unshare_region if the application unmapped them already.
  if (mr->shared) (void)control::unshare_region(mr->addr, mr->length, mr->memfd_inode);
  delete mr;
  return 0;
}

// ibv_rereg_mr: new keys for the region; a translation change gives the old range its private
// pages back if it was shared with the daemon (the new one is reached by cross-memory attach).
int rereg_mr(verbs_mr* vmr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  auto* mr = reinterpret_cast<Mr*>(vmr);
  control::ReregMrRequest request{};
  request.mr_handle = vmr->ibv_mr.handle;
  request.flags = static_cast<uint32_t>(flags);
  request.pd = (flags & IBV_REREG_MR_CHANGE_PD) != 0 && pd != nullptr ? pd->handle : 0;
  request.access = static_cast<uint32_t>(access);
  request.addr = reinterpret_cast<uint64_t>(addr);
  request.length = length;
  control::RegMrReply reply{};
  if (int err = call(vmr->ibv_mr.context, control::Op::rereg_mr, &request, sizeof(request), &reply,
                     sizeof(reply))) {
    errno = err;
    return err;
  }
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0) {
    if (mr->shared) (void)control::unshare_region(mr->addr, mr->length, mr->memfd_inode);
    mr->shared = false;
    mr->addr = addr;
    mr->length = length;
  }
  if ((flags & IBV_REREG_MR_CHANGE_ACCESS) != 0) vmr->access = access;
  vmr->ibv_mr.lkey = reply.lkey;
  vmr->ibv_mr.rkey = reply.rkey;
  return 0;
}

// ibv_advise_mr: the device checks the SGEs against the PD's regions; a prefetch has nothing
// more to do (pages are reached when an access comes, nothing is pinned).
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
              uint32_t num_sge) {
  if ((flags & ~static_cast<uint32_t>(IBV_ADVISE_MR_FLAG_FLUSH)) != 0) return EOPNOTSUPP;
  if (num_sge == 0 || num_sge > control::kMaxAdviseSge) return EINVAL;
  control::AdviseMrRequest request{};
  request.pd = pd->handle;
  request.advice = static_cast<uint32_t>(advice);
  request.flags = flags;
  request.num_sge = num_sge;
  for (uint32_t i = 0; i < num_sge; ++i)
    request.sge[i] = control::AdviseSge{sg_list[i].addr, sg_list[i].length, sg_list[i].lkey};
  return call(pd->context, control::Op::advise_mr, &request, sizeof(request), nullptr, 0);
}

// ibv_query_rt_values_ex: the device clock is CLOCK_MONOTONIC (hca_core_clock 1 GHz), the clock
// completion timestamps are taken from.
int query_rt_values(ibv_context*, ibv_values_ex* values) {
  if ((values->comp_mask & ~static_cast<uint32_t>(IBV_VALUES_MASK_RAW_CLOCK)) != 0) return EINVAL;
  values->comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
  return clock_gettime(CLOCK_MONOTONIC, &values->raw_clock) == 0 ? 0 : errno;
}

// libibverbs calls this after reading an event from async_fd; nothing to account for yet.
void async_event(ibv_context*, ibv_async_event*) {}

verbs_context_ops make_ops() {
  verbs_context_ops ops{};
  ops.advise_mr = advise_mr;
  ops.alloc_mw = alloc_mw;
  ops.bind_mw = bind_mw;
  ops.close_xrcd = close_xrcd;
  ops.create_srq_ex = create_srq_ex;
  ops.dealloc_mw = dealloc_mw;
  ops.get_srq_num = get_srq_num;
  ops.open_qp = open_qp;
  ops.open_xrcd = open_xrcd;
  ops.query_rt_values = query_rt_values;
  ops.rereg_mr = rereg_mr;
  ops.alloc_pd = alloc_pd;
  ops.async_event = async_event;
  ops.create_ah = create_ah;
  ops.create_cq = create_cq;
  ops.create_cq_ex = create_cq_ex;
  ops.create_qp = create_qp;
  ops.create_qp_ex = create_qp_ex;
  ops.create_srq = create_srq;
  ops.dealloc_pd = dealloc_pd;
  ops.dereg_mr = dereg_mr;
  ops.destroy_ah = destroy_ah;
  ops.destroy_cq = destroy_cq;
  ops.destroy_qp = destroy_qp;
  ops.destroy_srq = destroy_srq;
  ops.free_context = free_context;
  ops.modify_qp = modify_qp;
  ops.modify_srq = modify_srq;
  ops.poll_cq = poll_cq;
  ops.post_recv = post_recv;
  ops.post_send = post_send;
  ops.post_srq_recv = post_srq_recv;
  ops.query_device_ex = query_device_ex;
  ops.query_port = query_port;
  ops.query_qp = query_qp;
  ops.query_srq = query_srq;
  ops.reg_mr = reg_mr;
  ops.req_notify_cq = req_notify_cq;
  ops.resize_cq = resize_cq;
  return ops;
}

}  // namespace

const verbs_context_ops kContextOps = make_ops();

}  // namespace xroce::provider
