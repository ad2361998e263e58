// Queue pairs, shared receive queues and address handles: the control side (create, modify,
// query, destroy) over the control socket.
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "provider/device_death.h"
#include "provider/queues.h"
#include "provider/windows_xrc.h"

namespace xroce::provider {

namespace {

// The ibv_qp_init_attr_ex comp_mask bits we accept, and the send opcodes of the ibv_wr_* API.
// IBV_QP_INIT_ATTR_CREATE_FLAGS is accepted with no flag set (create_flags 0 asks for nothing):
// pyverbs' random_qp_init_attr_ex sets the bit at random with flags 0 for every non-mlx device.
constexpr uint32_t kQpInitMaskSupported = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                                          IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
// The ibv_wr_* operations each QP type offers (as rxe's rxe_create_qp_ex, plus XRC).
constexpr uint64_t kUcSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
constexpr uint64_t kXrcSendOps = kUcSendOps | IBV_QP_EX_WITH_RDMA_READ |
                                 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV;
constexpr uint64_t kRcSendOps = kXrcSendOps | IBV_QP_EX_WITH_ATOMIC_WRITE;
constexpr uint64_t kUdSendOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

uint64_t send_ops_of(ibv_qp_type type) {
  switch (type) {
    case IBV_QPT_RC:
      return kRcSendOps;
    case IBV_QPT_UC:
      return kUcSendOps;
    case IBV_QPT_UD:
      return kUdSendOps;
    case IBV_QPT_XRC_SEND:
      return kXrcSendOps;
    default:
      return 0;
  }
}

Qp* to_qp(ibv_qp* qp) {
  return reinterpret_cast<Qp*>(qp);
}

// The daemon copies the WQEs we posted and it has not taken into a ring of at least max_wr
// slots; we post from where it says the copy ends (the new ring's producer index).
int resize_srq(Srq* srq, uint32_t max_wr) {
  std::lock_guard guard(srq->lock);
  control::ResizeSrqRequest request{srq->handle, max_wr};
  control::SrqReply reply{};
  Fd region;
  const int err = call_fds(srq->srq.context, control::Op::resize_srq, &request, sizeof(request),
                           &reply, sizeof(reply), std::span(&region, 1));
  if (err != 0) return err;
  Mapping mapping;
  if (int map_err = mapping.map(region.release(), reply.region_bytes)) return map_err;
  srq->mapping.unmap();
  srq->mapping = mapping;
  srq->ring = queues::Ring(mapping.base, reply.slots, reply.slot_bytes);
  srq->next = srq->ring.header().producer.load(std::memory_order_acquire);
  srq->max_wr = reply.attr.max_wr;
  return 0;
}

Srq* to_srq(ibv_srq* srq) {
  return reinterpret_cast<Srq*>(srq);
}

control::AhAttr to_ah_attr(const ibv_ah_attr& a) {
  control::AhAttr out{};
  std::memcpy(out.dgid, a.grh.dgid.raw, sizeof(out.dgid));
  out.flow_label = a.grh.flow_label;
  out.sgid_index = a.grh.sgid_index;
  out.hop_limit = a.grh.hop_limit;
  out.traffic_class = a.grh.traffic_class;
  out.sl = a.sl;
  out.is_global = a.is_global;
  out.port_num = a.port_num;
  out.static_rate = a.static_rate;
  out.src_path_bits = a.src_path_bits;
  out.dlid = a.dlid;
  return out;
}

ibv_ah_attr from_ah_attr(const control::AhAttr& a) {
  ibv_ah_attr out{};
  std::memcpy(out.grh.dgid.raw, a.dgid, sizeof(a.dgid));
  out.grh.flow_label = a.flow_label;
  out.grh.sgid_index = a.sgid_index;
  out.grh.hop_limit = a.hop_limit;
  out.grh.traffic_class = a.traffic_class;
  out.sl = a.sl;
  out.is_global = a.is_global;
  out.port_num = a.port_num;
  out.static_rate = a.static_rate;
  out.src_path_bits = a.src_path_bits;
  out.dlid = a.dlid;
  return out;
}

void init_qp_fields(ibv_qp& qp, ibv_context* ctx, const ibv_qp_init_attr_ex& attr) {
  qp.context = ctx;
  qp.qp_context = attr.qp_context;
  qp.pd = attr.pd;
  qp.send_cq = attr.send_cq;
  qp.recv_cq = attr.recv_cq;
  qp.srq = attr.srq;
  qp.qp_type = attr.qp_type;
  qp.state = IBV_QPS_RESET;
  qp.events_completed = 0;
  pthread_mutex_init(&qp.mutex, nullptr);
  pthread_cond_init(&qp.cond, nullptr);
}

int attach_rings(Qp* qp, const control::CreateQpReply& reply, int region_fd) {
  const queues::QpRegionLayout layout = queues::qp_region_layout(
      reply.send_slots, reply.send_slot_bytes, reply.recv_slots, reply.recv_slot_bytes);
  if (layout.total_bytes > reply.region_bytes || layout.recv_offset != reply.recv_offset) {
    close(region_fd);
    return EIO;  // not the layout include/xroce/queues.h defines
  }
  Mapping mapping;
  if (int err = mapping.map(region_fd, reply.region_bytes)) return err;
  qp->mapping = mapping;
  auto* base = static_cast<uint8_t*>(mapping.base);
  qp->sq = queues::Ring(base, reply.send_slots, reply.send_slot_bytes);
  qp->sq_shadow = queues::WrIdShadow(base + layout.send_shadow_offset, reply.send_slots);
  qp->sq_bytes_before = std::make_unique<std::atomic<uint64_t>[]>(reply.send_slots);
  if (reply.recv_slots != 0) {
    qp->rq = queues::Ring(base + reply.recv_offset, reply.recv_slots, reply.recv_slot_bytes);
    qp->rq_shadow = queues::WrIdShadow(base + layout.recv_shadow_offset, reply.recv_slots);
  }
  return 0;
}

// Sends a create_qp or open_qp request and gives `qp` what the reply brings (its rings, doorbell,
// handle and caps). On failure the daemon's QP is released, `qp` deleted and errno set.
bool take_qp_reply(ibv_context* ctx, control::Op op, const void* request, size_t request_bytes,
                   Qp* qp, control::CreateQpReply& reply) {
  Fd region;
  int err = call_fds(ctx, op, request, request_bytes, &reply, sizeof(reply), std::span(&region, 1));
  if (err == 0) err = attach_rings(qp, reply, region.release());
  if (err != 0) {
    if (reply.handle != 0) {
      control::HandleRequest release{reply.handle};
      (void)call(ctx, control::Op::destroy_qp, &release, sizeof(release), nullptr, 0);
    }
    delete qp;
    errno = err;
    return false;
  }
  qp->doorbell_fd = context_doorbell(ctx);
  qp->page = context_page(ctx);
  qp->handle = reply.handle;
  qp->cap = reply.cap;
  return true;
}

// What each type needs from ibv_qp_init_attr_ex: RC, UC, UD a PD and both CQs; XRC_SEND a PD
// and a send CQ; XRC_RECV an XRC domain only.
bool init_attr_complete(const ibv_qp_init_attr_ex& attr) {
  switch (attr.qp_type) {
    case IBV_QPT_XRC_RECV:
      return (attr.comp_mask & IBV_QP_INIT_ATTR_XRCD) != 0 && attr.xrcd != nullptr;
    case IBV_QPT_XRC_SEND:
      return attr.pd != nullptr && attr.send_cq != nullptr;
    default:
      return attr.pd != nullptr && attr.send_cq != nullptr && attr.recv_cq != nullptr;
  }
}

ibv_qp* make_qp(ibv_context* ctx, ibv_qp_init_attr_ex& attr) {
  if (!init_attr_complete(attr)) {
    errno = EINVAL;
    return nullptr;
  }
  const bool xrc_recv = attr.qp_type == IBV_QPT_XRC_RECV;
  auto* qp = new (std::nothrow) Qp{};
  if (qp == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  control::CreateQpRequest request{};
  request.pd = xrc_recv || attr.pd == nullptr ? 0 : attr.pd->handle;
  request.send_cq = xrc_recv || attr.send_cq == nullptr ? 0 : attr.send_cq->handle;
  request.recv_cq = xrc_recv || attr.recv_cq == nullptr ? 0 : attr.recv_cq->handle;
  request.xrcd = xrc_recv ? to_xrcd(attr.xrcd)->handle : 0;
  request.srq = attr.srq == nullptr ? 0 : to_srq(attr.srq)->handle;
  request.qp_type = attr.qp_type;
  request.sq_sig_all = attr.sq_sig_all;
  request.cap = control::QpCap{attr.cap.max_send_wr, attr.cap.max_recv_wr, attr.cap.max_send_sge,
                               attr.cap.max_recv_sge, attr.cap.max_inline_data};
  request.cookie = reinterpret_cast<uint64_t>(&qp->vqp.qp);
  control::CreateQpReply reply{};
  if (!take_qp_reply(ctx, control::Op::create_qp, &request, sizeof(request), qp, reply)) {
    return nullptr;
  }
  qp->sq_sig_all = attr.sq_sig_all != 0;
  init_qp_fields(qp->vqp.qp, ctx, attr);
  qp->vqp.qp.handle = reply.handle;
  qp->vqp.qp.qp_num = reply.qpn;
  // What the device gave, as ibv_create_qp reports it back.
  attr.cap.max_send_wr = reply.cap.max_send_wr;
  attr.cap.max_recv_wr = reply.cap.max_recv_wr;
  attr.cap.max_send_sge = reply.cap.max_send_sge;
  attr.cap.max_recv_sge = reply.cap.max_recv_sge;
  attr.cap.max_inline_data = reply.cap.max_inline_data;
  register_qp(ctx, qp);
  return &qp->vqp.qp;
}

}  // namespace

ibv_qp* attach_opened_qp(ibv_context* ctx, const control::OpenQpRequest& base, void* qp_context) {
  auto* qp = new (std::nothrow) Qp{};
  if (qp == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  control::OpenQpRequest request = base;
  request.cookie = reinterpret_cast<uint64_t>(&qp->vqp.qp);
  control::CreateQpReply reply{};
  if (!take_qp_reply(ctx, control::Op::open_qp, &request, sizeof(request), qp, reply)) {
    return nullptr;
  }
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_XRC_RECV;
  attr.qp_context = qp_context;
  init_qp_fields(qp->vqp.qp, ctx, attr);
  qp->vqp.qp.handle = reply.handle;
  qp->vqp.qp.qp_num = reply.qpn;
  return &qp->vqp.qp;
}

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  ibv_qp_init_attr_ex ex{};
  std::memcpy(&ex, attr, sizeof(*attr));
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_qp* qp = make_qp(pd->context, ex);
  if (qp != nullptr) attr->cap = ex.cap;
  return qp;
}

ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  // An XRC_RECV QP belongs to its XRC domain, not to a PD (ibv_xsrq_pingpong passes only
  // IBV_QP_INIT_ATTR_XRCD).
  const bool needs_pd = attr->qp_type != IBV_QPT_XRC_RECV;
  if ((attr->comp_mask & ~kQpInitMaskSupported) != 0 ||
      (needs_pd && (attr->comp_mask & IBV_QP_INIT_ATTR_PD) == 0)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // No creation flag is supported (rxe_create_qp refuses any with EOPNOTSUPP too).
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 && attr->create_flags != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const bool ex_ops = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
  if (ex_ops) {
    const uint64_t allowed = send_ops_of(attr->qp_type);
    if ((attr->send_ops_flags & ~allowed) != 0) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
  }
  ibv_qp* ibqp = make_qp(ctx, *attr);
  if (ibqp == nullptr) return nullptr;
  Qp* qp = to_qp(ibqp);
  if (ex_ops) set_wr_ops(qp->vqp.qp_ex, attr->send_ops_flags);
  qp->vqp.comp_mask |= XROCE_VERBS_QP_EX;
  return ibqp;
}

int modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  Qp* qp = to_qp(ibqp);
  control::ModifyQpRequest request{};
  request.handle = qp->handle;
  request.mask = static_cast<uint32_t>(mask);
  control::QpAttr& a = request.attr;
  a.qp_state = attr->qp_state;
  a.cur_qp_state = attr->cur_qp_state;
  a.path_mtu = attr->path_mtu;
  a.qkey = attr->qkey;
  a.rq_psn = attr->rq_psn;
  a.sq_psn = attr->sq_psn;
  a.dest_qp_num = attr->dest_qp_num;
  a.qp_access_flags = attr->qp_access_flags;
  a.pkey_index = attr->pkey_index;
  a.en_sqd_async_notify = attr->en_sqd_async_notify;
  a.max_rd_atomic = attr->max_rd_atomic;
  a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  a.min_rnr_timer = attr->min_rnr_timer;
  a.port_num = attr->port_num;
  a.timeout = attr->timeout;
  a.retry_cnt = attr->retry_cnt;
  a.rnr_retry = attr->rnr_retry;
  a.ah_attr = to_ah_attr(attr->ah_attr);
  if (int err =
          call(ibqp->context, control::Op::modify_qp, &request, sizeof(request), nullptr, 0)) {
    return err;
  }
  // A QP reset leaves nothing of its past in its CQs: completions not polled yet (the flushed
  // work of its error state) would otherwise meet the consumer after the QP is connected again,
  // as if they were new (mlx5_modify_qp cleans its CQs the same way).
  if ((mask & IBV_QP_STATE) != 0 && attr->qp_state == IBV_QPS_RESET) {
    if (ibqp->recv_cq != nullptr) clean_cq(ibqp->recv_cq, ibqp->qp_num);
    if (ibqp->send_cq != nullptr && ibqp->send_cq != ibqp->recv_cq) {
      clean_cq(ibqp->send_cq, ibqp->qp_num);
    }
  }
  return 0;
}

int query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  (void)mask;  // we return every attribute we keep, as rxe does
  Qp* qp = to_qp(ibqp);
  control::HandleRequest request{qp->handle};
  control::QueryQpReply reply{};
  if (int err = call(ibqp->context, control::Op::query_qp, &request, sizeof(request), &reply,
                     sizeof(reply))) {
    return err;
  }
  const control::QpAttr& a = reply.attr;
  *attr = ibv_qp_attr{};
  attr->qp_state = static_cast<ibv_qp_state>(a.qp_state);
  attr->cur_qp_state = static_cast<ibv_qp_state>(a.cur_qp_state);
  attr->path_mtu = static_cast<ibv_mtu>(a.path_mtu);
  attr->qkey = a.qkey;
  attr->rq_psn = a.rq_psn;
  attr->sq_psn = a.sq_psn;
  attr->dest_qp_num = a.dest_qp_num;
  attr->qp_access_flags = static_cast<int>(a.qp_access_flags);
  attr->pkey_index = a.pkey_index;
  attr->en_sqd_async_notify = a.en_sqd_async_notify;
  attr->max_rd_atomic = a.max_rd_atomic;
  attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
  attr->min_rnr_timer = a.min_rnr_timer;
  attr->port_num = a.port_num;
  attr->timeout = a.timeout;
  attr->retry_cnt = a.retry_cnt;
  attr->rnr_retry = a.rnr_retry;
  attr->ah_attr = from_ah_attr(a.ah_attr);
  attr->cap = ibv_qp_cap{reply.cap.max_send_wr, reply.cap.max_recv_wr, reply.cap.max_send_sge,
                         reply.cap.max_recv_sge, reply.cap.max_inline_data};
  if (init != nullptr) {
    *init = ibv_qp_init_attr{};
    init->qp_context = ibqp->qp_context;
    init->send_cq = ibqp->send_cq;
    init->recv_cq = ibqp->recv_cq;
    init->srq = ibqp->srq;
    init->qp_type = ibqp->qp_type;
    init->sq_sig_all = qp->sq_sig_all ? 1 : 0;
    init->cap = attr->cap;
  }
  return 0;
}

