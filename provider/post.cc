// Posting work: ibv_post_send, ibv_post_recv, ibv_post_srq_recv and the ibv_wr_* API. Each
// writes WQE slots, publishes the producer index (release) and rings the doorbell eventfd only
// when the engine said it sleeps (include/xroce/queues.h): no system call while it is awake.
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "provider/device_death.h"
#include "provider/queues.h"

namespace xroce::provider {

namespace {

Qp* to_qp(ibv_qp* qp) {
  return reinterpret_cast<Qp*>(qp);
}
Qp* to_qp(ibv_qp_ex* qp) {
  return reinterpret_cast<Qp*>(&qp->qp_base);
}

void ring_doorbell(int fd) {
  const uint64_t one = 1;
  (void)!write(fd, &one, sizeof(one));
}

void publish(const queues::Ring& ring, uint32_t next, int doorbell_fd, queues::ContextPage* page) {
  if (ring.publish(next, page)) ring_doorbell(doorbell_fd);
}

// Records the payload bytes of send WQEs [from, to) (Qp::sq_bytes_before), before they are
// published; sq_lock held.
void note_send_bytes(Qp& qp, uint32_t from, uint32_t to) {
  if (!qp.sq_bytes_before) return;
  uint64_t total = qp.sq_bytes_posted.load(std::memory_order_relaxed);
  for (uint32_t i = from; i != to; ++i) {
    qp.sq_bytes_before[i & (qp.sq.slot_count() - 1)].store(total, std::memory_order_relaxed);
    const auto* wqe = reinterpret_cast<const queues::SendWqe*>(qp.sq.slot(i));
    if (wqe->inline_bytes != 0) {
      total += wqe->inline_bytes;
    } else {
      const auto* sge = reinterpret_cast<const queues::Sge*>(wqe + 1);
      for (uint32_t k = 0; k < wqe->num_sge; ++k)
        total += sge[k].length;
    }
  }
  qp.sq_bytes_posted.store(total, std::memory_order_release);
}

// The work requests each QP type carries (rxe_wr_opcode_info; IBA 9.2: UC has no READ, atomics
// or SEND_WITH_INV; ATOMIC_WRITE is RC's, as in rxe; an XRC_RECV QP sends nothing).
bool opcode_allowed(ibv_qp_type type, ibv_wr_opcode op) {
  const bool rc = type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND;
  const bool connected = rc || type == IBV_QPT_UC;
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return connected || type == IBV_QPT_UD;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV:
      return connected;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_SEND_WITH_INV:
      return rc;
    case IBV_WR_ATOMIC_WRITE:
      return type == IBV_QPT_RC;
    default:
      return false;
  }
}

bool state_allows_send(ibv_qp_state s) {
  return s == IBV_QPS_RTS || s == IBV_QPS_SQD || s == IBV_QPS_SQE || s == IBV_QPS_ERR;
}

uint64_t total_bytes(const ibv_sge* sg, int n) {
  uint64_t total = 0;
  for (int i = 0; i < n; ++i)
    total += sg[i].length;
  return total;
}

// A memory window bind (IBV_WR_BIND_MW, ibv_bind_mw, ibv_wr_bind_mw) in a WQE: the window's
// current R_Key, the one it takes, and ibv_mw_bind_info.
int write_bind_wqe(const ibv_mw* mw, uint32_t new_rkey, const ibv_mw_bind_info& info,
                   queues::SendWqe& w) {
  if (mw == nullptr || (info.length != 0 && info.mr == nullptr)) return EINVAL;
  w.invalidate_rkey = mw->rkey;
  w.rkey = new_rkey;
  w.remote_addr = info.addr;
  w.compare_add = info.length;
  w.mw_lkey = info.mr == nullptr ? 0 : info.mr->lkey;
  w.mw_access = info.mw_access_flags;
  return 0;
}

// Writes one ibv_send_wr into `slot`; 0, EINVAL (shape) or ENOMEM (inline too long).
int write_send_wqe(const Qp& qp, const ibv_send_wr& wr, uint8_t* slot) {
  const ibv_qp_type type = qp.vqp.qp.qp_type;
  if (!opcode_allowed(type, wr.opcode) || wr.num_sge < 0) return EINVAL;
  const bool is_inline = (wr.send_flags & IBV_SEND_INLINE) != 0;
  auto& w = *reinterpret_cast<queues::SendWqe*>(slot);
  w = queues::SendWqe{};
  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.send_flags = wr.send_flags | (qp.sq_sig_all ? IBV_SEND_SIGNALED : 0);
  w.imm_data = wr.imm_data;  // or invalidate_rkey: the same union in ibv_send_wr
  if (wr.opcode == IBV_WR_SEND_WITH_INV || wr.opcode == IBV_WR_LOCAL_INV) {
    w.invalidate_rkey = wr.invalidate_rkey;
  }
  if (type == IBV_QPT_XRC_SEND) w.xrc_remote_srqn = wr.qp_type.xrc.remote_srqn;
  if (wr.opcode == IBV_WR_BIND_MW)
    return write_bind_wqe(wr.bind_mw.mw, wr.bind_mw.rkey, wr.bind_mw.bind_info, w);
  if (wr.opcode == IBV_WR_LOCAL_INV) return 0;
  if (wr.opcode == IBV_WR_ATOMIC_WRITE) {
    // The 8 bytes to write: the one SGE, read now (rxe copies them into the WQE the same way).
    if (wr.num_sge != 1 || wr.sg_list[0].length != 8) return EINVAL;
    w.remote_addr = wr.wr.rdma.remote_addr;
    w.rkey = wr.wr.rdma.rkey;
    std::memcpy(&w.compare_add, reinterpret_cast<const void*>(wr.sg_list[0].addr), 8);
    return 0;
  }
  if (type == IBV_QPT_UD) {
    if (wr.wr.ud.ah == nullptr) return EINVAL;
    w.ah_handle = wr.wr.ud.ah->handle;
    w.remote_qpn = wr.wr.ud.remote_qpn;
    w.remote_qkey = wr.wr.ud.remote_qkey;
  } else if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    if (wr.num_sge != 1 || wr.sg_list[0].length != 8 || is_inline) return EINVAL;
    w.remote_addr = wr.wr.atomic.remote_addr;
    w.rkey = wr.wr.atomic.rkey;
    w.compare_add = wr.wr.atomic.compare_add;
    w.swap = wr.wr.atomic.swap;
  } else {
    w.remote_addr = wr.wr.rdma.remote_addr;
    w.rkey = wr.wr.rdma.rkey;
  }
  uint8_t* payload = slot + sizeof(queues::SendWqe);
  if (is_inline) {
    const uint64_t bytes = total_bytes(wr.sg_list, wr.num_sge);
    if (wr.opcode == IBV_WR_RDMA_READ) return EINVAL;
    if (bytes > qp.cap.max_inline_data) return EINVAL;
    for (int i = 0; i < wr.num_sge; ++i) {
      std::memcpy(payload, reinterpret_cast<const void*>(wr.sg_list[i].addr), wr.sg_list[i].length);
      payload += wr.sg_list[i].length;
    }
    w.inline_bytes = static_cast<uint32_t>(bytes);
    return 0;
  }
  if (static_cast<uint32_t>(wr.num_sge) > qp.cap.max_send_sge) return EINVAL;
  w.num_sge = static_cast<uint32_t>(wr.num_sge);
  std::memcpy(payload, wr.sg_list, sizeof(ibv_sge) * static_cast<std::size_t>(wr.num_sge));
  return 0;
}

