// The device model's data path objects (engine/device/device.h): the errnos uverbs gives for
// bad handles, limits and objects in use; ownership per client; a QP walked through its states
// by the transport core the device hands it to.
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <vector>

#include "device/device.h"

namespace xroce::device {
namespace {

constexpr ClientId kAlice = 1;
constexpr ClientId kBob = 2;
constexpr uint32_t kIbvQptRc = 2;
constexpr uint32_t kIbvQptUd = 4;

class DeviceModel : public ::testing::Test {
 protected:
  DeviceModel()
      : dev_("xtest0", NetdevState{"veth0", 3, {2, 0, 0, 0, 0, 1}, 1500, true, true, 0}, 7) {
    const uint8_t v4[4] = {198, 18, 0, 1};
    dev_.update_addresses({IpAddress::v4_from(v4)});
  }

  uint32_t cq(ClientId who = kAlice, uint32_t cqe = 16) {
    auto h = dev_.create_cq(who, CqRequest{cqe, 0, 0, 0xc0});
    EXPECT_TRUE(h.ok());
    return h.ok() ? *h : 0;
  }
  uint32_t pd(ClientId who = kAlice) {
    auto h = dev_.alloc_pd(who, 1234);
    EXPECT_TRUE(h.ok());
    return h.ok() ? *h : 0;
  }
  QpRequest rc(uint32_t p, uint32_t c, uint32_t srq = 0) {
    return QpRequest{p, c, c, srq, kIbvQptRc, false, control::QpCap{10, 10, 2, 2, 0}, 0xa0};
  }

