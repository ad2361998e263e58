// verbs_probe's "objects" mode: the data path objects through the system's libibverbs, with the
// errnos a real device returns. Prints "check NAME ok|FAILED" lines like the rest of the probe.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "verbs_probe.h"

namespace xroce::probe {

namespace {

constexpr int kCqe = 16;
constexpr uint32_t kWr = 8;

ibv_qp* make_qp(ibv_pd* pd, ibv_cq* cq, ibv_qp_type type, ibv_srq* srq = nullptr) {
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.srq = srq;
  init.qp_type = type;
  init.cap.max_send_wr = kWr;
  init.cap.max_recv_wr = srq != nullptr ? 0 : kWr;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = 64;
  return ibv_create_qp(pd, &init);
}

int to_init(ibv_qp* qp, bool ud) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  if (ud) {
    a.qkey = 0x11111111;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  }
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int rc_to_rtr(ibv_qp* qp, uint8_t sgid_index) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = 0x123;
  a.rq_psn = 77;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.grh.sgid_index = sgid_index;
  // ::ffff:198.18.99.2, a peer that does not exist: nothing is sent in these checks.
  const uint8_t dgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 99, 2};
  std::memcpy(a.ah_attr.grh.dgid.raw, dgid, sizeof(dgid));
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

int rc_to_rts(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 1234;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

void check_cq_errors(ibv_context* ctx, const ibv_device_attr& dev) {
  errno = 0;
  check(ibv_create_cq(ctx, 0, nullptr, nullptr, 0) == nullptr && errno == EINVAL, "cq_zero_einval");
  errno = 0;
  check(ibv_create_cq(ctx, dev.max_cqe + 1, nullptr, nullptr, 0) == nullptr && errno == EINVAL,
        "cq_beyond_max_cqe_einval");
  errno = 0;
  check(ibv_create_cq(ctx, kCqe, nullptr, nullptr, 1) == nullptr && errno == EINVAL,
        "cq_bad_vector_einval");
  ibv_cq_init_attr_ex ex{};
  ex.cqe = kCqe;
  // Completion timestamps are offered; a flow tag (a steering feature the device lacks) is not.
  ex.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  ibv_cq_ex* stamped = ibv_create_cq_ex(ctx, &ex);
  check(stamped != nullptr && ibv_destroy_cq(ibv_cq_ex_to_cq(stamped)) == 0,
        "cq_ex_timestamp_supported");
  ex.wc_flags = IBV_WC_EX_WITH_FLOW_TAG;
  errno = 0;
  check(ibv_create_cq_ex(ctx, &ex) == nullptr && errno == EOPNOTSUPP, "cq_ex_flow_tag_unsupported");
  ex.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_IMM;
  ibv_cq_ex* cq_ex = ibv_create_cq_ex(ctx, &ex);
  check(cq_ex != nullptr, "create_cq_ex");
  if (cq_ex == nullptr) return;
  ibv_poll_cq_attr poll{};
  check(ibv_start_poll(cq_ex, &poll) == ENOENT, "cq_ex_empty_enoent");
  check(ibv_destroy_cq(ibv_cq_ex_to_cq(cq_ex)) == 0, "destroy_cq_ex");
}

void check_rc_walk(ibv_pd* pd, ibv_cq* cq, ibv_mr* mr) {
  ibv_qp* qp = make_qp(pd, cq, IBV_QPT_RC);
  check(qp != nullptr && qp->qp_num > 1 && qp->state == IBV_QPS_RESET, "create_rc_qp");
  if (qp == nullptr) return;
  check(ibv_destroy_cq(cq) == EBUSY, "destroy_cq_in_use_ebusy");
  ibv_sge sge{reinterpret_cast<uint64_t>(mr->addr), 64, mr->lkey};
  ibv_send_wr swr{};
  swr.sg_list = &sge;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  check(ibv_post_send(qp, &swr, &bad) == EINVAL && bad == &swr, "post_send_in_reset_einval");

  check(rc_to_rtr(qp, 0) == EINVAL, "reset_to_rtr_einval");
  check(to_init(qp, false) == 0, "reset_to_init");
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  check(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state == IBV_QPS_INIT &&
            init.cap.max_send_wr >= kWr && init.send_cq == cq,
        "query_init");
  check(rc_to_rtr(qp, 200) == EINVAL, "rtr_bad_sgid_index_einval");
  check(rc_to_rtr(qp, 0) == 0, "init_to_rtr");
  check(rc_to_rts(qp) == 0, "rtr_to_rts");
  check(ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN, &init) == 0 &&
            attr.qp_state == IBV_QPS_RTS && attr.sq_psn == 1234 && attr.rq_psn == 77 &&
            attr.path_mtu == IBV_MTU_1024 && attr.dest_qp_num == 0x123 &&
            attr.ah_attr.grh.dgid.raw[15] == 2,
        "query_rts");
  check(rc_to_rtr(qp, 0) == EINVAL, "rts_to_rtr_einval");
  // Posting writes the ring; the queue is finite: some post fails with ENOMEM and says which.
  ibv_recv_wr rwr{};
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  int rc = 0;
  uint32_t posted = 0;
  while (rc == 0 && posted <= 4 * kWr) {
    rwr.wr_id = posted;
    rc = ibv_post_recv(qp, &rwr, &rbad);
    if (rc == 0) ++posted;
  }
  check(rc == ENOMEM && rbad == &rwr && posted >= kWr, "post_recv_until_full_enomem");
  ibv_send_wr too_many_sges = swr;
  too_many_sges.num_sge = 2;
  check(ibv_post_send(qp, &too_many_sges, &bad) == EINVAL && bad == &too_many_sges,
        "post_send_too_many_sges_einval");
  check(ibv_destroy_qp(qp) == 0, "destroy_rc_qp");
}

void check_srq(ibv_pd* pd, ibv_cq* cq) {
  ibv_srq_init_attr init{};
  init.attr.max_wr = kWr;
  init.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &init);
  check(srq != nullptr && init.attr.max_wr >= kWr, "create_srq");
  if (srq == nullptr) return;
  ibv_srq_attr attr{};
  attr.srq_limit = 4;
  check(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT) == 0, "modify_srq_limit");
  attr = {};
  check(ibv_query_srq(srq, &attr) == 0 && attr.srq_limit == 4 && attr.max_wr >= kWr, "query_srq");
  attr.srq_limit = 100000;
  check(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT) == EINVAL, "srq_limit_beyond_max_wr_einval");
  ibv_qp* qp = make_qp(pd, cq, IBV_QPT_RC, srq);
  check(qp != nullptr, "create_qp_on_srq");
  check(ibv_destroy_srq(srq) == EBUSY, "destroy_srq_in_use_ebusy");
  if (qp != nullptr) {
    ibv_recv_wr rwr{};
    ibv_recv_wr* bad = nullptr;
    check(to_init(qp, false) == 0 && ibv_post_recv(qp, &rwr, &bad) == EINVAL,
          "post_recv_on_srq_qp_einval");
    check(ibv_destroy_qp(qp) == 0, "destroy_qp_on_srq");
  }
  ibv_recv_wr rwr{};
  ibv_recv_wr* bad = nullptr;
  check(ibv_post_srq_recv(srq, &rwr, &bad) == 0, "post_srq_recv");
  check(ibv_destroy_srq(srq) == 0, "destroy_srq");
}

