// The UDP probes of `xroce validate` (the validating host) and `xroce validate --serve` (the
// peer): datagrams sent with DF set, of a chosen IP packet size and IPv4 TOS / IPv6 traffic
// class; the peer reports the size and TOS it received and answers with a reply of the size
// and TOS asked for, also with DF. So one exchange tells whether a packet of that size crosses
// the path each way unfragmented, and whether the ECN (and DSCP) bits arrive as sent each way.
//
// Probe:  "XRV1 probe seq=S reply_bytes=R reply_tos=T\n" padded with '.' to its size.
// Reply:  "XRV1 reply seq=S got_bytes=B got_tos=T\n" padded to the size asked for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace xroce::cli::validate {

inline constexpr int kUdpHeaderBytes = 8;
inline int ip_header_bytes(bool ipv6) {
  return ipv6 ? 40 : 20;
}

struct ProbeAnswer {
  int peer_got_bytes = 0;  // IP packet size the peer received
  int peer_got_tos = 0;    // TOS / traffic class the peer saw on the probe
  int reply_bytes = 0;     // IP packet size of the reply we received
  int reply_tos = 0;       // TOS / traffic class we saw on the reply
};

class ProbeClient {
 public:
  ProbeClient() = default;
  ~ProbeClient();
  ProbeClient(const ProbeClient&) = delete;
  ProbeClient& operator=(const ProbeClient&) = delete;

  // A UDP socket connected to peer:port, DF on every datagram, TOS of received ones reported.
  // 0 or an errno, `error` set.
  int open(const std::string& peer, int port, std::string& error);
  bool ipv6() const { return ipv6_; }
  // The local address the socket sends from (the route to the peer chooses it).
  std::string local_address() const;
  // The path MTU the kernel knows toward the peer (the outgoing interface's, without ICMP).
  int known_path_mtu() const;
  // One probe of `ip_bytes` with `tos`, asking for a reply of `reply_ip_bytes` with
  // `reply_tos`; up to `tries` attempts of `timeout_ms` each. nullopt when none was answered
  // (or the kernel refused to send it: then `error` says why).
  std::optional<ProbeAnswer> probe(int ip_bytes, int tos, int reply_ip_bytes, int reply_tos,
                                   int tries, int timeout_ms, std::string& error);

 private:
  int fd_ = -1;
  bool ipv6_ = false;
  std::uint32_t seq_ = 0;
};

// The peer's side: a UDP socket bound to addr:port (addr "" = any, IPv6 dual-stack).
int open_probe_responder(const std::string& addr, int port, std::string& error);
// Reads one datagram from the responder socket and answers it; false if it was not a probe.
bool answer_one_probe(int fd);

}  // namespace xroce::cli::validate
