#include "net/udp_port.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <linux/udp.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>

namespace xroce::net {
namespace {

constexpr std::size_t kControlBytes = 256;
constexpr std::uint32_t kTxBatch = 64;
constexpr int kSocketBufferBytes = 4 << 20;

#ifndef IPV6_AUTOFLOWLABEL
constexpr int IPV6_AUTOFLOWLABEL = 70;
#endif
#ifndef UDP_NO_CHECK6_TX
constexpr int UDP_NO_CHECK6_TX = 101;
#endif
#ifndef UDP_NO_CHECK6_RX
constexpr int UDP_NO_CHECK6_RX = 102;
#endif

// The network namespace the calling thread is in (its inode number), 0 when unknown.
ino_t current_netns() {
  struct stat st {};
  return stat("/proc/thread-self/ns/net", &st) == 0 ? st.st_ino : 0;
}

Err<PortError> os_error(std::string what) {
  return Err{PortError{std::move(what), errno}};
}

void set_int(int fd, int level, int name, int value) {
  // Options that only improve fidelity (ancillary data, buffer sizes): a kernel without one
  // still gives a working port, so failures are ignored here and show up as zeros.
  (void)setsockopt(fd, level, name, &value, sizeof(value));
}

// RoCEv2 sends UDP checksum 0 (docs/protocol.md §1.3) and so do we: the ICRC protects the data.
// It also keeps frames exact on links that leave checksum completion to hardware (veth hands
// the peer a partial checksum that only its kernel knows to trust).
//
// IPv4 also sets DF on every datagram: the ICRC covers the IPv4 identification and flags
// (docs/protocol.md §1.7), and Linux sends ID 0 for a DF datagram from an unconnected socket, which
// is what the transport's frame carries. Without DF the kernel picks an ID and the receiver's
// ICRC check fails.
void send_like_roce(int fd) {
  set_int(fd, SOL_SOCKET, SO_NO_CHECK, 1);
  set_int(fd, IPPROTO_UDP, UDP_NO_CHECK6_TX, 1);
  set_int(fd, SOL_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO);
  set_int(fd, IPPROTO_IPV6, IPV6_AUTOFLOWLABEL, 0);  // flow label 0, as our frames carry
}

}  // namespace

// One outstanding recvmsg: the datagram lands after kMaxEnvelopeBytes of headroom, where the
// synthesized headers go.
struct UdpPort::RxSlot {
  std::vector<std::uint8_t> buffer;
  msghdr msg{};
  iovec iov{};
  sockaddr_in6 peer{};
  alignas(cmsghdr) std::uint8_t control[kControlBytes];
  std::size_t frame_offset = 0;
  std::size_t frame_bytes = 0;
};

struct UdpPort::TxSlot {
  msghdr msg{};
  iovec iov{};
  sockaddr_in6 dst{};
  alignas(cmsghdr) std::uint8_t control[kControlBytes];
};

UdpPort::UdpPort(const UdpPortConfig& config) : config_(config) {}

UdpPort::~UdpPort() {
  if (tx_ring_ok_) io_uring_queue_exit(&tx_ring_);
  for (auto& [port, fd] : source_port_fds_)
    close(fd);
  if (fd_ >= 0) close(fd_);
}

Result<std::unique_ptr<UdpPort>, PortError> UdpPort::open(const UdpPortConfig& config) {
  std::unique_ptr<UdpPort> port(new UdpPort(config));
  auto r = port->setup();
  if (!r) return Err{r.error()};
  return port;
}

Result<int, PortError> UdpPort::setup() {
  netns_ = current_netns();
  fd_ = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return os_error("udp port: socket(AF_INET6)");
  set_int(fd_, IPPROTO_IPV6, IPV6_V6ONLY, 0);  // one socket for IPv4 (mapped) and IPv6
  set_int(fd_, SOL_IP, IP_PKTINFO, 1);
  set_int(fd_, SOL_IP, IP_RECVTOS, 1);
  set_int(fd_, SOL_IP, IP_RECVTTL, 1);
  set_int(fd_, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1);
  set_int(fd_, IPPROTO_IPV6, IPV6_RECVTCLASS, 1);
  set_int(fd_, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1);
  // RoCEv2 sends UDP checksum 0 (docs/protocol.md §1.3); IPv6 drops that unless told not to.
  set_int(fd_, IPPROTO_UDP, UDP_NO_CHECK6_RX, 1);
  send_like_roce(fd_);
  set_int(fd_, SOL_SOCKET, SO_RXQ_OVFL, 1);  // the socket's drop counter, as ancillary data
  set_int(fd_, SOL_SOCKET, SO_RCVBUF, kSocketBufferBytes);
  set_int(fd_, SOL_SOCKET, SO_SNDBUF, kSocketBufferBytes);
  if (config_.busy_poll_us > 0 && setsockopt(fd_, SOL_SOCKET, SO_BUSY_POLL, &config_.busy_poll_us,
                                             sizeof(config_.busy_poll_us)) < 0) {
    return os_error("udp port: SO_BUSY_POLL");
  }
  if (!config_.bind_device.empty() &&
      setsockopt(fd_, SOL_SOCKET, SO_BINDTODEVICE, config_.bind_device.data(),
                 static_cast<socklen_t>(config_.bind_device.size())) < 0) {
    return os_error("udp port: SO_BINDTODEVICE " + config_.bind_device);
  }
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_any;
  addr.sin6_port = htons(config_.udp_port);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    return os_error(fmt::format("udp port: bind [::]:{}", config_.udp_port));
  }
  const int rc = io_uring_queue_init(kTxBatch, &tx_ring_, 0);
  if (rc < 0) return Err{PortError{"udp port: io_uring_queue_init (tx)", -rc}};
  tx_ring_ok_ = true;