int write_recv_wqe(const ibv_recv_wr& wr, uint32_t max_sge, uint8_t* slot) {
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > max_sge) return EINVAL;
  auto& w = *reinterpret_cast<queues::RecvWqe*>(slot);
  w.wr_id = wr.wr_id;
  w.num_sge = static_cast<uint32_t>(wr.num_sge);
  w.reserved = 0;
  std::memcpy(slot + sizeof(queues::RecvWqe), wr.sg_list,
              sizeof(ibv_sge) * static_cast<std::size_t>(wr.num_sge));
  return 0;
}

int post_recv_list(const queues::Ring& ring, uint32_t& next, uint32_t max_sge, int doorbell_fd,
                   queues::ContextPage* page, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  const uint32_t start = next;
  int err = 0;
  for (; wr != nullptr; wr = wr->next) {
    if (ring.free_slots(next) == 0) {
      err = ENOMEM;
    } else {
      err = write_recv_wqe(*wr, max_sge, ring.slot(next));
    }
    if (err != 0) {
      *bad_wr = wr;
      break;
    }
    ++next;
  }
  if (next != start) publish(ring, next, doorbell_fd, page);
  return err;
}

static_assert(sizeof(ibv_sge) == sizeof(queues::Sge));

}  // namespace

int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp* qp = to_qp(ibqp);
  if (!state_allows_send(ibqp->state)) {
    *bad_wr = wr;
    return EINVAL;
  }
  std::lock_guard guard(qp->sq_lock);
  const uint32_t start = qp->sq_next;
  int err = 0;
  for (; wr != nullptr; wr = wr->next) {
    if (qp->sq.free_slots(qp->sq_next) == 0) {
      err = ENOMEM;
    } else {
      err = write_send_wqe(*qp, *wr, qp->sq.slot(qp->sq_next));
    }
    if (err != 0) {
      *bad_wr = wr;
      break;
    }
    ++qp->sq_next;
  }
  if (qp->sq_next != start) {
    note_send_bytes(*qp, start, qp->sq_next);
    publish(qp->sq, qp->sq_next, qp->doorbell_fd, qp->page);
  }
  if (device_dead(ibqp->context)) flush_send_queue_locked(*qp);
  return err;
}

