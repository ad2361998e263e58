// The device model's objects for the transport features beyond RC/UD basics: memory windows,
// re-registration and iova, ibv_advise_mr, XRC domains with their SRQs and target QPs,
// ibv_open_qp and SRQ resize. Errnos as uverbs and rxe give them.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include "device/device.h"

namespace xroce::device {
namespace {

constexpr ClientId kAlice = 1;
constexpr ClientId kBob = 2;
constexpr uint32_t kIbvQptXrcSend = 9;
constexpr uint32_t kIbvQptXrcRecv = 10;
constexpr uint32_t kAllAccess =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
// The file of a shared XRC domain, as the daemon names it: (st_dev, st_ino).
const std::pair<uint64_t, uint64_t> kDomainFile{0x803, 4242};

class DeviceTransport : public ::testing::Test {
 protected:
  DeviceTransport()
      : dev_("xtest0", NetdevState{"veth0", 3, {2, 0, 0, 0, 0, 1}, 1500, true, true, 0}, 7) {
    const uint8_t v4[4] = {198, 18, 0, 1};
    dev_.update_addresses({IpAddress::v4_from(v4)});
  }

  uint32_t cq(ClientId who = kAlice) {
    auto h = dev_.create_cq(who, CqRequest{16, 0, 0, 0xc0});
    EXPECT_TRUE(h.ok());
    return h.ok() ? *h : 0;
  }
  uint32_t pd(ClientId who = kAlice) {
    auto h = dev_.alloc_pd(who, 1234);
    EXPECT_TRUE(h.ok());
    return h.ok() ? *h : 0;
  }
  QpRequest qp(uint32_t type, uint32_t p, uint32_t c, uint32_t xrcd = 0) {
    QpRequest r{p, c, c, 0, type, false, control::QpCap{10, 10, 2, 2, 0}, 0xa0};
    r.xrcd = xrcd;
    return r;
  }