  // One spare byte tells an oversized datagram from one that fits exactly.
  const std::size_t max_datagram = config_.max_frame_bytes + 1;
  rx_.resize(config_.rx_slots);
  for (std::uint32_t i = 0; i < rx_.size(); ++i) {
    rx_[i].buffer.resize(kMaxEnvelopeBytes + max_datagram);
    rx_free_.push_back(static_cast<std::uint32_t>(rx_.size()) - 1 - i);
  }
  tx_.resize(kTxBatch);
  return 0;
}

void UdpPort::prepare_receive(std::uint32_t slot, mmsghdr& m) {
  RxSlot& s = rx_[slot];
  s.iov = {s.buffer.data() + kMaxEnvelopeBytes, s.buffer.size() - kMaxEnvelopeBytes};
  s.peer = {};
  // Zeroed so that the cmsg walk stops at the end of what the kernel wrote.
  std::memset(s.control, 0, sizeof(s.control));
  s.msg = {};
  s.msg.msg_name = &s.peer;
  s.msg.msg_namelen = sizeof(s.peer);
  s.msg.msg_iov = &s.iov;
  s.msg.msg_iovlen = 1;
  s.msg.msg_control = s.control;
  s.msg.msg_controllen = sizeof(s.control);
  m.msg_hdr = s.msg;
  m.msg_len = 0;
}

