// The steering program in real namespaces: it takes only our frames, sends frames for a queue
// without a socket to the kernel, leaves nothing behind after a detach or a crash, and the UDP
// port works for an unprivileged user. Needs root; skips with a message otherwise.
#include <arpa/inet.h>
#include <fmt/core.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "netns.h"
#include "port_harness.h"

namespace xroce::testing {
namespace {

using namespace std::chrono_literals;

constexpr auto kDeadline = 5s;
constexpr std::uint16_t kOtherUdpPort = 4792;
constexpr std::uint16_t kTcpPort = 5201;
constexpr int kNobody = 65534;

#define SKIP_UNLESS_ROOT() \
  if (!running_as_root()) GTEST_SKIP() << "needs root: network namespaces and XDP"

// A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

sockaddr_in v4_addr(const std::string& ip, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

// A kernel UDP socket in `ns` bound to port on every address.
int udp_socket_in(const std::string& ns, std::uint16_t port) {
  int fd = -1;
  run_in_netns(ns, [&] {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = v4_addr("0.0.0.0", port);
    if (port != 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) < 0) {
      close(fd);
      fd = -1;
    }
  });
  return fd;
}

bool send_udp(int fd, const std::string& ip, std::uint16_t port, const std::string& text) {
  sockaddr_in to = v4_addr(ip, port);
  return sendto(fd, text.data(), text.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) ==
         static_cast<ssize_t>(text.size());
}

std::string recv_udp(int fd, std::chrono::milliseconds deadline) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(deadline.count())) != 1) return {};
  char buf[2048];
  const ssize_t n = recv(fd, buf, sizeof(buf), 0);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// Sends `bytes` over TCP from namespace `from` to `to_ip` in namespace `to`; returns how many
// bytes the server read back intact (their sum must match too).
std::size_t tcp_transfer(const std::string& from, const std::string& to, const std::string& to_ip,
                         std::size_t bytes) {
  Fd listener;
  run_in_netns(to, [&] {
    listener.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listener.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a = v4_addr(to_ip, kTcpPort);
    if (bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) < 0 ||
        listen(listener.fd, 1) < 0) {
      throw std::runtime_error("tcp listen failed");
    }
  });
  Fd client;
  run_in_netns(from, [&] { client.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); });
  std::size_t received = 0;
  std::uint64_t sum_received = 0;
  std::thread server([&] {
    pollfd p{listener.fd, POLLIN, 0};
    if (poll(&p, 1, 5000) != 1) return;
    Fd conn(accept(listener.fd, nullptr, nullptr));
    std::vector<std::uint8_t> buf(65536);
    for (;;) {
      pollfd q{conn.fd, POLLIN, 0};
      if (poll(&q, 1, 5000) != 1) return;
      const ssize_t n = recv(conn.fd, buf.data(), buf.size(), 0);
      if (n <= 0) return;
      received += static_cast<std::size_t>(n);
      sum_received = std::accumulate(buf.begin(), buf.begin() + n, sum_received);
    }
  });
  std::vector<std::uint8_t> data(bytes);
  std::mt19937 rng(7);
  for (auto& b : data)
    b = static_cast<std::uint8_t>(rng());
  sockaddr_in a = v4_addr(to_ip, kTcpPort);
  if (connect(client.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    std::size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = send(client.fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<std::size_t>(n);
    }
  }
  close(client.fd);
  client.fd = -1;
  server.join();
  const std::uint64_t sum_sent = std::accumulate(data.begin(), data.end(), std::uint64_t{0});
  return sum_received == sum_sent ? received : 0;
}

bool xdp_attached(const Host& h) {
  std::string out;
  shell(fmt::format("ip -n {} -d link show dev {}", h.ns, h.ifname), &out);
  return out.find("xdp") != std::string::npos;
}

bool bpf_program_exists(std::uint32_t id) {
  return shell(fmt::format("bpftool prog show id {}", id)) == 0;
}

// The kernel frees a detached program once its last reference goes, which may trail the
// detach by a moment: wait for it with a deadline.
bool bpf_program_freed(std::uint32_t id) {
  const auto until = std::chrono::steady_clock::now() + kDeadline;
  while (bpf_program_exists(id)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(20ms);  // polling a condition, not synchronising
  }
  return true;
}

