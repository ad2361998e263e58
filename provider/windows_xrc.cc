// Memory windows (ibv_alloc_mw, ibv_bind_mw, ibv_dealloc_mw) and XRC (ibv_open_xrcd,
// ibv_close_xrcd, ibv_create_srq_ex, ibv_get_srq_num, ibv_open_qp), as rdma-core's rxe provider
// shapes them: a type 1 bind is posted to the send queue as IBV_WR_BIND_MW.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <new>

#include "provider/queues.h"
#include "provider/windows_xrc.h"

namespace xroce::provider {

namespace {

Srq* to_srq(ibv_srq* srq) {
  return reinterpret_cast<Srq*>(srq);
}

// ibv_inc_rkey: the consumer's key byte moves on with every bind (rxe's next_rkey).
uint32_t next_rkey(uint32_t rkey) {
  return (rkey & 0xFFFFFF00u) | ((rkey + 1) & 0xFFu);
}

}  // namespace

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  control::AllocMwRequest request{pd->handle, static_cast<uint32_t>(type)};
  control::MwReply reply{};
  if (int err = call(pd->context, control::Op::alloc_mw, &request, sizeof(request), &reply,
                     sizeof(reply))) {
    errno = err;
    return nullptr;
  }
  auto* mw = new (std::nothrow) ibv_mw{};
  if (mw == nullptr) {
    control::HandleRequest release{reply.handle};
    (void)call(pd->context, control::Op::dealloc_mw, &release, sizeof(release), nullptr, 0);
    errno = ENOMEM;
    return nullptr;
  }
  mw->context = pd->context;
  mw->pd = pd;
  mw->rkey = reply.rkey;
  mw->handle = reply.handle;
  mw->type = type;
  return mw;
}

int dealloc_mw(ibv_mw* mw) {
  control::HandleRequest request{mw->handle};
  if (int err = call(mw->context, control::Op::dealloc_mw, &request, sizeof(request), nullptr, 0)) {
    return err;
  }
  delete mw;
  return 0;
}

// ibv_bind_mw (type 1): posted as IBV_WR_BIND_MW; the window takes its next R_Key now, as rxe's
// provider does (an error completion leaves the application to undo it). No zero-based type 1
// windows (o10-36.2.2).
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  if ((mw_bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED) != 0) return EINVAL;
  ibv_send_wr wr{};
  wr.wr_id = mw_bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = mw_bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = next_rkey(mw->rkey);
  wr.bind_mw.bind_info = mw_bind->bind_info;
  ibv_send_wr* bad = nullptr;
  if (int err = post_send(qp, &wr, &bad)) return err;
  mw->rkey = wr.bind_mw.rkey;
  return 0;
}

ibv_xrcd* open_xrcd(ibv_context* ctx, ibv_xrcd_init_attr* attr) {
  // As libibverbs' ibv_cmd_open_xrcd: both the fd (-1 for a private domain) and the oflags.
  const uint32_t known = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  if ((attr->comp_mask & ~known) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (attr->comp_mask != known) {
    errno = EINVAL;
    return nullptr;
  }
  const int fd = attr->fd;
  control::OpenXrcdRequest request{static_cast<uint32_t>(attr->oflags)};
  control::HandleReply reply{};
  if (int err =
          call(ctx, control::Op::open_xrcd, &request, sizeof(request), &reply, sizeof(reply), fd)) {
    errno = err;
    return nullptr;
  }
  auto* xrcd = new (std::nothrow) Xrcd{};
  if (xrcd == nullptr) {
    control::HandleRequest release{reply.handle};
    (void)call(ctx, control::Op::close_xrcd, &release, sizeof(release), nullptr, 0);
    errno = ENOMEM;
    return nullptr;
  }
  xrcd->xrcd.context = ctx;
  xrcd->handle = reply.handle;
  return &xrcd->xrcd;
}

int close_xrcd(ibv_xrcd* ibxrcd) {
  Xrcd* xrcd = to_xrcd(ibxrcd);
  control::HandleRequest request{xrcd->handle};
  if (int err =
          call(ibxrcd->context, control::Op::close_xrcd, &request, sizeof(request), nullptr, 0)) {
    return err;
  }
  delete xrcd;
  return 0;
}

// ibv_create_srq_ex: a basic SRQ, or an XRC SRQ of a domain with the CQ its completions go to.
ibv_srq* create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* attr) {
  const uint32_t known =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  if ((attr->comp_mask & ~known) != 0) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const bool xrc =
      (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) != 0 && attr->srq_type == IBV_SRQT_XRC;
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) == 0 || attr->pd == nullptr ||
      (xrc && (attr->xrcd == nullptr || attr->cq == nullptr)) ||
      ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) != 0 && attr->srq_type != IBV_SRQT_BASIC &&
       !xrc)) {
    errno = EINVAL;
    return nullptr;
  }
  control::CreateSrqRequest request{};
  request.pd = attr->pd->handle;
  request.max_wr = attr->attr.max_wr;
  request.max_sge = attr->attr.max_sge;
  request.srq_limit = attr->attr.srq_limit;
  request.srq_type = xrc ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
  request.xrcd = xrc ? to_xrcd(attr->xrcd)->handle : 0;
  request.cq = xrc ? attr->cq->handle : 0;
  Srq* srq = make_srq(ctx, request);
  if (srq == nullptr) return nullptr;
  attr->attr.max_wr = srq->srq.handle == 0 ? attr->attr.max_wr : srq->max_wr;
  attr->attr.max_sge = srq->max_sge;
  // ibv_create_srq fills these for create_srq; the _ex verb leaves them to the provider.
  ibv_srq& s = srq->srq;
  s.context = ctx;
  s.srq_context = attr->srq_context;
  s.pd = attr->pd;
  s.events_completed = 0;
  pthread_mutex_init(&s.mutex, nullptr);
  pthread_cond_init(&s.cond, nullptr);
  return &srq->srq;
}

int get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
  *srq_num = to_srq(srq)->srqn;
  return 0;
}

// ibv_open_qp: another context's handle on an XRC_RECV QP of a domain both have open.
ibv_qp* open_qp(ibv_context* ctx, ibv_qp_open_attr* attr) {
  const uint32_t needed = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if ((attr->comp_mask & needed) != needed || attr->qp_type != IBV_QPT_XRC_RECV ||
      attr->xrcd == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  control::OpenQpRequest request{};
  request.xrcd = to_xrcd(attr->xrcd)->handle;
  request.qpn = attr->qp_num;
  request.qp_type = attr->qp_type;
  return attach_opened_qp(ctx, request, attr->qp_context);
}

}  // namespace xroce::provider
