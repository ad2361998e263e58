#include "net/afxdp_port.h"

#include <fmt/core.h>
#include <linux/if_xdp.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "net/bpf_log.h"

namespace xroce::net {
namespace {

// Multi-buffer AF_XDP (kernel 6.6); Debian 12's kernel headers (6.1) predate it.
#ifndef XDP_USE_SG
constexpr std::uint16_t XDP_USE_SG = 1 << 4;
#endif
#ifndef XDP_PKT_CONTD
constexpr std::uint32_t XDP_PKT_CONTD = 1 << 0;
#endif

constexpr std::uint32_t kMaxDescsPerFrame = 17;  // MAX_SKB_FRAGS + 1
constexpr std::uint64_t kReassemblyHandle = 1ULL << 63;
constexpr std::uint64_t kJoinedHandle = 1ULL << 62;  // the chunk in the handle and the next one
constexpr std::uint32_t kReassemblyBuffers = 64;
constexpr int kMaxTxKicks = 256;
constexpr auto kBusyQueueWait = std::chrono::seconds(2);
constexpr auto kBusyQueueRetry =
    std::chrono::milliseconds(10);  // copy mode sends at most 32 frames per kick

std::uint64_t chunk_base(std::uint64_t addr) {
  return addr & ~std::uint64_t{AfXdpPort::kChunkBytes - 1};
}

}  // namespace

AfXdpPort::AfXdpPort(const AfXdpPortConfig& config, std::shared_ptr<XdpSteering> steering)
    : config_(config), steering_(std::move(steering)) {}

AfXdpPort::~AfXdpPort() {
  if (xsk_) steering_->clear_queue_socket(config_.queue_id);
  destroy_socket();
  if (umem_area_) munmap(umem_area_, umem_bytes_);
}

Result<std::unique_ptr<AfXdpPort>, PortError> AfXdpPort::open(
    const AfXdpPortConfig& config, std::shared_ptr<XdpSteering> steering) {
  if (config.umem_frames < 4 || (config.umem_frames & (config.umem_frames - 1)) != 0) {
    return Err{PortError{"afxdp port: umem_frames must be a power of two >= 4", EINVAL}};
  }
  std::unique_ptr<AfXdpPort> port(new AfXdpPort(config, std::move(steering)));
  port->umem_bytes_ = std::size_t{config.umem_frames} * kChunkBytes;
  void* area = mmap(nullptr, port->umem_bytes_, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (area == MAP_FAILED) return Err{PortError{"afxdp port: mmap UMEM", errno}};
  port->umem_area_ = static_cast<std::uint8_t*>(area);
  // A socket of a process that just died keeps its queue until the kernel's deferred release
  // runs: EBUSY for a moment after a crash. Retry for a bounded time.
  const auto give_up = std::chrono::steady_clock::now() + kBusyQueueWait;
  for (;;) {
    auto r = port->create_socket();
    if (r) break;
    if (r.error().errno_value != EBUSY || std::chrono::steady_clock::now() > give_up) {
      return Err{r.error()};
    }
    std::this_thread::sleep_for(kBusyQueueRetry);
  }
  if (auto r = port->steering_->set_queue_socket(config.queue_id, xsk_socket__fd(port->xsk_)); !r) {
    return Err{r.error()};
  }
  return port;
}

void AfXdpPort::destroy_socket() {
  if (xsk_) xsk_socket__delete(xsk_);
  xsk_ = nullptr;
  if (umem_) xsk_umem__delete(umem_);
  umem_ = nullptr;
}

// Tries zero-copy then copy, each with multi-buffer first, and keeps the first bind that works.
Result<int, PortError> AfXdpPort::create_socket() {
  struct Try {
    std::uint16_t flags;
    PortMode mode;
  };
  std::vector<Try> tries;
  const PortMode copy_mode = steering_->native() ? PortMode::kAfXdpCopy : PortMode::kAfXdpSkb;
  if (config_.allow_zero_copy && steering_->native()) {
    tries.push_back({XDP_ZEROCOPY | XDP_USE_SG, PortMode::kAfXdpZeroCopy});
    tries.push_back({XDP_ZEROCOPY, PortMode::kAfXdpZeroCopy});
  }
  tries.push_back({XDP_COPY | XDP_USE_SG, copy_mode});
  tries.push_back({XDP_COPY, copy_mode});
  int last_err = 0;
  for (const Try& t : tries) {
    const auto r = try_bind(static_cast<std::uint16_t>(t.flags | XDP_USE_NEED_WAKEUP));
    if (r) {
      mode_ = t.mode;
      multi_buffer_ = (t.flags & XDP_USE_SG) != 0;
      // Without multi-buffer a frame must fit one chunk after the kernel's XDP headroom.
      max_frame_bytes_ = multi_buffer_ ? config_.max_frame_bytes
                                       : std::min<std::size_t>(config_.max_frame_bytes,
                                                               kChunkBytes - XDP_PACKET_HEADROOM);
      break;
    }
    last_err = r.error().errno_value;
  }
  // libxdp's words on the binds it refused say no more than last_err (bpf_log.h).
  (void)take_bpf_library_messages();
  if (!xsk_) {
    return Err{PortError{
        fmt::format("afxdp port: bind {} queue {}", config_.ifname, config_.queue_id), last_err}};
  }
  if (config_.busy_poll_us > 0) {
    if (auto r = enable_busy_poll(); !r) return Err{r.error()};
  }
  // Receive pool into the fill ring; transmit pool onto the free list.
  std::vector<std::uint64_t> rx_addrs(rx_frames());
  for (std::uint32_t i = 0; i < rx_frames(); ++i)
    rx_addrs[i] = std::uint64_t{i} * kChunkBytes;
  fill(rx_addrs);
  // Half the transmit pool is lent in pairs when frames may span two chunks (multi-buffer) and
  // the pool has room for at least two pairs.
  const std::uint32_t tx_frames = config_.umem_frames - rx_frames();
  const bool lend = multi_buffer_ && tx_frames >= 8;
  copy_frames_ = lend ? tx_frames / 2 : tx_frames;
  lend_base_ = std::uint64_t{rx_frames() + copy_frames_} * kChunkBytes;
  tx_free_.clear();
  for (std::uint32_t i = rx_frames(); i < rx_frames() + copy_frames_; ++i) {
    tx_free_.push_back(std::uint64_t{i} * kChunkBytes);
  }
  const std::uint32_t pairs = (tx_frames - copy_frames_) / 2;
  pairs_free_.clear();
  for (std::uint32_t i = pairs; i > 0; --i)
    pairs_free_.push_back(i - 1);
  pair_lent_.assign(pairs, 0);
  pair_in_kernel_.assign(pairs, 0);
  pairs_in_kernel_ = 0;
  reassembly_.assign(kReassemblyBuffers, std::vector<std::uint8_t>(max_frame_bytes_));
  reassembly_free_.clear();
  for (std::uint32_t i = 0; i < kReassemblyBuffers; ++i)
    reassembly_free_.push_back(i);
  return 0;
}

Result<int, PortError> AfXdpPort::try_bind(std::uint16_t bind_flags) {
  xsk_umem_config ucfg{};
  ucfg.fill_size = rx_frames();
  ucfg.comp_size = config_.umem_frames - rx_frames();
  ucfg.frame_size = kChunkBytes;
  ucfg.frame_headroom = 0;
  int rc = xsk_umem__create(&umem_, umem_area_, umem_bytes_, &fill_, &comp_, &ucfg);
  if (rc < 0) {
    umem_ = nullptr;
    return Err{PortError{"afxdp port: xsk_umem__create", -rc}};
  }
  xsk_socket_config scfg{};
  scfg.rx_size = rx_frames();
  scfg.tx_size = config_.umem_frames - rx_frames();
  // XdpSteering owns the program and the XSKMAP; libxdp must not load its default program.
  scfg.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
  scfg.bind_flags = bind_flags;
  rc =
      xsk_socket__create(&xsk_, config_.ifname.c_str(), config_.queue_id, umem_, &rx_, &tx_, &scfg);
  if (rc < 0) {
    xsk_ = nullptr;
    destroy_socket();
    return Err{PortError{"afxdp port: xsk_socket__create", -rc}};
  }
  return 0;
}

Result<int, PortError> AfXdpPort::enable_busy_poll() {
  const int fd = xsk_socket__fd(xsk_);
  const int prefer = 1;
  const int usecs = static_cast<int>(config_.busy_poll_us);
  const int budget = static_cast<int>(config_.umem_frames / 2);  // a whole receive ring
  if (setsockopt(fd, SOL_SOCKET, SO_PREFER_BUSY_POLL, &prefer, sizeof(prefer)) < 0 ||
      setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &usecs, sizeof(usecs)) < 0 ||
      setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL_BUDGET, &budget, sizeof(budget)) < 0) {
    return Err{PortError{"afxdp port: busy poll (SO_PREFER_BUSY_POLL, SO_BUSY_POLL)", errno}};
  }
  return 0;
}

