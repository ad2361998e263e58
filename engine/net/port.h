// Ports move whole Ethernet frames (docs/protocol.md §1) between the engine and a network: AF_XDP
// (afxdp_port.h), a UDP socket on io_uring (udp_port.h), or the simulator (sim/). All present
// the same frames, so the transport and the ICRC do not know which one carries them
// (docs/ARCHITECTURE.md decision 8). A port does not parse frames beyond what it must to deliver
// them; it never depends on the wire codec.
//
// Threading contract: a port belongs to one worker thread. Every member function must be
// called from that thread; the port takes no locks.
//
// Buffer contract (zero-copy friendly):
//  - receive() hands out RxFrames whose bytes live in memory the port owns (a UMEM chunk, a
//    receive buffer). They stay valid, untouched by the port, until the caller gives them
//    back with release(). A caller that holds frames too long starves the port of buffers;
//    receive() then returns fewer frames and the NIC or kernel counts drops.
//  - transmit() reads the caller's bytes during the call only; the caller may reuse them as
//    soon as it returns. The exception is a frame built in a buffer the port lent (lend_tx):
//    transmit() takes the buffer itself, and the caller must not touch it again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "wire/result.h"

namespace xroce::net {

using wire::Err;
using wire::Result;

// An operating failure (ARCHITECTURE/STYLE rule 7): what failed, with the errno behind it.
struct PortError {
  std::string what;
  int errno_value = 0;
  std::string message() const;
};

// One received frame: a view of port-owned memory plus the port's handle for it.
struct RxFrame {
  std::span<const std::uint8_t> bytes;
  std::uint64_t handle = 0;  // opaque to the caller; identifies the buffer for release()
  // The port computed the frame's ICRC over exactly `bytes` and it matched (the UDP port must,
  // to find the IPv4 identification a socket hides): the decoder need not compute it again.
  bool icrc_verified = false;
};

// One frame to transmit: the caller's bytes, read during transmit() only.
using TxFrame = std::span<const std::uint8_t>;

enum class PortMode : std::uint8_t {
  kAfXdpZeroCopy,  // AF_XDP, driver XDP, XDP_ZEROCOPY
  kAfXdpCopy,      // AF_XDP, driver XDP, XDP_COPY
  kAfXdpSkb,       // AF_XDP, generic (SKB) XDP, XDP_COPY
  kUdpSocket,      // UDP socket on io_uring: no XDP, no privileges
};
const char* to_string(PortMode m);

struct PortStats {
  std::uint64_t rx_packets = 0;
  std::uint64_t rx_bytes = 0;
  std::uint64_t rx_drops = 0;  // frames lost on receive (rings full, truncated, no buffer)
  std::uint64_t tx_packets = 0;
  std::uint64_t tx_bytes = 0;
  std::uint64_t tx_drops = 0;     // frames the port accepted but could not send
  std::uint64_t tx_rejected = 0;  // frames transmit() refused (malformed, too large)
  std::uint64_t tx_pending = 0;   // buffers handed to the kernel and not yet completed
  // Multi-buffer frames (AF_XDP): joined in place across adjacent chunks (no copy), or copied
  // into a reassembly buffer.
  std::uint64_t rx_joined_in_place = 0;
  std::uint64_t rx_reassembled = 0;
  // Sends that carried several frames (UDP port: segmentation offload).
  std::uint64_t tx_gso_sends = 0;
  // Received datagrams that carried several frames (UDP port: receive offload), and frames the
  // port copied into place because they did not land in a buffer of their own.
  std::uint64_t rx_gro_datagrams = 0;
  std::uint64_t rx_gro_copied = 0;
  // System calls that asked the kernel to send what the transmit ring holds (AF_XDP copy mode:
  // the `sendto` kick, each moving at most 32 descriptors).
  std::uint64_t tx_kicks = 0;
  // System calls that read the socket (UDP port: recvmmsg), and those of them that found nothing.
  std::uint64_t rx_reads = 0;
  std::uint64_t rx_empty_reads = 0;
};

// Every PortStats field by the name it has in `xroce stat`'s "port" object and the exporter's
// xroce_port_<name>_total: the one list that sums, prints and exports them.
struct PortStatField {
  const char* name;
  std::uint64_t PortStats::*member;
};
inline constexpr PortStatField kPortStatFields[] = {
    {"rx_packets", &PortStats::rx_packets},
    {"rx_bytes", &PortStats::rx_bytes},
    {"rx_drops", &PortStats::rx_drops},
    {"tx_packets", &PortStats::tx_packets},
    {"tx_bytes", &PortStats::tx_bytes},
    {"tx_drops", &PortStats::tx_drops},
    {"tx_rejected", &PortStats::tx_rejected},
    {"tx_pending", &PortStats::tx_pending},
    {"rx_joined_in_place", &PortStats::rx_joined_in_place},
    {"rx_reassembled", &PortStats::rx_reassembled},
    {"tx_gso_sends", &PortStats::tx_gso_sends},
    {"rx_gro_datagrams", &PortStats::rx_gro_datagrams},
    {"rx_gro_copied", &PortStats::rx_gro_copied},
    {"tx_kicks", &PortStats::tx_kicks},
    {"rx_reads", &PortStats::rx_reads},
    {"rx_empty_reads", &PortStats::rx_empty_reads},
};
static_assert(sizeof(kPortStatFields) / sizeof(kPortStatFields[0]) ==
                  sizeof(PortStats) / sizeof(std::uint64_t),
              "a PortStats field without a name");

inline PortStats& operator+=(PortStats& sum, const PortStats& more) {
  for (const PortStatField& f : kPortStatFields)
    sum.*f.member += more.*f.member;
  return sum;
}

class Port {
 public:
  virtual ~Port() = default;
  Port() = default;
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  // Fills up to frames.size() entries with received frames and returns how many; 0 when
  // nothing is waiting. Never blocks.
  virtual Result<std::size_t, PortError> receive(std::span<RxFrame> frames) = 0;

