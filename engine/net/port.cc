#include "net/port.h"

#include <cstring>

namespace xroce::net {

std::string PortError::message() const {
  if (errno_value == 0) return what;
  return what + ": " + std::strerror(errno_value);
}

const char* to_string(PortMode m) {
  switch (m) {
    case PortMode::kAfXdpZeroCopy:
      return "afxdp-zerocopy";
    case PortMode::kAfXdpCopy:
      return "afxdp-copy";
    case PortMode::kAfXdpSkb:
      return "afxdp-skb";
    case PortMode::kUdpSocket:
      return "udp-socket";
  }
  return "?";
}

}  // namespace xroce::net
