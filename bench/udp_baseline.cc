// xroce-udp-baseline: the kernel-socket baseline for `xroce bench port`. Sends or receives
// UDP datagrams with sendmmsg/recvmmsg, sized so that the frame on the wire has --size bytes
// (Ethernet to the end of the UDP payload, like a RoCEv2 frame), and prints the same figures.
#include <arpa/inet.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <array>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr unsigned kBatch = 64;
constexpr std::size_t kEthIpv4UdpBytes = 14 + 20 + 8;
constexpr std::size_t kEthIpv6UdpBytes = 14 + 40 + 8;
constexpr int kSocketBufferBytes = 4 << 20;

struct Options {
  std::string role = "rx";
  std::string dst;
  std::uint16_t port = 4791;
  std::uint64_t frames = 1000000;
  std::size_t size = 64;
  int idle_ms = 2000;
  int start_timeout_ms = 30000;
  int busy_poll_us = 0;
  bool v6 = false;
  bool json = false;
  std::size_t gso_segments = 0;  // tx: datagrams per send with UDP_SEGMENT (0, 1: none)
  bool gro = false;              // rx: UDP_GRO, a segmented send read as one datagram
};

#ifndef UDP_GRO
constexpr int UDP_GRO = 104;
#endif

struct Result {
  std::uint64_t packets = 0;
  std::uint64_t bytes = 0;  // frame bytes, counted like the ports count them
  double seconds = 0;
  std::uint64_t drops = 0;
};

int open_socket(const Options& o) {
  const int fd = socket(o.v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kSocketBufferBytes, sizeof(kSocketBufferBytes));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSocketBufferBytes, sizeof(kSocketBufferBytes));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
  if (o.gro && setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) < 0) {
    close(fd);
    return -1;
  }
  if (o.busy_poll_us > 0 &&
      setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &o.busy_poll_us, sizeof(o.busy_poll_us)) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