  Device dev_;
};

// The in-flight budget is a quarter of the frames the port holds received, never below a
// grant; a port that cannot tell leaves the default.
TEST_F(DeviceModel, TheInflightBudgetIsAQuarterOfWhatThePortHolds) {
  EXPECT_EQ(dev_.inflight_budget().limit_psns(), Device::kInflightBudgetPsns);
  dev_.set_port_receive_frames(2048);  // a UDP port's socket buffer
  EXPECT_EQ(dev_.inflight_budget().limit_psns(), 512u);
  dev_.set_port_receive_frames(1024);  // an AF_XDP port's ring at a 4096-byte MTU
  EXPECT_EQ(dev_.inflight_budget().limit_psns(), 256u);
  dev_.set_port_receive_frames(8);
  EXPECT_EQ(dev_.inflight_budget().limit_psns(), transport::InflightBudget::kGrantPsns);
  dev_.set_port_receive_frames(0);
  EXPECT_EQ(dev_.inflight_budget().limit_psns(), Device::kInflightBudgetPsns);
}

TEST_F(DeviceModel, CqLimitsAndComputeVector) {
  EXPECT_EQ(dev_.create_cq(kAlice, CqRequest{0, 0, 0, 0}).error(), EINVAL);
  EXPECT_EQ(dev_.create_cq(kAlice, CqRequest{dev_.limits().max_cqe + 1, 0, 0, 0}).error(), EINVAL);
  EXPECT_EQ(dev_.create_cq(kAlice, CqRequest{16, 0, 1, 0}).error(), EINVAL);
  const uint32_t c = cq(kAlice, 10);
  EXPECT_GE(dev_.cq(kAlice, c)->cqe, 10u);
  EXPECT_EQ(dev_.cq(kBob, c), nullptr);  // another client cannot name it
  EXPECT_EQ(dev_.destroy_cq(kBob, c), EINVAL);
  EXPECT_EQ(dev_.destroy_cq(kAlice, c), 0);
}

TEST_F(DeviceModel, ResizeKeepsUnpolledCompletions) {
  const uint32_t c = cq(kAlice, 4);
  CompletionQueue* q = dev_.cq(kAlice, c);
  queues::Cqe e{};
  for (uint64_t i = 0; i < 3; ++i) {
    e.wr_id = i;
    ASSERT_EQ(q->push(e), CompletionQueue::Push::written);
  }
  q->ring.release(1);  // one polled
  ASSERT_EQ(dev_.resize_cq(kAlice, c, 64), 0);
  q = dev_.cq(kAlice, c);
  EXPECT_GE(q->cqe, 64u);
  ASSERT_EQ(q->ring.ready(0), 2u);
  std::memcpy(&e, q->ring.slot(0), sizeof(e));
  EXPECT_EQ(e.wr_id, 1u);
  EXPECT_EQ(dev_.resize_cq(kAlice, c, 1), EINVAL);  // cannot hold the two pending
}

TEST_F(DeviceModel, QpNeedsOwnedPdAndCqsAndSaneCaps) {
  const uint32_t p = pd();
  const uint32_t c = cq();
  const uint32_t bobs_cq = cq(kBob);
  EXPECT_EQ(dev_.create_qp(kAlice, rc(p, bobs_cq)).error(), EINVAL);
  EXPECT_EQ(dev_.create_qp(kAlice, rc(p + 100, c)).error(), EINVAL);
  QpRequest r = rc(p, c);
  r.cap.max_send_sge = dev_.limits().max_sge + 1;
  EXPECT_EQ(dev_.create_qp(kAlice, r).error(), EINVAL);
  r = rc(p, c);
  r.cap.max_inline_data = dev_.limits().max_inline_data + 1;
  EXPECT_EQ(dev_.create_qp(kAlice, r).error(), EINVAL);

  auto q1 = dev_.create_qp(kAlice, rc(p, c));
  auto q2 = dev_.create_qp(kAlice, rc(p, c));
  ASSERT_TRUE(q1.ok() && q2.ok());
  const QueuePair* a = dev_.qp(kAlice, *q1);
  EXPECT_GE(a->cap.max_send_wr, 10u);
  EXPECT_EQ(a->cap.max_send_wr & (a->cap.max_send_wr - 1), 0u);  // ring slots: a power of two
  EXPECT_GT(a->qpn.value(), 1u);
  EXPECT_NE(a->qpn, dev_.qp(kAlice, *q2)->qpn);
  EXPECT_TRUE(a->sq.valid() && a->rq.valid());
  EXPECT_TRUE(a->sq_shadow.valid() && a->rq_shadow.valid());
  EXPECT_EQ(dev_.destroy_cq(kAlice, c), EBUSY);
  EXPECT_EQ(dev_.dealloc_pd(kAlice, p), EBUSY);
  EXPECT_EQ(dev_.destroy_qp(kAlice, *q1), 0);
  EXPECT_EQ(dev_.destroy_qp(kAlice, *q2), 0);
  EXPECT_EQ(dev_.destroy_cq(kAlice, c), 0);
  EXPECT_EQ(dev_.dealloc_pd(kAlice, p), 0);
}

// What the transport does not run is refused when it is asked for, with EOPNOTSUPP, as
// rxe_qp_chk_init does: never created and then failing at RTR. UC and XRC it runs.
TEST_F(DeviceModel, QpTypesWithoutTransportAreNotSupported) {
  const uint32_t p = pd();
  const uint32_t c = cq();
  constexpr uint32_t kUc = 3, kRawPacket = 8, kUnknown = 200;
  for (uint32_t type : {kRawPacket, kUnknown}) {
    QpRequest r = rc(p, c);
    r.qp_type = type;
    EXPECT_EQ(dev_.create_qp(kAlice, r).error(), EOPNOTSUPP) << "qp_type " << type;
  }
  for (uint32_t type : {kIbvQptUd, kUc}) {
    QpRequest r = rc(p, c);
    r.qp_type = type;
    EXPECT_TRUE(dev_.create_qp(kAlice, r).ok()) << "qp_type " << type;
  }
}

// ibv_access_flags: those of features the device lacks are EOPNOTSUPP at reg_mr (zero-based
// regions, persistent memory), unknown bits EINVAL, the HUGETLB hint accepted, and memory
// window binds, ODP and global-visibility FLUSH taken.
TEST_F(DeviceModel, MemoryAccessFlagsOfMissingFeaturesAreNotSupported) {
  const uint32_t p = pd();
  auto reg = [&](uint32_t access) {
    return dev_.reg_mr(kAlice, MrRequest{p, 0x10000, 4096, 0x10000, access, 1234});
  };
  for (uint32_t flag : {kAccessZeroBased, kAccessFlushPersistent}) {
    EXPECT_EQ(reg(kAccessLocalWrite | flag).error(), EOPNOTSUPP) << "access " << flag;
  }
  EXPECT_EQ(reg(kAccessLocalWrite | (1u << 15)).error(), EINVAL);
  EXPECT_EQ(reg(kAccessRemoteWrite | kAccessMwBind).error(), EINVAL);  // IBA 10.6.3.1 first
  for (uint32_t flag : {kAccessHugetlb, kAccessMwBind, kAccessOnDemand, kAccessFlushGlobal}) {
    auto mr = reg(kAccessLocalWrite | flag);
    ASSERT_TRUE(mr.ok()) << "access " << flag;
    EXPECT_EQ(dev_.dereg_mr(kAlice, mr->handle), 0);
  }
}

TEST_F(DeviceModel, QpWalksResetInitRtrRts) {
  const uint32_t c = cq();
  auto h = dev_.create_qp(kAlice, rc(pd(), c));
  ASSERT_TRUE(h.ok());
  control::QpAttr a{};
  a.qp_state = 1;  // INIT
  a.port_num = 1;
  const uint32_t init_mask = transport::qp_attr::kState | transport::qp_attr::kPkeyIndex |
                             transport::qp_attr::kPort | transport::qp_attr::kAccessFlags;
  ASSERT_EQ(dev_.modify_qp(kAlice, *h, a, init_mask), 0);
  a = {};
  a.qp_state = 2;  // RTR
  a.path_mtu = 3;
  a.dest_qp_num = 0x99;
  a.rq_psn = 5;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.sgid_index = 7;  // no such GID
  const uint32_t rtr_mask = transport::qp_attr::kState | transport::qp_attr::kAv |
                            transport::qp_attr::kPathMtu | transport::qp_attr::kDestQpn |
                            transport::qp_attr::kRqPsn | transport::qp_attr::kMaxDestRdAtomic |
                            transport::qp_attr::kMinRnrTimer;
  EXPECT_EQ(dev_.modify_qp(kAlice, *h, a, rtr_mask), EINVAL);
  a.ah_attr.sgid_index = 0;
  ASSERT_EQ(dev_.modify_qp(kAlice, *h, a, rtr_mask), 0);
  a = {};
  a.qp_state = 3;  // RTS
  a.sq_psn = 11;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  const uint32_t rts_mask = transport::qp_attr::kState | transport::qp_attr::kSqPsn |
                            transport::qp_attr::kTimeout | transport::qp_attr::kRetryCnt |
                            transport::qp_attr::kRnrRetry | transport::qp_attr::kMaxQpRdAtomic;
  ASSERT_EQ(dev_.modify_qp(kAlice, *h, a, rts_mask), 0);
  auto q = dev_.query_qp(kAlice, *h);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->attr.qp_state, 3u);
  EXPECT_EQ(q->attr.sq_psn, 11u);
  EXPECT_EQ(q->attr.rq_psn, 5u);
  EXPECT_EQ(q->attr.dest_qp_num, 0x99u);
  EXPECT_EQ(q->attr.path_mtu, 3u);
  EXPECT_EQ(q->attr.ah_attr.is_global, 1u);
  EXPECT_EQ(q->qp_type, kIbvQptRc);
  // RTS -> RTR is no transition.
  a = {};
  a.qp_state = 2;
  EXPECT_EQ(dev_.modify_qp(kAlice, *h, a, transport::qp_attr::kState), EINVAL);
  EXPECT_EQ(dev_.query_qp(kBob, *h).error(), EINVAL);
}

TEST_F(DeviceModel, SrqLimitsAndUse) {
  const uint32_t p = pd();
  const uint32_t c = cq();
  EXPECT_EQ(dev_.create_srq(kAlice, SrqRequest{p, {0, 1, 0}, 0}).error(), EINVAL);
  EXPECT_EQ(dev_.create_srq(kAlice, SrqRequest{p, {8, 1, 9}, 0}).error(), EINVAL);
  auto s = dev_.create_srq(kAlice, SrqRequest{p, {8, 1, 0}, 0});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(dev_.modify_srq(kAlice, *s, control::SrqAttr{0, 0, 4}, 2), 0);
  EXPECT_EQ(dev_.query_srq(kAlice, *s)->srq_limit, 4u);
  EXPECT_EQ(dev_.modify_srq(kAlice, *s, control::SrqAttr{16, 0, 0}, 1), EINVAL);  // no resize
  auto q = dev_.create_qp(kAlice, rc(p, c, *s));
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(dev_.qp(kAlice, *q)->rq.valid());  // receives come from the SRQ
  EXPECT_EQ(dev_.destroy_srq(kAlice, *s), EBUSY);
  EXPECT_EQ(dev_.destroy_qp(kAlice, *q), 0);
  EXPECT_EQ(dev_.destroy_srq(kAlice, *s), 0);
}

TEST_F(DeviceModel, AddressHandlesNeedAGlobalRouteThroughOurGid) {
  const uint32_t p = pd();
  control::AhAttr a{};
  a.is_global = 1;
  a.port_num = 1;
  a.sgid_index = 0;
  auto h = dev_.create_ah(kAlice, p, a);
  ASSERT_TRUE(h.ok());
  EXPECT_NE(dev_.ah(*h), nullptr);
  a.sgid_index = 5;
  EXPECT_EQ(dev_.create_ah(kAlice, p, a).error(), EINVAL);
  a.sgid_index = 0;
  a.is_global = 0;
  EXPECT_EQ(dev_.create_ah(kAlice, p, a).error(), EINVAL);
  EXPECT_EQ(dev_.create_ah(kBob, p, a).error(), EINVAL);
  EXPECT_EQ(dev_.dealloc_pd(kAlice, p), EBUSY);
  EXPECT_EQ(dev_.destroy_ah(kBob, *h), EINVAL);
  EXPECT_EQ(dev_.destroy_ah(kAlice, *h), 0);
}

TEST_F(DeviceModel, MemoryKeysComeFromThePdsRegionTable) {
  const uint32_t p = pd();
  auto a = dev_.reg_mr(kAlice, MrRequest{p, 0x10000, 4096, 0x10000, 1, 1234});
  auto b = dev_.reg_mr(kAlice, MrRequest{p, 0x20000, 4096, 0x20000, 1, 1234});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->lkey, b->lkey);
  EXPECT_EQ(dev_.dereg_mr(kAlice, a->handle), 0);
  auto c = dev_.reg_mr(kAlice, MrRequest{p, 0x10000, 4096, 0x10000, 1, 1234});
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->lkey, a->lkey);  // a re-used slot gets a new generation: stale keys never match
}