TEST(Steering, OnlyOurFramesAreTaken) {
  SKIP_UNLESS_ROOT();
  VethPair net("only");
  // A second address on B that is not registered with the steering program.
  const std::string unregistered = net.b().ipv4_text.substr(0, net.b().ipv4_text.size() - 1) + "3";
  ASSERT_EQ(shell(fmt::format("ip -n {} addr add {}/24 dev {}", net.b().ns, unregistered,
                              net.b().ifname)),
            0);
  NsPort b(net.b(), net.a(), PortKind::kAfXdp);
  if (!b.ok()) GTEST_SKIP() << "AF_XDP unavailable: " << b.error();
  ASSERT_TRUE(xdp_attached(net.b()));

  // ping (ICMP and ICMPv6), a TCP transfer, UDP to another port: all reach B's kernel.
  EXPECT_EQ(shell(fmt::format("ip netns exec {} ping -c 3 -i 0.2 -W 2 {}", net.a().ns,
                              net.b().ipv4_text)),
            0);
  EXPECT_EQ(shell(fmt::format("ip netns exec {} ping -6 -c 3 -i 0.2 -W 2 {}", net.a().ns,
                              net.b().ipv6_text)),
            0);
  constexpr std::size_t kTcpBytes = 4 << 20;
  EXPECT_EQ(tcp_transfer(net.a().ns, net.b().ns, net.b().ipv4_text, kTcpBytes), kTcpBytes);
  Fd other(udp_socket_in(net.b().ns, kOtherUdpPort));
  Fd roce_kernel(udp_socket_in(net.b().ns, net::kRoceUdpPort));
  Fd sender(udp_socket_in(net.a().ns, 0));
  ASSERT_GE(other.fd, 0);
  ASSERT_GE(roce_kernel.fd, 0);
  ASSERT_TRUE(send_udp(sender.fd, net.b().ipv4_text, kOtherUdpPort, "other port"));
  EXPECT_EQ(recv_udp(other.fd, kDeadline), "other port");

  // UDP 4791 to an address that is not ours: the kernel's, not the port's.
  ASSERT_TRUE(send_udp(sender.fd, unregistered, net::kRoceUdpPort, "not our address"));
  EXPECT_EQ(recv_udp(roce_kernel.fd, kDeadline), "not our address");

  // UDP 4791 to our address: the port's, and the kernel socket sees nothing.
  ASSERT_TRUE(send_udp(sender.fd, net.b().ipv4_text, net::kRoceUdpPort, "ours"));
  auto got = b.run([&](net::Port& p) { return receive_n(p, 1, kDeadline); });
  ASSERT_EQ(got.size(), 1u);
  const auto parsed = net::parse_udp_frame(got[0]);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(std::string(parsed->payload.begin(), parsed->payload.end()), "ours");
  EXPECT_EQ(recv_udp(roce_kernel.fd, 200ms), "");

  const net::XdpCounters c = b.steering()->counters();
  EXPECT_EQ(c.redirected, 1u);
  EXPECT_GT(c.passed, 0u);
  EXPECT_EQ(c.malformed, 0u);

  // Once the address is removed from the map, its frames are the kernel's again.
  b.steering()->remove_local_ip(net.b().ipv4);
  ASSERT_TRUE(send_udp(sender.fd, net.b().ipv4_text, net::kRoceUdpPort, "no longer ours"));
  EXPECT_EQ(recv_udp(roce_kernel.fd, kDeadline), "no longer ours");
  EXPECT_EQ(b.steering()->counters().redirected, 1u);
}

