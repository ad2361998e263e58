// Device: the data path objects (CQ, QP, SRQ, AH) and their checks.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "device/device.h"

namespace xroce::device {

namespace {

// QPNs 0 and 1 are the special QPs (IBA 10.2.5); rxe starts ordinary QPs at 16.
constexpr uint32_t kFirstQpn = 0x11;
constexpr uint32_t kQpnSpace = 1u << 24;
constexpr uint32_t kQpTypeRc = 2;  // ibv_qp_type
constexpr uint32_t kQpTypeUc = 3;
constexpr uint32_t kQpTypeUd = 4;
constexpr uint32_t kQpTypeXrcSend = 9;
constexpr uint32_t kQpTypeXrcRecv = 10;
constexpr uint32_t kSrqMaxWr = 1;  // ibv_srq_attr_mask
constexpr uint32_t kSrqLimit = 2;

template <typename Map>
auto* owned(Map& map, ClientId owner, uint32_t handle) {
  auto it = map.find(handle);
  return it == map.end() || it->second->owner != owner ? nullptr : it->second.get();
}

Result<SharedRegion, int> cq_region(uint32_t slots) {
  auto region = SharedRegion::create("xroce-cq", queues::ring_bytes(slots, sizeof(queues::Cqe)));
  if (region)
    queues::Ring::format(region->base(), queues::RingKind::cq, slots, sizeof(queues::Cqe));
  return region;
}

transport::QpAttr to_transport(const control::QpAttr& a) {
  transport::QpAttr t;
  t.qp_state = static_cast<transport::QpState>(a.qp_state);
  t.cur_qp_state = static_cast<transport::QpState>(a.cur_qp_state);
  t.path_mtu = static_cast<transport::PathMtu>(a.path_mtu);
  t.qkey = wire::Qkey(a.qkey);
  t.rq_psn = wire::Psn(a.rq_psn);
  t.sq_psn = wire::Psn(a.sq_psn);
  t.dest_qp_num = wire::Qpn(a.dest_qp_num);
  t.qp_access_flags = a.qp_access_flags;
  t.pkey_index = a.pkey_index;
  t.en_sqd_async_notify = a.en_sqd_async_notify;
  t.max_rd_atomic = a.max_rd_atomic;
  t.max_dest_rd_atomic = a.max_dest_rd_atomic;
  t.min_rnr_timer = a.min_rnr_timer;
  t.port_num = a.port_num;
  t.timeout = a.timeout;
  t.retry_cnt = a.retry_cnt;
  t.rnr_retry = a.rnr_retry;
  return t;
}

control::QpAttr from_transport(const transport::QpAttr& t, transport::QpState state) {
  control::QpAttr a{};
  a.qp_state = static_cast<uint32_t>(state);
  a.cur_qp_state = static_cast<uint32_t>(state);
  a.path_mtu = static_cast<uint32_t>(t.path_mtu);
  a.qkey = t.qkey.value();
  a.rq_psn = t.rq_psn.value();
  a.sq_psn = t.sq_psn.value();
  a.dest_qp_num = t.dest_qp_num.value();
  a.qp_access_flags = t.qp_access_flags;
  a.pkey_index = t.pkey_index;
  a.en_sqd_async_notify = t.en_sqd_async_notify;
  a.max_rd_atomic = t.max_rd_atomic;
  a.max_dest_rd_atomic = t.max_dest_rd_atomic;
  a.min_rnr_timer = t.min_rnr_timer;
  a.port_num = t.port_num;
  a.timeout = t.timeout;
  a.retry_cnt = t.retry_cnt;
  a.rnr_retry = t.rnr_retry;
  return a;
}

// ibv_query_qp reports the PSNs the QP is at, not those modify_qp started it from, as
// rxe_qp_to_attr does (rq_psn = resp.psn, sq_psn = req.psn): the PSN the responder expects
// next once it has been RTR, and the one the requester sends next once it has been RTS.
void apply_current_psns(const transport::Qp& core, control::QpAttr& a) {
  using transport::QpState;
  const QpState s = core.state();
  if (s != QpState::kReset && s != QpState::kInit) a.rq_psn = core.expected_psn().value();
  if (s == QpState::kRts || s == QpState::kSqd || s == QpState::kSqe || s == QpState::kErr) {
    a.sq_psn = core.next_send_psn().value();
  }
}

}  // namespace

CompletionQueue* Device::cq(ClientId owner, uint32_t handle) {
  return owned(cqs_, owner, handle);
}
QueuePair* Device::qp(ClientId owner, uint32_t handle) {
  auto alias = opened_qps_.find(handle);
  if (alias != opened_qps_.end()) {
    if (alias->second.owner != owner) return nullptr;
    auto it = qps_.find(alias->second.target);
    return it == qps_.end() ? nullptr : it->second.get();
  }
  return owned(qps_, owner, handle);
}
SharedReceiveQueue* Device::srq(ClientId owner, uint32_t handle) {
  return owned(srqs_, owner, handle);
}
const AddressHandle* Device::ah(uint32_t handle) const {
  auto it = ahs_.find(handle);
  return it == ahs_.end() ? nullptr : &it->second;
}

uint32_t Device::next_qpn() {
  for (;;) {
    const uint32_t qpn = kFirstQpn + qpn_cursor_;
    qpn_cursor_ = (qpn_cursor_ + 1) % (kQpnSpace - kFirstQpn);
    bool used = false;
    for (const auto& [handle, qp] : qps_)
      used = used || qp->qpn.value() == qpn;
    if (!used) return qpn;
  }
}

Result<uint32_t, int> Device::create_cq(ClientId owner, const CqRequest& request) {
  if (request.cqe == 0 || request.cqe > limits_.max_cqe) return Err{EINVAL};
  if (request.comp_vector != 0) return Err{EINVAL};  // one completion vector
  if (cqs_.size() >= limits_.max_cq || counts(owner).cqs >= quota_.max_cq) return Err{ENOMEM};
  const uint32_t slots = queues::round_up_pow2(request.cqe);
  auto region = cq_region(slots);
  if (!region) return Err{region.error()};
  auto cq = std::make_unique<CompletionQueue>();
  cq->owner = owner;
  cq->cookie = request.cookie;
  cq->channel = request.channel;
  cq->cqe = slots;
  cq->region = std::move(*region);
  cq->ring = queues::Ring(cq->region.base(), slots, sizeof(queues::Cqe));
  const uint32_t handle = next_cq_++;
  cqs_.emplace(handle, std::move(cq));
  ++counts(owner).cqs;
  return handle;
}

// Copies the CQEs not yet polled into a new ring. The copy and the swap run where the CQ's
// writer runs (the worker of a QP that uses it: QPs sharing a CQ share a worker), so no
// completion is written into the old ring meanwhile.
int Device::resize_cq(ClientId owner, uint32_t handle, uint32_t cqe) {
  CompletionQueue* cq = this->cq(owner, handle);
  if (cq == nullptr || cqe == 0 || cqe > limits_.max_cqe) return EINVAL;
  const uint32_t slots = queues::round_up_pow2(cqe);
  auto region = cq_region(slots);
  if (!region) return region.error();
  int err = 0;
  auto swap = [&] {
    const uint32_t consumer = cq->ring.header().consumer.load(std::memory_order_acquire);
    const uint32_t pending = cq->producer - consumer;
    if (pending > cq->ring.slot_count() || pending > slots) {
      err = EINVAL;
      return;
    }
    queues::Ring ring(region->base(), slots, sizeof(queues::Cqe));
    for (uint32_t i = 0; i < pending; ++i)
      std::memcpy(ring.slot(i), cq->ring.slot(consumer + i), sizeof(queues::Cqe));
    ring.header().producer.store(pending, std::memory_order_release);
    ring.header().arm.store(cq->ring.header().arm.load(std::memory_order_acquire));
    cq->region = std::move(*region);
    cq->ring = ring;
    cq->producer = pending;
    cq->cqe = slots;
  };
  QueuePair* writer = nullptr;
  for (auto& [h, qp] : qps_) {
    if (qp->send_cq == handle || qp->recv_cq == handle) writer = qp.get();
  }
  if (writer != nullptr) {
    // The CQEs of work posted before the call count as unpolled (a resize below them fails with
    // EINVAL), as with rxe, whose ibv_post_send has sent a UD request and written its CQE before
    // it returns (pyverbs test_cq test_resize_cq).
    if (writer->hosted) runner_->catch_up(*writer);
    with_core(*writer, [&](transport::Qp&) { swap(); });
  } else {
    swap();
  }
  return err;
}

int Device::destroy_cq(ClientId owner, uint32_t handle) {
  CompletionQueue* cq = this->cq(owner, handle);
  if (cq == nullptr) return EINVAL;
  if (cq->users != 0) return EBUSY;
  cqs_.erase(handle);
  --counts(owner).cqs;
  return 0;
}

// A receive posted to an SRQ needs no worker awake (include/xroce/queues.h "Receive
// doorbells"): the QP that needs a WQE pulls the SRQ then, every turn reads it before its packets,
// and nothing flushes an SRQ's WQEs (a QP's error state leaves them to the others). With no
// worker (no runner) nothing pulls on arrival, and posts ring as ever.
void Device::skip_srq_doorbells(const queues::Ring& ring) const {
  if (runner_ == nullptr) return;
  ring.header().receive_doorbell.store(queues::kReceiveDoorbellSkip, std::memory_order_release);
}

Result<uint32_t, int> Device::create_srq(ClientId owner, const SrqRequest& request) {
  ProtectionDomain* pd = owned_pd(owner, request.pd);
  if (pd == nullptr) return Err{EINVAL};
  // An XRC SRQ (IBV_SRQT_XRC) names its domain and the CQ its completions go to.
  XrcDomainObject* domain = request.xrcd == 0 ? nullptr : xrcd(owner, request.xrcd);
  if (request.xrcd != 0 && (domain == nullptr || cq(owner, request.cq) == nullptr)) {
    return Err{EINVAL};
  }
  const control::SrqAttr& a = request.attr;
  if (a.max_wr == 0 || a.max_wr > limits_.max_srq_wr || a.max_sge > limits_.max_srq_sge ||
      a.srq_limit > a.max_wr) {
    return Err{EINVAL};
  }
  if (srqs_.size() >= limits_.max_srq || counts(owner).srqs >= quota_.max_srq) return Err{ENOMEM};
  auto srq = std::make_unique<SharedReceiveQueue>();
  const uint32_t slots = queues::round_up_pow2(a.max_wr);
  const uint32_t max_sge = a.max_sge == 0 ? 1 : a.max_sge;
  const uint32_t slot_bytes = queues::recv_slot_bytes(max_sge);
  auto region = SharedRegion::create("xroce-srq", queues::ring_bytes(slots, slot_bytes));
  if (!region) return Err{region.error()};
  queues::Ring::format(region->base(), queues::RingKind::srq, slots, slot_bytes);
  srq->owner = owner;
  srq->pd = request.pd;
  srq->cookie = request.cookie;
  srq->attr = control::SrqAttr{slots, max_sge, a.srq_limit};
  srq->region = std::move(*region);
  srq->ring = queues::Ring(srq->region.base(), slots, slot_bytes);
  skip_srq_doorbells(srq->ring);
  srq->doorbell_fd = request.doorbell_fd;
  srq->srq = std::make_unique<transport::Srq>(slots, max_sge);
  if (a.srq_limit != 0) (void)srq->srq->set_limit(a.srq_limit);
  srq->regions = pd->regions.get();
  srq->xrcd = request.xrcd;
  srq->cq = request.cq;
  srq->xrc_cq = domain != nullptr ? cq(owner, request.cq) : nullptr;
  const uint32_t handle = next_srq_++;
  SharedReceiveQueue& placed = *srqs_.emplace(handle, std::move(srq)).first->second;
  if (domain != nullptr) {
    ++cqs_.at(request.cq)->users;
    // The handle is the SRQ number an XRCETH names (ibv_get_srq_num).
    on_xrc_worker(request.xrcd, [&] { domain->add(handle, &placed); });
  }
  ++counts(owner).srqs;
  return handle;
}

int Device::modify_srq(ClientId owner, uint32_t handle, const control::SrqAttr& attr,
                       uint32_t mask) {
  SharedReceiveQueue* srq = this->srq(owner, handle);
  if (srq == nullptr || mask == 0 || (mask & ~(kSrqMaxWr | kSrqLimit)) != 0) return EINVAL;
  // Resizing (IBV_SRQ_MAX_WR) is resize_srq: it hands the application a new ring.
  if ((mask & kSrqMaxWr) != 0) return EINVAL;
  if (attr.srq_limit > srq->attr.max_wr) return EINVAL;
  // The transport's Srq belongs to the worker of the QPs attached to it (they share one).
  int err = 0;
  auto arm = [&] { err = srq->srq->set_limit(attr.srq_limit); };
  QueuePair* user = nullptr;
  for (auto& [h, qp] : qps_) {
    if (qp->srq == handle) user = qp.get();
  }
  if (user != nullptr) {
    with_core(*user, [&](transport::Qp&) { arm(); });
  } else if (srq->xrcd != 0) {
    on_xrc_worker(srq->xrcd, arm);
  } else {
    arm();
  }
  if (err != 0) return err;
  srq->attr.srq_limit = attr.srq_limit;
  return 0;
}

// ibv_modify_srq(IBV_SRQ_MAX_WR): a new ring, the WQEs not yet taken copied over (rxe resizes
// its queue the same way). The copy and the swap run where the SRQ's consumer runs. EINVAL
// below what is posted, or below the armed limit (rxe_srq_chk_attr).
int Device::resize_srq(ClientId owner, uint32_t handle, uint32_t max_wr) {
  SharedReceiveQueue* srq = this->srq(owner, handle);
  if (srq == nullptr || max_wr == 0 || max_wr > limits_.max_srq_wr) return EINVAL;
  const uint32_t slots = queues::round_up_pow2(max_wr);
  const uint32_t slot_bytes = srq->ring.slot_bytes();
  auto region = SharedRegion::create("xroce-srq", queues::ring_bytes(slots, slot_bytes));
  if (!region) return region.error();
  queues::Ring::format(region->base(), queues::RingKind::srq, slots, slot_bytes);
  int err = 0;
  auto swap = [&] {
    const uint32_t producer = srq->ring.header().producer.load(std::memory_order_acquire);
    const uint32_t pending = producer - srq->consumer;
    if (pending > srq->ring.slot_count() || pending + srq->srq->size() > slots ||
        (err = srq->srq->resize(slots)) != 0) {
      err = err != 0 ? err : EINVAL;
      return;
    }
    queues::Ring ring(region->base(), slots, slot_bytes);
    skip_srq_doorbells(ring);
    for (uint32_t i = 0; i < pending; ++i)
      std::memcpy(ring.slot(i), srq->ring.slot(srq->consumer + i), slot_bytes);
    ring.header().producer.store(pending, std::memory_order_release);
    srq->region = std::move(*region);
    srq->ring = ring;
    srq->consumer = 0;
    srq->attr.max_wr = slots;
  };
  QueuePair* user = nullptr;
  for (auto& [h, qp] : qps_) {
    if (qp->srq == handle) user = qp.get();
  }
  if (user != nullptr) {
    with_core(*user, [&](transport::Qp&) { swap(); });
  } else if (srq->xrcd != 0) {
    on_xrc_worker(srq->xrcd, swap);
  } else {
    swap();
  }
  return err;
}

Result<control::SrqAttr, int> Device::query_srq(ClientId owner, uint32_t handle) const {
  auto it = srqs_.find(handle);
  if (it == srqs_.end() || it->second->owner != owner) return Err{EINVAL};
  return it->second->attr;
}

int Device::destroy_srq(ClientId owner, uint32_t handle) {
  SharedReceiveQueue* srq = this->srq(owner, handle);
  if (srq == nullptr) return EINVAL;
  if (srq->users != 0) return EBUSY;
  forget_xrc_srq(*srq, handle);
  srqs_.erase(handle);
  --counts(owner).srqs;
  return 0;
}

// An XRC SRQ leaves its domain on the worker of the domain's target QPs, so none of them is
// using it when it goes.
void Device::forget_xrc_srq(SharedReceiveQueue& srq, uint32_t handle) {
  if (srq.xrcd == 0) return;
  auto it = xrcds_.find(srq.xrcd);
  if (it != xrcds_.end()) {
    XrcDomainObject& domain = *it->second;
    on_xrc_worker(srq.xrcd, [&] { domain.remove(handle); });
  }
  if (auto c = cqs_.find(srq.cq); c != cqs_.end()) --c->second->users;
  srq.xrcd = 0;
}

Result<uint32_t, int> Device::create_ah(ClientId owner, uint32_t pd, const control::AhAttr& attr) {
  if (owned_pd(owner, pd) == nullptr) return Err{EINVAL};
  // RoCE needs a global route through a GID of ours (rdma-core's ibv_create_ah checks the same).
  if (attr.is_global == 0 || attr.port_num != 1 || attr.sgid_index >= gids_.size() ||
      is_zero(gids_.at(attr.sgid_index))) {
    return Err{EINVAL};
  }
  if (ahs_.size() >= limits_.max_ah || counts(owner).ahs >= quota_.max_ah) return Err{ENOMEM};
  const uint32_t handle = next_ah_++;
  ahs_.emplace(handle, AddressHandle{owner, pd, attr});
  ++counts(owner).ahs;
  return handle;
}

// What each QP type needs (ibv_create_qp_ex and the kernel's create_qp): RC, UC and UD a PD
// and both CQs; XRC_SEND a PD and a send CQ, no receive queue; XRC_RECV only its XRC domain
// (no PD, CQs or queues of its own: it receives through the domain's SRQs).
int Device::check_qp_request(ClientId owner, const QpRequest& r) {
  const bool shared_ok = r.srq == 0 || srq(owner, r.srq) != nullptr;
  switch (r.qp_type) {
    case kQpTypeRc:
    case kQpTypeUc:
    case kQpTypeUd:
      if (owned_pd(owner, r.pd) == nullptr || cq(owner, r.send_cq) == nullptr ||
          cq(owner, r.recv_cq) == nullptr || !shared_ok) {
        return EINVAL;
      }
      return 0;
    case kQpTypeXrcSend:
      if (owned_pd(owner, r.pd) == nullptr || cq(owner, r.send_cq) == nullptr || r.srq != 0 ||
          (r.recv_cq != 0 && cq(owner, r.recv_cq) == nullptr)) {
        return EINVAL;
      }
      return 0;
    case kQpTypeXrcRecv:
      return xrcd(owner, r.xrcd) == nullptr ? EINVAL : 0;
    default:
      // A type the transport does not run (raw packet, driver-specific) is refused at
      // creation, as rxe_qp_chk_init refuses the types it lacks.
      return EOPNOTSUPP;
  }
}

Result<uint32_t, int> Device::create_qp(ClientId owner, const QpRequest& r) {
  if (const int err = check_qp_request(owner, r)) return Err{err};
  const bool xrc_send = r.qp_type == kQpTypeXrcSend;
  const bool xrc_recv = r.qp_type == kQpTypeXrcRecv;
  ProtectionDomain* pd = xrc_recv ? nullptr : owned_pd(owner, r.pd);
  CompletionQueue* send_cq = xrc_recv ? nullptr : cq(owner, r.send_cq);
  CompletionQueue* recv_cq = xrc_recv || r.recv_cq == 0 ? nullptr : cq(owner, r.recv_cq);
  SharedReceiveQueue* shared = r.srq == 0 ? nullptr : srq(owner, r.srq);
  XrcDomainObject* domain = xrc_recv ? xrcd(owner, r.xrcd) : nullptr;
  const bool has_rq = shared == nullptr && !xrc_send && !xrc_recv;
  const control::QpCap& c = r.cap;
  if (c.max_send_wr > limits_.max_qp_wr || c.max_send_sge > limits_.max_sge ||
      c.max_inline_data > limits_.max_inline_data ||
      (has_rq && (c.max_recv_wr > limits_.max_qp_wr || c.max_recv_sge > limits_.max_sge))) {
    return Err{EINVAL};
  }
  if (qps_.size() >= limits_.max_qp || counts(owner).qps >= quota_.max_qp) return Err{ENOMEM};

  auto qp = std::make_unique<QueuePair>();
  qp->cap.max_send_wr = queues::round_up_pow2(c.max_send_wr == 0 ? 1 : c.max_send_wr);
  qp->cap.max_send_sge = c.max_send_sge == 0 ? 1 : c.max_send_sge;
  qp->cap.max_inline_data = limits_.max_inline_data;
  if (has_rq) {
    qp->cap.max_recv_wr = queues::round_up_pow2(c.max_recv_wr == 0 ? 1 : c.max_recv_wr);
    qp->cap.max_recv_sge = c.max_recv_sge == 0 ? 1 : c.max_recv_sge;
  }
  qp->layout = queues::qp_region_layout(
      qp->cap.max_send_wr, queues::send_slot_bytes(qp->cap.max_send_sge, qp->cap.max_inline_data),
      qp->cap.max_recv_wr,
      qp->cap.max_recv_wr == 0 ? 0 : queues::recv_slot_bytes(qp->cap.max_recv_sge));
  auto region = SharedRegion::create("xroce-qp", qp->layout.total_bytes);
  if (!region) return Err{region.error()};
  qp->region = std::move(*region);
  qp->doorbell_fd = r.doorbell_fd;
  qp->ready_page = r.ready_page;
  qp->ready_bit = r.ready_page == nullptr ? queues::kNoReadyBit : r.ready_bit;
  auto* base = static_cast<uint8_t*>(qp->region.base());
  queues::Ring::format(base, queues::RingKind::send, qp->layout.send_slots,
                       qp->layout.send_slot_bytes, qp->ready_bit);
  qp->sq = queues::Ring(base, qp->layout.send_slots, qp->layout.send_slot_bytes);
  qp->sq_shadow = queues::WrIdShadow(base + qp->layout.send_shadow_offset, qp->layout.send_slots);
  if (qp->layout.recv_slots != 0) {
    queues::Ring::format(base + qp->layout.recv_offset, queues::RingKind::recv,
                         qp->layout.recv_slots, qp->layout.recv_slot_bytes, qp->ready_bit);
    qp->rq = queues::Ring(base + qp->layout.recv_offset, qp->layout.recv_slots,
                          qp->layout.recv_slot_bytes);
    qp->rq_shadow = queues::WrIdShadow(base + qp->layout.recv_shadow_offset, qp->layout.recv_slots);
  }

  qp->owner = owner;
  qp->pd = xrc_recv ? 0 : r.pd;
  qp->send_cq = send_cq == nullptr ? 0 : r.send_cq;
  qp->recv_cq = recv_cq == nullptr ? 0 : r.recv_cq;
  qp->srq = r.srq;
  qp->xrcd = xrc_recv ? r.xrcd : 0;
  qp->cookie = r.cookie;
  qp->type = static_cast<transport::QpType>(r.qp_type);
  qp->qpn = wire::Qpn(next_qpn());
  qp->sq_sig_all = r.sq_sig_all;
  transport::QpConfig config;
  config.type = qp->type;
  config.qpn = qp->qpn;
  config.max_send_wr = qp->cap.max_send_wr;
  config.max_recv_wr = qp->cap.max_recv_wr;
  config.max_send_sge = qp->cap.max_send_sge;
  config.max_recv_sge = qp->cap.max_recv_sge;
  config.max_inline_data = qp->cap.max_inline_data;
  config.max_msg_bytes = limits_.max_msg_bytes;
  // The port's active MTU when the QP is made: it bounds UD datagrams and every RC packet
  // (ibv_query_port reports the same value).
  config.port_mtu = static_cast<transport::PathMtu>(active_mtu());
  config.sq_sig_all = r.sq_sig_all;
  config.limits.max_qp_rd_atom =
      static_cast<uint8_t>(std::min<uint32_t>(limits_.max_qp_rd_atom, 255));
  config.limits.max_qp_init_rd_atom = config.limits.max_qp_rd_atom;
  config.limits.max_pkeys = limits_.max_pkeys;
  config.xrc = domain;
  config.inflight_budget = inflight_budget_;
  transport::use_daemon_timers_and_windows(config);
  auto core =
      std::make_unique<transport::Qp>(config, pd != nullptr ? *pd->regions : *domain->no_regions,
                                      shared == nullptr ? nullptr : shared->srq.get());
  if (send_cq != nullptr) ++send_cq->users;
  if (recv_cq != nullptr) ++recv_cq->users;
  if (shared != nullptr) ++shared->users;
  if (domain != nullptr) ++domain->qps;
  const uint32_t handle = next_qp_++;
  QueuePair& placed = *qps_.emplace(handle, std::move(qp)).first->second;
  ++counts(owner).qps;
  if (runner_ != nullptr) {
    placed.hosted = true;
    runner_->host(placed, std::move(core));
  } else {
    placed.qp = std::move(core);
  }
  return handle;
}

int Device::modify_qp(ClientId owner, uint32_t handle, const control::QpAttr& attr, uint32_t mask) {
  QueuePair* qp = this->qp(owner, handle);
  if (qp == nullptr) return EINVAL;
  // As the kernel's uverbs does before ib_modify_qp_is_ok (uverbs_cmd.c modify_qp_mask): an
  // XRC send QP (XRC_INI) ignores the responder's attributes and an XRC receive QP (XRC_TGT)
  // the requester's, so a program that gives every XRC QP the RC mask (perftest -c XRC) is
  // served as on a NIC.
  namespace a = transport::qp_attr;
  if (qp->type == transport::QpType::kXrcSend) mask &= ~(a::kMaxDestRdAtomic | a::kMinRnrTimer);
  if (qp->type == transport::QpType::kXrcRecv) {
    mask &= ~(a::kMaxQpRdAtomic | a::kRetryCnt | a::kRnrRetry);
  }
  transport::QpAttr t = to_transport(attr);
  if ((mask & transport::qp_attr::kAv) != 0) {
    const control::AhAttr& av = attr.ah_attr;
    if (av.is_global == 0 || av.sgid_index >= gids_.size() || is_zero(gids_.at(av.sgid_index))) {
      return EINVAL;
    }
    t.av_id = kQpAvTag | handle;
  }
  int err = 0;
  with_core(*qp, [&](transport::Qp& core) {
    err = core.modify(t, mask);
    // Receive WQEs keep their RQ slots until they complete (datapath_runner's RingBinding); a
    // reset drops them without completions, so all those read from the ring are free again.
    // This runs where the ring's consumer runs (the QP's worker).
    if (err == 0 && core.state() == transport::QpState::kReset && qp->rq.valid()) {
      qp->rq.release(qp->rq_consumer);
      qp->rq.complete(qp->rq_consumer);  // nothing of theirs is left to flush either
    }
    sync_receive_doorbell(*qp, core.state());
  });
  if (err != 0) return err;
  if ((mask & transport::qp_attr::kAv) != 0) qp->av = attr.ah_attr;
  return 0;
}

Result<control::QueryQpReply, int> Device::query_qp(ClientId owner, uint32_t handle) {
  QueuePair* found = this->qp(owner, handle);
  if (found == nullptr) return Err{EINVAL};
  const QueuePair& qp = *found;
  control::QueryQpReply reply{};
  with_core(*found, [&](transport::Qp& core) {
    reply.attr = from_transport(core.attr(), core.state());
    apply_current_psns(core, reply.attr);
  });
  reply.attr.ah_attr = qp.av;
  reply.cap = qp.cap;
  reply.qp_type = static_cast<uint32_t>(qp.type);
  reply.sq_sig_all = qp.sq_sig_all ? 1 : 0;
  return reply;
}

int Device::destroy_qp(ClientId owner, uint32_t handle) {
  if (auto alias = opened_qps_.find(handle); alias != opened_qps_.end()) {
    if (alias->second.owner != owner) return EINVAL;
    opened_qps_.erase(alias);  // ibv_close_qp of an opened handle: the QP stays
    --counts(owner).qps;
    return 0;
  }
  QueuePair* qp = this->qp(owner, handle);
  if (qp == nullptr) return EINVAL;
  for (const auto& [alias, opened] : opened_qps_)
    if (opened.target == handle) return EBUSY;  // other contexts still hold it open
  if (qp->send_cq != 0) --cqs_.at(qp->send_cq)->users;
  if (qp->recv_cq != 0) --cqs_.at(qp->recv_cq)->users;
  if (qp->srq != 0) --srqs_.at(qp->srq)->users;
  if (qp->xrcd != 0) --xrcds_.at(qp->xrcd)->qps;
  if (qp->hosted) runner_->unhost(*qp);
  qps_.erase(handle);
  --counts(owner).qps;
  return 0;
}

void Device::with_core(QueuePair& qp, const std::function<void(transport::Qp&)>& fn) {
  if (qp.hosted) {
    runner_->run(qp, fn);
  } else {
    fn(*qp.qp);
  }
}

int Device::destroy_ah(ClientId owner, uint32_t handle) {
  auto it = ahs_.find(handle);
  if (it == ahs_.end() || it->second.owner != owner) return EINVAL;
  ahs_.erase(it);
  --counts(owner).ahs;
  return 0;
}

}  // namespace xroce::device
