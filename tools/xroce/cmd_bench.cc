// xroce bench port: sends or receives RoCEv2 frames through an AF_XDP or UDP port and
// reports packets, bytes, rate, drops and the port mode. Frames are built with the wire codec
// (UD SEND_ONLY with a correct ICRC), so a receiver can check them with --verify.
#include <arpa/inet.h>
#include <fmt/core.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "net/afxdp_port.h"
#include "net/neighbour.h"
#include "net/udp_port.h"
#include "net/xdp_steering.h"
#include "wire/frame.h"

namespace xroce::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kBatch = 64;
constexpr std::size_t kDistinctFrames = 256;
constexpr int kSpinsBeforeSleep = 256;  // empty receive() calls before sleeping in poll()  // a
                                        // ring of frames with consecutive PSNs

struct BenchOptions {
  std::string dev;
  std::string port = "afxdp";
  std::string role = "rx";
  std::uint64_t frames = 1000000;
  std::size_t size = 64;
  std::string dst;
  std::string dst_mac;
  std::uint32_t queue = 0;
  std::string xdp_mode = "auto";
  int idle_ms = 2000;
  int start_timeout_ms = 30000;
  std::uint32_t busy_poll_us = 0;
  bool verify = false;
  bool no_gso = false;
  bool no_gro = false;
  bool json = false;
};

struct Device {
  net::Mac mac{};
  std::vector<net::Ip16> v4;
  std::vector<net::Ip16> v6;
};

struct BenchResult {
  std::uint64_t packets = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::uint64_t drops = 0;
  std::uint64_t invalid = 0;          // --verify: frames that did not decode or failed the ICRC
  std::uint64_t joined_in_place = 0;  // rx: multi-buffer frames joined without a copy
  std::uint64_t reassembled = 0;      // rx: multi-buffer frames copied whole
  std::uint64_t gso_sends = 0;        // tx (udp): sends that carried several frames
  std::uint64_t gro_datagrams = 0;    // rx (udp): datagrams that carried several frames
  std::uint64_t gro_copied = 0;       // rx (udp): frames moved into a buffer of their own
  std::string mode;
  std::size_t frame_bytes = 0;
};

std::optional<Device> query_device(const std::string& name) {
  Device d;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || name != a->ifa_name) continue;
    if (a->ifa_addr->sa_family == AF_INET) {
      const auto* s = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      d.v4.push_back(net::v4_mapped(ntohl(s->sin_addr.s_addr)));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      const auto* s = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&s->sin6_addr)) continue;
      net::Ip16 ip;
      std::memcpy(ip.data(), &s->sin6_addr, 16);
      d.v6.push_back(ip);
    }
  }
  freeifaddrs(list);
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq req{};
  std::strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
  const bool ok = fd >= 0 && ioctl(fd, SIOCGIFHWADDR, &req) == 0;
  if (fd >= 0) close(fd);
  if (!ok) return std::nullopt;
  std::memcpy(d.mac.data(), req.ifr_hwaddr.sa_data, 6);
  return d;
}

std::optional<net::Mac> parse_mac(const std::string& text) {
  unsigned v[6];
  if (std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) !=
      6) {
    return std::nullopt;
  }
  net::Mac m;
  for (int i = 0; i < 6; ++i)
    m[i] = static_cast<std::uint8_t>(v[i]);
  return m;
}

