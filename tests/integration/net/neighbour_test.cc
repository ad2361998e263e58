// Route and neighbour resolution against the kernel (engine/net/neighbour.h): two namespaces
// joined by a veth pair with no static neighbour entries, so every answer comes from real ARP /
// ND that the resolver triggered (IPv6 also with no link-local address to send from); off-link
// destinations routed through the peer; the namespace's own addresses answered as local; and
// changes followed: a peer whose MAC changes (announced, and unannounced with the kernel's probes),
// a route moved to another gateway.
#include <fcntl.h>
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "net/neighbour.h"

namespace xroce::net {
namespace {

int sh(const std::string& cmd, std::string* out = nullptr) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  std::array<char, 512> buf;
  std::string text;
  while (std::fgets(buf.data(), buf.size(), p) != nullptr)
    text += buf.data();
  const int rc = ::pclose(p);
  if (out != nullptr) *out = text;
  return rc;
}

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

wire::MacAddr parse_mac(const std::string& text) {
  wire::MacAddr mac{};
  unsigned v[6] = {};
  std::sscanf(text.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]);
  for (int i = 0; i < 6; ++i)
    mac[i] = static_cast<std::uint8_t>(v[i]);
  return mac;
}

wire::IpAddr v6(std::uint16_t g3, std::uint8_t last) {
  std::array<std::uint8_t, 16> b{0x20, 0x01, 0x00, 0x02, 0x00, 0x00};
  b[6] = static_cast<std::uint8_t>(g3 >> 8);
  b[7] = static_cast<std::uint8_t>(g3);
  b[15] = last;
  return wire::IpAddr::v6(b);
}

// Namespaces <tag>a and <tag>b, veth <tag>a/<tag>b: 198.18.200.1/24 and .2, 2001:2:0:c8::1/64
// and ::2. In a: 198.19.77.0/24 and 2001:2:0:77::/64 routed via b. Neighbour probes sped up
// so that a missing neighbour fails in a fraction of a second.
class TwoHosts {
 public:
  TwoHosts() : tag_(fmt::format("xg3n{}", ::getpid() % 100000)) {
    cleanup();
    ok_ = run(fmt::format("ip netns add {0}a && ip netns add {0}b", tag_)) &&
          run(fmt::format("ip link add {0}a netns {0}a type veth peer name {0}b netns {0}b", tag_));
    for (const char* side : {"a", "b"}) {
      const int host = side[0] == 'a' ? 1 : 2;
      const std::string ns = tag_ + side;
      // No DAD: link-local addresses usable at once, as on a host that has been up a while.
      ok_ = ok_ &&
            run(fmt::format("ip netns exec {0} sysctl -qw net.ipv6.conf.{0}.accept_dad=0", ns)) &&
            run(fmt::format("ip -n {0} link set lo up && ip -n {0} link set {0} up", ns)) &&
            run(fmt::format("ip -n {0} addr add 198.18.200.{1}/24 dev {0}", ns, host)) &&
            run(fmt::format("ip -n {0} addr add 2001:2:0:c8::{1}/64 dev {0} nodad", ns, host)) &&
            run(fmt::format("ip netns exec {0} sysctl -qw net.ipv4.neigh.{0}.retrans_time_ms=100 "
                            "net.ipv6.neigh.{0}.retrans_time_ms=100",
                            ns));
    }
    ok_ = ok_ && run(fmt::format("ip -n {0}a route add 198.19.77.0/24 via 198.18.200.2", tag_)) &&
          run(fmt::format("ip -n {0}a route add 2001:2:0:77::/64 via 2001:2:0:c8::2", tag_));
    std::string out;
    sh(fmt::format("ip netns exec {0}b cat /sys/class/net/{0}b/address", tag_), &out);
    peer_mac_ = parse_mac(out);
    sh(fmt::format("ip netns exec {0}a cat /sys/class/net/{0}a/ifindex", tag_), &out);
    ifindex_ = std::atoi(out.c_str());
  }
  ~TwoHosts() { cleanup(); }

