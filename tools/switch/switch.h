// The switch: ports (one AF_PACKET socket and one egress queue each), MAC learning with
// flooding of broadcast, multicast and unknown destinations, impairment of RoCE frames at
// ingress, and statistics. Single-threaded: run() owns every socket and queue and returns when
// SIGTERM or SIGINT arrives (SIGUSR1 writes the statistics file); the caller blocks those
// signals first.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "egress_queue.h"
#include "frame_edit.h"
#include "packet_socket.h"

namespace xroce::sw {

struct ImpairConfig {
  std::uint64_t drop_nth = 0;                // 0: off; else drop the Nth matching RoCE frame
  std::optional<std::uint8_t> match_opcode;  // only frames with this BTH opcode
  std::optional<std::string> from_port;      // only frames received on this port
  double loss = 0;                           // probability of dropping a matching RoCE frame
};

struct SwitchConfig {
  std::vector<std::string> ports;
  EgressConfig egress;  // the same for every port (each port's PRNG is seeded apart)
  ImpairConfig impair;
  std::uint64_t seed = 1;
  std::string stats_path;   // empty: no statistics file
  bool bleach_ecn = false;  // clear the ECN field of every IP packet at ingress
};

struct IngressCounters {
  std::uint64_t rx = 0;
  std::uint64_t rx_bytes = 0;
  std::uint64_t dropped_impair = 0;
  std::uint64_t rx_truncated = 0;
  std::uint64_t bleached = 0;   // packets whose ECN field --bleach-ecn cleared
  std::uint64_t tx_errors = 0;  // frames the egress device refused (counted at egress)
};

class Switch {
 public:
  explicit Switch(const SwitchConfig& config);
  // Empty when every port opened; else what failed.
  const std::string& error() const { return error_; }
  // Forwards until SIGTERM/SIGINT (read from `signal_fd`); returns the exit status.
  int run(int signal_fd);
  bool write_stats();

 private:
  struct Port {
    std::unique_ptr<PacketSocket> socket;
    std::unique_ptr<EgressQueue> queue;
    IngressCounters counters;
    bool blocked = false;  // the last send said EAGAIN: wait for POLLOUT
  };
  std::size_t receive_batch(std::size_t port);
  void handle_frame(std::size_t ingress, const ReceivedFrame& f);
  // One wire frame (`buffer`: virtio-net header, then the frame) through impairment, marking,
  // MAC learning and the egress queues.
  void switch_frame(std::size_t ingress, std::vector<std::uint8_t> buffer);
  bool impaired(std::size_t ingress, bool roce, std::uint8_t opcode);
  void enqueue(std::size_t egress, const std::vector<std::uint8_t>& buffer, const FrameInfo& info);
  void transmit_ready(std::size_t port, std::uint64_t now_ns);
  std::optional<std::uint64_t> next_deadline_ns() const;

  SwitchConfig config_;
  std::string error_;
  std::vector<Port> ports_;
  std::unordered_map<std::uint64_t, std::size_t> mac_table_;  // source MAC -> port
  std::mt19937_64 loss_rng_;
  std::uint64_t impair_matches_ = 0;
  std::uint64_t stats_writes_ = 0;
};

}  // namespace xroce::sw
