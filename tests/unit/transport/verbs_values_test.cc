// The core's verbs enums carry rdma-core's numeric values, so the provider maps them 1:1.
// This test (not the core) includes rdma-core's header to compare.
#include <gtest/gtest.h>

#include "transport/verbs.h"

#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>
#define XROCE_HAVE_VERBS_H 1
#endif

namespace xroce::transport {
namespace {

#ifdef XROCE_HAVE_VERBS_H
template <typename A, typename B>
constexpr bool same(A a, B b) {
  return static_cast<long>(a) == static_cast<long>(b);
}
static_assert(same(QpState::kReset, IBV_QPS_RESET) && same(QpState::kErr, IBV_QPS_ERR) &&
              same(QpState::kSqe, IBV_QPS_SQE));
static_assert(same(QpType::kRc, IBV_QPT_RC) && same(QpType::kUc, IBV_QPT_UC) &&
              same(QpType::kUd, IBV_QPT_UD) && same(QpType::kXrcSend, IBV_QPT_XRC_SEND) &&
              same(QpType::kXrcRecv, IBV_QPT_XRC_RECV));
static_assert(same(WcStatus::kMwBindErr, IBV_WC_MW_BIND_ERR));
static_assert(same(WcOpcode::kBindMw, IBV_WC_BIND_MW) &&
              same(WcOpcode::kLocalInv, IBV_WC_LOCAL_INV) &&
              same(WcOpcode::kAtomicWrite, IBV_WC_ATOMIC_WRITE));
static_assert(same(WrOpcode::kLocalInv, IBV_WR_LOCAL_INV) &&
              same(WrOpcode::kBindMw, IBV_WR_BIND_MW) &&
              same(WrOpcode::kAtomicWrite, IBV_WR_ATOMIC_WRITE));
static_assert(access::kMwBind == IBV_ACCESS_MW_BIND &&
              access::kZeroBased == IBV_ACCESS_ZERO_BASED &&
              access::kOnDemand == IBV_ACCESS_ON_DEMAND);
static_assert(same(MwType::kType1, IBV_MW_TYPE_1) && same(MwType::kType2, IBV_MW_TYPE_2));
static_assert(same(AsyncEventType::kSrqErr, IBV_EVENT_SRQ_ERR));
static_assert(same(WcStatus::kLocLenErr, IBV_WC_LOC_LEN_ERR) &&
              same(WcStatus::kWrFlushErr, IBV_WC_WR_FLUSH_ERR) &&
              same(WcStatus::kRemInvReqErr, IBV_WC_REM_INV_REQ_ERR) &&
              same(WcStatus::kRemAccessErr, IBV_WC_REM_ACCESS_ERR) &&
              same(WcStatus::kRemOpErr, IBV_WC_REM_OP_ERR) &&
              same(WcStatus::kRetryExcErr, IBV_WC_RETRY_EXC_ERR) &&
              same(WcStatus::kRnrRetryExcErr, IBV_WC_RNR_RETRY_EXC_ERR) &&
              same(WcStatus::kGeneralErr, IBV_WC_GENERAL_ERR));
static_assert(same(WcOpcode::kRdmaRead, IBV_WC_RDMA_READ) &&
              same(WcOpcode::kFetchAdd, IBV_WC_FETCH_ADD) && same(WcOpcode::kRecv, IBV_WC_RECV) &&
              same(WcOpcode::kRecvRdmaWithImm, IBV_WC_RECV_RDMA_WITH_IMM));
static_assert(same(WrOpcode::kRdmaWrite, IBV_WR_RDMA_WRITE) &&
              same(WrOpcode::kSendWithImm, IBV_WR_SEND_WITH_IMM) &&
              same(WrOpcode::kAtomicFetchAndAdd, IBV_WR_ATOMIC_FETCH_AND_ADD) &&
              same(WrOpcode::kSendWithInv, IBV_WR_SEND_WITH_INV));
static_assert(send_flags::kFence == IBV_SEND_FENCE && send_flags::kSignaled == IBV_SEND_SIGNALED &&
              send_flags::kSolicited == IBV_SEND_SOLICITED &&
              send_flags::kInline == IBV_SEND_INLINE);
static_assert(access::kLocalWrite == IBV_ACCESS_LOCAL_WRITE &&
              access::kRemoteWrite == IBV_ACCESS_REMOTE_WRITE &&
              access::kRemoteRead == IBV_ACCESS_REMOTE_READ &&
              access::kRemoteAtomic == IBV_ACCESS_REMOTE_ATOMIC);
static_assert(wc_flags::kGrh == IBV_WC_GRH && wc_flags::kWithImm == IBV_WC_WITH_IMM &&
              wc_flags::kWithInv == IBV_WC_WITH_INV);
static_assert(qp_attr::kState == IBV_QP_STATE && qp_attr::kAv == IBV_QP_AV &&
              qp_attr::kMinRnrTimer == IBV_QP_MIN_RNR_TIMER &&
              qp_attr::kMaxDestRdAtomic == IBV_QP_MAX_DEST_RD_ATOMIC &&
              qp_attr::kDestQpn == IBV_QP_DEST_QPN && qp_attr::kRateLimit == IBV_QP_RATE_LIMIT);
static_assert(same(PathMtu::k4096, IBV_MTU_4096) && same(PathMtu::k256, IBV_MTU_256));
static_assert(same(AsyncEventType::kSqDrained, IBV_EVENT_SQ_DRAINED) &&
              same(AsyncEventType::kSrqLimitReached, IBV_EVENT_SRQ_LIMIT_REACHED));
#endif

TEST(VerbsValues, MatchRdmaCore) {
#ifndef XROCE_HAVE_VERBS_H
  GTEST_SKIP() << "rdma-core headers not installed; values unchecked";
#endif
  EXPECT_EQ(mtu_bytes(PathMtu::k1024), 1024u);
}

}  // namespace
}  // namespace xroce::transport
