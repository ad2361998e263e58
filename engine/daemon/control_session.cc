#include "daemon/control_session.h"

namespace xroce::daemon {

Session* Sessions::add(Fd connection) {
  auto peer = ConnectionPeer::of(connection.get());
  if (!peer || sessions_.size() >= kMaxSessions) return nullptr;
  if (peer->uid() != 0) {
    std::size_t mine = 0;
    for (const auto& [fd, s] : sessions_)
      mine += s->peer.uid() == peer->uid() ? 1 : 0;
    if (mine >= kMaxSessionsPerUser) return nullptr;
  }
  const int fd = connection.get();
  auto session = std::make_unique<Session>(next_id_++, std::move(connection), std::move(*peer));
  Session* placed = session.get();
  by_id_[placed->id] = placed;
  sessions_[fd] = std::move(session);
  return placed;
}

Session* Sessions::find_by_connection(int fd) {
  const auto it = sessions_.find(fd);
  return it == sessions_.end() ? nullptr : it->second.get();
}

Session* Sessions::find(device::ClientId id) {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

const Session* Sessions::find(device::ClientId id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

void Sessions::remove(int connection_fd) {
  const auto it = sessions_.find(connection_fd);
  if (it == sessions_.end()) return;
  by_id_.erase(it->second->id);
  sessions_.erase(it);
}

std::optional<uid_t> Sessions::uid_of(device::ClientId id) const {
  const Session* s = find(id);
  if (s == nullptr) return std::nullopt;
  return s->peer.uid();
}

std::size_t Sessions::pending_text_total() const {
  std::size_t total = 0;
  for (const auto& [fd, s] : sessions_)
    total += s->pending_text.size() - s->pending_sent;
  return total;
}

uint32_t Session::take_ready_bit() {
  if (!freed_ready_bits.empty()) {
    const uint32_t bit = freed_ready_bits.back();
    freed_ready_bits.pop_back();
    return bit;
  }
  return next_ready_bit < queues::kReadyBits ? next_ready_bit++ : queues::kNoReadyBit;
}

}  // namespace xroce::daemon