TEST_F(DeviceModel, ReleasingAClientDropsEverythingItOwned) {
  const uint32_t p = pd();
  const uint32_t c = cq();
  ASSERT_TRUE(dev_.create_qp(kAlice, rc(p, c)).ok());
  QpRequest ud = rc(p, c);
  ud.qp_type = kIbvQptUd;
  ASSERT_TRUE(dev_.create_qp(kAlice, ud).ok());
  const uint32_t bobs = cq(kBob);
  dev_.release_client(kAlice);
  EXPECT_TRUE(dev_.queue_pairs().empty());
  EXPECT_EQ(dev_.pd_count(), 0u);
  EXPECT_EQ(dev_.cq_count(), 1u);
  EXPECT_NE(dev_.cq(kBob, bobs), nullptr);
}

// Quotas (device.h ClientQuota): one client's objects stop at its quota with ENOMEM, as a device
// out of resources answers, while another client still gets its own; released objects count no
// more. Registered bytes stop at the client's limit.
TEST_F(DeviceModel, AClientStopsAtItsQuotaAndOthersDoNot) {
  const uint32_t p = pd();
  const uint32_t c = cq();
  const ClientQuota& quota = dev_.client_quota();
  std::vector<uint32_t> qps;
  for (uint32_t i = 0; i < quota.max_qp; ++i) {
    QpRequest r = rc(p, c);
    r.cap = control::QpCap{1, 1, 1, 1, 0};
    auto h = dev_.create_qp(kAlice, r);
    ASSERT_TRUE(h.ok()) << "QP " << i << ": " << h.error();
    qps.push_back(*h);
  }
  EXPECT_EQ(dev_.create_qp(kAlice, rc(p, c)).error(), ENOMEM);
  EXPECT_EQ(dev_.owned_counts(kAlice).qps, quota.max_qp);
  const uint32_t bp = pd(kBob);
  const uint32_t bc = cq(kBob);
  EXPECT_TRUE(dev_.create_qp(kBob, rc(bp, bc)).ok());
  ASSERT_EQ(dev_.destroy_qp(kAlice, qps.back()), 0);
  EXPECT_TRUE(dev_.create_qp(kAlice, rc(p, c)).ok());

  MrRequest mr{p, 0x10000, 8192, 0x10000, 1, 1234, 12288};
  ASSERT_TRUE(dev_.reg_mr(kAlice, mr).ok());
  mr.addr = mr.iova = 0x20000;
  EXPECT_EQ(dev_.reg_mr(kAlice, mr).error(), ENOMEM);  // 16 KiB would pass the 12 KiB limit
  mr.length = 4096;
  EXPECT_TRUE(dev_.reg_mr(kAlice, mr).ok());
  EXPECT_EQ(dev_.owned_counts(kAlice).mr_bytes, 12288u);
  dev_.release_client(kAlice);
  EXPECT_EQ(dev_.owned_counts(kAlice).qps, 0u);
  EXPECT_EQ(dev_.owned_counts(kBob).qps, 1u);
}

