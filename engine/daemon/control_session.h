// The daemon's side of one control connection (a verbs context after Op::hello, or a CLI
// command), and the table of them.
//
// A session owns every descriptor the daemon keeps for it: the connection, the peer's pidfd,
// the context's event socket and doorbell, its completion channels. Dropping a session closes
// them all. Quotas: at most kMaxSessionsPerUser sessions per user (root excepted) and
// kMaxSessions in all, so that one user cannot make the daemon run out of descriptors for the
// others; a session's objects are bounded by device::ClientQuota (engine/device/device.h).
//
// Threading: the control thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/control_identity.h"
#include "device/objects.h"
#include "xroce/fd.h"

namespace xroce::daemon {

struct Session {
  Session(device::ClientId id, Fd connection, ConnectionPeer peer)
      : id(id), connection(std::move(connection)), peer(std::move(peer)) {}

  device::ClientId id;
  Fd connection;
  ConnectionPeer peer;
  std::string device;  // the device of its context, after hello ("" otherwise)
  Fd event_socket;     // the context's async event socket (daemon end)
  Fd doorbell;         // the context's doorbell: every QP and SRQ of it rings this eventfd
  // The context's page of ready bits (include/xroce/queues.h), mapped here; its QPs' bits by
  // QP handle, and the bits free again below next_ready_bit.
  device::SharedRegion page;
  std::map<uint32_t, uint32_t> ready_bits;
  std::vector<uint32_t> freed_ready_bits;
  uint32_t next_ready_bit = 0;
  std::map<uint32_t, Fd> channels;  // completion channels: handle -> daemon end
  uint32_t next_channel = 1;
  std::map<uint32_t, uint64_t> shared_mrs;  // MRs reached through a shared mapping -> addr
  // The rest of a text reply that did not fit one datagram (Op::text_next takes it page by page).
  std::string pending_text;
  std::size_t pending_sent = 0;
  // Set when the session must go once the current request is answered (its device was deleted).
  bool closing = false;

  bool has_context() const { return !device.empty(); }
  queues::ContextPage* ready_page() const { return static_cast<queues::ContextPage*>(page.base()); }
  // A free bit of the page, or queues::kNoReadyBit when every bit is taken; a bit no QP holds
  // any more goes back with return_ready_bit.
  uint32_t take_ready_bit();
  void return_ready_bit(uint32_t bit) { freed_ready_bits.push_back(bit); }
};

class Sessions {
 public:
  static constexpr std::size_t kMaxSessions = 4096;
  static constexpr std::size_t kMaxSessionsPerUser = 128;
  static constexpr std::size_t kMaxChannelsPerContext = 16;
  // What the text of unfinished paged replies may hold, per session and in all.
  static constexpr std::size_t kMaxPendingTextPerSession = 64u << 20;
  static constexpr std::size_t kMaxPendingTextTotal = 256u << 20;

  // A session for a connection just accepted; nullptr when the peer is gone or over its quota.
  Session* add(Fd connection);
  Session* find_by_connection(int fd);
  Session* find(device::ClientId id);
  const Session* find(device::ClientId id) const;
  // Removes the session (its descriptors close). The caller has released its objects.
  void remove(int connection_fd);

  std::map<int, std::unique_ptr<Session>>& by_connection() { return sessions_; }
  const std::map<int, std::unique_ptr<Session>>& by_connection() const { return sessions_; }
  // The user a session (an object's owner) belongs to, if it is still there.
  std::optional<uid_t> uid_of(device::ClientId id) const;
  // The pending text of every session together.
  std::size_t pending_text_total() const;

 private:
  std::map<int, std::unique_ptr<Session>> sessions_;  // by connection fd
  std::map<device::ClientId, Session*> by_id_;
  device::ClientId next_id_ = 1;
};

}  // namespace xroce::daemon