  Device dev_;
};

TEST_F(DeviceTransport, MemoryWindowsOfBothTypesBelongToTheirPd) {
  const uint32_t p = pd();
  auto one = dev_.alloc_mw(kAlice, p, 1);
  auto two = dev_.alloc_mw(kAlice, p, 2);
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_NE(one->rkey, two->rkey);
  EXPECT_NE(one->handle, two->handle);
  EXPECT_EQ(dev_.alloc_mw(kAlice, p, 3).error(), EINVAL);      // rxe_alloc_mw: types 1 and 2
  EXPECT_EQ(dev_.alloc_mw(kBob, p, 1).error(), EINVAL);        // not Bob's PD
  EXPECT_EQ(dev_.alloc_mw(kAlice, p + 7, 1).error(), EINVAL);  // no such PD
  EXPECT_EQ(dev_.dealloc_pd(kAlice, p), EBUSY);                // windows hold their PD
  EXPECT_EQ(dev_.dealloc_mw(kBob, one->handle), EINVAL);
  EXPECT_EQ(dev_.dealloc_mw(kAlice, one->handle), 0);
  EXPECT_EQ(dev_.dealloc_mw(kAlice, one->handle), EINVAL);
  EXPECT_EQ(dev_.dealloc_mw(kAlice, two->handle), 0);
  EXPECT_EQ(dev_.dealloc_pd(kAlice, p), 0);
}

TEST_F(DeviceTransport, RegionsTakeAnIovaOfTheirOwnAndAccessForWindowsAndOdp) {
  const uint32_t p = pd();
  auto r = dev_.reg_mr(kAlice, MrRequest{p, 0x10000, 8192, 0x7000000, kAllAccess, 1234});
  ASSERT_TRUE(r.ok());
  const MemoryRegion& mr = dev_.memory_regions().at(r->handle);
  EXPECT_EQ(mr.addr, 0x10000u);
  EXPECT_EQ(mr.iova, 0x7000000u);
  EXPECT_TRUE(dev_.reg_mr(kAlice, MrRequest{p, 0x10000, 4096, 0x10000,
                                            kAccessLocalWrite | kAccessMwBind, 1234})
                  .ok());
  // Implicit ODP: the whole address space, no address (ibv_reg_mr(pd, NULL, SIZE_MAX, ...)).
  EXPECT_TRUE(dev_.reg_mr(kAlice, MrRequest{p, 0, kImplicitOdpLength, 0,
                                            kAccessLocalWrite | kAccessOnDemand, 1234})
                  .ok());
  // Persistent memory is not what a process registers here: FLUSH_PERSISTENT is refused as a
  // feature the device lacks (ib_check_mr_access's EOPNOTSUPP).
  EXPECT_EQ(dev_.reg_mr(kAlice, MrRequest{p, 0x10000, 4096, 0x10000,
                                          kAccessLocalWrite | kAccessFlushPersistent, 1234})
                .error(),
            EOPNOTSUPP);
  EXPECT_TRUE(dev_.reg_mr(kAlice, MrRequest{p, 0x10000, 4096, 0x10000,
                                            kAccessLocalWrite | kAccessFlushGlobal, 1234})
                  .ok());
}

TEST_F(DeviceTransport, ReregistrationChangesAccessTranslationAndPd) {
  const uint32_t p = pd();
  const uint32_t q = pd();
  auto r = dev_.reg_mr(kAlice, MrRequest{p, 0x10000, 4096, 0x10000, kAccessLocalWrite, 1234});
  ASSERT_TRUE(r.ok());
  auto access = dev_.rereg_mr(kAlice, r->handle, ReregRequest{kReregAccess, 0, kAllAccess, 0, 0});
  ASSERT_TRUE(access.ok());
  EXPECT_EQ(access->handle, r->handle);
  EXPECT_EQ(access->lkey, r->lkey);  // the keys stay (rxe_rereg_user_mr)
  EXPECT_EQ(access->rkey, r->rkey);
  EXPECT_EQ(dev_.memory_regions().at(r->handle).access, kAllAccess);

  auto moved = dev_.rereg_mr(kAlice, r->handle,
                             ReregRequest{kReregTranslation | kReregPd, q, 0, 0x40000, 16384});
  ASSERT_TRUE(moved.ok());
  const MemoryRegion& mr = dev_.memory_regions().at(r->handle);
  EXPECT_EQ(mr.pd, q);
  EXPECT_EQ(mr.addr, 0x40000u);
  EXPECT_EQ(mr.iova, 0x40000u);
  EXPECT_EQ(mr.length, 16384u);
  EXPECT_EQ(dev_.dealloc_pd(kAlice, p), 0);  // the region left it
  EXPECT_EQ(dev_.dealloc_pd(kAlice, q), EBUSY);

  // Bad requests change nothing: the region keeps its keys.
  EXPECT_EQ(dev_.rereg_mr(kAlice, r->handle, ReregRequest{0, 0, 0, 0, 0}).error(), EINVAL);
  EXPECT_EQ(dev_.rereg_mr(kAlice, r->handle, ReregRequest{8, 0, 0, 0, 0}).error(), EINVAL);
  EXPECT_EQ(
      dev_.rereg_mr(kAlice, r->handle, ReregRequest{kReregAccess, 0, kAccessRemoteWrite, 0, 0})
          .error(),
      EINVAL);  // remote write without local write (C10-8 as for reg_mr)
  EXPECT_EQ(dev_.rereg_mr(kBob, r->handle, ReregRequest{kReregAccess, 0, kAllAccess, 0, 0}).error(),
            EINVAL);
  EXPECT_EQ(dev_.rereg_mr(kAlice, r->handle, ReregRequest{kReregPd, p, 0, 0, 0}).error(), EINVAL);
  EXPECT_EQ(dev_.memory_regions().at(r->handle).lkey, moved->lkey);
}

TEST_F(DeviceTransport, AdviseMrChecksEveryRangeAgainstThePdsRegions) {
  const uint32_t p = pd();
  auto r = dev_.reg_mr(
      kAlice, MrRequest{p, 0x10000, 8192, 0x10000, kAccessLocalWrite | kAccessOnDemand, 1234});
  auto ro = dev_.reg_mr(kAlice, MrRequest{p, 0x30000, 4096, 0x30000, kAccessOnDemand, 1234});
  ASSERT_TRUE(r.ok() && ro.ok());
  const control::AdviseSge inside{0x10000, 8192, r->lkey};
  const control::AdviseSge beyond{0x11000, 8192, r->lkey};
  const control::AdviseSge read_only{0x30000, 4096, ro->lkey};
  EXPECT_EQ(dev_.advise_mr(kAlice, p, 0, {&inside, 1}), 0);  // PREFETCH
  EXPECT_EQ(dev_.advise_mr(kAlice, p, 1, {&inside, 1}), 0);  // PREFETCH_WRITE
  EXPECT_EQ(dev_.advise_mr(kAlice, p, 2, {&inside, 1}), 0);  // PREFETCH_NO_FAULT
  EXPECT_EQ(dev_.advise_mr(kAlice, p, 0, {&beyond, 1}), EINVAL);
  EXPECT_EQ(dev_.advise_mr(kAlice, p, 0, {&read_only, 1}), 0);
  EXPECT_EQ(dev_.advise_mr(kAlice, p, 1, {&read_only, 1}), EINVAL);  // writing needs LOCAL_WRITE
  EXPECT_EQ(dev_.advise_mr(kAlice, p, 9, {&inside, 1}), EOPNOTSUPP);
  EXPECT_EQ(dev_.advise_mr(kBob, p, 0, {&inside, 1}), EINVAL);
  EXPECT_EQ(dev_.advise_mr(kAlice, p, 0, {}), EINVAL);
}

TEST_F(DeviceTransport, XrcDomainsAreSharedByFileAndPrivateWithout) {
  auto a = dev_.open_xrcd(kAlice, kDomainFile, O_CREAT);
  ASSERT_TRUE(a.ok());
  auto b = dev_.open_xrcd(kBob, kDomainFile, 0);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);  // the same domain, as the kernel's xrcd table keys it by inode
  EXPECT_EQ(dev_.open_xrcd(kBob, kDomainFile, O_CREAT | O_EXCL).error(), EINVAL);
  EXPECT_EQ(dev_.open_xrcd(kBob, std::make_pair(uint64_t{0x803}, uint64_t{99}), 0).error(),
            EAGAIN);  // ib_uverbs_open_xrcd: no such domain and no O_CREAT
  auto mine = dev_.open_xrcd(kAlice, std::nullopt, 0);
  auto yours = dev_.open_xrcd(kBob, std::nullopt, 0);
  ASSERT_TRUE(mine.ok() && yours.ok());
  EXPECT_NE(*mine, *yours);
  EXPECT_EQ(dev_.xrcd(kAlice, *yours), nullptr);  // a private domain is its opener's alone
  EXPECT_EQ(dev_.close_xrcd(kAlice, *yours), EINVAL);

