// Reading a netdev's state and addresses in the daemon's network namespace, and watching for
// changes (rtnetlink).
#pragma once

#include <string>
#include <vector>

#include "device/gid_table.h"
#include "device/port.h"
#include "wire/result.h"

namespace xroce::daemon {

// The netdev's state (up, carrier), MTU, MAC and speed; ENODEV if there is no such netdev.
wire::Result<device::NetdevState, int> read_netdev(const std::string& name);
// Every IPv4 and IPv6 address on the netdev, in the order the kernel lists them.
std::vector<device::IpAddress> read_addresses(const std::string& name);

// An rtnetlink socket subscribed to link and address changes. The owner polls fd() and calls
// drain() when readable; drain() says whether anything arrived (the daemon then re-reads every
// served netdev, which keeps the logic in one place).
class NetlinkWatcher {
 public:
  NetlinkWatcher();
  ~NetlinkWatcher();
  NetlinkWatcher(const NetlinkWatcher&) = delete;
  NetlinkWatcher& operator=(const NetlinkWatcher&) = delete;

  int fd() const { return fd_; }
  bool drain();

 private:
  int fd_ = -1;
};

}  // namespace xroce::daemon