int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp* qp = to_qp(ibqp);
  if (!qp->rq.valid() || ibqp->state == IBV_QPS_RESET) {
    *bad_wr = wr;
    return EINVAL;  // a QP on an SRQ has no receive queue of its own
  }
  std::lock_guard guard(qp->rq_lock);
  const int err = post_recv_list(qp->rq, qp->rq_next, qp->cap.max_recv_sge, qp->doorbell_fd,
                                 qp->page, wr, bad_wr);
  if (device_dead(ibqp->context)) flush_recv_queue_locked(*qp);
  return err;
}

int post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Srq* srq = reinterpret_cast<Srq*>(ibsrq);
  std::lock_guard guard(srq->lock);
  return post_recv_list(srq->ring, srq->next, srq->max_sge, srq->doorbell_fd, srq->page, wr,
                        bad_wr);
}

// ---- the ibv_wr_* API: WQEs built in place between wr_start and wr_complete ----

namespace {

void wr_start(ibv_qp_ex* ibqp) {
  Qp* qp = to_qp(ibqp);
  qp->sq_lock.lock();
  qp->batch_start = qp->sq_next;
  qp->batch_error = state_allows_send(qp->vqp.qp.state) ? 0 : EINVAL;
  qp->batch_wqe = nullptr;
}

int wr_complete(ibv_qp_ex* ibqp) {
  Qp* qp = to_qp(ibqp);
  const int err = qp->batch_error;
  if (err != 0) {
    qp->sq_next = qp->batch_start;
  } else if (qp->sq_next != qp->batch_start) {
    note_send_bytes(*qp, qp->batch_start, qp->sq_next);
    publish(qp->sq, qp->sq_next, qp->doorbell_fd, qp->page);
    if (device_dead(qp->vqp.qp.context)) flush_send_queue_locked(*qp);
  }
  qp->batch_wqe = nullptr;
  qp->sq_lock.unlock();
  return err;
}

void wr_abort(ibv_qp_ex* ibqp) {
  Qp* qp = to_qp(ibqp);
  qp->sq_next = qp->batch_start;
  qp->batch_wqe = nullptr;
  qp->sq_lock.unlock();
}

// Begins a WQE of `opcode` from the QP's wr_id and wr_flags; nullptr (and the batch fails)
// when the queue is full.
queues::SendWqe* begin_wqe(ibv_qp_ex* ibqp, ibv_wr_opcode opcode) {
  Qp* qp = to_qp(ibqp);
  qp->batch_wqe = nullptr;
  if (qp->batch_error != 0) return nullptr;
  if (qp->sq.free_slots(qp->sq_next) == 0) {
    qp->batch_error = ENOMEM;
    return nullptr;
  }
  auto* w = reinterpret_cast<queues::SendWqe*>(qp->sq.slot(qp->sq_next));
  *w = queues::SendWqe{};
  w->wr_id = ibqp->wr_id;
  w->opcode = opcode;
  w->send_flags = ibqp->wr_flags | (qp->sq_sig_all ? IBV_SEND_SIGNALED : 0);
  ++qp->sq_next;
  qp->batch_wqe = w;
  return w;
}

void wr_send(ibv_qp_ex* qp) {
  begin_wqe(qp, IBV_WR_SEND);
}
void wr_send_imm(ibv_qp_ex* qp, __be32 imm) {
  if (auto* w = begin_wqe(qp, IBV_WR_SEND_WITH_IMM)) w->imm_data = imm;
}
void wr_rdma_write(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr) {
  if (auto* w = begin_wqe(qp, IBV_WR_RDMA_WRITE)) {
    w->rkey = rkey;
    w->remote_addr = remote_addr;
  }
}
void wr_rdma_write_imm(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, __be32 imm) {
  if (auto* w = begin_wqe(qp, IBV_WR_RDMA_WRITE_WITH_IMM)) {
    w->rkey = rkey;
    w->remote_addr = remote_addr;
    w->imm_data = imm;
  }
}
void wr_rdma_read(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr) {
  if (auto* w = begin_wqe(qp, IBV_WR_RDMA_READ)) {
    w->rkey = rkey;
    w->remote_addr = remote_addr;
  }
}
void wr_atomic_cmp_swp(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                       uint64_t swap) {
  if (auto* w = begin_wqe(qp, IBV_WR_ATOMIC_CMP_AND_SWP)) {
    w->rkey = rkey;
    w->remote_addr = remote_addr;
    w->compare_add = compare;
    w->swap = swap;
  }
}
void wr_atomic_fetch_add(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
  if (auto* w = begin_wqe(qp, IBV_WR_ATOMIC_FETCH_AND_ADD)) {
    w->rkey = rkey;
    w->remote_addr = remote_addr;
    w->compare_add = add;
  }
}

void wr_send_inv(ibv_qp_ex* qp, uint32_t invalidate_rkey) {
  if (auto* w = begin_wqe(qp, IBV_WR_SEND_WITH_INV)) w->invalidate_rkey = invalidate_rkey;
}
void wr_local_inv(ibv_qp_ex* qp, uint32_t invalidate_rkey) {
  if (auto* w = begin_wqe(qp, IBV_WR_LOCAL_INV)) w->invalidate_rkey = invalidate_rkey;
}
void wr_bind_mw(ibv_qp_ex* ibqp, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  auto* w = begin_wqe(ibqp, IBV_WR_BIND_MW);
  if (w != nullptr && write_bind_wqe(mw, rkey, *info, *w) != 0) to_qp(ibqp)->batch_error = EINVAL;
}
void wr_atomic_write(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, const void* atomic_wr) {
  if (auto* w = begin_wqe(qp, IBV_WR_ATOMIC_WRITE)) {
    w->rkey = rkey;
    w->remote_addr = remote_addr;
    std::memcpy(&w->compare_add, atomic_wr, 8);
  }
}
void wr_set_xrc_srqn(ibv_qp_ex* ibqp, uint32_t remote_srqn) {
  if (queues::SendWqe* w = to_qp(ibqp)->batch_wqe) w->xrc_remote_srqn = remote_srqn;
}

void wr_set_ud_addr(ibv_qp_ex* ibqp, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  queues::SendWqe* w = to_qp(ibqp)->batch_wqe;
  if (w == nullptr) return;
  w->ah_handle = ah->handle;
  w->remote_qpn = remote_qpn;
  w->remote_qkey = remote_qkey;
}

void wr_set_sge_list(ibv_qp_ex* ibqp, size_t num_sge, const ibv_sge* sg_list) {
  Qp* qp = to_qp(ibqp);
  queues::SendWqe* w = qp->batch_wqe;
  if (w == nullptr) return;
  if (num_sge > qp->cap.max_send_sge) {
    qp->batch_error = EINVAL;
    return;
  }
  w->send_flags &= ~static_cast<uint32_t>(IBV_SEND_INLINE);
  w->num_sge = static_cast<uint32_t>(num_sge);
  std::memcpy(reinterpret_cast<uint8_t*>(w) + sizeof(*w), sg_list, sizeof(ibv_sge) * num_sge);
}

void wr_set_sge(ibv_qp_ex* qp, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge sge{addr, length, lkey};
  wr_set_sge_list(qp, 1, &sge);
}

void wr_set_inline_data_list(ibv_qp_ex* ibqp, size_t num_buf, const ibv_data_buf* bufs) {
  Qp* qp = to_qp(ibqp);
  queues::SendWqe* w = qp->batch_wqe;
  if (w == nullptr) return;
  std::size_t total = 0;
  for (size_t i = 0; i < num_buf; ++i)
    total += bufs[i].length;
  if (total > qp->cap.max_inline_data) {
    qp->batch_error = EINVAL;
    return;
  }
  uint8_t* out = reinterpret_cast<uint8_t*>(w) + sizeof(*w);
  for (size_t i = 0; i < num_buf; ++i) {
    std::memcpy(out, bufs[i].addr, bufs[i].length);
    out += bufs[i].length;
  }
  w->send_flags |= IBV_SEND_INLINE;
  w->num_sge = 0;
  w->inline_bytes = static_cast<uint32_t>(total);
}

void wr_set_inline_data(ibv_qp_ex* qp, void* addr, size_t length) {
  const ibv_data_buf buf{addr, length};
  wr_set_inline_data_list(qp, 1, &buf);
}

}  // namespace

