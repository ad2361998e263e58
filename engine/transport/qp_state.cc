#include "transport/qp_state.h"

#include <cerrno>

namespace xroce::transport {

const char* to_string(QpState s) {
  switch (s) {
    case QpState::kReset:
      return "RESET";
    case QpState::kInit:
      return "INIT";
    case QpState::kRtr:
      return "RTR";
    case QpState::kRts:
      return "RTS";
    case QpState::kSqd:
      return "SQD";
    case QpState::kSqe:
      return "SQE";
    case QpState::kErr:
      return "ERR";
  }
  return "?";
}

const char* to_string(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess:
      return "SUCCESS";
    case WcStatus::kLocLenErr:
      return "LOC_LEN_ERR";
    case WcStatus::kLocQpOpErr:
      return "LOC_QP_OP_ERR";
    case WcStatus::kLocProtErr:
      return "LOC_PROT_ERR";
    case WcStatus::kWrFlushErr:
      return "WR_FLUSH_ERR";
    case WcStatus::kBadRespErr:
      return "BAD_RESP_ERR";
    case WcStatus::kLocAccessErr:
      return "LOC_ACCESS_ERR";
    case WcStatus::kRemInvReqErr:
      return "REM_INV_REQ_ERR";
    case WcStatus::kRemAccessErr:
      return "REM_ACCESS_ERR";
    case WcStatus::kRemOpErr:
      return "REM_OP_ERR";
    case WcStatus::kRetryExcErr:
      return "RETRY_EXC_ERR";
    case WcStatus::kRnrRetryExcErr:
      return "RNR_RETRY_EXC_ERR";
    default:
      return "OTHER_ERR";
  }
}