  // The shared domain lives while one opener has it.
  EXPECT_EQ(dev_.close_xrcd(kAlice, *a), 0);
  EXPECT_NE(dev_.xrcd(kBob, *b), nullptr);
  EXPECT_EQ(dev_.xrcd(kAlice, *a), nullptr);
  dev_.release_client(kBob);
  EXPECT_EQ(dev_.open_xrcd(kAlice, kDomainFile, 0).error(), EAGAIN);
}

TEST_F(DeviceTransport, XrcSrqsAndTargetQpsNeedTheirDomain) {
  const uint32_t p = pd();
  const uint32_t c = cq();
  auto domain = dev_.open_xrcd(kAlice, kDomainFile, O_CREAT);
  ASSERT_TRUE(domain.ok());
  SrqRequest xrc{p, {16, 1, 0}, 0x5, *domain, c};
  SrqRequest no_cq = xrc;
  no_cq.cq = 0;
  EXPECT_EQ(dev_.create_srq(kAlice, no_cq).error(), EINVAL);
  SrqRequest bad_domain = xrc;
  bad_domain.xrcd = *domain + 50;
  EXPECT_EQ(dev_.create_srq(kAlice, bad_domain).error(), EINVAL);
  auto srq = dev_.create_srq(kAlice, xrc);
  ASSERT_TRUE(srq.ok());
  EXPECT_EQ(dev_.destroy_cq(kAlice, c), EBUSY);  // the XRC SRQ completes into it
  EXPECT_NE(dev_.xrcd(kAlice, *domain)->srq(*srq), nullptr);

  // XRC_SEND: a PD and a send CQ, no receive side; XRC_RECV: only the domain.
  auto initiator = dev_.create_qp(kAlice, qp(kIbvQptXrcSend, p, c));
  ASSERT_TRUE(initiator.ok());
  EXPECT_FALSE(dev_.qp(kAlice, *initiator)->rq.valid());
  EXPECT_EQ(dev_.create_qp(kAlice, qp(kIbvQptXrcRecv, 0, 0)).error(), EINVAL);
  auto target = dev_.create_qp(kAlice, qp(kIbvQptXrcRecv, 0, 0, *domain));
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(dev_.qp(kAlice, *target)->xrcd, *domain);
  EXPECT_EQ(dev_.close_xrcd(kAlice, *domain), EBUSY);

  // Bob, with the domain open, takes a handle on the target QP by its number.
  auto bobs_domain = dev_.open_xrcd(kBob, kDomainFile, 0);
  ASSERT_TRUE(bobs_domain.ok());
  const uint32_t qpn = dev_.qp(kAlice, *target)->qpn.value();
  EXPECT_EQ(dev_.open_qp(kBob, *bobs_domain, qpn + 1000, 0).error(), EINVAL);
  EXPECT_EQ(dev_.open_qp(kBob, *bobs_domain, dev_.qp(kAlice, *initiator)->qpn.value(), 0).error(),
            EINVAL);  // only XRC_RECV QPs are opened
  auto opened = dev_.open_qp(kBob, *bobs_domain, qpn, 0);
  ASSERT_TRUE(opened.ok());
  ASSERT_NE(dev_.qp(kBob, *opened), nullptr);
  EXPECT_EQ(dev_.qp(kBob, *opened)->qpn.value(), qpn);
  EXPECT_EQ(dev_.destroy_qp(kBob, *opened), 0);

  EXPECT_EQ(dev_.destroy_qp(kAlice, *target), 0);
  EXPECT_EQ(dev_.destroy_qp(kAlice, *initiator), 0);
  EXPECT_EQ(dev_.destroy_srq(kAlice, *srq), 0);
  EXPECT_EQ(dev_.xrcd(kAlice, *domain)->srq(*srq), nullptr);
  EXPECT_EQ(dev_.close_xrcd(kAlice, *domain), 0);
  EXPECT_EQ(dev_.destroy_cq(kAlice, c), 0);
}

// uverbs' modify_qp_mask: an XRC send QP ignores the responder's RTR attributes, an XRC receive
// QP the requester's RTS ones, so both walk to RTS with RC's masks (what perftest -c XRC sends);
// transport::check_modify_qp alone, as ib_modify_qp_is_ok, would refuse them.
TEST_F(DeviceTransport, XrcQpsTakeTheRcMasksAsUverbsDoes) {
  namespace a = transport::qp_attr;
  const uint32_t p = pd();
  const uint32_t c = cq();
  auto domain = dev_.open_xrcd(kAlice, kDomainFile, O_CREAT);
  ASSERT_TRUE(domain.ok());
  auto initiator = dev_.create_qp(kAlice, qp(kIbvQptXrcSend, p, c));
  auto target = dev_.create_qp(kAlice, qp(kIbvQptXrcRecv, 0, 0, *domain));
  ASSERT_TRUE(initiator.ok() && target.ok());
  for (const uint32_t h : {*initiator, *target}) {
    control::QpAttr attr{};
    attr.qp_state = 1;  // INIT
    attr.port_num = 1;
    ASSERT_EQ(
        dev_.modify_qp(kAlice, h, attr, a::kState | a::kPkeyIndex | a::kPort | a::kAccessFlags), 0);
    attr = {};
    attr.qp_state = 2;  // RTR
    attr.path_mtu = 3;
    attr.dest_qp_num = 0x99;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.port_num = 1;
    EXPECT_EQ(dev_.modify_qp(kAlice, h, attr,
                             a::kState | a::kAv | a::kPathMtu | a::kDestQpn | a::kRqPsn |
                                 a::kMaxDestRdAtomic | a::kMinRnrTimer),
              0);
    attr = {};
    attr.qp_state = 3;  // RTS
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    EXPECT_EQ(dev_.modify_qp(kAlice, h, attr,
                             a::kState | a::kSqPsn | a::kTimeout | a::kRetryCnt | a::kRnrRetry |
                                 a::kMaxQpRdAtomic),
              0);
    EXPECT_EQ(dev_.query_qp(kAlice, h)->attr.qp_state, 3u);
  }
  // What neither type has at all is still refused: a Q_Key.
  control::QpAttr reset{};
  for (const uint32_t h : {*initiator, *target})
    ASSERT_EQ(dev_.modify_qp(kAlice, h, reset, a::kState), 0);
  control::QpAttr init{};
  init.qp_state = 1;
  init.port_num = 1;
  EXPECT_EQ(dev_.modify_qp(kAlice, *initiator, init,
                           a::kState | a::kPkeyIndex | a::kPort | a::kAccessFlags | a::kQkey),
            EINVAL);
  EXPECT_EQ(dev_.destroy_qp(kAlice, *target), 0);
  EXPECT_EQ(dev_.destroy_qp(kAlice, *initiator), 0);
}

TEST_F(DeviceTransport, SrqResizeKeepsPostedReceivesAndRefusesTooFewSlots) {
  const uint32_t p = pd();
  auto s = dev_.create_srq(kAlice, SrqRequest{p, {4, 1, 0}, 0});
  ASSERT_TRUE(s.ok());
  SharedReceiveQueue* srq = dev_.srq(kAlice, *s);
  // The application posts three receives (the provider's side of the ring).
  for (uint32_t i = 0; i < 3; ++i) {
    queues::RecvWqe wqe{};
    wqe.wr_id = 100 + i;
    std::memcpy(srq->ring.slot(i), &wqe, sizeof(wqe));
  }
  srq->ring.header().producer.store(3, std::memory_order_release);
  EXPECT_EQ(dev_.resize_srq(kAlice, *s, 2), EINVAL);  // three are posted
  EXPECT_EQ(dev_.resize_srq(kAlice, *s, dev_.limits().max_srq_wr + 1), EINVAL);
  EXPECT_EQ(dev_.resize_srq(kBob, *s, 64), EINVAL);
  ASSERT_EQ(dev_.resize_srq(kAlice, *s, 40), 0);
  srq = dev_.srq(kAlice, *s);
  EXPECT_EQ(srq->attr.max_wr, 64u);  // ring slots: a power of two
  EXPECT_EQ(dev_.query_srq(kAlice, *s)->max_wr, 64u);
  ASSERT_EQ(srq->ring.header().producer.load(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    queues::RecvWqe wqe{};
    std::memcpy(&wqe, srq->ring.slot(i), sizeof(wqe));
    EXPECT_EQ(wqe.wr_id, 100u + i);
  }
}

TEST_F(DeviceTransport, ReleasingAClientFreesItsWindowsDomainsAndOpenedQps) {
  const uint32_t p = pd();
  ASSERT_TRUE(dev_.alloc_mw(kAlice, p, 2).ok());
  auto domain = dev_.open_xrcd(kAlice, kDomainFile, O_CREAT);
  ASSERT_TRUE(domain.ok());
  auto target = dev_.create_qp(kAlice, qp(kIbvQptXrcRecv, 0, 0, *domain));
  ASSERT_TRUE(target.ok());
  auto bobs_domain = dev_.open_xrcd(kBob, kDomainFile, 0);
  ASSERT_TRUE(bobs_domain.ok());
  auto opened = dev_.open_qp(kBob, *bobs_domain, dev_.qp(kAlice, *target)->qpn.value(), 0);
  ASSERT_TRUE(opened.ok());
  dev_.release_client(kBob);
  EXPECT_NE(dev_.qp(kAlice, *target), nullptr);
  dev_.release_client(kAlice);
  EXPECT_TRUE(dev_.queue_pairs().empty());
  EXPECT_EQ(dev_.pd_count(), 0u);
  EXPECT_EQ(dev_.open_xrcd(kAlice, kDomainFile, 0).error(), EAGAIN);
}

}  // namespace
}  // namespace xroce::device