// 802.1Q-tagged RoCEv2 frames for an address of ours are steered to the port, tag and all.
// (This kernel has no VLAN devices, so A's AF_XDP port sends the tagged frames itself.)
TEST(Steering, VlanTaggedFramesAreSteered) {
  SKIP_UNLESS_ROOT();
  VethPair net("vlan");
  NsPort a(net.a(), net.b(), PortKind::kAfXdp);
  NsPort b(net.b(), net.a(), PortKind::kAfXdp);
  if (!a.ok() || !b.ok()) GTEST_SKIP() << "AF_XDP unavailable: " << a.error() << b.error();
  constexpr std::uint16_t kTci = 3 << 13 | 10;  // PCP 3, VLAN 10
  std::vector<std::vector<std::uint8_t>> frames;
  for (bool v6 : {false, true}) {
    net::UdpEnvelope env;
    env.dst_mac = net.b().mac;
    env.src_mac = net.a().mac;
    env.vlan_tci = kTci;
    env.src_ip = v6 ? net.a().ipv6 : net.a().ipv4;
    env.dst_ip = v6 ? net.b().ipv6 : net.b().ipv4;
    env.src_port = 0xC000;
    std::vector<std::uint8_t> f(net::envelope_bytes(env) + 100, 0x5A);
    net::write_envelope(env, 100, f.data() + net::envelope_bytes(env));
    frames.push_back(std::move(f));
  }
  ASSERT_TRUE(a.run([&](net::Port& p) { return send_all(p, frames, kDeadline); }));
  auto got = b.run([&](net::Port& p) { return receive_n(p, frames.size(), kDeadline); });
  ASSERT_EQ(got.size(), frames.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], frames[i]) << "frame " << i;
    const auto parsed = net::parse_udp_frame(got[i]);
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(parsed->env.vlan_tci, std::optional<std::uint16_t>(kTci));
  }
  EXPECT_EQ(b.steering()->counters().redirected, frames.size());

  // Headers cut short are counted as malformed and passed: a VLAN tag without its EtherType,
  // and IPv4 to our address that ends before its UDP header.
  std::vector<std::vector<std::uint8_t>> bad;
  bad.push_back(std::vector<std::uint8_t>(frames[0].begin(), frames[0].begin() + 16));
  std::vector<std::uint8_t> no_udp(frames[0].begin(), frames[0].begin() + 14 + 4 + 20);
  no_udp[12 + 4 + 2 + 2] = 0;  // IPv4 total length: claims only the header (still truncated)
  no_udp[12 + 4 + 2 + 3] = 20;
  bad.push_back(std::move(no_udp));
  ASSERT_TRUE(a.run([&](net::Port& p) { return send_all(p, bad, kDeadline); }));
  const auto until = std::chrono::steady_clock::now() + kDeadline;
  while (b.steering()->counters().malformed < bad.size() &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);  // polling a counter, not synchronising
  }
  EXPECT_EQ(b.steering()->counters().malformed, bad.size());
  EXPECT_EQ(b.steering()->counters().redirected, frames.size());
}

// One socket per queue: with two queues, frames arriving on rx queue 1 reach the socket of
// queue 1 and only that one (XSKMAP is indexed by rx queue). A's port sends on its queue 1,
// which veth delivers to B's rx queue 1.
TEST(Steering, EachQueueHasItsOwnSocket) {
  SKIP_UNLESS_ROOT();
  VethPair net("queues", 2);
  NsThread a_thread(net.a().ns);
  NsThread b_thread(net.b().ns);
  std::shared_ptr<net::XdpSteering> a_steer, b_steer;
  std::unique_ptr<net::AfXdpPort> a1, b0, b1;
  std::string error;
  auto open_side =
      [&](const Host& h, std::shared_ptr<net::XdpSteering>& steer,
          std::initializer_list<std::pair<std::uint32_t, std::unique_ptr<net::AfXdpPort>*>> ports) {
        auto s = net::XdpSteering::attach(h.ifname, net::XdpAttachMode::kAuto);
        if (!s) return void(error = s.error().message());
        steer = *s;
        (void)steer->add_local_ip(h.ipv4);
        for (auto [queue, out] : ports) {
          net::AfXdpPortConfig cfg;
          cfg.ifname = h.ifname;
          cfg.queue_id = queue;
          auto p = net::AfXdpPort::open(cfg, steer);
          if (!p) return void(error = p.error().message());
          *out = std::move(*p);
        }
      };
  a_thread.call([&] { open_side(net.a(), a_steer, {{1, &a1}}); });
  b_thread.call([&] { open_side(net.b(), b_steer, {{0, &b0}, {1, &b1}}); });
  auto close_all = [&] {
    a_thread.call([&] {
      a1.reset();
      a_steer.reset();
    });
    b_thread.call([&] {
      b0.reset();
      b1.reset();
      b_steer.reset();
    });
  };
  if (!error.empty()) {
    close_all();
    GTEST_SKIP() << "AF_XDP unavailable: " << error;
  }
  std::mt19937 rng(5);
  std::vector<std::vector<std::uint8_t>> frames;
  for (int i = 0; i < 8; ++i)
    frames.push_back(make_frame(net.a(), net.b(), false, 300, 0xC000, 0, rng));
  bool sent = false;
  a_thread.call([&] { sent = send_all(*a1, frames, kDeadline); });
  std::vector<std::vector<std::uint8_t>> on_q1, on_q0;
  b_thread.call([&] {
    on_q1 = receive_n(*b1, frames.size(), kDeadline);
    on_q0 = receive_n(*b0, 1, 100ms);
  });
  close_all();
  EXPECT_TRUE(sent);
  EXPECT_EQ(on_q1, frames);
  EXPECT_TRUE(on_q0.empty());
}