void set_wr_ops(ibv_qp_ex& qp, uint64_t flags) {
  if (flags & IBV_QP_EX_WITH_SEND) qp.wr_send = wr_send;
  if (flags & IBV_QP_EX_WITH_SEND_WITH_IMM) qp.wr_send_imm = wr_send_imm;
  if (flags & IBV_QP_EX_WITH_RDMA_WRITE) qp.wr_rdma_write = wr_rdma_write;
  if (flags & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) qp.wr_rdma_write_imm = wr_rdma_write_imm;
  if (flags & IBV_QP_EX_WITH_RDMA_READ) qp.wr_rdma_read = wr_rdma_read;
  if (flags & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP) qp.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  if (flags & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) qp.wr_atomic_fetch_add = wr_atomic_fetch_add;
  if (flags & IBV_QP_EX_WITH_SEND_WITH_INV) qp.wr_send_inv = wr_send_inv;
  if (flags & IBV_QP_EX_WITH_LOCAL_INV) qp.wr_local_inv = wr_local_inv;
  if (flags & IBV_QP_EX_WITH_BIND_MW) qp.wr_bind_mw = wr_bind_mw;
  if (flags & IBV_QP_EX_WITH_ATOMIC_WRITE) qp.wr_atomic_write = wr_atomic_write;
  qp.wr_set_xrc_srqn = wr_set_xrc_srqn;
  qp.wr_set_ud_addr = wr_set_ud_addr;
  qp.wr_set_sge = wr_set_sge;
  qp.wr_set_sge_list = wr_set_sge_list;
  qp.wr_set_inline_data = wr_set_inline_data;
  qp.wr_set_inline_data_list = wr_set_inline_data_list;
  qp.wr_start = wr_start;
  qp.wr_complete = wr_complete;
  qp.wr_abort = wr_abort;
}

}  // namespace xroce::provider