void check_ud_and_ah(ibv_pd* pd, ibv_cq* cq) {
  ibv_ah_attr ah_attr{};
  ah_attr.is_global = 1;
  ah_attr.port_num = 1;
  ah_attr.grh.hop_limit = 1;
  ah_attr.grh.sgid_index = 0;
  ah_attr.grh.dgid.raw[10] = 0xff;
  ah_attr.grh.dgid.raw[11] = 0xff;
  ibv_ah* ah = ibv_create_ah(pd, &ah_attr);
  check(ah != nullptr, "create_ah");
  ah_attr.grh.sgid_index = 200;
  errno = 0;
  check(ibv_create_ah(pd, &ah_attr) == nullptr && errno == EINVAL, "ah_bad_sgid_index_einval");
  ibv_qp* qp = make_qp(pd, cq, IBV_QPT_UD);
  check(qp != nullptr, "create_ud_qp");
  if (qp != nullptr) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    bool ok = to_init(qp, true) == 0 && ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0;
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 5;
    ok = ok && ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0;
    check(ok, "ud_qp_to_rts");
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.ud.ah = ah;
    ibv_send_wr* bad = nullptr;
    check(ibv_post_send(qp, &wr, &bad) == EINVAL && bad == &wr, "ud_rdma_write_einval");
    check(ibv_destroy_qp(qp) == 0, "destroy_ud_qp");
  }
  if (ah != nullptr) check(ibv_destroy_ah(ah) == 0, "destroy_ah");
}

