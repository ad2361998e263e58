// Ports opened inside a test namespace, and the helpers the packet I/O tests share: frame
// construction, sending everything with a deadline, receiving N frames with a deadline.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "net/afxdp_port.h"
#include "net/udp_port.h"
#include "net/xdp_steering.h"
#include "netns.h"

namespace xroce::testing {

// A thread that joins a namespace and runs the calls given to it there, one at a time.
class NsThread {
 public:
  explicit NsThread(const std::string& ns);
  ~NsThread();
  void call(const std::function<void()>& fn);  // runs fn there and waits; rethrows

 private:
  void loop(const std::string& ns);
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void()>* job_ = nullptr;
  std::exception_ptr error_;
  bool done_ = false;
  bool stop_ = false;
  bool joined_ns_ = false;
  std::thread thread_;
};

// kAfXdp: the default mode order (native XDP first); kAfXdpSkb: generic (SKB) XDP only.
// kUdpNoGro: a UDP port without receive offload (one datagram per frame).
enum class PortKind { kAfXdp, kUdp, kAfXdpSkb, kUdpNoGro };
const char* to_string(PortKind k);

// A port living in one namespace and owned by one thread that stays there (the ports'
// threading contract): open, every use through run(), and close (which detaches the XDP
// program, addressed by interface index in that namespace) all happen on that thread.
class NsPort {
 public:
  // `peer` gives the UDP port the MAC it writes as the source of received frames.
  NsPort(const Host& host, const Host& peer, PortKind kind,
         net::XdpAttachMode mode = net::XdpAttachMode::kAuto);
  ~NsPort();
  // Runs fn(port) on the owning thread and returns its result.
  template <typename F>
  auto run(F fn) {
    using R = decltype(fn(*port_));
    if constexpr (std::is_void_v<R>) {
      worker_.call([&] { fn(*port_); });
    } else {
      std::optional<R> out;
      worker_.call([&] { out.emplace(fn(*port_)); });
      return std::move(*out);
    }
  }
  net::Port& port() { return *port_; }  // for reading stats and mode from any thread
  net::XdpSteering* steering() { return steering_.get(); }
  bool ok() const { return port_ != nullptr; }
  const std::string& error() const { return error_; }

 private:
  NsThread worker_;
  std::shared_ptr<net::XdpSteering> steering_;
  std::unique_ptr<net::Port> port_;
  std::string error_;
};

// A RoCEv2-shaped frame from `from` to `to` of exactly frame_bytes bytes, with the header
// values RoCEv2 sends and a UDP port reproduces (IPv4 ID 0 with DF, UDP checksum 0, IPv6 flow
// label 0), and a random UDP payload.
std::vector<std::uint8_t> make_frame(const Host& from, const Host& to, bool ipv6,
                                     std::size_t frame_bytes, std::uint16_t src_port,
                                     std::uint8_t traffic_class, std::mt19937& rng);

bool send_all(net::Port& port, const std::vector<std::vector<std::uint8_t>>& frames,
              std::chrono::milliseconds deadline);
std::vector<std::vector<std::uint8_t>> receive_n(net::Port& port, std::size_t n,
                                                 std::chrono::milliseconds deadline);

}  // namespace xroce::testing
