#include "daemon/worker_neighbours.h"

#include <algorithm>

namespace xroce::daemon {

WorkerNeighbours::WorkerNeighbours(int ifindex, std::unique_ptr<net::NeighbourResolver> resolver)
    : ifindex_(ifindex), resolver_(std::move(resolver)) {}

WorkerNeighbours::Route WorkerNeighbours::route(std::uint64_t now_ns, wire::FrameAddress& addr) {
  if (!resolver_) return Route::kUnreachable;
  const net::NeighbourAnswer a = resolver_->resolve(now_ns, ifindex_, addr.dst_ip);
  switch (a.state) {
    case net::NeighbourState::kResolved:
      addr.dst_mac = a.mac;
      addr.hop_limit = a.hop_limit;  // the route's, as the kernel gives RoCE v2 packets
      return Route::kSend;
    case net::NeighbourState::kPending:
      return Route::kWait;
    case net::NeighbourState::kLocal:  // the daemon's loopback did not claim it: nobody serves it
    case net::NeighbourState::kUnreachable:
      break;
  }
  return Route::kUnreachable;
}

std::size_t WorkerNeighbours::wait(std::uint64_t now_ns, const wire::FrameAddress& addr,
                                   const transport::Transmit& tx, wire::Bytes payload) {
  std::size_t dropped = 0;
  if (waiting_.size() >= kMaxWaiting) {
    waiting_.pop_front();  // the oldest is the nearest to giving up anyway
    dropped = 1;
  }
  Waiting& w = waiting_.emplace_back();
  w.addr = addr;
  w.tx = tx;
  w.payload.assign(payload.begin(), payload.begin() + tx.payload_len);
  w.give_up_ns = now_ns + kWaitNs;
  return dropped;
}

WorkerNeighbours::Progress WorkerNeighbours::service(std::uint64_t now_ns, bool readable,
                                                     const std::function<void(Waiting&)>& send) {
  Progress progress;
  if (!resolver_) return progress;
  if (readable || now_ns >= next_poll_ns_) {
    resolver_->on_readable(now_ns);
    next_poll_ns_ = now_ns + kPollNs;
  }
  if (const auto d = resolver_->next_deadline(); d && *d <= now_ns) resolver_->on_timeout(now_ns);
  bool answered = false;
  while (const auto a = resolver_->poll_answer()) {
    answered = true;
    if (a->mac_changed) ++progress.mac_changes;
  }
  if (waiting_.empty()) return progress;
  if (!answered && now_ns < waiting_.front().give_up_ns) return progress;
  // Frames leave in the order they came; those still unanswered keep waiting.
  std::deque<Waiting> still;
  for (Waiting& w : waiting_) {
    switch (route(now_ns, w.addr)) {
      case Route::kSend:
        send(w);
        break;
      case Route::kWait:
        if (now_ns < w.give_up_ns) {
          still.push_back(std::move(w));
        } else {
          ++progress.failed;
        }
        break;
      case Route::kUnreachable:
        ++progress.failed;
        break;
    }
  }
  waiting_.swap(still);
  return progress;
}

std::optional<std::uint64_t> WorkerNeighbours::next_deadline() const {
  std::optional<std::uint64_t> next = resolver_ ? resolver_->next_deadline() : std::nullopt;
  if (!waiting_.empty()) {
    // give_up_ns only grows along the queue: the front is the earliest.
    const std::uint64_t give_up = waiting_.front().give_up_ns;
    next = next ? std::min(*next, give_up) : give_up;
  }
  return next;
}

}  // namespace xroce::daemon