// The next hop's MAC for `dst` out of `dev`, from the route and neighbour resolver (it asks
// the kernel, and triggers ARP / neighbour solicitation when needed, for up to 3 s).
std::optional<net::Mac> resolve_mac(const wire::IpAddr& dst, const std::string& dev) {
  const unsigned ifindex = if_nametoindex(dev.c_str());
  int error = 0;
  auto resolver = net::NeighbourResolver::open({}, error);
  if (ifindex == 0 || !resolver) return std::nullopt;
  const auto answer = resolver->resolve_blocking(static_cast<int>(ifindex), dst, 3'000'000'000);
  if (answer.state != net::NeighbourState::kResolved) return std::nullopt;
  return answer.mac;
}

struct OpenPort {
  std::shared_ptr<net::XdpSteering> steering;
  std::unique_ptr<net::Port> port;
};

std::optional<OpenPort> open_port(const BenchOptions& o, const Device& dev, std::string& error) {
  OpenPort p;
  if (o.port == "udp") {
    net::UdpPortConfig cfg;
    cfg.bind_device = o.dev;
    cfg.local_mac = dev.mac;
    cfg.busy_poll_us = o.busy_poll_us;
    cfg.gso = !o.no_gso;
    cfg.gro = !o.no_gro;
    auto r = net::UdpPort::open(cfg);
    if (!r) {
      error = r.error().message();
      return std::nullopt;
    }
    p.port = std::move(*r);
    return p;
  }
  const auto mode = o.xdp_mode == "native" ? net::XdpAttachMode::kNative
                    : o.xdp_mode == "skb"  ? net::XdpAttachMode::kSkb
                                           : net::XdpAttachMode::kAuto;
  auto s = net::XdpSteering::attach(o.dev, mode);
  if (!s) {
    error = s.error().message();
    return std::nullopt;
  }
  p.steering = *s;
  for (const auto* list : {&dev.v4, &dev.v6}) {
    for (const net::Ip16& ip : *list)
      (void)p.steering->add_local_ip(ip);
  }
  net::AfXdpPortConfig cfg;
  cfg.ifname = o.dev;
  cfg.queue_id = o.queue;
  cfg.busy_poll_us = o.busy_poll_us;
  auto r = net::AfXdpPort::open(cfg, p.steering);
  if (!r) {
    error = r.error().message();
    return std::nullopt;
  }
  p.port = std::move(*r);
  return p;
}

// kDistinctFrames UD SEND_ONLY frames of o.size bytes (or the smallest possible), consecutive
// PSNs, from dev's first address of dst's family.
std::optional<std::vector<std::vector<std::uint8_t>>> build_frames(const BenchOptions& o,
                                                                   const Device& dev,
                                                                   std::string& error) {
  wire::FrameAddress addr;
  in_addr a4{};
  in6_addr a6{};
  if (inet_pton(AF_INET, o.dst.c_str(), &a4) == 1) {
    if (dev.v4.empty()) return error = "no IPv4 address on " + o.dev, std::nullopt;
    addr.dst_ip = wire::IpAddr::v4(ntohl(a4.s_addr));
    addr.src_ip = wire::IpAddr{dev.v4.front()};
  } else if (inet_pton(AF_INET6, o.dst.c_str(), &a6) == 1) {
    if (dev.v6.empty()) return error = "no IPv6 address on " + o.dev, std::nullopt;
    std::array<std::uint8_t, 16> b;
    std::memcpy(b.data(), &a6, 16);
    addr.dst_ip = wire::IpAddr::v6(b);
    addr.src_ip = wire::IpAddr{dev.v6.front()};
  } else {
    return error = "--dst must be an IPv4 or IPv6 address", std::nullopt;
  }
  std::optional<net::Mac> dst_mac;
  if (!o.dst_mac.empty()) {
    dst_mac = parse_mac(o.dst_mac);
  } else if (o.port == "afxdp") {
    dst_mac = resolve_mac(addr.dst_ip, o.dev);  // the UDP port leaves the MACs to the kernel
  }
  if (!dst_mac && o.port == "afxdp") {
    return error = "no neighbour answers for " + o.dst + " on " + o.dev + "; give --dst-mac",
           std::nullopt;
  }
  addr.src_mac = dev.mac;
  addr.dst_mac = dst_mac.value_or(net::Mac{});
  addr.traffic_class = 0x02;  // ECT(0), as DCQCN senders mark data
  wire::TransportHeaders hdr;
  hdr.bth.opcode = wire::Opcode::kUdSendOnly;
  hdr.bth.dest_qp = wire::Qpn(0x11);
  hdr.deth = wire::Deth{wire::Qkey(0x11111111), wire::Qpn(0x12)};
  const std::size_t empty = wire::frame_bytes(addr, hdr, 0);
  const std::size_t payload = o.size > empty ? o.size - empty : 0;
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::size_t i = 0; i < kDistinctFrames; ++i) {
    hdr.bth.psn = wire::Psn(static_cast<std::uint32_t>(i));
    std::vector<std::uint8_t> data(payload, static_cast<std::uint8_t>(i));
    std::vector<std::uint8_t> f(wire::frame_bytes(addr, hdr, payload));
    auto n = wire::encode_frame(addr, hdr, data, f);
    if (!n) return error = wire::to_string(n.error()), std::nullopt;
    f.resize(*n);
    frames.push_back(std::move(f));
  }
  return frames;
}