std::size_t UdpPort::synthesize(RxSlot& s, std::size_t datagram_bytes) {
  UdpEnvelope env;
  env.dst_mac = config_.local_mac;
  env.src_mac = config_.peer_mac;
  std::memcpy(env.src_ip.data(), &s.peer.sin6_addr, 16);
  env.src_port = ntohs(s.peer.sin6_port);
  env.dst_port = config_.udp_port;
  msghdr walk = s.msg;
  walk.msg_controllen = sizeof(s.control);
  for (cmsghdr* c = CMSG_FIRSTHDR(&walk); c && c->cmsg_len != 0; c = CMSG_NXTHDR(&walk, c)) {
    const void* d = CMSG_DATA(c);
    int v = 0;
    if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_PKTINFO) {
      in_pktinfo pi;
      std::memcpy(&pi, d, sizeof(pi));
      env.dst_ip = v4_mapped(ntohl(pi.ipi_addr.s_addr));
    } else if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_TOS) {
      env.traffic_class = *static_cast<const std::uint8_t*>(d);
    } else if (c->cmsg_level == SOL_IP && c->cmsg_type == IP_TTL) {
      std::memcpy(&v, d, sizeof(v));
      env.hop_limit = static_cast<std::uint8_t>(v);
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
      in6_pktinfo pi;
      std::memcpy(&pi, d, sizeof(pi));
      std::memcpy(env.dst_ip.data(), &pi.ipi6_addr, 16);
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
      std::memcpy(&v, d, sizeof(v));
      env.traffic_class = static_cast<std::uint8_t>(v);
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT) {
      std::memcpy(&v, d, sizeof(v));
      env.hop_limit = static_cast<std::uint8_t>(v);
    } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
      std::memcpy(&socket_drops_, d, sizeof(socket_drops_));
    }
  }
  const std::size_t header_bytes = envelope_bytes(env);
  write_envelope(env, datagram_bytes, s.buffer.data() + kMaxEnvelopeBytes);
  // The socket hides the IPv4 identification the ICRC covers; senders other than us set it.
  recover_ipv4_id(env, datagram_bytes, s.buffer.data() + kMaxEnvelopeBytes);
  s.frame_offset = kMaxEnvelopeBytes - header_bytes;
  s.frame_bytes = header_bytes + datagram_bytes;
  return s.frame_bytes;
}

Result<std::size_t, PortError> UdpPort::receive(std::span<RxFrame> frames) {
  const std::size_t want = std::min(frames.size(), rx_free_.size());
  if (want == 0) return std::size_t{0};
  rx_batch_.resize(want);
  rx_batch_slots_.resize(want);
  for (std::size_t i = 0; i < want; ++i) {
    rx_batch_slots_[i] = rx_free_[rx_free_.size() - 1 - i];
    prepare_receive(rx_batch_slots_[i], rx_batch_[i]);
  }
  const int got =
      recvmmsg(fd_, rx_batch_.data(), static_cast<unsigned>(want), MSG_DONTWAIT, nullptr);
  if (got <= 0) {
    if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ++stats_.rx_drops;
    return std::size_t{0};
  }
  // The first `got` slots of the batch are the last `got` entries of the free list.
  rx_free_.resize(rx_free_.size() - static_cast<std::size_t>(got));
  std::size_t n = 0;
  for (int i = 0; i < got; ++i) {
    const std::uint32_t slot = rx_batch_slots_[static_cast<std::size_t>(i)];
    RxSlot& s = rx_[slot];
    s.msg = rx_batch_[static_cast<std::size_t>(i)].msg_hdr;
    const std::size_t res = rx_batch_[static_cast<std::size_t>(i)].msg_len;
    if (res > s.buffer.size() - kMaxEnvelopeBytes - 1 || (s.msg.msg_flags & MSG_TRUNC) != 0) {
      ++stats_.rx_drops;  // a datagram larger than any frame we carry
      rx_free_.push_back(slot);
      continue;
    }
    const std::size_t bytes = synthesize(s, res);
    frames[n++] = RxFrame{{s.buffer.data() + s.frame_offset, bytes}, slot};
    ++stats_.rx_packets;
    stats_.rx_bytes += bytes;
  }
  return n;
}

void UdpPort::release(std::span<const RxFrame> frames) {
  for (const RxFrame& f : frames)
    rx_free_.push_back(static_cast<std::uint32_t>(f.handle));
}

int UdpPort::socket_for_source_port(std::uint16_t port) {
  if (port == config_.udp_port) return fd_;
  if (auto it = source_port_fds_.find(port); it != source_port_fds_.end()) return it->second;
  if (source_port_fds_.size() >= config_.max_source_port_sockets) return fd_;
  // A socket made now lands in the calling thread's namespace: it must be the port's.
  if (current_netns() != netns_) return fd_;
  int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fd_;
  set_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, 0);
  set_int(fd, SOL_SOCKET, SO_SNDBUF, kSocketBufferBytes);
  send_like_roce(fd);
  if (!config_.bind_device.empty()) {
    (void)setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, config_.bind_device.data(),
                     static_cast<socklen_t>(config_.bind_device.size()));
  }
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_any;
  addr.sin6_port = htons(port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
    close(fd);
    fd = fd_;  // the port is taken: send from 4791 rather than not at all
  }
  source_port_fds_.emplace(port, fd);
  return fd;
}

