// Memory windows and XRC verbs of the provider (windows_xrc.cc), and what qp.cc shares with them.
#pragma once

#include "provider/xroce.h"

namespace xroce::provider {

// An XRC domain: ibv_xrcd first (libibverbs reads only its context).
struct Xrcd {
  ibv_xrcd xrcd;
  uint32_t handle = 0;
};
inline Xrcd* to_xrcd(ibv_xrcd* xrcd) {
  return reinterpret_cast<Xrcd*>(xrcd);
}

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int dealloc_mw(ibv_mw* mw);
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);
ibv_xrcd* open_xrcd(ibv_context* ctx, ibv_xrcd_init_attr* attr);
int close_xrcd(ibv_xrcd* xrcd);
ibv_srq* create_srq_ex(ibv_context* ctx, ibv_srq_init_attr_ex* attr);
int get_srq_num(ibv_srq* srq, uint32_t* srq_num);
ibv_qp* open_qp(ibv_context* ctx, ibv_qp_open_attr* attr);

// qp.cc: an SRQ from a create_srq request (its rings mapped; the ibv_srq fields left to the
// caller), and the QP ibv_open_qp hands out.
Srq* make_srq(ibv_context* ctx, const control::CreateSrqRequest& request);
ibv_qp* attach_opened_qp(ibv_context* ctx, const control::OpenQpRequest& request, void* qp_context);

}  // namespace xroce::provider