int destroy_qp(ibv_qp* ibqp) {
  Qp* qp = to_qp(ibqp);
  control::HandleRequest request{qp->handle};
  if (int err =
          call(ibqp->context, control::Op::destroy_qp, &request, sizeof(request), nullptr, 0)) {
    return err;
  }
  unregister_qp(ibqp->context, qp);
  qp->mapping.unmap();
  pthread_mutex_destroy(&ibqp->mutex);
  pthread_cond_destroy(&ibqp->cond);
  delete qp;
  return 0;
}

Srq* make_srq(ibv_context* ctx, const control::CreateSrqRequest& base) {
  auto* srq = new (std::nothrow) Srq{};
  if (srq == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  control::CreateSrqRequest request = base;
  request.cookie = reinterpret_cast<uint64_t>(&srq->srq);
  control::SrqReply reply{};
  Fd region;
  int err = call_fds(ctx, control::Op::create_srq, &request, sizeof(request), &reply, sizeof(reply),
                     std::span(&region, 1));
  if (err == 0) err = srq->mapping.map(region.release(), reply.region_bytes);
  if (err != 0) {
    if (reply.handle != 0) {
      control::HandleRequest release{reply.handle};
      (void)call(ctx, control::Op::destroy_srq, &release, sizeof(release), nullptr, 0);
    }
    delete srq;
    errno = err;
    return nullptr;
  }
  srq->doorbell_fd = context_doorbell(ctx);
  srq->page = context_page(ctx);
  srq->handle = reply.handle;
  srq->max_wr = reply.attr.max_wr;
  srq->max_sge = reply.attr.max_sge;
  srq->srqn = reply.srqn;
  srq->ring = queues::Ring(srq->mapping.base, reply.slots, reply.slot_bytes);
  srq->srq.handle = reply.handle;
  return srq;
}

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  control::CreateSrqRequest request{};
  request.pd = pd->handle;
  request.max_wr = attr->attr.max_wr;
  request.max_sge = attr->attr.max_sge;
  request.srq_limit = attr->attr.srq_limit;
  Srq* srq = make_srq(pd->context, request);
  if (srq == nullptr) return nullptr;
  attr->attr.max_wr = srq->max_wr;
  attr->attr.max_sge = srq->max_sge;
  // ibv_create_srq fills context, srq_context, pd, mutex and cond.
  return &srq->srq;
}

