#include "daemon/worker_ingress.h"

#include "cm/mad.h"
#include "daemon/worker.h"

namespace xroce::daemon {

Ingress::Ingress(std::uint32_t index, const QpRoutes& routes, HostedQps& qps, WorkList& work,
                 TimersAndPacing& pacing, WorkerCounters& counters)
    : index_(index),
      routes_(routes),
      qps_(qps),
      work_(work),
      pacing_(pacing),
      counters_(counters) {}

Ingress::~Ingress() {
  for (auto& ring : inbox_) {
    FrameCopy* f = nullptr;
    while (ring->pop(f))
      delete f;
  }
  FrameCopy* f = nullptr;
  while (loopback_inbox_.pop(f))
    delete f;
}

void Ingress::connect(std::span<Worker* const> workers) {
  peers_.assign(workers.begin(), workers.end());
  inbox_.clear();
  for (std::size_t i = 0; i < peers_.size(); ++i)
    inbox_.push_back(std::make_unique<HandoverRing>());
}

bool Ingress::receive_waiting(std::uint64_t now_ns, net::Port& port, std::size_t max_batches) {
  bool any = false;
  for (std::size_t b = 0; b < max_batches; ++b) {
    const std::size_t got = receive_batch(now_ns, port);
    any |= got > 0;
    if (got < kRxBatch) break;
  }
  return any;
}

std::size_t Ingress::receive_batch(std::uint64_t now_ns, net::Port& port) {
  std::array<net::RxFrame, kRxBatch> frames;
  const auto got = port.receive(frames);
  if (!got || *got == 0) return 0;
  for (std::size_t i = 0; i < *got; ++i)
    take(now_ns, frames[i].bytes, frames[i].icrc_verified);
  port.release(std::span<const net::RxFrame>(frames.data(), *got));
  return *got;
}

bool Ingress::drain_handovers(std::uint64_t now_ns) {
  bool any = false;
  for (auto& ring : inbox_) {
    FrameCopy* h = nullptr;
    while (ring->pop(h)) {
      std::unique_ptr<FrameCopy> owned(h);
      if (classify(h->bytes, decoded_) == FrameClass::kPacket) deliver(now_ns, h->bytes, decoded_);
      any = true;
    }
  }
  return any;
}

bool Ingress::drain_loopback(std::uint64_t now_ns) {
  bool any = false;
  FrameCopy* f = nullptr;
  while (loopback_inbox_.pop(f)) {
    std::unique_ptr<FrameCopy> owned(f);
    counters_.looped_back_in();
    take(now_ns, owned->bytes);
    any = true;
  }
  return any;
}

bool Ingress::frames_waiting() {
  if (!loopback_inbox_.empty()) return true;
  for (const auto& ring : inbox_)
    if (!ring->empty()) return true;
  return false;
}

// The door: count and drop what is not a good RoCEv2 packet, then route by the destination QP
// to its owner.
void Ingress::take(std::uint64_t now_ns, wire::Bytes frame, bool icrc_verified) {
  counters_.frame_in();
  switch (classify(frame, decoded_, icrc_verified)) {
    case FrameClass::kMalformed:
      counters_.malformed();
      return;
    case FrameClass::kBadIcrc:
      counters_.bad_icrc();
      return;
    case FrameClass::kPacket:
      break;
  }
  if (impairer_.drop()) {
    counters_.impair_dropped();
    return;
  }
  const std::uint32_t owner = routes_.owner(decoded_.hdr.bth.dest_qp);
  if (owner == index_ || owner >= peers_.size()) {  // ours, or nobody's: counted as no QP
    deliver(now_ns, frame, decoded_);
    return;
  }
  hand_over(owner, frame);
}

void Ingress::hand_over(std::uint32_t owner, wire::Bytes frame) {
  auto* h = new FrameCopy{std::vector<std::uint8_t>(frame.begin(), frame.end())};
  if (!peers_[owner]->push_handover(index_, h)) {
    delete h;
    counters_.handover_dropped();
    return;
  }
  counters_.handed_over(decoded_.hdr.info());
  peers_[owner]->wake();
}

void Ingress::sample_port_drops(std::uint64_t now_ns, const net::Port& port) {
  if (now_ns - port_drops_sampled_ns_ < kPortDropsSampleNs) return;
  port_drops_sampled_ns_ = now_ns;
  const std::uint64_t drops = port.stats().rx_drops;
  if (drops > port_drops_counted_) {
    counters_.port_drops(drops - port_drops_counted_);
    port_drops_counted_ = drops;
  }
}

void Ingress::deliver(std::uint64_t now_ns, wire::Bytes frame, const wire::DecodedFrame& f) {
  if (gsi_sink_ && f.hdr.bth.dest_qp.value() == cm::kGsiQpn) {
    counters_.delivered(frame.size());
    gsi_sink_(frame);
    return;
  }
  const auto it = qps_.find(f.hdr.bth.dest_qp.value());
  if (it == qps_.end()) {
    counters_.no_qp();
    return;  // a CNP for a QP that does not exist is ignored too (docs/protocol.md §5.2)
  }
  Hosted& hosted = it->second;
  if (!hosted.binding->accepts_from_on_worker(f.addr)) {
    counters_.peer_mismatch();
    return;
  }
  counters_.delivered(frame.size());
  pacing_.attach(hosted);
  const transport::RxMeta meta = rx_meta_of(frame, f);
  pacing_.on_packet(now_ns, hosted, meta, f.hdr.info().operation, counters_);
  hosted.qp->handle_packet(now_ns, f.hdr, f.payload, meta);
  work_.mark(hosted);
}

}  // namespace xroce::daemon
