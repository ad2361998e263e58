#include "port_harness.h"

#include <poll.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>

namespace xroce::testing {

const char* to_string(PortKind k) {
  switch (k) {
    case PortKind::kAfXdp:
      return "afxdp";
    case PortKind::kAfXdpSkb:
      return "afxdpskb";
    case PortKind::kUdp:
      return "udp";
    case PortKind::kUdpNoGro:
      return "udpnogro";
  }
  return "?";
}

NsThread::NsThread(const std::string& ns) {
  thread_ = std::thread([this, ns] { loop(ns); });
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  done_ = false;
  if (!joined_ns_) throw std::runtime_error("cannot join namespace " + ns);
}

NsThread::~NsThread() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void NsThread::loop(const std::string& ns) {
  std::unique_lock lock(mu_);
  joined_ns_ = enter_netns(ns);
  done_ = true;
  cv_.notify_all();
  if (!joined_ns_) return;
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || job_ != nullptr; });
    if (job_ == nullptr) return;
    try {
      (*job_)();
    } catch (...) {
      error_ = std::current_exception();
    }
    job_ = nullptr;
    done_ = true;
    cv_.notify_all();
  }
}

void NsThread::call(const std::function<void()>& fn) {
  std::unique_lock lock(mu_);
  job_ = &fn;
  done_ = false;
  cv_.notify_all();
  cv_.wait(lock, [&] { return done_; });
  done_ = false;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

NsPort::NsPort(const Host& host, const Host& peer, PortKind kind, net::XdpAttachMode mode)
    : worker_(host.ns) {
  worker_.call([&] {
    if (kind == PortKind::kUdp || kind == PortKind::kUdpNoGro) {
      net::UdpPortConfig cfg;
      cfg.local_mac = host.mac;
      cfg.peer_mac = peer.mac;
      cfg.gro = kind == PortKind::kUdp;
      auto p = net::UdpPort::open(cfg);
      if (!p) {
        error_ = p.error().message();
        return;
      }
      port_ = std::move(*p);
      return;
    }
    auto s = net::XdpSteering::attach(
        host.ifname, kind == PortKind::kAfXdpSkb ? net::XdpAttachMode::kSkb : mode);
    if (!s) {
      error_ = s.error().message();
      return;
    }
    steering_ = *s;
    for (const net::Ip16& ip : {host.ipv4, host.ipv6}) {
      if (auto r = steering_->add_local_ip(ip); !r) {
        error_ = r.error().message();
        return;
      }
    }
    net::AfXdpPortConfig cfg;
    cfg.ifname = host.ifname;
    auto p = net::AfXdpPort::open(cfg, steering_);
    if (!p) {
      error_ = p.error().message();
      return;
    }
    port_ = std::move(*p);
  });
}

NsPort::~NsPort() {
  worker_.call([&] {
    port_.reset();
    steering_.reset();
  });
}

std::vector<std::uint8_t> make_frame(const Host& from, const Host& to, bool ipv6,
                                     std::size_t frame_bytes, std::uint16_t src_port,
                                     std::uint8_t traffic_class, std::mt19937& rng) {
  net::UdpEnvelope env;
  env.dst_mac = to.mac;
  env.src_mac = from.mac;
  env.src_ip = ipv6 ? from.ipv6 : from.ipv4;
  env.dst_ip = ipv6 ? to.ipv6 : to.ipv4;
  env.traffic_class = traffic_class;
  env.hop_limit = 64;
  env.src_port = src_port;
  const std::size_t header = net::envelope_bytes(env);
  std::vector<std::uint8_t> f(std::max(frame_bytes, header));
  for (std::size_t i = header; i < f.size(); ++i)
    f[i] = static_cast<std::uint8_t>(rng());
  net::write_envelope(env, f.size() - header, f.data() + header);
  return f;
}

bool send_all(net::Port& port, const std::vector<std::vector<std::uint8_t>>& frames,
              std::chrono::milliseconds deadline) {
  std::vector<net::TxFrame> views(frames.begin(), frames.end());
  std::span<const net::TxFrame> rest(views);
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (!rest.empty()) {
    auto taken = port.transmit(rest);
    if (!taken) return false;
    rest = rest.subspan(*taken);
    if (!port.flush()) return false;
    if (std::chrono::steady_clock::now() > until) return false;
    if (!rest.empty()) std::this_thread::yield();  // the ring drains as the kernel sends
  }
  // Let the kernel finish every queued frame before the caller inspects the other side.
  while (std::chrono::steady_clock::now() < until) {
    if (!port.flush()) return false;
    if (port.stats().tx_pending == 0) return true;
    std::this_thread::yield();
  }
  return false;
}

std::vector<std::vector<std::uint8_t>> receive_n(net::Port& port, std::size_t n,
                                                 std::chrono::milliseconds deadline) {
  std::vector<std::vector<std::uint8_t>> got;
  std::vector<net::RxFrame> batch(64);
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (got.size() < n && std::chrono::steady_clock::now() < until) {
    auto r = port.receive(batch);
    if (!r) break;
    for (std::size_t i = 0; i < *r; ++i)
      got.emplace_back(batch[i].bytes.begin(), batch[i].bytes.end());
    port.release(std::span(batch).first(*r));
    if (*r == 0) {
      pollfd p{port.wait_fd(), POLLIN, 0};
      poll(&p, 1, 10);
    }
  }
  return got;
}

}  // namespace xroce::testing