// IBV_SRQ_MAX_WR resizes (a new ring, with the WQEs not yet taken carried over), then
// IBV_SRQ_LIMIT arms the limit event.
int modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
  Srq* srq = to_srq(ibsrq);
  if ((mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) != 0 || mask == 0) return EINVAL;
  if ((mask & IBV_SRQ_MAX_WR) != 0) {
    if (int err = resize_srq(srq, attr->max_wr)) return err;
  }
  if ((mask & IBV_SRQ_LIMIT) == 0) return 0;
  control::ModifySrqRequest request{};
  request.handle = srq->handle;
  request.mask = IBV_SRQ_LIMIT;
  request.attr = control::SrqAttr{attr->max_wr, attr->max_sge, attr->srq_limit};
  return call(ibsrq->context, control::Op::modify_srq, &request, sizeof(request), nullptr, 0);
}

int query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  control::HandleRequest request{to_srq(ibsrq)->handle};
  control::SrqAttr reply{};
  if (int err = call(ibsrq->context, control::Op::query_srq, &request, sizeof(request), &reply,
                     sizeof(reply))) {
    return err;
  }
  attr->max_wr = reply.max_wr;
  attr->max_sge = reply.max_sge;
  attr->srq_limit = reply.srq_limit;
  return 0;
}

