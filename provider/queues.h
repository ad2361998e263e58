// The data path verbs: CQs, QPs, SRQs, AHs, posting and polling (include/xroce/queues.h).
// Posting and polling touch only the shared rings; the doorbell eventfd is written only when the
// engine said it sleeps.
#pragma once

#include "provider/xroce.h"

namespace xroce::provider {

ibv_cq* create_cq(ibv_context* ctx, int cqe, ibv_comp_channel* channel, int comp_vector);
ibv_cq_ex* create_cq_ex(ibv_context* ctx, ibv_cq_init_attr_ex* attr);
int destroy_cq(ibv_cq* cq);
int resize_cq(ibv_cq* cq, int cqe);
int poll_cq(ibv_cq* cq, int ne, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);
// Drops the completions of QP `qpn` not polled yet (a QP moved to RESET; mlx5_cq_clean).
void clean_cq(ibv_cq* cq, uint32_t qpn);

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr);
ibv_qp* create_qp_ex(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask);
int query_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init);
int destroy_qp(ibv_qp* qp);
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
// The ibv_wr_* send API of an extended QP.
void set_wr_ops(ibv_qp_ex& qp, uint64_t send_ops_flags);

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr);
int modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask);
int query_srq(ibv_srq* srq, ibv_srq_attr* attr);
int destroy_srq(ibv_srq* srq);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr);
int destroy_ah(ibv_ah* ah);

// The daemon's handle of a completion channel this context made, or 0.
uint32_t channel_handle(ibv_comp_channel* channel);

}  // namespace xroce::provider