  bool ok() const { return ok_ && ifindex_ > 0; }
  std::string ns_a() const { return tag_ + "a"; }
  std::string ns_b() const { return tag_ + "b"; }
  std::string if_a() const { return tag_ + "a"; }
  std::string if_b() const { return tag_ + "b"; }
  // Runs `cmd` (a shell command), failing the test if it fails.
  bool run(const std::string& cmd) {
    std::string out;
    const int rc = sh(cmd, &out);
    if (rc != 0) ADD_FAILURE() << cmd << ": " << out;
    return rc == 0;
  }
  // Gives b's end of the link a new MAC.
  bool set_peer_mac(const wire::MacAddr& mac) {
    peer_mac_ = mac;
    return run(
        fmt::format("ip -n {0}b link set dev {0}b address {1:02x}:{2:02x}:{3:02x}:{4:02x}:"
                    "{5:02x}:{6:02x}",
                    tag_, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]));
  }
  int ifindex_a() const { return ifindex_; }
  const wire::MacAddr& peer_mac() const { return peer_mac_; }
  std::string neighbours_a() const {
    std::string out;
    sh(fmt::format("ip -n {0}a neigh show dev {0}a", tag_), &out);
    return out;
  }

 private:
  void cleanup() {
    sh(fmt::format("ip netns del {0}a", tag_));
    sh(fmt::format("ip netns del {0}b", tag_));
  }

  std::string tag_;
  bool ok_ = false;
  int ifindex_ = 0;
  wire::MacAddr peer_mac_{};
};

// Opens the resolver from a thread inside `ns`: its socket then lives in that namespace.
std::unique_ptr<NeighbourResolver> open_in(const std::string& ns, NeighbourOptions options) {
  std::unique_ptr<NeighbourResolver> r;
  std::thread t([&] {
    const int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) return;
    ::close(fd);
    int error = 0;
    r = NeighbourResolver::open(options, error);
  });
  t.join();
  return r;
}

// Drives the resolver until an answer for `dst` arrives or the deadline passes.
std::optional<NeighbourAnswer> wait_answer(NeighbourResolver& r, const wire::IpAddr& dst,
                                           std::chrono::milliseconds limit) {
  const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(limit.count()) * 1000000;
  while (now_ns() < deadline) {
    while (auto a = r.poll_answer())
      if (a->key.dst == dst) return a;
    std::uint64_t wake = std::min(deadline, now_ns() + 50'000'000);
    if (auto d = r.next_deadline()) wake = std::min(wake, std::max(*d, now_ns()));
    pollfd p{r.fd(), POLLIN, 0};
    const int ms = static_cast<int>((wake - std::min(wake, now_ns())) / 1'000'000);
    if (::poll(&p, 1, ms) > 0) r.on_readable(now_ns());
    if (auto d = r.next_deadline(); d && *d <= now_ns()) r.on_timeout(now_ns());
  }
  return std::nullopt;
}

class NeighbourIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
    hosts_ = std::make_unique<TwoHosts>();
    ASSERT_TRUE(hosts_->ok());
    NeighbourOptions options;
    options.give_up_ns = 1'500'000'000;
    resolver_ = open_in(hosts_->ns_a(), options);
    ASSERT_NE(resolver_, nullptr);
  }
  void expect_resolves_to_peer(const wire::IpAddr& dst) {
    const NeighbourAnswer first = resolver_->resolve(now_ns(), hosts_->ifindex_a(), dst);
    ASSERT_EQ(first.state, NeighbourState::kPending);
    const auto answer = wait_answer(*resolver_, dst, std::chrono::seconds(5));
    ASSERT_TRUE(answer.has_value()) << "no answer; kernel table:\n" << hosts_->neighbours_a();
    EXPECT_EQ(answer->state, NeighbourState::kResolved) << hosts_->neighbours_a();
    EXPECT_EQ(answer->mac, hosts_->peer_mac());
    // Now cached: answered at once, nothing asked.
    const NeighbourAnswer cached = resolver_->resolve(now_ns(), hosts_->ifindex_a(), dst);
    EXPECT_EQ(cached.state, NeighbourState::kResolved);
    EXPECT_EQ(cached.mac, hosts_->peer_mac());
  }

  std::unique_ptr<TwoHosts> hosts_;
  std::unique_ptr<NeighbourResolver> resolver_;
};

TEST_F(NeighbourIntegration, OnLinkIpv4TriggersArp) {
  EXPECT_EQ(hosts_->neighbours_a().find("198.18.200.2"), std::string::npos);
  expect_resolves_to_peer(wire::IpAddr::v4(0xC612C802));  // 198.18.200.2
}

TEST_F(NeighbourIntegration, OnLinkIpv6TriggersNeighbourSolicitation) {
  expect_resolves_to_peer(v6(0xc8, 2));
}

