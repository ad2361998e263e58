// AfXdpPort: the Port interface over one AF_XDP socket, bound to one queue of an interface
// that XdpSteering has attached the steering program to (one socket per queue: a worker owns
// one queue, docs/ARCHITECTURE.md decision 7).
//
// UMEM layout: umem_frames chunks of kChunkBytes; the first half is the receive pool (it lives
// in the fill ring, the rx ring and the caller's hands between receive() and release()), the
// second half the transmit pool. Half of that pool is single chunks that transmit() copies
// frames into (free list -> tx ring -> completion ring -> free list); the other half is pairs
// of adjacent chunks lent to the caller (lend_tx) to encode a frame of up to 8 KiB in place, so
// a 4 KiB-payload frame reaches the UMEM with no copy of the worker's: transmit() posts it as
// one descriptor per chunk it touches, and the pair is free again when the completion ring has
// returned them all. Lending needs multi-buffer (a frame that starts inside the first chunk
// ends in the second); without it, or with none free, the caller builds frames elsewhere.
//
// Mode: zero-copy is tried first (only where the program runs in driver mode), then copy;
// generic (SKB) XDP uses copy. Frames longer than a chunk (a 4096-byte RoCE MTU frame on a
// 9000-byte link) use multi-buffer AF_XDP (XDP_USE_SG, kernel 6.6+): several descriptors with
// XDP_PKT_CONTD. receive() hands a single-buffer frame out as a view of its UMEM chunk (no
// copy). A two-buffer frame (the 4 KiB-payload case: 4170 bytes in 3840 + 330) whose first
// buffer ends exactly at its chunk's end and whose second lies in the next chunk is joined in
// place: the second buffer's bytes move back over that chunk's headroom (a memmove of the
// short tail), and the frame is one view across the two chunks. The kernel takes rx buffers in
// fill-ring order, and the fill ring is refilled in the order frames were received (both
// chunks of a joined frame together), so consecutive chunks stay adjacent and nearly every
// such frame is joined in place. Any other multi-buffer frame is copied into a reassembly
// buffer (one copy of the whole frame).
#pragma once

#include <xdp/xsk.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/port.h"
#include "net/xdp_steering.h"

namespace xroce::net {

struct AfXdpPortConfig {
  std::string ifname;
  std::uint32_t queue_id = 0;
  std::uint32_t umem_frames = 4096;  // power of two; half receive, half transmit
  bool allow_zero_copy = true;
  std::size_t max_frame_bytes = 9000 + 14;
  // > 0: the socket busy-polls its queue's NAPI for up to this long in each empty receive()
  // (SO_BUSY_POLL with SO_PREFER_BUSY_POLL), so the receiving thread runs the driver's receive
  // work on its own core instead of waiting for a softirq. Costs a spinning core; for
  // benchmarks and dedicated hosts. 0 (the default): no busy polling.
  std::uint32_t busy_poll_us = 0;
};

class AfXdpPort final : public Port {
 public:
  static constexpr std::uint32_t kChunkBytes = 4096;

  static Result<std::unique_ptr<AfXdpPort>, PortError> open(const AfXdpPortConfig& config,
                                                            std::shared_ptr<XdpSteering> steering);
  ~AfXdpPort() override;

  Result<std::size_t, PortError> receive(std::span<RxFrame> frames) override;
  void release(std::span<const RxFrame> frames) override;
  Result<std::size_t, PortError> transmit(std::span<const TxFrame> frames) override;
  std::span<std::uint8_t> lend_tx(std::size_t bytes) override;
  void return_tx(std::span<const std::uint8_t> lent) override;
  Result<std::size_t, PortError> flush() override;
  int wait_fd() const override;
  PortStats stats() const override;
  PortMode mode() const override { return mode_; }
  std::size_t max_frame_bytes() const override { return max_frame_bytes_; }
  // The receive half of the UMEM, in frames of that size: with multi-buffer a frame takes a
  // chunk per kChunkBytes of it and the kernel's XDP headroom, else one chunk.
  std::size_t receive_frames(std::size_t frame_bytes) const override;
  bool multi_buffer() const { return multi_buffer_; }

 private:
  AfXdpPort(const AfXdpPortConfig& config, std::shared_ptr<XdpSteering> steering);
  Result<int, PortError> create_socket();
  Result<int, PortError> try_bind(std::uint16_t bind_flags);
  Result<int, PortError> enable_busy_poll();
  void destroy_socket();
  void fill(std::span<const std::uint64_t> addrs);
  void reclaim_completions();
  void wake_tx();
  bool tx_ring_taken() const;
  bool take_multi_buffer(std::uint32_t idx, std::uint32_t descs, RxFrame& out);
  bool join_in_place(std::uint32_t idx, RxFrame& out);
  // Reserves and fills one tx descriptor per chunk a frame built in lent pair `pair` touches
  // (the caller submits them) and returns how many; 0 when the ring has no room for them.
  std::uint32_t post_lent(std::uint32_t pair, TxFrame frame);
  void free_pair(std::uint32_t pair);
  std::uint32_t rx_frames() const { return config_.umem_frames / 2; }
  // The lent pair a frame starts in, or -1 when it is not inside the lending region.
  std::int64_t pair_of(const std::uint8_t* p) const;

  AfXdpPortConfig config_;
  std::shared_ptr<XdpSteering> steering_;
  PortMode mode_ = PortMode::kAfXdpCopy;
  bool multi_buffer_ = false;
  std::size_t max_frame_bytes_ = 0;

  std::uint8_t* umem_area_ = nullptr;
  std::size_t umem_bytes_ = 0;
  xsk_umem* umem_ = nullptr;
  xsk_socket* xsk_ = nullptr;
  xsk_ring_prod fill_{};
  xsk_ring_cons comp_{};
  xsk_ring_cons rx_{};
  xsk_ring_prod tx_{};

  std::vector<std::uint64_t> tx_free_;  // chunk addresses ready for transmit
  std::uint32_t copy_frames_ = 0;       // chunks of the copying half (all, without lending)
  std::uint64_t lend_base_ = 0;         // UMEM offset of the first lent pair
  // Lending: free pairs; per pair, lent to the caller, or descriptors the kernel still holds.
  std::vector<std::uint32_t> pairs_free_;
  std::vector<std::uint8_t> pair_lent_;
  std::vector<std::uint8_t> pair_in_kernel_;
  std::uint32_t pairs_in_kernel_ = 0;
  std::vector<std::uint64_t> pending_fill_;
  std::vector<std::vector<std::uint8_t>> reassembly_;
  std::vector<std::uint32_t> reassembly_free_;
  PortStats stats_;
};

}  // namespace xroce::net
