// Throwaway test hosts: two network namespaces joined by a veth pair (MTU 9000), with
// addresses from 198.18.0.0/15 and 2001:2::/48. Names carry the test's pid and a counter so
// that tests running in parallel never meet. Everything is removed in the destructor, also
// when the test fails.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "net/udp_frame.h"

namespace xroce::testing {

struct Host {
  std::string ns;      // namespace name
  std::string ifname;  // its end of the veth pair
  net::Mac mac{};
  net::Ip16 ipv4{};  // mapped form
  net::Ip16 ipv6{};
  std::string ipv4_text;
  std::string ipv6_text;
};

class VethPair {
 public:
  // `queues`: receive and transmit queues on each end (veth maps A's tx queue i to B's rx
  // queue i, which lets a test choose the queue a frame arrives on).
  explicit VethPair(const std::string& tag, int queues = 1);
  ~VethPair();
  VethPair(const VethPair&) = delete;
  VethPair& operator=(const VethPair&) = delete;

  const Host& a() const { return a_; }
  const Host& b() const { return b_; }

 private:
  void create();
  void destroy();
  int queues_ = 1;
  Host a_;
  Host b_;
};

// Runs fn on a new thread that has joined namespace `ns`, and waits for it. Sockets created
// there stay in that namespace when used from other threads afterwards.
void run_in_netns(const std::string& ns, const std::function<void()>& fn);

// Moves the calling thread into namespace `ns` for good (for forked children).
bool enter_netns(const std::string& ns);

// Runs a shell command; returns its exit status and appends its stdout to *out when given.
int shell(const std::string& command, std::string* out = nullptr);

bool running_as_root();

}  // namespace xroce::testing
