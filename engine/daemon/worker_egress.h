// Egress: every way a worker's packets leave, and the one choice per packet of where to.
//
//  1. Loopback: a destination GID in the daemon's LoopbackTable goes to that device's owning
//     worker (loopback.h), encoded as for the wire into a frame of its own.
//  2. Neighbours: where the worker writes the Ethernet header (AF_XDP) and the address has no
//     destination MAC, the MAC and hop limit come from the worker's route and neighbour
//     resolver (worker_neighbours.h); the packet waits there, not yet encoded, while the MAC
//     is being resolved, and leaves from service_neighbours() when the answer comes.
//  3. The port: the packet is encoded in place into the next slot of the transmit batch, and
//     the batch leaves in one port call (one kernel kick) when full or when the loop asks
//     (transmit_batch), for up to kTxBatch frames: no allocation or copy per packet. A slot is
//     a buffer the port lends (AF_XDP: a UMEM chunk pair, so the frame is never copied by the
//     worker again) or, where the port lends none, the worker's own buffer. What the
//     port refuses (back-pressure) waits in the backlog, in order, and leaves first at the
//     next flush(); past kMaxTxBacklog frames the newest are dropped (send_err). The loop
//     stops draining QPs while has_room() is false, so packets wait inside their QPs instead.
//
// Contract with the transport: poll_transmit writes a packet's payload into payload_buffer()
// and send() (or emit()) reads it before the next poll_transmit. That buffer lies inside the
// next batch slot, where the frame's payload will be: a packet for the port is encoded around
// it, not copied (nothing may be encoded between payload_buffer() and send()).
//
// Threading: owning worker only; pushing a looped-back frame into another worker's inbox is
// that inbox's contract (Worker::push_loopback).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "daemon/loopback.h"
#include "daemon/worker_counters.h"
#include "daemon/worker_neighbours.h"
#include "daemon/worker_qps.h"
#include "net/port.h"
#include "transport/work.h"
#include "wire/frame.h"

namespace xroce::daemon {

class Egress {
 public:
  static constexpr std::size_t kTxBatch = 32;
  static constexpr std::size_t kMaxTxBacklog = 4096;
  // Room for the largest headers before a payload in a slot: Ethernet with two VLAN tags, IPv6,
  // UDP (70 bytes) and the longest transport headers (BTH, XRCETH, RETH, ImmDt; atomics).
  static constexpr std::size_t kPayloadOffset = 128;

  // `neighbours`: null where the port's owner (the kernel) writes the Ethernet header.
  Egress(net::Port& port, WorkerCounters& counters, std::unique_ptr<WorkerNeighbours> neighbours);
  ~Egress();
  Egress(const Egress&) = delete;
  Egress& operator=(const Egress&) = delete;

  // Where poll_transmit writes a packet's payload (the largest path MTU): in the next batch
  // slot, kPayloadOffset bytes in (sends the batch first when it is full).
  wire::MutableBytes payload_buffer();
  // Whether the loop may take more packets from the QPs this turn.
  bool has_room() const { return backlog_.size() < kMaxTxBacklog; }
  // Nothing waits for the port (the loop must not sleep while something does).
  bool backlog_empty() const { return backlog_.empty(); }

  // A packet the transport produced, its payload in payload_buffer(): to the address its
  // binding names for tx.av_id (counted and dropped when there is none).
  void send(std::uint64_t now_ns, const transport::Transmit& tx, QpBinding& binding);
  // A packet to `addr` (see the top of the file for where it goes).
  void emit(std::uint64_t now_ns, const transport::Transmit& tx, const wire::FrameAddress& addr,
            wire::Bytes payload);
  // Sends the batch built so far in one port call.
  void transmit_batch();
  // Retries the backlog, then lets the port push what it queued. Returns whether a backlogged
  // frame left.
  bool flush();

  // The resolver's socket and timers: frames whose MAC arrived leave in this turn's batch.
  // Returns whether any did.
  bool service_neighbours(std::uint64_t now_ns);
  // The sleep saw the resolver's socket readable.
  void resolver_readable() { resolver_readable_ = true; }
  int resolver_fd() const { return neighbours_ ? neighbours_->fd() : -1; }
  // When service_neighbours must run even if the socket stays quiet (never before now_ns).
  std::optional<std::uint64_t> neighbour_deadline(std::uint64_t now_ns) const;

  // The GIDs this daemon serves and where their frames go.
  void set_loopback(std::shared_ptr<const LoopbackTable> table) { loopback_ = std::move(table); }

 private:
  void loop_back(const transport::Transmit& tx, const wire::FrameAddress& addr, wire::Bytes payload,
                 const LoopbackTarget& target);
  void encode_to_port(const transport::Transmit& tx, const wire::FrameAddress& addr,
                      wire::Bytes payload);
  wire::MutableBytes next_slot();

  net::Port& port_;
  WorkerCounters& counters_;
  std::unique_ptr<WorkerNeighbours> neighbours_;
  bool resolver_readable_ = false;
  std::shared_ptr<const LoopbackTable> loopback_;
  std::deque<std::vector<std::uint8_t>> backlog_;
  wire::MutableBytes handed_out_;  // the last payload_buffer()
  std::vector<std::vector<std::uint8_t>> batch_bufs_;
  // The buffer of each batch slot: empty until next_slot() asks the port for one to lend or
  // falls back to batch_bufs_; lent_[i] says which (a lent one goes back to the port).
  std::array<wire::MutableBytes, kTxBatch> slots_{};
  std::array<bool, kTxBatch> lent_{};
  std::array<net::TxFrame, kTxBatch> batch_{};
  std::size_t batch_count_ = 0;
};

}  // namespace xroce::daemon