// Walks a QP of the device to RTS (RC: connected through GID 0 with `path_mtu`).
void bring_to_rts(Device& dev, uint32_t qp, bool ud, uint32_t path_mtu) {
  namespace m = transport::qp_attr;
  control::QpAttr a{};
  a.qp_state = 1;  // INIT
  a.port_num = 1;
  a.qkey = 0x11;
  ASSERT_EQ(dev.modify_qp(kAlice, qp, a,
                          m::kState | m::kPkeyIndex | m::kPort | (ud ? m::kQkey : m::kAccessFlags)),
            0);
  a = {};
  a.qp_state = 2;  // RTR
  a.path_mtu = path_mtu;
  a.dest_qp_num = 0x99;
  a.max_dest_rd_atomic = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  ASSERT_EQ(dev.modify_qp(kAlice, qp, a,
                          ud ? m::kState
                             : m::kState | m::kAv | m::kPathMtu | m::kDestQpn | m::kRqPsn |
                                   m::kMaxDestRdAtomic | m::kMinRnrTimer),
            0);
  a = {};
  a.qp_state = 3;  // RTS
  a.timeout = 14;
  a.max_rd_atomic = 1;
  ASSERT_EQ(dev.modify_qp(kAlice, qp, a,
                          ud ? m::kState | m::kSqPsn
                             : m::kState | m::kSqPsn | m::kTimeout | m::kRetryCnt | m::kRnrRetry |
                                   m::kMaxQpRdAtomic),
            0);
}