bool UdpPort::prepare_send(const TxFrame& frame, TxSlot& t, std::uint16_t& src_port) {
  const auto parsed = parse_udp_frame(frame);
  if (!parsed) return false;
  const UdpEnvelope& env = parsed->env;
  // The kernel sends IPv4 with ID 0 and DF (send_like_roce); a frame that says otherwise would
  // arrive with an ICRC that no longer verifies.
  if (is_v4_mapped(env.dst_ip) && (env.ipv4_id != 0 || !env.ipv4_dont_fragment)) return false;
  src_port = env.src_port;
  t.dst = {};
  t.dst.sin6_family = AF_INET6;
  t.dst.sin6_port = htons(env.dst_port);
  std::memcpy(&t.dst.sin6_addr, env.dst_ip.data(), 16);
  t.iov = {const_cast<std::uint8_t*>(parsed->payload.data()), parsed->payload.size()};
  t.msg = {};
  t.msg.msg_name = &t.dst;
  t.msg.msg_namelen = sizeof(t.dst);
  t.msg.msg_iov = &t.iov;
  t.msg.msg_iovlen = 1;
  t.msg.msg_control = t.control;
  t.msg.msg_controllen = CMSG_SPACE(sizeof(int)) * 2;
  std::memset(t.control, 0, sizeof(t.control));
  const bool v4 = is_v4_mapped(env.dst_ip);
  cmsghdr* c = CMSG_FIRSTHDR(&t.msg);
  c->cmsg_level = v4 ? SOL_IP : IPPROTO_IPV6;
  c->cmsg_type = v4 ? IP_TOS : IPV6_TCLASS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  const int tclass = env.traffic_class;
  std::memcpy(CMSG_DATA(c), &tclass, sizeof(tclass));
  c = CMSG_NXTHDR(&t.msg, c);
  c->cmsg_level = v4 ? SOL_IP : IPPROTO_IPV6;
  c->cmsg_type = v4 ? IP_TTL : IPV6_HOPLIMIT;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  const int hops = env.hop_limit;
  std::memcpy(CMSG_DATA(c), &hops, sizeof(hops));
  return true;
}

Result<std::size_t, PortError> UdpPort::transmit(std::span<const TxFrame> frames) {
  std::size_t done = 0;
  while (done < frames.size()) {
    std::uint32_t queued = 0;
    for (; done < frames.size() && queued < kTxBatch; ++done) {
      TxSlot& t = tx_[queued];
      std::uint16_t src_port = 0;
      if (frames[done].size() > config_.max_frame_bytes ||
          !prepare_send(frames[done], t, src_port)) {
        ++stats_.tx_rejected;
        continue;
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&tx_ring_);
      io_uring_prep_sendmsg(sqe, socket_for_source_port(src_port), &t.msg, 0);
      io_uring_sqe_set_data64(sqe, frames[done].size());
      ++queued;
    }
    if (queued == 0) continue;
    // The caller's bytes must be sent before we return: wait for every completion.
    const int rc = io_uring_submit_and_wait(&tx_ring_, queued);
    if (rc < 0) return Err{PortError{"udp port: io_uring_submit_and_wait (tx)", -rc}};
    for (std::uint32_t i = 0; i < queued; ++i) {
      io_uring_cqe* cqe = nullptr;
      const int wrc = io_uring_wait_cqe(&tx_ring_, &cqe);
      if (wrc < 0) return Err{PortError{"udp port: io_uring_wait_cqe (tx)", -wrc}};
      if (cqe->res < 0) {
        ++stats_.tx_drops;
      } else {
        ++stats_.tx_packets;
        stats_.tx_bytes += io_uring_cqe_get_data64(cqe);
      }
      io_uring_cqe_seen(&tx_ring_, cqe);
    }
  }
  return done;
}

}  // namespace xroce::net
