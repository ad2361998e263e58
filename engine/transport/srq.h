// Shared receive queue: receive WQEs any QP attached to it may consume, with the limit event
// (ibv_modify_srq srq_limit: armed, fires once when the count drops below the limit).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>

#include "transport/work.h"

namespace xroce::transport {

class Srq {
 public:
  explicit Srq(std::uint32_t max_wr, std::uint32_t max_sge = 8)
      : max_wr_(max_wr), max_sge_(max_sge) {}

  // Returns 0, ENOMEM when full, EINVAL for too many SGEs.
  int post_recv(const RecvRequest& wr);
  // Arms the limit event (srq_limit > 0) or disarms it (0). EINVAL if above max_wr.
  int set_limit(std::uint32_t srq_limit);
  // ibv_modify_srq(IBV_SRQ_MAX_WR): EINVAL below the WQEs posted now or the armed limit, as
  // rxe_srq_chk_attr refuses (and 0).
  int resize(std::uint32_t max_wr);
  std::uint32_t max_wr() const { return max_wr_; }

  // Takes the oldest receive WQE; raises the limit event when the count falls below the limit.
  std::optional<RecvRequest> take();
  bool empty() const { return wqes_.empty(); }
  std::size_t size() const { return wqes_.size(); }
  // True once per firing of the limit event (IBV_EVENT_SRQ_LIMIT_REACHED).
  bool poll_limit_event();

 private:
  std::uint32_t max_wr_;
  std::uint32_t max_sge_;
  std::uint32_t limit_ = 0;
  bool armed_ = false;
  bool event_pending_ = false;
  std::deque<RecvRequest> wqes_;
};

}  // namespace xroce::transport
