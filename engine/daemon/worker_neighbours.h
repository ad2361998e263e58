// The worker's side of destination MACs, for ports where the worker writes the Ethernet header
// (AF_XDP; through a UDP socket the kernel does). It owns the worker's route and neighbour
// resolver (engine/net/neighbour.h), asks it for each frame's destination and completes the
// frame's address (next hop's MAC, the route's hop limit) when the answer is known.
//
// Nothing here blocks the worker. A frame whose destination is still being resolved waits
// here, not yet encoded, for at most kWaitNs (and at most kMaxWaiting frames wait): when the
// answer comes it is sent with it; after that it is dropped and counted (neighbour_failures).
// RC then retransmits it, UD loses it, as on a wire. The worker polls fd() in its io_uring
// sleep, and calls service() every turn: it reads the resolver's socket when the sleep said
// readable and at least every kPollNs while the worker is busy (so a notification is never
// left unread behind a long burst), and fires the resolver's timers.
//
// Threading: worker thread only, like the resolver it owns.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "net/neighbour.h"
#include "transport/work.h"
#include "wire/frame.h"

namespace xroce::daemon {

class WorkerNeighbours {
 public:
  static constexpr std::uint64_t kWaitNs = 1'000'000'000;
  static constexpr std::size_t kMaxWaiting = 4096;
  static constexpr std::uint64_t kPollNs = 1'000'000;

  // A frame waiting for its MAC: what encode_transmit needs, the payload copied.
  struct Waiting {
    wire::FrameAddress addr;
    transport::Transmit tx;
    std::vector<std::uint8_t> payload;
    std::uint64_t give_up_ns = 0;
  };
  enum class Route : std::uint8_t {
    kSend,         // addr completed: encode and transmit it now
    kWait,         // being resolved: hand the frame to wait()
    kUnreachable,  // no route, no answer, or a local address no device of ours serves: drop it
  };
  struct Progress {
    std::size_t failed = 0;       // frames dropped: unreachable, or waited too long
    std::size_t mac_changes = 0;  // resolved destinations whose MAC changed (followed)
  };

  // `resolver` may be null (it could not be opened): every destination is then unreachable.
  WorkerNeighbours(int ifindex, std::unique_ptr<net::NeighbourResolver> resolver);

  // Looks the destination up (never blocks); on kSend fills addr.dst_mac and addr.hop_limit.
  Route route(std::uint64_t now_ns, wire::FrameAddress& addr);
  // Keeps a frame route() answered kWait with, until service() sends or drops it. Returns the
  // number of frames dropped to make room (0 or 1).
  std::size_t wait(std::uint64_t now_ns, const wire::FrameAddress& addr,
                   const transport::Transmit& tx, wire::Bytes payload);
  // Reads the resolver's socket (when `readable`, or kPollNs after the last read), fires its
  // timers, sends (through `send`, addr completed) the frames whose MAC arrived and drops those
  // whose destination is unreachable or that waited kWaitNs.
  Progress service(std::uint64_t now_ns, bool readable, const std::function<void(Waiting&)>& send);

  // The resolver's socket, for the worker's sleep; -1 without a resolver.
  int fd() const { return resolver_ ? resolver_->fd() : -1; }
  // When service() must run next even if fd() stays quiet.
  std::optional<std::uint64_t> next_deadline() const;
  bool idle() const { return waiting_.empty(); }

 private:
  int ifindex_;
  std::unique_ptr<net::NeighbourResolver> resolver_;
  std::deque<Waiting> waiting_;
  std::uint64_t next_poll_ns_ = 0;
};

}  // namespace xroce::daemon