Result run_tx(int fd, const Options& o, std::size_t payload) {
  sockaddr_storage dst{};
  socklen_t dst_len = 0;
  if (o.v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&dst);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(o.port);
    inet_pton(AF_INET6, o.dst.c_str(), &a->sin6_addr);
    dst_len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&dst);
    a->sin_family = AF_INET;
    a->sin_port = htons(o.port);
    inet_pton(AF_INET, o.dst.c_str(), &a->sin_addr);
    dst_len = sizeof(*a);
  }
  std::vector<std::uint8_t> data(payload, 0xAB);
  // With --gso-segments N each message carries N datagrams (UDP_SEGMENT, udp(7)): the same
  // payload N times, cut by the kernel or the NIC.
  const std::size_t per_msg = o.gso_segments > 1 ? o.gso_segments : 1;
  std::vector<iovec> iov(kBatch * per_msg, iovec{data.data(), data.size()});
  std::vector<mmsghdr> msgs(kBatch);
  std::vector<std::array<std::uint8_t, CMSG_SPACE(sizeof(std::uint16_t))>> control(kBatch);
  for (unsigned i = 0; i < kBatch; ++i) {
    msgs[i].msg_hdr = {};
    msgs[i].msg_hdr.msg_name = &dst;
    msgs[i].msg_hdr.msg_namelen = dst_len;
    msgs[i].msg_hdr.msg_iov = &iov[i * per_msg];
    msgs[i].msg_hdr.msg_iovlen = per_msg;
    if (per_msg > 1) {
      msgs[i].msg_hdr.msg_control = control[i].data();
      msgs[i].msg_hdr.msg_controllen = control[i].size();
      cmsghdr* c = CMSG_FIRSTHDR(&msgs[i].msg_hdr);
      c->cmsg_level = IPPROTO_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
      const auto segment = static_cast<std::uint16_t>(payload);
      std::memcpy(CMSG_DATA(c), &segment, sizeof(segment));
    }
  }
  Result r;
  const auto start = Clock::now();
  while (r.packets < o.frames) {
    const std::uint64_t left = (o.frames - r.packets + per_msg - 1) / per_msg;
    const auto n = static_cast<unsigned>(std::min<std::uint64_t>(kBatch, left));
    const int sent = sendmmsg(fd, msgs.data(), n, 0);
    if (sent < 0) {
      if (errno == EINTR || errno == ENOBUFS || errno == EAGAIN) continue;
      break;
    }
    r.packets += static_cast<std::uint64_t>(sent) * per_msg;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

Result run_rx(int fd, const Options& o, std::size_t frame_overhead) {
  // With UDP_GRO a datagram carries up to 64 segments and 64 KiB.
  const std::size_t kMaxDatagram = o.gro ? 65536 : 9000;
  std::vector<std::uint8_t> buffers(std::size_t{kBatch} * kMaxDatagram);
  std::vector<iovec> iov(kBatch);
  std::vector<mmsghdr> msgs(kBatch);
  std::vector<std::array<std::uint8_t, 64>> control(kBatch);
  Result r;
  std::optional<Clock::time_point> first, last;
  const auto start = Clock::now();
  std::uint32_t kernel_drops = 0;
  while (r.packets < o.frames) {
    for (unsigned i = 0; i < kBatch; ++i) {
      iov[i] = {buffers.data() + std::size_t{i} * kMaxDatagram, kMaxDatagram};
      msgs[i].msg_hdr = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_control = control[i].data();
      msgs[i].msg_hdr.msg_controllen = control[i].size();
    }
    const int got = recvmmsg(fd, msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
    const auto now = Clock::now();
    if (got <= 0) {
      const int limit_ms = last ? o.idle_ms : o.start_timeout_ms;
      if (now - last.value_or(start) > std::chrono::milliseconds(limit_ms)) break;
      pollfd p{fd, POLLIN, 0};
      poll(&p, 1, 1);
      continue;
    }
    if (!first) first = now;
    last = now;
    for (int i = 0; i < got; ++i) {
      int segment = 0;  // UDP_GRO: the length of each segment but the last
      for (cmsghdr* c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c; c = CMSG_NXTHDR(&msgs[i].msg_hdr, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
          std::memcpy(&kernel_drops, CMSG_DATA(c), sizeof(kernel_drops));
        } else if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) {
          std::memcpy(&segment, CMSG_DATA(c), sizeof(segment));
        }
      }
      const std::size_t len = msgs[i].msg_len;
      const std::size_t datagrams =
          segment > 0 && len > 0 ? (len + static_cast<std::size_t>(segment) - 1) / segment : 1;
      r.packets += datagrams;
      r.bytes += len + datagrams * frame_overhead;
    }
  }
  if (first && last) r.seconds = std::chrono::duration<double>(*last - *first).count();
  r.drops = kernel_drops;
  return r;
}

int run(const Options& o) {
  const std::size_t overhead = o.v6 ? kEthIpv6UdpBytes : kEthIpv4UdpBytes;
  const std::size_t payload = o.size > overhead ? o.size - overhead : 0;
  const int fd = open_socket(o);
  if (fd < 0) {
    fmt::print(stderr, "xroce-udp-baseline: socket: {}\n", std::strerror(errno));
    return 1;
  }
  Result r;
  if (o.role == "tx") {
    r = run_tx(fd, o, payload);
    r.bytes = r.packets * (payload + overhead);
  } else {
    sockaddr_storage any{};
    socklen_t len = 0;
    if (o.v6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&any);
      a->sin6_family = AF_INET6;
      a->sin6_port = htons(o.port);
      len = sizeof(*a);
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&any);
      a->sin_family = AF_INET;
      a->sin_port = htons(o.port);
      len = sizeof(*a);
    }
    if (bind(fd, reinterpret_cast<sockaddr*>(&any), len) < 0) {
      fmt::print(stderr, "xroce-udp-baseline: bind port {}: {}\n", o.port, std::strerror(errno));
      close(fd);
      return 1;
    }
    fmt::print(stderr, "ready: kernel UDP socket on port {}\n", o.port);
    r = run_rx(fd, o, overhead);
  }
  close(fd);
  const double pps = r.seconds > 0 ? static_cast<double>(r.packets) / r.seconds : 0;
  const double gbps = r.seconds > 0 ? static_cast<double>(r.bytes) * 8 / r.seconds / 1e9 : 0;
  const char* mode = o.gso_segments > 1 ? "sendmmsg+gso/recvmmsg"
                     : o.gro            ? "sendmmsg/recvmmsg+gro"
                                        : "sendmmsg/recvmmsg";
  if (o.json) {
    fmt::print("{}\n", nlohmann::json{{"role", o.role},
                                      {"port", "kernel-udp"},
                                      {"mode", mode},
                                      {"packets", r.packets},
                                      {"bytes", r.bytes},
                                      {"seconds", r.seconds},
                                      {"pps", pps},
                                      {"gbps", gbps},
                                      {"drops", r.drops},
                                      {"frame_bytes", payload + overhead}}
                           .dump());
  } else {
    fmt::print("{} kernel-udp: {} packets, {} bytes ({}-byte frames) in {:.3f} s\n", o.role,
               r.packets, r.bytes, payload + overhead, r.seconds);
    fmt::print("  rate {:.0f} packets/s, {:.3f} Gbit/s, drops {}\n", pps, gbps, r.drops);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xroce-udp-baseline: kernel UDP sockets with sendmmsg/recvmmsg"};
  Options o;
  app.add_option("--role", o.role, "Send or receive")->check(CLI::IsMember({"tx", "rx"}));
  app.add_option("--dst", o.dst, "Destination IP address (tx)");
  app.add_option("--port", o.port, "UDP port");
  app.add_option("--frames", o.frames, "Datagrams to send, or to receive before stopping");
  app.add_option("--size", o.size, "Frame size on the wire (Ethernet header to UDP payload end)");
  app.add_option("--idle-ms", o.idle_ms, "rx: stop after this long without a datagram");
  app.add_option("--start-timeout-ms", o.start_timeout_ms, "rx: wait this long for the first");
  app.add_option("--busy-poll-us", o.busy_poll_us,
                 "SO_BUSY_POLL: an empty receive polls the device for up to this long");
  app.add_option("--gso-segments", o.gso_segments,
                 "tx: datagrams per send, cut by UDP segmentation offload (UDP_SEGMENT)")
      ->check(CLI::Range(0, 64));
  app.add_flag("--gro", o.gro,
               "rx: UDP receive offload (UDP_GRO): a segmented send is read as one datagram");
  app.add_flag("--ipv6", o.v6, "Use IPv6");
  app.add_flag("--json", o.json, "Print as JSON");
  CLI11_PARSE(app, argc, argv);
  if (o.role == "tx" && o.dst.empty()) {
    fmt::print(stderr, "xroce-udp-baseline: --role tx needs --dst\n");
    return 1;
  }
  return run(o);
}
