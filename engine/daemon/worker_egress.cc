#include "daemon/worker_egress.h"

#include <algorithm>
#include <utility>

#include "daemon/worker.h"

namespace xroce::daemon {
namespace {

constexpr std::size_t kFrameBufBytes = 4096 + 256;  // the largest path MTU and headers

bool is_zero(const wire::MacAddr& mac) {
  return std::all_of(mac.begin(), mac.end(), [](std::uint8_t b) { return b == 0; });
}

}  // namespace

Egress::Egress(net::Port& port, WorkerCounters& counters,
               std::unique_ptr<WorkerNeighbours> neighbours)
    : port_(port),
      counters_(counters),
      neighbours_(std::move(neighbours)),
      batch_bufs_(kTxBatch, std::vector<std::uint8_t>(kFrameBufBytes)) {}

Egress::~Egress() {
  for (std::size_t i = 0; i < kTxBatch; ++i)
    if (lent_[i]) port_.return_tx(slots_[i]);
}

void Egress::send(std::uint64_t now_ns, const transport::Transmit& tx, QpBinding& binding) {
  const wire::FrameAddress* addr = binding.address_on_worker(tx.av_id);
  if (addr == nullptr) {
    counters_.no_address();
    return;
  }
  emit(now_ns, tx, *addr, handed_out_);
}

// The payload goes where the next batch slot's frame will have it, so a packet for the port is
// encoded around it (encode_to_port) instead of copied: one copy of each payload byte fewer.
wire::MutableBytes Egress::payload_buffer() {
  handed_out_ = next_slot().subspan(kPayloadOffset);
  return handed_out_;
}

void Egress::emit(std::uint64_t now_ns, const transport::Transmit& tx, const wire::FrameAddress& a,
                  wire::Bytes payload) {
  if (loopback_) {
    if (const LoopbackTarget* target = loopback_->find(a.dst_ip)) {
      loop_back(tx, a, payload, *target);
      return;
    }
  }
  if (neighbours_ == nullptr || !is_zero(a.dst_mac)) {
    encode_to_port(tx, a, payload);
    return;
  }
  wire::FrameAddress addr = a;
  switch (neighbours_->route(now_ns, addr)) {
    case WorkerNeighbours::Route::kSend:
      encode_to_port(tx, addr, payload);
      return;
    case WorkerNeighbours::Route::kWait:
      counters_.neighbour_failures(neighbours_->wait(now_ns, addr, tx, payload));
      return;
    case WorkerNeighbours::Route::kUnreachable:
      counters_.neighbour_failures(1);
      return;
  }
}

// Encodes the packet as for the wire and hands it to the worker that owns the destination QP.
void Egress::loop_back(const transport::Transmit& tx, const wire::FrameAddress& a,
                       wire::Bytes payload, const LoopbackTarget& target) {
  wire::FrameAddress addr = a;
  addr.dst_mac = target.mac;
  auto frame = std::make_unique<FrameCopy>();
  frame->bytes.resize(wire::frame_bytes(addr, tx.hdr, tx.payload_len));
  const auto len = encode_transmit(tx, addr, payload, frame->bytes);
  if (!len) {
    counters_.encode_failed();
    return;
  }
  frame->bytes.resize(*len);
  Worker& to = target.worker_for(tx.hdr.bth.dest_qp);
  if (!to.push_loopback(frame.get())) {
    counters_.loopback_dropped();
    return;
  }
  (void)frame.release();
  counters_.looped_back_out(*len);
  to.wake();
}

void Egress::encode_to_port(const transport::Transmit& tx, const wire::FrameAddress& addr,
                            wire::Bytes payload) {
  const wire::MutableBytes slot = next_slot();
  wire::MutableBytes out = slot;
  // In place: the payload is already in this slot (payload_buffer), the headers go before it.
  if (tx.payload_len != 0 && payload.data() == slot.data() + kPayloadOffset) {
    const std::size_t headers = wire::frame_bytes(addr, tx.hdr, 0) - wire::kIcrcBytes;
    if (headers <= kPayloadOffset) out = out.subspan(kPayloadOffset - headers);
  }
  const auto len = encode_transmit(tx, addr, payload, out);
  if (!len) {
    counters_.encode_failed();
    return;
  }
  batch_[batch_count_++] = net::TxFrame(out.data(), *len);
}

// The next batch slot to encode a frame into (sends the batch first when it is full).
wire::MutableBytes Egress::next_slot() {
  if (batch_count_ == kTxBatch) transmit_batch();
  const std::size_t i = batch_count_;
  if (slots_[i].empty()) {
    const std::span<std::uint8_t> lent = port_.lend_tx(kFrameBufBytes);
    lent_[i] = !lent.empty();
    slots_[i] = lent_[i] ? lent.first(kFrameBufBytes) : wire::MutableBytes(batch_bufs_[i]);
  }
  return slots_[i];
}

// What the port refuses goes to the backlog, behind anything already there, so frames leave in
// order.
void Egress::transmit_batch() {
  if (batch_count_ == 0) return;
  std::size_t sent = 0;
  if (backlog_.empty()) {
    const auto r = port_.transmit(std::span<const net::TxFrame>(batch_.data(), batch_count_));
    sent = r ? *r : 0;
    for (std::size_t i = 0; i < sent; ++i)
      counters_.sent(batch_[i].size());
  }
  for (std::size_t i = sent; i < batch_count_; ++i) {
    if (backlog_.size() >= kMaxTxBacklog) {
      counters_.backlog_dropped();
    } else {
      backlog_.emplace_back(batch_[i].begin(), batch_[i].end());
    }
    if (lent_[i]) port_.return_tx(slots_[i]);
  }
  // A lent slot the port took is the port's now; the worker's own slots ask to borrow again.
  for (std::size_t i = 0; i < batch_count_; ++i) {
    slots_[i] = {};
    lent_[i] = false;
  }
  batch_count_ = 0;
}

bool Egress::flush() {
  bool any = false;
  while (!backlog_.empty()) {
    const net::TxFrame one(backlog_.front());
    const auto sent = port_.transmit(std::span<const net::TxFrame>(&one, 1));
    if (!sent || *sent == 0) break;
    counters_.sent(backlog_.front().size());
    backlog_.pop_front();
    any = true;
  }
  (void)port_.flush();
  return any;
}

bool Egress::service_neighbours(std::uint64_t now_ns) {
  if (neighbours_ == nullptr) return false;
  bool sent = false;
  const auto progress = neighbours_->service(now_ns, std::exchange(resolver_readable_, false),
                                             [&](WorkerNeighbours::Waiting& w) {
                                               encode_to_port(w.tx, w.addr, w.payload);
                                               sent = true;
                                             });
  transmit_batch();
  counters_.neighbour_failures(progress.failed);
  counters_.neighbour_changes(progress.mac_changes);
  return sent;
}

std::optional<std::uint64_t> Egress::neighbour_deadline(std::uint64_t now_ns) const {
  if (neighbours_ == nullptr) return std::nullopt;
  const auto d = neighbours_->next_deadline();
  if (!d) return std::nullopt;
  return std::max(*d, now_ns);
}

}  // namespace xroce::daemon
