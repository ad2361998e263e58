#include "switch.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "frame_edit.h"

namespace xroce::sw {

namespace {

// Frames taken from one port's ring before the others get a turn.
constexpr std::size_t kReceiveBatch = 64;
// The longest the loop sleeps with nothing to do (it wakes on frames and signals anyway).
constexpr std::uint64_t kIdleWaitNs = 500'000'000;

std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000 +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t mac_at(std::span<const std::uint8_t> frame, std::size_t at) {
  std::uint64_t mac = 0;
  for (std::size_t i = 0; i < 6; ++i)
    mac = mac << 8 | frame[at + i];
  return mac;
}

constexpr std::uint8_t kVnetNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
constexpr std::uint8_t kVnetGsoNone = 0;    // VIRTIO_NET_HDR_GSO_NONE

void add_to_u16(std::vector<std::uint8_t>& b, std::size_t at, std::uint16_t delta) {
  std::uint16_t v = 0;  // the header is in host (little-endian) order for packet sockets
  std::memcpy(&v, b.data() + at, 2);
  v = static_cast<std::uint16_t>(v + delta);
  std::memcpy(b.data() + at, &v, 2);
}

// What the egress socket sends: the virtio-net header, then the frame, with a tag the receive
// path stripped into metadata put back (and the header's offsets moved past it).
std::vector<std::uint8_t> rebuild(const ReceivedFrame& f) {
  std::vector<std::uint8_t> out;
  out.reserve(kVnetHeaderBytes + f.data.size() + 4);
  out.insert(out.end(), f.vnet_header.begin(), f.vnet_header.end());
  if (!f.vlan_tci) {
    out.insert(out.end(), f.data.begin(), f.data.end());
    return out;
  }
  out.insert(out.end(), f.data.begin(), f.data.begin() + 12);
  out.push_back(static_cast<std::uint8_t>(f.vlan_tpid >> 8));
  out.push_back(static_cast<std::uint8_t>(f.vlan_tpid));
  out.push_back(static_cast<std::uint8_t>(*f.vlan_tci >> 8));
  out.push_back(static_cast<std::uint8_t>(*f.vlan_tci));
  out.insert(out.end(), f.data.begin() + 12, f.data.end());
  if ((out[0] & kVnetNeedsCsum) != 0) add_to_u16(out, 6, 4);  // csum_start
  if (out[1] != kVnetGsoNone) add_to_u16(out, 2, 4);          // hdr_len
  return out;
}

}  // namespace

Switch::Switch(const SwitchConfig& config) : config_(config), loss_rng_(config.seed) {
  for (std::size_t i = 0; i < config.ports.size(); ++i) {
    Port port;
    port.socket = std::make_unique<PacketSocket>(config.ports[i]);
    if (!port.socket->ok()) {
      error_ = config.ports[i] + ": " + port.socket->error();
      return;
    }
    EgressConfig egress = config.egress;
    egress.seed = config.seed * 1'000'003 + i + 1;  // a stream per port, apart from loss's
    port.queue = std::make_unique<EgressQueue>(egress);
    ports_.push_back(std::move(port));
  }
}

bool Switch::impaired(std::size_t ingress, bool roce, std::uint8_t opcode) {
  const ImpairConfig& imp = config_.impair;
  if (!roce || (imp.drop_nth == 0 && imp.loss <= 0)) return false;
  if (imp.match_opcode && *imp.match_opcode != opcode) return false;
  if (imp.from_port && *imp.from_port != config_.ports[ingress]) return false;
  ++impair_matches_;
  if (imp.drop_nth != 0 && impair_matches_ == imp.drop_nth) return true;
  return imp.loss > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(loss_rng_) < imp.loss;
}

void Switch::enqueue(std::size_t egress, const std::vector<std::uint8_t>& buffer,
                     const FrameInfo& info) {
  EgressQueue& q = *ports_[egress].queue;
  const std::size_t wire_bytes = buffer.size() - kVnetHeaderBytes;
  switch (q.admit(wire_bytes, is_ect(info.ecn))) {
    case EgressQueue::Admission::kDroppedFull:
      return;
    case EgressQueue::Admission::kQueued:
      q.push(buffer, wire_bytes, false);
      return;
    case EgressQueue::Admission::kQueuedMarkCe: {
      std::vector<std::uint8_t> copy = buffer;  // a flooded frame is marked per port
      const bool marked = mark_ce(std::span(copy).subspan(kVnetHeaderBytes), info);
      q.push(std::move(copy), wire_bytes, marked);
      return;
    }
  }
}

// A UDP segmentation-offload superframe (a socket's UDP_SEGMENT send handed over whole by a
// veth) is split into the frames a NIC would have sent, and each is switched on its own:
// impairment, marking and the counters see the wire's packets, not the sender's sends.
void Switch::handle_frame(std::size_t ingress, const ReceivedFrame& f) {
  Port& in = ports_[ingress];
  if (f.truncated) {
    ++in.counters.rx;
    in.counters.rx_bytes += f.data.size();
    ++in.counters.rx_truncated;
    return;
  }
  std::vector<std::uint8_t> buffer = rebuild(f);
  if (const std::uint16_t segment =
          wire::vnet_udp_segment_bytes(std::span(buffer).first(kVnetHeaderBytes))) {
    const auto frames = split_udp_superframe(std::span(buffer).subspan(kVnetHeaderBytes), segment);
    if (!frames.empty()) {
      for (const auto& frame : frames) {
        std::vector<std::uint8_t> one(kVnetHeaderBytes, 0);  // no offload left to do
        one.insert(one.end(), frame.begin(), frame.end());
        switch_frame(ingress, std::move(one));
      }
      return;
    }
  }
  switch_frame(ingress, std::move(buffer));
}

void Switch::switch_frame(std::size_t ingress, std::vector<std::uint8_t> buffer) {
  Port& in = ports_[ingress];
  ++in.counters.rx;
  in.counters.rx_bytes += buffer.size() - kVnetHeaderBytes;
  const auto frame = std::span(buffer).subspan(kVnetHeaderBytes);
  auto info = classify(frame);
  if (!info) return;
  if (impaired(ingress, info->roce, info->bth_opcode)) {
    ++in.counters.dropped_impair;
    return;
  }
  if (config_.bleach_ecn && bleach_ecn(frame, *info)) {
    info->ecn = Ecn::kNotEct;
    ++in.counters.bleached;
  }
  const std::uint64_t dst = mac_at(frame, 0);
  const std::uint64_t src = mac_at(frame, 6);
  constexpr std::uint64_t kGroupBit = std::uint64_t{1} << 40;  // I/G bit of the first byte
  if ((src & kGroupBit) == 0) mac_table_[src] = ingress;
  const auto known = (dst & kGroupBit) == 0 ? mac_table_.find(dst) : mac_table_.end();
  if (known != mac_table_.end()) {
    if (known->second != ingress) enqueue(known->second, buffer, *info);
  } else {
    for (std::size_t p = 0; p < ports_.size(); ++p)
      if (p != ingress) enqueue(p, buffer, *info);
  }
}

std::size_t Switch::receive_batch(std::size_t port) {
  PacketSocket& s = *ports_[port].socket;
  std::size_t n = 0;
  for (; n < kReceiveBatch; ++n) {
    const auto f = s.peek();
    if (!f) break;
    handle_frame(port, *f);
    s.release();
  }
  return n;
}

void Switch::transmit_ready(std::size_t port, std::uint64_t now_ns) {
  Port& p = ports_[port];
  while (const auto* frame = p.queue->head_if_ready(now_ns)) {
    const auto r = p.socket->send(*frame);
    if (r == PacketSocket::SendResult::kBlocked) {
      p.blocked = true;
      return;
    }
    p.blocked = false;
    if (r == PacketSocket::SendResult::kFailed) ++p.counters.tx_errors;
    p.queue->pop(now_ns, r == PacketSocket::SendResult::kSent);
  }
}

std::optional<std::uint64_t> Switch::next_deadline_ns() const {
  std::optional<std::uint64_t> next;
  for (const Port& p : ports_) {
    if (p.blocked) continue;  // waits for POLLOUT instead
    const auto ready = p.queue->head_ready_ns();
    if (ready && (!next || *ready < *next)) next = ready;
  }
  return next;
}

int Switch::run(int signal_fd) {
  std::vector<pollfd> fds(ports_.size() + 1);
  for (;;) {
    bool more = false;
    for (std::size_t p = 0; p < ports_.size(); ++p)
      more |= receive_batch(p) == kReceiveBatch;
    const std::uint64_t now = now_ns();
    for (std::size_t p = 0; p < ports_.size(); ++p)
      transmit_ready(p, now);
    std::uint64_t wait_ns = kIdleWaitNs;
    if (more) {
      wait_ns = 0;
    } else if (const auto next = next_deadline_ns()) {
      const std::uint64_t after = now_ns();
      wait_ns = *next > after ? *next - after : 0;
    }
    for (std::size_t p = 0; p < ports_.size(); ++p) {
      fds[p] = {ports_[p].socket->fd(),
                static_cast<short>(POLLIN | (ports_[p].blocked ? POLLOUT : 0)), 0};
    }
    fds.back() = {signal_fd, POLLIN, 0};
    const timespec timeout{static_cast<time_t>(wait_ns / 1'000'000'000),
                           static_cast<long>(wait_ns % 1'000'000'000)};
    if (ppoll(fds.data(), fds.size(), &timeout, nullptr) < 0 && errno != EINTR) {
      std::perror("xroce-switch: ppoll");
      return 1;
    }
    if ((fds.back().revents & POLLIN) == 0) continue;
    signalfd_siginfo si{};
    if (read(signal_fd, &si, sizeof(si)) != sizeof(si)) continue;
    if (si.ssi_signo == SIGUSR1) {
      write_stats();
      continue;
    }
    return write_stats() ? 0 : 1;
  }
}

bool Switch::write_stats() {
  if (config_.stats_path.empty()) return true;
  nlohmann::json ports = nlohmann::json::array();
  for (std::size_t i = 0; i < ports_.size(); ++i) {
    Port& p = ports_[i];
    const EgressCounters& e = p.queue->counters();
    ports.push_back({{"name", config_.ports[i]},
                     {"rx", p.counters.rx},
                     {"rx_bytes", p.counters.rx_bytes},
                     {"tx", e.tx},
                     {"tx_bytes", e.tx_bytes},
                     {"marked", e.marked},
                     {"dropped_full", e.dropped_full},
                     {"dropped_impair", p.counters.dropped_impair},
                     {"rx_truncated", p.counters.rx_truncated},
                     {"bleached", p.counters.bleached},
                     {"rx_ring_drops", p.socket->ring_drops()},
                     {"tx_errors", p.counters.tx_errors},
                     {"queue_bytes", p.queue->depth_bytes()},
                     {"queue_max_bytes", e.queue_max_bytes},
                     {"queue_p99_bytes", p.queue->depth_p99_bytes()}});
  }
  const nlohmann::json doc = {{"sequence", ++stats_writes_}, {"ports", ports}};
  // Written aside and renamed, so a reader never sees half a file.
  const std::string tmp = config_.stats_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << doc.dump(2) << '\n';
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), config_.stats_path.c_str()) == 0;
}

}  // namespace xroce::sw