// A device on a netdev of the given MTU, with a PD, a CQ and an 8 KiB region of Alice's to send
// from.
class DevicePortMtu : public ::testing::Test {
 protected:
  void open(uint32_t netdev_mtu) {
    dev_ = std::make_unique<Device>(
        "xmtu0", NetdevState{"veth0", 3, {2, 0, 0, 0, 0, 1}, netdev_mtu, true, true, 0}, 7,
        [this](int) {
          auto m = std::make_unique<transport::LocalMemory>();
          memory_ = m.get();
          return m;
        });
    const uint8_t v4[4] = {198, 18, 0, 1};
    dev_->update_addresses({IpAddress::v4_from(v4)});
    auto p = dev_->alloc_pd(kAlice, 1234);
    auto c = dev_->create_cq(kAlice, CqRequest{16, 0, 0, 0});
    ASSERT_TRUE(p.ok() && c.ok() && memory_ != nullptr);
    pd_ = *p;
    cq_ = *c;
    buf_ = memory_->allocate(8192);
    auto mr = dev_->reg_mr(kAlice, MrRequest{pd_, buf_, 8192, buf_, kAccessLocalWrite, 1234});
    ASSERT_TRUE(mr.ok());
    lkey_ = wire::Lkey(mr->lkey);
  }
  // A signaled send of `bytes` from the region.
  transport::WorkRequest send(uint64_t wr_id, uint32_t bytes) const {
    transport::WorkRequest w;
    w.wr_id = wr_id;
    w.send_flags = transport::send_flags::kSignaled;
    w.sg_list = {transport::Sge{buf_, bytes, lkey_}};
    return w;
  }
  QpRequest qp_request(uint32_t type) const {
    return QpRequest{pd_, cq_, cq_, 0, type, false, control::QpCap{10, 10, 2, 2, 0}, 0xa0};
  }