  // Gives received frames' buffers back to the port.
  virtual void release(std::span<const RxFrame> frames) = 0;

  // Queues frames for sending and returns how many were taken, in order; fewer than
  // frames.size() means the transmit ring is full now (back-pressure, not loss): retry the
  // rest later. Malformed frames are counted in tx_rejected and skipped (taken).
  virtual Result<std::size_t, PortError> transmit(std::span<const TxFrame> frames) = 0;

  // Zero-copy transmit, for a port whose transmit memory the caller may write (AF_XDP's UMEM).
  // lend_tx() returns a buffer of at least `bytes` to build one frame in, or an empty span when
  // the port lends none (one that always copies, or none free now): build the frame elsewhere.
  // A frame inside a lent buffer that transmit() takes leaves without a copy, and the buffer
  // goes back to the port with it; a lent buffer transmit() did not take, or that was never
  // passed to it, goes back with return_tx(). The defaults lend nothing.
  virtual std::span<std::uint8_t> lend_tx(std::size_t /*bytes*/) { return {}; }
  virtual void return_tx(std::span<const std::uint8_t> /*lent*/) {}

  // Pushes anything queued by transmit() that still waits for a kernel wakeup, and reclaims
  // finished transmit buffers. Cheap when there is nothing to do.
  virtual Result<std::size_t, PortError> flush() = 0;

  // A file descriptor that polls readable when receive() may return frames: a worker adds it
  // to its io_uring (or poll) set before sleeping. Valid for the port's lifetime.
  virtual int wait_fd() const = 0;

  virtual PortStats stats() const = 0;
  virtual PortMode mode() const = 0;

  // Largest frame (Ethernet header to ICRC) this port carries.
  virtual std::size_t max_frame_bytes() const = 0;

  // About how many frames of `frame_bytes` the port's receive queue holds before it drops
  // (what arrives while its worker is busy waits there): the bound a sender of this kind's
  // traffic should keep its unacknowledged packets well within (device::Device::
  // set_port_receive_frames). 0: not known; the default.
  virtual std::size_t receive_frames(std::size_t /*frame_bytes*/) const { return 0; }
};

}  // namespace xroce::net
