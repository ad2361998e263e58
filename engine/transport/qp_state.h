// QP attributes and the modify-QP rules: which transitions exist and which attributes each
// requires or allows, as ibv_modify_qp (and the kernel's ib_modify_qp_is_ok table) define them.
#pragma once

#include <cstdint>

#include "transport/verbs.h"
#include "wire/psn.h"
#include "wire/types.h"

namespace xroce::transport {

// The ibv_qp_attr fields the core uses. Field names follow ibv_qp_attr.
struct QpAttr {
  QpState qp_state = QpState::kReset;
  QpState cur_qp_state = QpState::kReset;
  PathMtu path_mtu = PathMtu::k1024;
  wire::Qkey qkey;
  wire::Psn rq_psn;
  wire::Psn sq_psn;
  wire::Qpn dest_qp_num;
  std::uint32_t qp_access_flags = 0;
  std::uint16_t pkey_index = 0;
  std::uint8_t en_sqd_async_notify = 0;
  std::uint8_t max_rd_atomic = 0;
  std::uint8_t max_dest_rd_atomic = 0;
  std::uint8_t min_rnr_timer = 0;  // RNR NAK timer code (IBA table 45; docs/protocol.md §3.4)
  std::uint8_t port_num = 1;
  std::uint8_t timeout = 0;    // local ACK timeout 4.096 us * 2^timeout, 0 = infinite
  std::uint8_t retry_cnt = 0;  // 0..7
  std::uint8_t rnr_retry = 0;  // 0..7, 7 = infinite
  std::uint32_t av_id = 0;     // the address vector (ah_attr), resolved by the port
};

// Limits a real device advertises; modify-QP refuses values beyond them with EINVAL.
struct DeviceLimits {
  std::uint8_t max_qp_rd_atom = 16;
  std::uint8_t max_qp_init_rd_atom = 16;
  std::uint16_t max_pkeys = 1;
  std::uint8_t phys_port_cnt = 1;
  PathMtu max_mtu = PathMtu::k4096;
};

// Checks a modify request against the transition table and attribute ranges. Returns 0 or
// EINVAL, as ibv_modify_qp does.
int check_modify_qp(QpType type, QpState current, const QpAttr& attr, std::uint32_t mask,
                    const DeviceLimits& limits);

// Local ACK timeout in nanoseconds; 0 means the timer is disabled (docs/protocol.md §3.9).
constexpr std::uint64_t ack_timeout_ns(std::uint8_t timeout) {
  return timeout == 0 ? 0 : std::uint64_t{4096} << timeout;
}

}  // namespace xroce::transport