int destroy_srq(ibv_srq* ibsrq) {
  Srq* srq = to_srq(ibsrq);
  control::HandleRequest request{srq->handle};
  if (int err =
          call(ibsrq->context, control::Op::destroy_srq, &request, sizeof(request), nullptr, 0)) {
    return err;
  }
  srq->mapping.unmap();
  delete srq;
  return 0;
}

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  control::CreateAhRequest request{};
  request.pd = pd->handle;
  request.attr = to_ah_attr(*attr);
  control::HandleReply reply{};
  if (int err = call(pd->context, control::Op::create_ah, &request, sizeof(request), &reply,
                     sizeof(reply))) {
    errno = err;
    return nullptr;
  }
  auto* ah = new (std::nothrow) Ah{};
  if (ah == nullptr) {
    control::HandleRequest release{reply.handle};
    (void)call(pd->context, control::Op::destroy_ah, &release, sizeof(release), nullptr, 0);
    errno = ENOMEM;
    return nullptr;
  }
  ah->ah.handle = reply.handle;
  return &ah->ah;  // ibv_create_ah fills context and pd
}

int destroy_ah(ibv_ah* ibah) {
  control::HandleRequest request{ibah->handle};
  if (int err =
          call(ibah->context, control::Op::destroy_ah, &request, sizeof(request), nullptr, 0)) {
    return err;
  }
  delete reinterpret_cast<Ah*>(ibah);
  return 0;
}

}  // namespace xroce::provider