  transport::LocalMemory* memory_ = nullptr;
  std::unique_ptr<Device> dev_;
  uint32_t pd_ = 0;
  uint32_t cq_ = 0;
  uint64_t buf_ = 0;
  wire::Lkey lkey_{0};
};

// The port's active MTU (1024 on a 1500-byte netdev, what ibv_query_port reports) reaches every
// QP: a UD datagram longer than it is not sent (C10-93.1.1), and an RC path MTU above it is
// accepted but segments at it.
TEST_F(DevicePortMtu, QpsAreBoundByThePortsActiveMtu) {
  open(1500);
  Device& dev = *dev_;
  std::array<uint8_t, 4096> out{};
  auto rc = dev.create_qp(kAlice, qp_request(kIbvQptRc));
  ASSERT_TRUE(rc.ok());
  bring_to_rts(dev, *rc, false, 5);  // IBV_MTU_4096
  EXPECT_EQ(dev.query_qp(kAlice, *rc)->attr.path_mtu, 5u);
  transport::Qp& rc_core = *dev.qp(kAlice, *rc)->qp;
  ASSERT_EQ(rc_core.post_send(send(1, 3000)), 0);
  auto first = rc_core.poll_transmit(0, out);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->hdr.bth.opcode, wire::Opcode::kRcSendFirst);
  EXPECT_EQ(first->payload_len, 1024u);

  auto ud = dev.create_qp(kAlice, qp_request(kIbvQptUd));
  ASSERT_TRUE(ud.ok());
  bring_to_rts(dev, *ud, true, 0);
  transport::Qp& ud_core = *dev.qp(kAlice, *ud)->qp;
  auto too_long = send(1, 1025);
  too_long.ud = transport::UdDestination{1, wire::Qpn(0x99), wire::Qkey(0x11)};
  ASSERT_EQ(ud_core.post_send(too_long), 0);
  EXPECT_FALSE(ud_core.poll_transmit(0, out).has_value());
  auto done = ud_core.poll_completion();
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->status, transport::WcStatus::kSuccess);
  auto fits = send(2, 1024);
  fits.ud = too_long.ud;
  ASSERT_EQ(ud_core.post_send(fits), 0);
  auto datagram = ud_core.poll_transmit(0, out);
  ASSERT_TRUE(datagram.has_value());
  EXPECT_EQ(datagram->payload_len, 1024u);
}

// The active MTU is what both the netdev and the data path's ports carry: a 9000-byte netdev
// gives 4096, but not over an AF_XDP port without multi-buffer (one 4 KB UMEM chunk less the
// kernel's headroom: 3,840-byte frames), which carries 2048; a QP made then sends 2 KB packets.
TEST_F(DevicePortMtu, TheActiveMtuIsBoundByWhatThePortsCarry) {
  open(9000);
  Device& dev = *dev_;
  EXPECT_EQ(dev.active_mtu(), kIbMtu4096);
  dev.set_port_frame_limit(4202);  // every RoCE frame of a 4096 MTU
  EXPECT_EQ(dev.active_mtu(), kIbMtu4096);
  dev.set_port_frame_limit(3840);
  EXPECT_EQ(ib_mtu_bytes(dev.active_mtu()), 2048u);
  dev.set_port_frame_limit(0);  // no limit of the ports' own
  EXPECT_EQ(dev.active_mtu(), kIbMtu4096);

  dev.set_port_frame_limit(3840);
  auto rc = dev.create_qp(kAlice, qp_request(kIbvQptRc));
  ASSERT_TRUE(rc.ok());
  bring_to_rts(dev, *rc, false, 5);  // IBV_MTU_4096 asked for
  transport::Qp& core = *dev.qp(kAlice, *rc)->qp;
  ASSERT_EQ(core.post_send(send(1, 5000)), 0);
  std::array<uint8_t, 4096> out{};
  auto first = core.poll_transmit(0, out);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->payload_len, 2048u);
}

}  // namespace
}  // namespace xroce::device