TEST(Steering, FramesForAQueueWithoutSocketGoToTheKernel) {
  SKIP_UNLESS_ROOT();
  VethPair net("nosock");
  std::shared_ptr<net::XdpSteering> steering;
  NsThread b_thread(net.b().ns);
  std::string error;
  b_thread.call([&] {
    auto s = net::XdpSteering::attach(net.b().ifname, net::XdpAttachMode::kAuto);
    if (!s) {
      error = s.error().message();
      return;
    }
    steering = *s;
    (void)steering->add_local_ip(net.b().ipv4);
  });
  if (!steering) GTEST_SKIP() << "XDP unavailable: " << error;
  Fd roce_kernel(udp_socket_in(net.b().ns, net::kRoceUdpPort));
  Fd sender(udp_socket_in(net.a().ns, 0));
  ASSERT_TRUE(send_udp(sender.fd, net.b().ipv4_text, net::kRoceUdpPort, "no socket"));
  EXPECT_EQ(recv_udp(roce_kernel.fd, kDeadline), "no socket");
  EXPECT_EQ(steering->counters().redirected, 0u);
  b_thread.call([&] { steering.reset(); });
  EXPECT_FALSE(xdp_attached(net.b()));
}

TEST(Steering, DetachLeavesNoProgram) {
  SKIP_UNLESS_ROOT();
  VethPair net("detach");
  std::uint32_t id = 0;
  {
    NsPort b(net.b(), net.a(), PortKind::kAfXdp);
    if (!b.ok()) GTEST_SKIP() << "AF_XDP unavailable: " << b.error();
    id = b.steering()->program_id();
    EXPECT_TRUE(xdp_attached(net.b()));
    EXPECT_TRUE(bpf_program_exists(id));
  }
  EXPECT_FALSE(xdp_attached(net.b()));
  EXPECT_TRUE(bpf_program_freed(id));
}

// Another XDP program already on the interface stays there: with libxdp's dispatcher both
// run and our detach leaves the other; where the dispatcher cannot load (freplace refused, as
// on the kernel this was written on) our attach fails and the interface is left untouched.
TEST(Steering, AnotherProgramOnTheInterfaceIsLeftInPlace) {
  SKIP_UNLESS_ROOT();
  VethPair net("coexist");
  const std::string other = "/usr/lib/x86_64-linux-gnu/bpf/xdpfilt_alw_all.o";
  const std::string in_b = "nsenter --net=/var/run/netns/" + net.b().ns + " ";
  if (shell(in_b + "xdp-loader load -m skb " + net.b().ifname + " " + other) != 0) {
    GTEST_SKIP() << "cannot load xdp-tools' " << other;
  }
  auto other_loaded = [&] {
    std::string out;
    shell(in_b + "xdp-loader status " + net.b().ifname, &out);
    return out.find("xdpfilt_alw_all") != std::string::npos;
  };
  ASSERT_TRUE(other_loaded());
  std::string error;
  std::shared_ptr<net::XdpSteering> steering;
  {
    NsThread b_thread(net.b().ns);
    b_thread.call([&] {
      auto s = net::XdpSteering::attach(net.b().ifname, net::XdpAttachMode::kSkb);
      if (s) {
        steering = *s;
      } else {
        error = s.error().message();
      }
    });
    if (steering) {
      std::string out;
      shell(in_b + "xdp-loader status " + net.b().ifname, &out);
      EXPECT_NE(out.find("xroce_steer"), std::string::npos) << out;
      b_thread.call([&] { steering.reset(); });
    } else {
      RecordProperty("attach_error", error);
    }
  }
  EXPECT_TRUE(other_loaded()) << "attach error (if any): " << error;
  shell(in_b + "xdp-loader unload --all " + net.b().ifname);
}