void AfXdpPort::fill(std::span<const std::uint64_t> addrs) {
  if (addrs.empty()) return;
  std::uint32_t idx = 0;
  // The fill ring has a slot for every receive chunk, so this always succeeds.
  const std::uint32_t got =
      xsk_ring_prod__reserve(&fill_, static_cast<std::uint32_t>(addrs.size()), &idx);
  for (std::uint32_t i = 0; i < got; ++i)
    *xsk_ring_prod__fill_addr(&fill_, idx + i) = addrs[i];
  xsk_ring_prod__submit(&fill_, got);
}

int AfXdpPort::wait_fd() const {
  return xsk_socket__fd(xsk_);
}

bool AfXdpPort::join_in_place(std::uint32_t idx, RxFrame& out) {
  const xdp_desc* first = xsk_ring_cons__rx_desc(&rx_, idx);
  const xdp_desc* second = xsk_ring_cons__rx_desc(&rx_, idx + 1);
  const std::uint64_t next_chunk = chunk_base(first->addr) + kChunkBytes;
  if (first->addr + first->len != next_chunk || chunk_base(second->addr) != next_chunk) {
    return false;
  }
  std::memmove(umem_area_ + next_chunk, umem_area_ + second->addr, second->len);
  out = RxFrame{{umem_area_ + first->addr, std::size_t{first->len} + second->len},
                kJoinedHandle | chunk_base(first->addr)};
  ++stats_.rx_joined_in_place;
  return true;
}