// Without a usable link-local address (here none at all; right after link-up, one still in
// DAD) the kernel sends no solicitation for an NTF_USE (ndisc_send_ns has no source): the
// resolver's own, from the global address, is what gets the answer (neighbour.h rule 4).
TEST_F(NeighbourIntegration, Ipv6ResolvesWithoutAUsableLinkLocalAddress) {
  ASSERT_TRUE(hosts_->run(
      fmt::format("ip -n {0} -6 addr flush dev {1} scope link", hosts_->ns_a(), hosts_->if_a())));
  expect_resolves_to_peer(v6(0xc8, 2));
}

TEST_F(NeighbourIntegration, OffLinkDestinationsResolveTheGateway) {
  expect_resolves_to_peer(wire::IpAddr::v4(0xC6134D05));  // 198.19.77.5 via 198.18.200.2
  expect_resolves_to_peer(v6(0x77, 5));                   // 2001:2:0:77::5 via 2001:2:0:c8::2
}

TEST_F(NeighbourIntegration, SilentNeighbourIsUnreachable) {
  const auto nobody = wire::IpAddr::v4(0xC612C863);  // 198.18.200.99
  EXPECT_EQ(resolver_->resolve(now_ns(), hosts_->ifindex_a(), nobody).state,
            NeighbourState::kPending);
  const auto answer = wait_answer(*resolver_, nobody, std::chrono::seconds(6));
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->state, NeighbourState::kUnreachable);
}

TEST_F(NeighbourIntegration, NoRouteIsUnreachable) {
  const auto elsewhere = wire::IpAddr::v4(0xC6130909);  // 198.19.9.9: no route in a
  resolver_->resolve(now_ns(), hosts_->ifindex_a(), elsewhere);
  const auto answer = wait_answer(*resolver_, elsewhere, std::chrono::seconds(5));
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->state, NeighbourState::kUnreachable);
}