// A child process attaches and is killed; the next attach finds its program and replaces it,
// and the next detach leaves the interface clean.
TEST(Steering, StaleProgramOfAKilledProcessIsReplaced) {
  SKIP_UNLESS_ROOT();
  VethPair net("stale");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    if (!enter_netns(net.b().ns)) _exit(2);
    auto s = net::XdpSteering::attach(net.b().ifname, net::XdpAttachMode::kAuto);
    if (!s) _exit(3);
    net::AfXdpPortConfig cfg;
    cfg.ifname = net.b().ifname;
    auto p = net::AfXdpPort::open(cfg, *s);
    if (!p) _exit(4);
    const std::uint32_t id = (*s)->program_id();
    if (write(ready[1], &id, sizeof(id)) != sizeof(id)) _exit(5);
    for (;;)
      pause();
  }
  close(ready[1]);
  std::uint32_t stale_id = 0;
  pollfd p{ready[0], POLLIN, 0};
  const bool child_ready = poll(&p, 1, 5000) == 1 && read(ready[0], &stale_id, sizeof(stale_id)) ==
                                                         static_cast<ssize_t>(sizeof(stale_id));
  close(ready[0]);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  if (!child_ready) GTEST_SKIP() << "AF_XDP unavailable in the child";
  ASSERT_TRUE(xdp_attached(net.b())) << "a killed process leaves its program attached";
  ASSERT_TRUE(bpf_program_exists(stale_id));
  {
    NsPort b(net.b(), net.a(), PortKind::kAfXdp);
    ASSERT_TRUE(b.ok()) << b.error();
    EXPECT_EQ(b.steering()->stale_programs_removed(), 1);
    EXPECT_NE(b.steering()->program_id(), stale_id);
    EXPECT_TRUE(bpf_program_freed(stale_id));
    // The new program steers: a frame from A arrives.
    NsPort a(net.a(), net.b(), PortKind::kUdp);
    ASSERT_TRUE(a.ok()) << a.error();
    std::mt19937 rng(1);
    std::vector<std::vector<std::uint8_t>> frames{
        make_frame(net.a(), net.b(), false, 200, 0xC001, 0, rng)};
    ASSERT_TRUE(a.run([&](net::Port& port) { return send_all(port, frames, kDeadline); }));
    EXPECT_EQ(b.run([&](net::Port& port) { return receive_n(port, 1, kDeadline); }).size(), 1u);
  }
  EXPECT_FALSE(xdp_attached(net.b()));
}

// A UDP port opened on a thread that then exits (io_uring cancels that thread's receives)
// still receives when its owner calls receive() from another thread.
TEST(UdpPort, OpenedOnAThreadThatExits) {
  SKIP_UNLESS_ROOT();
  VethPair net("handover");
  std::unique_ptr<net::UdpPort> port;
  run_in_netns(net.b().ns, [&] {
    net::UdpPortConfig cfg;
    cfg.local_mac = net.b().mac;
    cfg.peer_mac = net.a().mac;
    auto p = net::UdpPort::open(cfg);
    if (p) port = std::move(*p);
  });
  ASSERT_TRUE(port);
  Fd sender(udp_socket_in(net.a().ns, 0));
  ASSERT_TRUE(send_udp(sender.fd, net.b().ipv4_text, net::kRoceUdpPort, "handed over"));
  auto got = receive_n(*port, 1, kDeadline);
  ASSERT_EQ(got.size(), 1u);
  const auto parsed = net::parse_udp_frame(got[0]);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(std::string(parsed->payload.begin(), parsed->payload.end()), "handed over");
  EXPECT_EQ(port->stats().rx_drops, 0u);
}

// A datagram longer than any frame is dropped and counted, with receive offload and without,
// and the port goes on.
TEST(UdpPort, AnOversizedDatagramIsCountedAndDropped) {
  SKIP_UNLESS_ROOT();
  VethPair net("grobig");
  for (bool gro : {true, false}) {
    std::unique_ptr<net::UdpPort> port;
    run_in_netns(net.b().ns, [&] {
      net::UdpPortConfig cfg;
      cfg.local_mac = net.b().mac;
      cfg.peer_mac = net.a().mac;
      cfg.max_frame_bytes = 4202;  // as the daemon opens it: the largest 4096-MTU RoCE frame
      cfg.gro = gro;
      auto p = net::UdpPort::open(cfg);
      if (p) port = std::move(*p);
    });
    ASSERT_TRUE(port);
    Fd sender(udp_socket_in(net.a().ns, 0));
    ASSERT_TRUE(send_udp(sender.fd, net.b().ipv4_text, net::kRoceUdpPort, std::string(8000, 'x')));
    ASSERT_TRUE(send_udp(sender.fd, net.b().ipv4_text, net::kRoceUdpPort, "after"));
    auto got = receive_n(*port, 1, kDeadline);
    ASSERT_EQ(got.size(), 1u) << "gro " << gro;
    const auto parsed = net::parse_udp_frame(got[0]);
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(std::string(parsed->payload.begin(), parsed->payload.end()), "after");
    EXPECT_EQ(port->stats().rx_drops, 1u) << "gro " << gro;
    EXPECT_EQ(port->stats().rx_packets, 1u) << "gro " << gro;
  }
}