bool AfXdpPort::take_multi_buffer(std::uint32_t idx, std::uint32_t descs, RxFrame& out) {
  std::size_t total = 0;
  bool fits = !reassembly_free_.empty();
  std::uint32_t slot = fits ? reassembly_free_.back() : 0;
  for (std::uint32_t i = 0; i < descs; ++i) {
    const xdp_desc* d = xsk_ring_cons__rx_desc(&rx_, idx + i);
    if (fits && total + d->len <= reassembly_[slot].size()) {
      std::memcpy(reassembly_[slot].data() + total, xsk_umem__get_data(umem_area_, d->addr),
                  d->len);
    } else {
      fits = false;
    }
    total += d->len;
    pending_fill_.push_back(chunk_base(d->addr));
  }
  if (!fits) return false;
  reassembly_free_.pop_back();
  out = RxFrame{{reassembly_[slot].data(), total}, kReassemblyHandle | slot};
  ++stats_.rx_reassembled;
  return true;
}

Result<std::size_t, PortError> AfXdpPort::receive(std::span<RxFrame> frames) {
  if (frames.empty()) return std::size_t{0};
  std::uint32_t idx = 0;
  const auto want = static_cast<std::uint32_t>(frames.size()) + kMaxDescsPerFrame;
  const std::uint32_t avail = xsk_ring_cons__peek(&rx_, want, &idx);
  if (avail == 0) {
    // The kernel sleeps on an empty fill ring until we wake it (need_wakeup); a busy-polling
    // socket's recvfrom runs the queue's NAPI here.
    if (config_.busy_poll_us > 0 || xsk_ring_prod__needs_wakeup(&fill_)) {
      recvfrom(xsk_socket__fd(xsk_), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
    }
    return std::size_t{0};
  }
  std::size_t n = 0;
  std::uint32_t used = 0;
  while (used < avail && n < frames.size()) {
    // A frame is its descriptors up to the first one without XDP_PKT_CONTD.
    std::uint32_t descs = 1;
    while (used + descs <= avail &&
           (xsk_ring_cons__rx_desc(&rx_, idx + used + descs - 1)->options & XDP_PKT_CONTD)) {
      ++descs;
    }
    if (used + descs > avail) break;  // the rest of this frame is not in the ring yet
    const xdp_desc* first = xsk_ring_cons__rx_desc(&rx_, idx + used);
    RxFrame& f = frames[n];
    bool ok = true;
    if (descs == 1) {
      f = RxFrame{{static_cast<const std::uint8_t*>(xsk_umem__get_data(umem_area_, first->addr)),
                   first->len},
                  chunk_base(first->addr)};
    } else if (descs == 2 && join_in_place(idx + used, f)) {
      ok = true;
    } else {
      ok = take_multi_buffer(idx + used, descs, f);
    }
    used += descs;
    if (!ok) {
      ++stats_.rx_drops;
      continue;
    }
    ++stats_.rx_packets;
    stats_.rx_bytes += f.bytes.size();
    ++n;
  }
  xsk_ring_cons__cancel(&rx_, avail - used);
  xsk_ring_cons__release(&rx_, used);
  fill(pending_fill_);
  pending_fill_.clear();
  return n;
}

void AfXdpPort::release(std::span<const RxFrame> frames) {
  for (const RxFrame& f : frames) {
    if (f.handle & kReassemblyHandle) {
      reassembly_free_.push_back(static_cast<std::uint32_t>(f.handle & ~kReassemblyHandle));
    } else if (f.handle & kJoinedHandle) {
      const std::uint64_t chunk = f.handle & ~kJoinedHandle;
      pending_fill_.push_back(chunk);
      pending_fill_.push_back(chunk + kChunkBytes);
    } else {
      pending_fill_.push_back(f.handle);
    }
  }
  fill(pending_fill_);
  pending_fill_.clear();
}

void AfXdpPort::reclaim_completions() {
  std::uint32_t idx = 0;
  const std::uint32_t done = xsk_ring_cons__peek(&comp_, config_.umem_frames, &idx);
  for (std::uint32_t i = 0; i < done; ++i) {
    const std::uint64_t addr = *xsk_ring_cons__comp_addr(&comp_, idx + i);
    if (addr < lend_base_) {
      tx_free_.push_back(addr);
      continue;
    }
    const auto pair = static_cast<std::uint32_t>((addr - lend_base_) / (2 * kChunkBytes));
    if (--pair_in_kernel_[pair] == 0) {
      --pairs_in_kernel_;
      pairs_free_.push_back(pair);
    }
  }
  xsk_ring_cons__release(&comp_, done);
}

std::int64_t AfXdpPort::pair_of(const std::uint8_t* p) const {
  if (pair_lent_.empty() || p < umem_area_ + lend_base_ || p >= umem_area_ + umem_bytes_) return -1;
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(p - (umem_area_ + lend_base_)) /
                                   (2 * kChunkBytes));
}

