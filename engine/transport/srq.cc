#include "transport/srq.h"

#include <cerrno>

namespace xroce::transport {

int Srq::post_recv(const RecvRequest& wr) {
  if (wr.sg_list.size() > max_sge_) return EINVAL;
  if (wqes_.size() >= max_wr_) return ENOMEM;
  wqes_.push_back(wr);
  return 0;
}

int Srq::set_limit(std::uint32_t srq_limit) {
  if (srq_limit > max_wr_) return EINVAL;
  limit_ = srq_limit;
  armed_ = srq_limit > 0;
  return 0;
}

int Srq::resize(std::uint32_t max_wr) {
  if (max_wr == 0 || max_wr < wqes_.size() || (armed_ && max_wr < limit_)) return EINVAL;
  max_wr_ = max_wr;
  return 0;
}

std::optional<RecvRequest> Srq::take() {
  if (wqes_.empty()) return std::nullopt;
  RecvRequest wr = std::move(wqes_.front());
  wqes_.pop_front();
  // ibv_modify_srq(srq_limit): the event fires when the WQE count drops below the limit while
  // armed.
  if (armed_ && wqes_.size() < limit_) {
    armed_ = false;
    event_pending_ = true;
  }
  return wr;
}

bool Srq::poll_limit_event() {
  const bool fired = event_pending_;
  event_pending_ = false;
  return fired;
}

}  // namespace xroce::transport