void check_qp_ex(ibv_context* ctx, ibv_pd* pd, ibv_cq* cq, ibv_mr* mr) {
  ibv_qp_init_attr_ex init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = kWr;
  init.cap.max_recv_wr = kWr;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  init.pd = pd;
  // TSO is a UD/raw-packet operation: an RC QP does not offer it.
  init.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_TSO;
  errno = 0;
  check(ibv_create_qp_ex(ctx, &init) == nullptr && errno == EOPNOTSUPP, "qp_ex_tso_unsupported");
  init.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
  ibv_qp* qp = ibv_create_qp_ex(ctx, &init);
  ibv_qp_ex* qpx = qp != nullptr ? ibv_qp_to_qp_ex(qp) : nullptr;
  check(qpx != nullptr, "create_qp_ex");
  if (qpx == nullptr) return;
  check(to_init(qp, false) == 0 && rc_to_rtr(qp, 0) == 0 && rc_to_rts(qp) == 0, "qp_ex_to_rts");
  ibv_wr_start(qpx);
  qpx->wr_id = 42;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, mr->lkey, reinterpret_cast<uint64_t>(mr->addr), 16);
  ibv_wr_rdma_write(qpx, 0x1234, 0x1000);
  const char text[] = "inline";
  ibv_wr_set_inline_data(qpx, const_cast<char*>(text), sizeof(text));
  check(ibv_wr_complete(qpx) == 0, "wr_send_and_write_complete");
  ibv_wr_start(qpx);
  ibv_wr_send(qpx);
  ibv_wr_abort(qpx);
  check(ibv_destroy_qp(qp) == 0, "destroy_qp_ex");
}

}  // namespace

int objects(ibv_context* ctx) {
  ibv_device_attr dev{};
  check(ibv_query_device(ctx, &dev) == 0 && dev.max_cqe > 0 && dev.max_qp_wr > 0, "query_device");
  check_cq_errors(ctx, dev);
  ibv_cq* cq = ibv_create_cq(ctx, kCqe, nullptr, nullptr, 0);
  check(cq != nullptr && cq->cqe >= kCqe, "create_cq");
  ibv_pd* pd = ibv_alloc_pd(ctx);
  static std::vector<char> buf(1 << 16);
  ibv_mr* mr =
      pd != nullptr ? ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE) : nullptr;
  check(pd != nullptr && mr != nullptr, "pd_and_mr");
  if (cq == nullptr || mr == nullptr) return 1;
  ibv_wc wc[4];
  check(ibv_poll_cq(cq, 4, wc) == 0, "poll_empty_cq");
  check(ibv_req_notify_cq(cq, 0) == 0 && ibv_req_notify_cq(cq, 1) == 0, "req_notify_cq");
  check(ibv_resize_cq(cq, 4 * kCqe) == 0 && cq->cqe >= 4 * kCqe, "resize_cq");
  check(ibv_poll_cq(cq, 4, wc) == 0, "poll_resized_cq");

  check_rc_walk(pd, cq, mr);
  check_srq(pd, cq);
  check_ud_and_ah(pd, cq);
  check_qp_ex(ctx, pd, cq, mr);

  check(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0, "dealloc_pd");
  check(ibv_destroy_cq(cq) == 0, "destroy_cq");
  return 0;
}

}  // namespace xroce::probe