std::span<std::uint8_t> AfXdpPort::lend_tx(std::size_t bytes) {
  if (bytes > 2 * kChunkBytes) return {};
  if (pairs_free_.empty()) reclaim_completions();
  if (pairs_free_.empty()) return {};
  const std::uint32_t pair = pairs_free_.back();
  pairs_free_.pop_back();
  pair_lent_[pair] = 1;
  return {umem_area_ + lend_base_ + std::uint64_t{pair} * 2 * kChunkBytes, 2 * kChunkBytes};
}

void AfXdpPort::return_tx(std::span<const std::uint8_t> lent) {
  const std::int64_t pair = pair_of(lent.data());
  if (pair >= 0 && pair_lent_[static_cast<std::size_t>(pair)] != 0) {
    free_pair(static_cast<std::uint32_t>(pair));
  }
}

void AfXdpPort::free_pair(std::uint32_t pair) {
  pair_lent_[pair] = 0;
  pairs_free_.push_back(pair);
}

std::uint32_t AfXdpPort::post_lent(std::uint32_t pair, TxFrame frame) {
  const auto start = static_cast<std::uint64_t>(frame.data() - umem_area_);
  const std::uint64_t end = start + frame.size();
  const auto descs = static_cast<std::uint32_t>((end - 1) / kChunkBytes - start / kChunkBytes + 1);
  std::uint32_t idx = 0;
  if (xsk_ring_prod__reserve(&tx_, descs, &idx) != descs) return 0;
  std::uint64_t addr = start;
  for (std::uint32_t i = 0; i < descs; ++i) {
    const std::uint64_t stop = std::min(end, chunk_base(addr) + kChunkBytes);
    xdp_desc* d = xsk_ring_prod__tx_desc(&tx_, idx + i);
    d->addr = addr;
    d->len = static_cast<std::uint32_t>(stop - addr);
    d->options = i + 1 < descs ? XDP_PKT_CONTD : 0;
    addr = stop;
  }
  pair_lent_[pair] = 0;
  pair_in_kernel_[pair] = static_cast<std::uint8_t>(descs);
  ++pairs_in_kernel_;
  return descs;
}

// Copy mode keeps the transmit ring's need_wakeup flag set for good, so the flag alone would
// kick at every flush, a worker's every turn, its idle spinning turns too: a system call that
// runs the generic transmit path to find nothing (about 200,000 a second during ib_write_bw,
// bench/README.md "Kicks that found nothing"). What the kernel has taken (its consumer index at
// our producer's) needs no kick: it is being sent, and its completions come without one.
bool AfXdpPort::tx_ring_taken() const {
  return __atomic_load_n(tx_.consumer, __ATOMIC_ACQUIRE) == tx_.cached_prod;
}

