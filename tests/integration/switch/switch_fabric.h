// Three network namespaces for the switch tests: end a, the middle m running xroce-switch, end
// b; veth xsa (a) <-> xsma (m) and xsb (b) <-> xsmb (m). IPv6 is off in all three so that no
// neighbour discovery or MLD frame mixes with what a test counts. Raw frames go in and out
// through AF_PACKET sockets opened inside the end namespaces. Everything is removed by name
// (namespaces) or pid (the switch) when the fabric goes away, also when the test fails.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fabric.h"

namespace xroce::swtest {

inline constexpr const char* kPortA = "xsma";  // the switch's port towards a
inline constexpr const char* kPortB = "xsmb";  // and towards b

// An AF_PACKET socket bound to one interface inside a namespace; ignores its own frames.
class RawSocket {
 public:
  RawSocket(const std::string& netns, const std::string& ifname);
  ~RawSocket();
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;
  bool ok() const { return fd_ >= 0; }
  bool send(std::span<const std::uint8_t> frame);
  // The next frame, or nullopt after `deadline` without one.
  std::optional<std::vector<std::uint8_t>> receive(std::chrono::milliseconds deadline);
  // When the kernel took in the frame receive() returned last (CLOCK_REALTIME): the moment
  // the switch sent it, however late this process got to read it.
  std::chrono::nanoseconds last_arrival() const;

 private:
  int fd_ = -1;
};

class SwitchFabric {
 public:
  explicit SwitchFabric(const std::string& prefix);
  ~SwitchFabric();
  SwitchFabric(const SwitchFabric&) = delete;
  SwitchFabric& operator=(const SwitchFabric&) = delete;

  bool ok() const { return ok_; }
  const std::string& ns_a() const { return ns_[0]; }
  const std::string& ns_b() const { return ns_[2]; }

  // Starts xroce-switch on both ports with these extra arguments; true once it said "ready".
  bool start_switch(const std::vector<std::string>& args);
  // SIGUSR1, then the statistics it wrote (nullopt when none came within the deadline).
  std::optional<nlohmann::json> stats_now();
  // SIGTERM, then the final statistics; the exit status in *status.
  std::optional<nlohmann::json> stop_switch(int* status);
  // Where frames a test missed may have gone: the switch's statistics and the kernel's counters
  // (drops included) of the four veth ends, for a failure message.
  std::string describe_counters();
  // One port's object from a statistics document.
  static nlohmann::json port(const nlohmann::json& stats, const std::string& name);

 private:
  std::optional<nlohmann::json> read_stats() const;
  bool ok_ = false;
  std::string ns_[3];
  std::string stats_path_;
  std::unique_ptr<e2e::Child> switch_;
  std::uint64_t last_sequence_ = 0;
};

std::string switch_bin();

}  // namespace xroce::swtest