BenchResult run_tx(net::Port& port, const std::vector<std::vector<std::uint8_t>>& frames,
                   std::uint64_t count) {
  std::vector<net::TxFrame> ring(frames.begin(), frames.end());
  std::vector<net::TxFrame> batch(kBatch);
  BenchResult r;
  r.frame_bytes = frames.front().size();
  const auto start = Clock::now();
  std::uint64_t sent = 0;
  while (sent < count) {
    const std::size_t n = std::min<std::uint64_t>(kBatch, count - sent);
    for (std::size_t i = 0; i < n; ++i)
      batch[i] = ring[(sent + i) % ring.size()];
    auto taken = port.transmit(std::span(batch).first(n));
    if (!taken) break;
    sent += *taken;
    if (*taken < n) {
      (void)port.flush();  // back-pressure: let the kernel drain the ring
      sched_yield();
    }
  }
  while (port.stats().tx_pending > 0 && port.flush())
    sched_yield();
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const net::PortStats s = port.stats();
  r.packets = s.tx_packets;
  r.bytes = s.tx_bytes;
  r.drops = s.tx_drops + s.tx_rejected;
  r.gso_sends = s.tx_gso_sends;
  return r;
}

BenchResult run_rx(net::Port& port, const BenchOptions& o) {
  std::vector<net::RxFrame> batch(kBatch);
  BenchResult r;
  std::optional<Clock::time_point> first, last;
  const auto start = Clock::now();
  int empty_polls = 0;
  while (r.packets < o.frames) {
    auto got = port.receive(batch);
    if (!got) break;
    const auto now = Clock::now();
    if (*got == 0) {
      const auto idle = now - last.value_or(start);
      const int limit_ms = last ? o.idle_ms : o.start_timeout_ms;
      if (idle > std::chrono::milliseconds(limit_ms)) break;
      // Spin a little before sleeping, as an engine worker does (docs/ARCHITECTURE.md decision 7).
      if (++empty_polls < kSpinsBeforeSleep) continue;
      empty_polls = 0;
      pollfd p{port.wait_fd(), POLLIN, 0};
      poll(&p, 1, 1);
      continue;
    }
    empty_polls = 0;
    if (!first) first = now;
    last = now;
    for (std::size_t i = 0; i < *got; ++i) {
      r.bytes += batch[i].bytes.size();
      r.frame_bytes = batch[i].bytes.size();
      if (o.verify) {
        auto d = wire::decode_frame(batch[i].bytes);
        if (!d || !d->icrc_ok) {
          if (r.invalid++ == 0) {
            fmt::print(stderr, "first invalid frame: {}\n",
                       d ? "ICRC mismatch" : wire::to_string(d.error()));
          }
        }
      }
    }
    r.packets += *got;
    port.release(std::span(batch).first(*got));
  }
  if (first && last) r.seconds = std::chrono::duration<double>(*last - *first).count();
  const net::PortStats s = port.stats();
  r.drops = s.rx_drops;
  r.joined_in_place = s.rx_joined_in_place;
  r.reassembled = s.rx_reassembled;
  r.gro_datagrams = s.rx_gro_datagrams;
  r.gro_copied = s.rx_gro_copied;
  return r;
}