namespace {

using namespace qp_attr;

struct Rule {
  bool valid = false;
  std::uint32_t required = 0;
  std::uint32_t optional = 0;
};

// The transition table of the kernel's ib_modify_qp_is_ok (drivers/infiniband/core/verbs.c
// qp_state_table), for the QP types the core speaks. XRC_SEND is the kernel's XRC_INI, XRC_RECV
// its XRC_TGT.
Rule rule_for(QpType type, QpState from, QpState to) {
  using T = QpType;
  const bool ud = type == T::kUd;
  const bool uc = type == T::kUc;
  const bool ini = type == T::kXrcSend;
  const bool tgt = type == T::kXrcRecv;
  if (to == QpState::kReset || to == QpState::kErr) return {true, 0, 0};
  switch (from) {
    case QpState::kReset:
      if (to == QpState::kInit) {
        return {true, ud ? (kPkeyIndex | kPort | kQkey) : (kPkeyIndex | kPort | kAccessFlags), 0};
      }
      break;
    case QpState::kInit:
      if (to == QpState::kInit) {
        return {true, 0, ud ? (kPkeyIndex | kPort | kQkey) : (kPkeyIndex | kPort | kAccessFlags)};
      }
      if (to == QpState::kRtr) {
        if (ud) return {true, 0, kPkeyIndex | kQkey};
        const std::uint32_t base = kAv | kPathMtu | kDestQpn | kRqPsn;
        const std::uint32_t responder = (uc || ini) ? 0 : kMaxDestRdAtomic | kMinRnrTimer;
        return {true, base | responder, kAltPath | kAccessFlags | kPkeyIndex};
      }
      break;
    case QpState::kRtr:
      if (to == QpState::kRts) {
        if (ud) return {true, kSqPsn, kCurState | kQkey};
        if (uc) return {true, kSqPsn, kCurState | kAltPath | kAccessFlags | kPathMigState};
        if (tgt) {
          return {true, kTimeout | kSqPsn,
                  kCurState | kAltPath | kAccessFlags | kMinRnrTimer | kPathMigState};
        }
        return {true, kTimeout | kRetryCnt | kRnrRetry | kSqPsn | kMaxQpRdAtomic,
                kCurState | kAltPath | kAccessFlags | (ini ? 0 : kMinRnrTimer) | kPathMigState};
      }
      break;
    case QpState::kRts:
      if (to == QpState::kRts) {
        if (ud) return {true, 0, kCurState | kQkey};
        const std::uint32_t rnr = (uc || ini) ? 0 : kMinRnrTimer;
        return {true, 0, kCurState | kAccessFlags | kAltPath | kPathMigState | rnr};
      }
      if (to == QpState::kSqd) return {true, 0, kEnSqdAsyncNotify};
      break;
    case QpState::kSqd:
      if (to == QpState::kRts) {
        if (ud) return {true, 0, kCurState | kQkey};
        const std::uint32_t rnr = (uc || ini) ? 0 : kMinRnrTimer;
        return {true, 0, kCurState | kAltPath | kAccessFlags | rnr | kPathMigState};
      }
      if (to == QpState::kSqd) {
        if (ud) return {true, 0, kPkeyIndex | kQkey};
        if (uc) return {true, 0, kAv | kAltPath | kAccessFlags | kPkeyIndex | kPathMigState};
        const std::uint32_t common =
            kPort | kAv | kTimeout | kAltPath | kAccessFlags | kPkeyIndex | kPathMigState;
        if (ini) return {true, 0, common | kRetryCnt | kRnrRetry | kMaxQpRdAtomic};
        if (tgt) return {true, 0, common | kMaxDestRdAtomic | kMinRnrTimer};
        return {true, 0,
                common | kRetryCnt | kRnrRetry | kMaxQpRdAtomic | kMaxDestRdAtomic | kMinRnrTimer};
      }
      break;
    case QpState::kSqe:
      // SQE exists for UD and UC only; RC and XRC QPs never enter it.
      if (to == QpState::kRts && ud) return {true, 0, kCurState | kQkey};
      if (to == QpState::kRts && uc) return {true, 0, kCurState | kAccessFlags};
      break;
    case QpState::kErr:
      break;
  }
  return {};
}

bool attr_values_ok(const QpAttr& a, std::uint32_t mask, const DeviceLimits& lim) {
  if ((mask & kPort) && (a.port_num == 0 || a.port_num > lim.phys_port_cnt)) return false;
  if ((mask & kPkeyIndex) && a.pkey_index >= lim.max_pkeys) return false;
  if ((mask & kPathMtu) && (static_cast<unsigned>(a.path_mtu) < 1 ||
                            static_cast<unsigned>(a.path_mtu) > static_cast<unsigned>(lim.max_mtu)))
    return false;
  if ((mask & kMaxQpRdAtomic) && a.max_rd_atomic > lim.max_qp_init_rd_atom) return false;
  if ((mask & kMaxDestRdAtomic) && a.max_dest_rd_atomic > lim.max_qp_rd_atom) return false;
  if ((mask & kTimeout) && a.timeout > 31) return false;
  if ((mask & kRetryCnt) && a.retry_cnt > 7) return false;
  if ((mask & kRnrRetry) && a.rnr_retry > 7) return false;
  if ((mask & kMinRnrTimer) && a.min_rnr_timer > 31) return false;
  if ((mask & kDestQpn) && a.dest_qp_num.value() == 0) return false;
  return true;
}

}  // namespace

int check_modify_qp(QpType type, QpState current, const QpAttr& attr, std::uint32_t mask,
                    const DeviceLimits& limits) {
  if (mask & kCurState) {
    // Only RTS and SQE may be named as the current state, and it must be the true one.
    if (attr.cur_qp_state != QpState::kRts && attr.cur_qp_state != QpState::kSqe) return EINVAL;
    if (attr.cur_qp_state != current) return EINVAL;
  }
  const QpState next = (mask & kState) ? attr.qp_state : current;
  const Rule rule = rule_for(type, current, next);
  if (!rule.valid) return EINVAL;
  const std::uint32_t attrs = mask & ~kState;
  if ((attrs & rule.required) != rule.required) return EINVAL;
  if (attrs & ~(rule.required | rule.optional)) return EINVAL;
  if (!attr_values_ok(attr, mask, limits)) return EINVAL;
  return 0;
}

}  // namespace xroce::transport
