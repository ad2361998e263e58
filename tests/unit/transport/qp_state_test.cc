// Modify-QP rules: transitions and required/optional attribute masks (ibv_modify_qp).
#include "transport/qp_state.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "transport/memory.h"
#include "transport/qp.h"

namespace xroce::transport {
namespace {

using namespace qp_attr;

constexpr std::uint32_t kRcInit = kState | kPkeyIndex | kPort | kAccessFlags;
constexpr std::uint32_t kRcRtr =
    kState | kAv | kPathMtu | kDestQpn | kRqPsn | kMaxDestRdAtomic | kMinRnrTimer;
constexpr std::uint32_t kRcRts =
    kState | kTimeout | kRetryCnt | kRnrRetry | kSqPsn | kMaxQpRdAtomic;

QpAttr to(QpState s) {
  QpAttr a;
  a.qp_state = s;
  a.dest_qp_num = wire::Qpn(7);
  a.path_mtu = PathMtu::k1024;
  return a;
}

int check(QpType t, QpState from, const QpAttr& a, std::uint32_t mask) {
  return check_modify_qp(t, from, a, mask, DeviceLimits{});
}

TEST(ModifyQp, RcReachesRtsWithExactlyTheRequiredAttributes) {
  EXPECT_EQ(check(QpType::kRc, QpState::kReset, to(QpState::kInit), kRcInit), 0);
  EXPECT_EQ(check(QpType::kRc, QpState::kInit, to(QpState::kRtr), kRcRtr), 0);
  EXPECT_EQ(check(QpType::kRc, QpState::kRtr, to(QpState::kRts), kRcRts), 0);
}

TEST(ModifyQp, EachMissingRequiredAttributeIsEinval) {
  for (std::uint32_t bit = 1; bit != 0; bit <<= 1) {
    if (bit == kState) continue;
    if (kRcRtr & bit) {
      EXPECT_EQ(check(QpType::kRc, QpState::kInit, to(QpState::kRtr), kRcRtr & ~bit), EINVAL)
          << "INIT->RTR without bit " << bit;
    }
    if (kRcRts & bit) {
      EXPECT_EQ(check(QpType::kRc, QpState::kRtr, to(QpState::kRts), kRcRts & ~bit), EINVAL)
          << "RTR->RTS without bit " << bit;
    }
  }
}

TEST(ModifyQp, AttributesNotAllowedInTheTransitionAreEinval) {
  EXPECT_EQ(check(QpType::kRc, QpState::kInit, to(QpState::kRtr), kRcRtr | kSqPsn), EINVAL);
  EXPECT_EQ(check(QpType::kRc, QpState::kReset, to(QpState::kInit), kRcInit | kQkey), EINVAL);
  EXPECT_EQ(check(QpType::kRc, QpState::kRts, to(QpState::kRts), kState | kTimeout), EINVAL);
  // Optional ones are fine.
  EXPECT_EQ(check(QpType::kRc, QpState::kInit, to(QpState::kRtr), kRcRtr | kAccessFlags), 0);
  EXPECT_EQ(check(QpType::kRc, QpState::kRts, to(QpState::kRts), kState | kMinRnrTimer), 0);
}

TEST(ModifyQp, TransitionsThatDoNotExistAreEinval) {
  EXPECT_EQ(check(QpType::kRc, QpState::kReset, to(QpState::kRtr), kRcRtr), EINVAL);
  EXPECT_EQ(check(QpType::kRc, QpState::kInit, to(QpState::kRts), kRcRts), EINVAL);
  EXPECT_EQ(check(QpType::kRc, QpState::kSqe, to(QpState::kRts), kState), EINVAL);  // RC: no SQE
  EXPECT_EQ(check(QpType::kRc, QpState::kErr, to(QpState::kRts), kState), EINVAL);
  EXPECT_EQ(check(QpType::kRc, QpState::kRtr, to(QpState::kSqd), kState), EINVAL);
}

TEST(ModifyQp, AnyStateMayGoToResetOrError) {
  for (QpState s : {QpState::kReset, QpState::kInit, QpState::kRtr, QpState::kRts, QpState::kSqd,
                    QpState::kErr}) {
    EXPECT_EQ(check(QpType::kRc, s, to(QpState::kErr), kState), 0);
    EXPECT_EQ(check(QpType::kRc, s, to(QpState::kReset), kState), 0);
  }
}

TEST(ModifyQp, UdNeedsQkeyAtInitAndSqPsnAtRts) {
  const std::uint32_t ud_init = kState | kPkeyIndex | kPort | kQkey;
  EXPECT_EQ(check(QpType::kUd, QpState::kReset, to(QpState::kInit), ud_init), 0);
  EXPECT_EQ(check(QpType::kUd, QpState::kReset, to(QpState::kInit), ud_init & ~kQkey), EINVAL);
  EXPECT_EQ(check(QpType::kUd, QpState::kInit, to(QpState::kRtr), kState), 0);
  EXPECT_EQ(check(QpType::kUd, QpState::kInit, to(QpState::kRtr), kState | kAv), EINVAL);
  EXPECT_EQ(check(QpType::kUd, QpState::kRtr, to(QpState::kRts), kState), EINVAL);
  EXPECT_EQ(check(QpType::kUd, QpState::kRtr, to(QpState::kRts), kState | kSqPsn), 0);
  EXPECT_EQ(check(QpType::kUd, QpState::kSqe, to(QpState::kRts), kState), 0);
}

TEST(ModifyQp, OutOfRangeValuesAreEinval) {
  QpAttr a = to(QpState::kRts);
  a.retry_cnt = 8;
  EXPECT_EQ(check(QpType::kRc, QpState::kRtr, a, kRcRts), EINVAL);
  a = to(QpState::kRts);
  a.max_rd_atomic = 17;
  EXPECT_EQ(check(QpType::kRc, QpState::kRtr, a, kRcRts), EINVAL);
  a = to(QpState::kRtr);
  a.path_mtu = static_cast<PathMtu>(6);
  EXPECT_EQ(check(QpType::kRc, QpState::kInit, a, kRcRtr), EINVAL);
  a = to(QpState::kInit);
  a.port_num = 2;
  EXPECT_EQ(check(QpType::kRc, QpState::kReset, a, kRcInit), EINVAL);
}

TEST(ModifyQp, CurrentStateMustBeTrueAndRtsOrSqe) {
  QpAttr a = to(QpState::kRts);
  a.cur_qp_state = QpState::kRts;
  EXPECT_EQ(check(QpType::kRc, QpState::kRts, a, kState | kCurState), 0);
  a.cur_qp_state = QpState::kSqe;
  EXPECT_EQ(check(QpType::kRc, QpState::kRts, a, kState | kCurState), EINVAL);
}

TEST(ModifyQp, QpAppliesTheTransitionAndRefusesPostsBeforeRts) {
  LocalMemory mem;
  MemoryRegionTable mrs(mem);
  QpConfig cfg;
  cfg.qpn = wire::Qpn(0x11);
  Qp qp(cfg, mrs);
  EXPECT_EQ(qp.modify(to(QpState::kRtr), kRcRtr), EINVAL);
  EXPECT_EQ(qp.state(), QpState::kReset);
  ASSERT_EQ(qp.modify(to(QpState::kInit), kRcInit), 0);
  EXPECT_EQ(qp.state(), QpState::kInit);
  EXPECT_EQ(qp.post_send(WorkRequest{}), EINVAL);
  EXPECT_EQ(qp.post_recv(RecvRequest{}), 0);  // receives may be posted from INIT
  ASSERT_EQ(qp.modify(to(QpState::kRtr), kRcRtr), 0);
  EXPECT_EQ(qp.post_send(WorkRequest{}), EINVAL);
  ASSERT_EQ(qp.modify(to(QpState::kRts), kRcRts), 0);
  EXPECT_EQ(qp.state(), QpState::kRts);
  EXPECT_EQ(qp.attr().path_mtu, PathMtu::k1024);
  EXPECT_EQ(qp.post_send(WorkRequest{}), 0);
  // Moving to ERR flushes the posted receive and the posted send.
  ASSERT_EQ(qp.modify(to(QpState::kErr), kState), 0);
  int flushed = 0;
  while (auto c = qp.poll_completion()) {
    EXPECT_EQ(c->status, WcStatus::kWrFlushErr);
    ++flushed;
  }
  EXPECT_EQ(flushed, 2);
}

}  // namespace
}  // namespace xroce::transport