// Exit codes of the unprivileged child, for the failure message.
enum ChildExit : int {
  kChildOk = 0,
  kChildNoNetns = 10,
  kChildCannotDrop = 11,
  kChildStillPrivileged = 12,
  kChildOpenFailed = 13,
  kChildReceiveShort = 14,
  kChildSendFailed = 15,
};

// In the child: drop to nobody, open a UDP port, echo `count` frames back to their sender.
int unprivileged_echo(const Host& self, const Host& peer, std::size_t count, int ready_fd) {
  if (!enter_netns(self.ns)) return kChildNoNetns;
  if (setgroups(0, nullptr) != 0 || setresgid(kNobody, kNobody, kNobody) != 0 ||
      setresuid(kNobody, kNobody, kNobody) != 0) {
    return kChildCannotDrop;
  }
  const int xdp_fd = socket(AF_XDP, SOCK_RAW, 0);
  if (xdp_fd >= 0) return kChildStillPrivileged;  // AF_XDP needs CAP_NET_RAW: must fail here
  net::UdpPortConfig cfg;
  cfg.local_mac = self.mac;
  cfg.peer_mac = peer.mac;
  auto port = net::UdpPort::open(cfg);
  if (!port) return kChildOpenFailed;
  const char ok = 1;
  if (write(ready_fd, &ok, 1) != 1) return kChildOpenFailed;
  auto got = receive_n(**port, count, kDeadline);
  if (got.size() != count) return kChildReceiveShort;
  std::vector<std::vector<std::uint8_t>> replies;
  for (const auto& f : got) {
    auto parsed = net::parse_udp_frame(f);
    if (!parsed) return kChildReceiveShort;
    net::UdpEnvelope env = parsed->env;
    std::swap(env.src_ip, env.dst_ip);
    std::swap(env.src_mac, env.dst_mac);
    env.dst_port = net::kRoceUdpPort;
    std::vector<std::uint8_t> r(net::envelope_bytes(env) + parsed->payload.size());
    std::memcpy(r.data() + net::envelope_bytes(env), parsed->payload.data(),
                parsed->payload.size());
    net::write_envelope(env, parsed->payload.size(), r.data() + net::envelope_bytes(env));
    replies.push_back(std::move(r));
  }
  return send_all(**port, replies, kDeadline) ? kChildOk : kChildSendFailed;
}

TEST(UdpPort, WorksAsAnUnprivilegedUser) {
  SKIP_UNLESS_ROOT();
  VethPair net("unpriv");
  std::mt19937 rng(99);
  std::vector<std::vector<std::uint8_t>> frames;
  for (std::size_t size : {64, 1000, 4170}) {
    frames.push_back(make_frame(net.a(), net.b(), false, size, 0xC100, 0x02, rng));
    frames.push_back(make_frame(net.a(), net.b(), true, size + 20, 0xC101, 0x02, rng));
  }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    _exit(unprivileged_echo(net.b(), net.a(), frames.size(), ready[1]));
  }
  close(ready[1]);
  pollfd p{ready[0], POLLIN, 0};
  char byte = 0;
  const bool child_ready = poll(&p, 1, 5000) == 1 && read(ready[0], &byte, 1) == 1;
  close(ready[0]);
  std::vector<std::vector<std::uint8_t>> echoed;
  if (child_ready) {
    NsPort a(net.a(), net.b(), PortKind::kUdp);
    EXPECT_TRUE(a.ok()) << a.error();
    if (a.ok()) {
      EXPECT_TRUE(a.run([&](net::Port& port) { return send_all(port, frames, kDeadline); }));
      echoed = a.run([&](net::Port& port) { return receive_n(port, frames.size(), kDeadline); });
    }
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), kChildOk) << "see ChildExit";
  ASSERT_EQ(echoed.size(), frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const auto sent = net::parse_udp_frame(frames[i]);
    const auto back = net::parse_udp_frame(echoed[i]);
    ASSERT_TRUE(sent && back);
    EXPECT_TRUE(std::equal(sent->payload.begin(), sent->payload.end(), back->payload.begin(),
                           back->payload.end()))
        << "frame " << i;
    EXPECT_EQ(back->env.src_ip, sent->env.dst_ip);
    EXPECT_EQ(back->env.traffic_class, sent->env.traffic_class) << "ECN bits survive";
    EXPECT_EQ(back->env.src_port, sent->env.src_port) << "the UDP source port is kept";
  }
}

}  // namespace
}  // namespace xroce::testing