void print(const BenchOptions& o, const BenchResult& r) {
  const double pps = r.seconds > 0 ? static_cast<double>(r.packets) / r.seconds : 0;
  const double gbps = r.seconds > 0 ? static_cast<double>(r.bytes) * 8 / r.seconds / 1e9 : 0;
  if (o.json) {
    nlohmann::json j{{"role", o.role},
                     {"port", o.port},
                     {"mode", r.mode},
                     {"dev", o.dev},
                     {"packets", r.packets},
                     {"bytes", r.bytes},
                     {"seconds", r.seconds},
                     {"pps", pps},
                     {"gbps", gbps},
                     {"drops", r.drops},
                     {"joined_in_place", r.joined_in_place},
                     {"reassembled", r.reassembled},
                     {"gso_sends", r.gso_sends},
                     {"gro_datagrams", r.gro_datagrams},
                     {"gro_copied", r.gro_copied},
                     {"frame_bytes", r.frame_bytes}};
    if (o.verify) j["invalid"] = r.invalid;
    fmt::print("{}\n", j.dump());
    return;
  }
  fmt::print("{} {} on {} ({}): {} packets, {} bytes ({}-byte frames) in {:.3f} s\n", o.role,
             o.port, o.dev, r.mode, r.packets, r.bytes, r.frame_bytes, r.seconds);
  fmt::print("  rate {:.0f} packets/s, {:.3f} Gbit/s, drops {}", pps, gbps, r.drops);
  if (r.joined_in_place + r.reassembled > 0) {
    fmt::print(", multi-buffer frames joined in place {} / copied {}", r.joined_in_place,
               r.reassembled);
  }
  if (r.gso_sends > 0) fmt::print(", segmented sends {}", r.gso_sends);
  if (r.gro_datagrams > 0) {
    fmt::print(", offloaded datagrams {} (frames moved {})", r.gro_datagrams, r.gro_copied);
  }
  if (o.verify) fmt::print(", invalid {}", r.invalid);
  fmt::print("\n");
}

int run_bench(const BenchOptions& o) {
  const auto dev = query_device(o.dev);
  if (!dev) {
    fmt::print(stderr, "xroce bench port: no interface {}\n", o.dev);
    return 1;
  }
  std::string error;
  std::optional<std::vector<std::vector<std::uint8_t>>> frames;
  if (o.role == "tx") {
    if (o.dst.empty()) {
      fmt::print(stderr, "xroce bench port: --role tx needs --dst\n");
      return 1;
    }
    frames = build_frames(o, *dev, error);
    if (!frames) {
      fmt::print(stderr, "xroce bench port: {}\n", error);
      return 1;
    }
  }
  auto p = open_port(o, *dev, error);
  if (!p) {
    fmt::print(stderr, "xroce bench port: {}\n", error);
    return 1;
  }
  fmt::print(stderr, "ready: {} port on {}, mode {}\n", o.port, o.dev,
             net::to_string(p->port->mode()));
  BenchResult r = o.role == "tx" ? run_tx(*p->port, *frames, o.frames) : run_rx(*p->port, o);
  r.mode = net::to_string(p->port->mode());
  print(o, r);
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, ExitStatus& status) {
  auto* bench = app.add_subcommand("bench", "Measure the engine's parts");
  bench->require_subcommand(1);
  auto* cmd = bench->add_subcommand("port", "Send or receive RoCEv2 frames through a port");
  auto o = std::make_shared<BenchOptions>();
  cmd->add_option("--dev", o->dev, "Interface")->required();
  cmd->add_option("--port", o->port, "Port kind")->check(CLI::IsMember({"afxdp", "udp"}));
  cmd->add_option("--role", o->role, "Send or receive")->check(CLI::IsMember({"tx", "rx"}));
  cmd->add_option("--frames", o->frames, "Frames to send, or to receive before stopping");
  cmd->add_option("--size", o->size, "Frame size in bytes, Ethernet header to ICRC");
  cmd->add_option("--dst", o->dst, "Destination IP address (tx)");
  cmd->add_option("--dst-mac", o->dst_mac,
                  "Destination MAC (tx; default: the next hop's, resolved on DEV)");
  cmd->add_option("--queue", o->queue, "Receive/transmit queue (afxdp)");
  cmd->add_option("--xdp-mode", o->xdp_mode, "XDP attach mode")
      ->check(CLI::IsMember({"auto", "native", "skb"}));
  cmd->add_option("--idle-ms", o->idle_ms, "rx: stop after this long without a frame");
  cmd->add_option("--start-timeout-ms", o->start_timeout_ms, "rx: wait this long for the first");
  cmd->add_option("--busy-poll-us", o->busy_poll_us,
                  "Busy-poll the device's receive work for up to this long per empty receive");
  cmd->add_flag("--no-gso", o->no_gso,
                "udp: one send per frame (no UDP segmentation offload), UDP checksum 0");
  cmd->add_flag("--no-gro", o->no_gro,
                "udp: one datagram per frame on receive (no UDP receive offload)");
  cmd->add_flag("--verify", o->verify, "rx: decode every frame and check its ICRC");
  cmd->add_flag("--json", o->json, "Print as JSON");
  cmd->callback([o, &status] { status.code = run_bench(*o); });
}

}  // namespace xroce::cli