void AfXdpPort::wake_tx() {
  if (!xsk_ring_prod__needs_wakeup(&tx_) || tx_ring_taken()) return;
  // Copy mode transmits at most a small batch per call and says EAGAIN while more wait.
  for (int i = 0; i < kMaxTxKicks; ++i) {
    ++stats_.tx_kicks;
    if (sendto(xsk_socket__fd(xsk_), nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0) break;
    if (errno != EAGAIN && errno != EBUSY) break;
    // Stop once the kernel has taken every descriptor (it may still be busy sending them).
    if (tx_ring_taken()) break;
  }
}

Result<std::size_t, PortError> AfXdpPort::transmit(std::span<const TxFrame> frames) {
  reclaim_completions();
  std::size_t taken = 0;
  std::uint32_t submitted = 0;
  for (; taken < frames.size(); ++taken) {
    const TxFrame& frame = frames[taken];
    const std::int64_t pair = pair_of(frame.data());
    if (pair >= 0) {
      // Built in a buffer this port lent: posted where it is. A frame that was not lent, or runs
      // past its pair, is refused (and a lent pair taken back).
      const auto p = static_cast<std::uint32_t>(pair);
      const std::uint8_t* pair_end =
          umem_area_ + lend_base_ + (std::uint64_t{p} + 1) * 2 * kChunkBytes;
      const bool lent = pair_lent_[p] != 0;
      if (!lent || frame.empty() || frame.size() > max_frame_bytes_ ||
          frame.data() + frame.size() > pair_end) {
        ++stats_.tx_rejected;
        if (lent) free_pair(p);
        continue;
      }
      const std::uint32_t descs = post_lent(p, frame);
      if (descs == 0) break;
      submitted += descs;
      ++stats_.tx_packets;
      stats_.tx_bytes += frame.size();
      continue;
    }
    if (frame.empty() || frame.size() > max_frame_bytes_) {
      ++stats_.tx_rejected;
      continue;
    }
    const auto descs = static_cast<std::uint32_t>((frame.size() + kChunkBytes - 1) / kChunkBytes);
    if (tx_free_.size() < descs) break;
    std::uint32_t idx = 0;
    if (xsk_ring_prod__reserve(&tx_, descs, &idx) != descs) break;
    for (std::uint32_t i = 0; i < descs; ++i) {
      const std::uint64_t addr = tx_free_.back();
      tx_free_.pop_back();
      const std::size_t off = std::size_t{i} * kChunkBytes;
      const auto len =
          static_cast<std::uint32_t>(std::min<std::size_t>(kChunkBytes, frame.size() - off));
      std::memcpy(xsk_umem__get_data(umem_area_, addr), frame.data() + off, len);
      xdp_desc* d = xsk_ring_prod__tx_desc(&tx_, idx + i);
      d->addr = addr;
      d->len = len;
      d->options = i + 1 < descs ? XDP_PKT_CONTD : 0;
    }
    submitted += descs;
    ++stats_.tx_packets;
    stats_.tx_bytes += frame.size();
  }
  if (submitted > 0) {
    xsk_ring_prod__submit(&tx_, submitted);
    wake_tx();
  }
  return taken;
}

Result<std::size_t, PortError> AfXdpPort::flush() {
  wake_tx();
  const std::size_t before = tx_free_.size();
  reclaim_completions();
  return tx_free_.size() - before;
}

PortStats AfXdpPort::stats() const {
  PortStats s = stats_;
  s.tx_pending = (copy_frames_ - tx_free_.size()) + pairs_in_kernel_;
  xdp_statistics xs{};
  socklen_t len = sizeof(xs);
  if (getsockopt(xsk_socket__fd(xsk_), SOL_XDP, XDP_STATISTICS, &xs, &len) == 0) {
    s.rx_drops += xs.rx_dropped + xs.rx_ring_full;
    s.tx_drops += xs.tx_invalid_descs;
  }
  return s;
}

std::size_t AfXdpPort::receive_frames(std::size_t frame_bytes) const {
  const std::size_t bytes = std::min(std::max<std::size_t>(frame_bytes, 1), max_frame_bytes_);
  const std::size_t chunks =
      multi_buffer_ ? (bytes + XDP_PACKET_HEADROOM + kChunkBytes - 1) / kChunkBytes : 1;
  return rx_frames() / std::max<std::size_t>(chunks, 1);
}

}  // namespace xroce::net