TEST_F(NeighbourIntegration, OwnAddressesAreLocalWithoutAskingTheNeighbourTable) {
  for (const auto& own : {wire::IpAddr::v4(0xC612C801), v6(0xc8, 1)}) {  // 198.18.200.1, ::1
    const auto answer = resolver_->resolve_blocking(hosts_->ifindex_a(), own, 2'000'000'000);
    EXPECT_EQ(answer.state, NeighbourState::kLocal);
    EXPECT_EQ(answer.ifindex, hosts_->ifindex_a());
  }
  // An address added to another interface (lo) after the resolver opened: notified, local.
  ASSERT_TRUE(hosts_->run(fmt::format("ip -n {} addr add 198.18.201.1/32 dev lo", hosts_->ns_a())));
  const auto added = wire::IpAddr::v4(0xC612C901);
  bool local = false;
  for (int i = 0; i < 100 && !local; ++i) {
    wait_answer(*resolver_, added, std::chrono::milliseconds(20));
    local =
        resolver_->resolve(now_ns(), hosts_->ifindex_a(), added).state == NeighbourState::kLocal;
  }
  EXPECT_TRUE(local);
  EXPECT_EQ(hosts_->neighbours_a().find("198.18.201.1"), std::string::npos);
  EXPECT_EQ(hosts_->neighbours_a().find("198.18.200.1 "), std::string::npos);
}

TEST_F(NeighbourIntegration, RouteHopLimitAndPreferredSource) {
  ASSERT_TRUE(hosts_->run(fmt::format(
      "ip -n {} route add 198.19.78.0/24 via 198.18.200.2 hoplimit 9", hosts_->ns_a())));
  const auto answer = resolver_->resolve_blocking(hosts_->ifindex_a(), wire::IpAddr::v4(0xC6134E05),
                                                  5'000'000'000);  // 198.19.78.5
  EXPECT_EQ(answer.state, NeighbourState::kResolved);
  EXPECT_TRUE(answer.via_gateway);
  EXPECT_EQ(answer.next_hop, wire::IpAddr::v4(0xC612C802));
  EXPECT_EQ(answer.hop_limit, 9);
  EXPECT_EQ(answer.source, wire::IpAddr::v4(0xC612C801));
  EXPECT_EQ(answer.mac, hosts_->peer_mac());
}

// Keeps using (ifindex_a, dst) as a worker sending to it would, until `done` holds for the
// answer or the deadline passes. Returns whether it held; counts the answers with a changed MAC
// (for any destination) in *mac_changes.
bool follow(NeighbourResolver& r, int ifindex, const wire::IpAddr& dst,
            const std::function<bool(const NeighbourAnswer&)>& done,
            std::chrono::milliseconds limit, int* mac_changes = nullptr) {
  const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(limit.count()) * 1000000;
  while (now_ns() < deadline) {
    if (done(r.resolve(now_ns(), ifindex, dst))) return true;
    pollfd p{r.fd(), POLLIN, 0};
    if (::poll(&p, 1, 20) > 0) r.on_readable(now_ns());
    if (auto d = r.next_deadline(); d && *d <= now_ns()) r.on_timeout(now_ns());
    while (auto a = r.poll_answer())
      if (mac_changes != nullptr && a->mac_changed) ++*mac_changes;
  }
  return false;
}

TEST_F(NeighbourIntegration, AnnouncedMacChangeIsFollowedAtOnce) {
  const auto peer = wire::IpAddr::v4(0xC612C802);
  const auto peer6 = v6(0xc8, 2);
  expect_resolves_to_peer(peer);
  expect_resolves_to_peer(peer6);
  // b announces its new MAC (gratuitous ARP, unsolicited neighbour advertisement), as a host
  // or router does when its address moves.
  ASSERT_TRUE(
      hosts_->run(fmt::format("ip netns exec {0} sysctl -qw net.ipv4.conf.{1}.arp_notify=1 "
                              "net.ipv6.conf.{1}.ndisc_notify=1",
                              hosts_->ns_b(), hosts_->if_b())));
  const wire::MacAddr moved = {0x02, 0x00, 0x5e, 0x00, 0x53, 0x11};
  ASSERT_TRUE(hosts_->set_peer_mac(moved));
  int changes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& dst : {peer, peer6}) {
    EXPECT_TRUE(follow(
        *resolver_, hosts_->ifindex_a(), dst,
        [&](const NeighbourAnswer& a) { return a.mac == moved; }, std::chrono::seconds(3),
        &changes))
        << hosts_->neighbours_a();
  }
  // Far sooner than any probe could have found it: the announcement did.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(changes, 2);  // each destination's answer said its MAC changed, once
}

TEST_F(NeighbourIntegration, UnannouncedMacChangeIsFollowedThroughTheKernelsProbes) {
  // The kernel's neighbour timers, shortened: reachable 0.5-1.5 s, first probe after 1 s, three
  // unicast probes 100 ms apart. The resolver keeps "using" the entry (NTF_USE), so the kernel
  // re-confirms it, finds the old MAC silent, and the resolver resolves it afresh.
  ASSERT_TRUE(hosts_->run(
      fmt::format("ip netns exec {0} sysctl -qw net.ipv4.neigh.{1}.base_reachable_time_ms=1000 "
                  "net.ipv4.neigh.{1}.delay_first_probe_time=1",
                  hosts_->ns_a(), hosts_->if_a())));
  NeighbourOptions options;
  options.confirm_interval_ns = 200'000'000;
  resolver_ = open_in(hosts_->ns_a(), options);
  ASSERT_NE(resolver_, nullptr);
  const auto peer = wire::IpAddr::v4(0xC612C802);
  expect_resolves_to_peer(peer);
  const wire::MacAddr moved = {0x02, 0x00, 0x5e, 0x00, 0x53, 0x22};
  ASSERT_TRUE(hosts_->set_peer_mac(moved));
  int changes = 0;
  EXPECT_TRUE(follow(
      *resolver_, hosts_->ifindex_a(), peer,
      [&](const NeighbourAnswer& a) {
        return a.state == NeighbourState::kResolved && a.mac == moved;
      },
      std::chrono::seconds(10), &changes))
      << hosts_->neighbours_a();
  EXPECT_EQ(changes, 1);
}

TEST_F(NeighbourIntegration, MovedRouteIsFollowedToTheNewGateway) {
  ASSERT_TRUE(hosts_->run(
      fmt::format("ip -n {} addr add 198.18.200.3/24 dev {}", hosts_->ns_b(), hosts_->if_b())));
  const auto far = wire::IpAddr::v4(0xC6134D05);  // 198.19.77.5, via 198.18.200.2
  expect_resolves_to_peer(far);
  ASSERT_TRUE(hosts_->run(
      fmt::format("ip -n {} route replace 198.19.77.0/24 via 198.18.200.3", hosts_->ns_a())));
  EXPECT_TRUE(follow(
      *resolver_, hosts_->ifindex_a(), far,
      [](const NeighbourAnswer& a) {
        return a.state == NeighbourState::kResolved && a.next_hop == wire::IpAddr::v4(0xC612C803);
      },
      std::chrono::seconds(3)));
  EXPECT_EQ(resolver_->resolve(now_ns(), hosts_->ifindex_a(), far).mac, hosts_->peer_mac());
}

}  // namespace
}  // namespace xroce::net
