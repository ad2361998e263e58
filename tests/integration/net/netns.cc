#include "netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <utility>

namespace xroce::testing {
namespace {

std::atomic<int> g_pair_counter{0};

net::Mac read_mac(const std::string& ns, const std::string& ifname) {
  std::string out;
  shell(fmt::format("ip -n {} -br link show dev {} | awk '{{print $3}}'", ns, ifname), &out);
  net::Mac mac{};
  unsigned v[6] = {};
  if (std::sscanf(out.c_str(), "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) ==
      6) {
    for (int i = 0; i < 6; ++i)
      mac[i] = static_cast<std::uint8_t>(v[i]);
  }
  return mac;
}

net::Ip16 parse_ip(const std::string& text) {
  net::Ip16 ip{};
  in_addr a4{};
  if (inet_pton(AF_INET, text.c_str(), &a4) == 1) return net::v4_mapped(ntohl(a4.s_addr));
  inet_pton(AF_INET6, text.c_str(), ip.data());
  return ip;
}

void must(const std::string& command) {
  if (shell(command) != 0) throw std::runtime_error("test setup failed: " + command);
}

}  // namespace

int shell(const std::string& command, std::string* out) {
  FILE* p = popen((command + " 2>/dev/null").c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) {
    if (out) out->append(buf.data(), n);
  }
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool running_as_root() {
  return geteuid() == 0;
}

VethPair::VethPair(const std::string& tag, int queues) : queues_(queues) {
  const int n = g_pair_counter.fetch_add(1);
  const int pid = getpid();
  const int subnet = (pid + n) % 250 + 1;
  a_.ns = fmt::format("xroce-{}-{}-{}-a", tag, pid, n);
  b_.ns = fmt::format("xroce-{}-{}-{}-b", tag, pid, n);
  // Interface names are at most 15 characters.
  a_.ifname = fmt::format("xa{}x{}", pid % 1000000, n);
  b_.ifname = fmt::format("xb{}x{}", pid % 1000000, n);
  a_.ipv4_text = fmt::format("198.18.{}.1", subnet);
  b_.ipv4_text = fmt::format("198.18.{}.2", subnet);
  a_.ipv6_text = fmt::format("2001:2:0:{:x}::1", subnet);
  b_.ipv6_text = fmt::format("2001:2:0:{:x}::2", subnet);
  try {
    create();
  } catch (...) {
    destroy();
    throw;
  }
}

void VethPair::create() {
  must("ip netns add " + a_.ns);
  must("ip netns add " + b_.ns);
  const std::string q = fmt::format("numtxqueues {0} numrxqueues {0}", queues_);
  must(fmt::format("ip link add {} netns {} {} type veth peer name {} netns {} {}", a_.ifname,
                   a_.ns, q, b_.ifname, b_.ns, q));
  for (Host* h : {&a_, &b_}) {
    must(fmt::format("ip -n {} link set lo up", h->ns));
    must(fmt::format("ip -n {} link set {} mtu 9000 up", h->ns, h->ifname));
    must(fmt::format("ip -n {} addr add {}/24 dev {}", h->ns, h->ipv4_text, h->ifname));
    must(fmt::format("ip -n {} addr add {}/64 dev {} nodad", h->ns, h->ipv6_text, h->ifname));
    h->mac = read_mac(h->ns, h->ifname);
    h->ipv4 = parse_ip(h->ipv4_text);
    h->ipv6 = parse_ip(h->ipv6_text);
  }
  // Static neighbours: the first frames of a test must not wait for ARP or ND.
  for (auto [self, peer] : {std::pair{&a_, &b_}, std::pair{&b_, &a_}}) {
    const std::string mac = fmt::format("{:02x}", fmt::join(peer->mac, ":"));
    for (const std::string* ip : {&peer->ipv4_text, &peer->ipv6_text}) {
      must(fmt::format("ip -n {} neigh replace {} lladdr {} dev {} nud permanent", self->ns, *ip,
                       mac, self->ifname));
    }
  }
}

VethPair::~VethPair() {
  destroy();
}

void VethPair::destroy() {
  // Deleting a namespace deletes the veth in it, and the peer with it.
  shell("ip netns del " + a_.ns);
  shell("ip netns del " + b_.ns);
}

bool enter_netns(const std::string& ns) {
  const int fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = setns(fd, CLONE_NEWNET) == 0;
  close(fd);
  return ok;
}

void run_in_netns(const std::string& ns, const std::function<void()>& fn) {
  std::exception_ptr error;
  std::thread t([&] {
    try {
      if (!enter_netns(ns)) throw std::runtime_error("setns into " + ns);
      fn();
    } catch (...) {
      error = std::current_exception();
    }
  });
  t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace xroce::testing
