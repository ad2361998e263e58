#include "switch_fabric.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace xroce::swtest {

using e2e::run;

std::string switch_bin() {
  return XROCE_SWITCH_BIN;
}

RawSocket::RawSocket(const std::string& netns, const std::string& ifname) {
  // A socket belongs to the namespace it was created in: create it on a thread that joined it.
  std::thread([&] {
    const int ns_fd = open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (ns_fd < 0) return;
    const bool joined = setns(ns_fd, CLONE_NEWNET) == 0;
    close(ns_fd);
    if (!joined) return;
    const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd < 0) return;
    const int one = 1;
    const int rcvbuf = 16 << 20;
    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
    sockaddr_ll addr{};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_ALL);
    addr.sll_ifindex = static_cast<int>(if_nametoindex(ifname.c_str()));
    if (addr.sll_ifindex == 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      return;
    }
    fd_ = fd;
  }).join();
}

RawSocket::~RawSocket() {
  if (fd_ >= 0) close(fd_);
}

bool RawSocket::send(std::span<const std::uint8_t> frame) {
  return ::send(fd_, frame.data(), frame.size(), 0) == static_cast<ssize_t>(frame.size());
}

std::optional<std::vector<std::uint8_t>> RawSocket::receive(std::chrono::milliseconds deadline) {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(deadline.count())) <= 0) return std::nullopt;
  std::vector<std::uint8_t> frame(65536);
  const ssize_t n = recv(fd_, frame.data(), frame.size(), 0);
  if (n < 0) return std::nullopt;
  frame.resize(static_cast<std::size_t>(n));
  return frame;
}

std::chrono::nanoseconds RawSocket::last_arrival() const {
  timespec ts{};
  if (ioctl(fd_, SIOCGSTAMPNS, &ts) != 0) return std::chrono::nanoseconds(0);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

std::string SwitchFabric::describe_counters() {
  const auto stats = stats_now();
  std::string out = "switch: " + (stats ? stats->dump() : std::string("no statistics"));
  const std::pair<int, const char*> links[4] = {{0, "xsa"}, {1, kPortA}, {1, kPortB}, {2, "xsb"}};
  for (const auto& [ns, link] : links)
    out += "\n" + run({"ip", "-n", ns_[ns], "-s", "-o", "link", "show", "dev", link}).output;
  return out;
}

SwitchFabric::SwitchFabric(const std::string& prefix) {
  const std::string base = prefix + "-" + std::to_string(getpid());
  const char* roles[3] = {"a", "m", "b"};
  for (int i = 0; i < 3; ++i) {
    ns_[i] = base + "-" + roles[i];
    run({"ip", "netns", "add", ns_[i]});
    for (const char* key : {"all", "default"}) {
      run({"ip", "netns", "exec", ns_[i], "sysctl", "-qw",
           std::string("net.ipv6.conf.") + key + ".disable_ipv6=1"});
    }
  }
  ok_ = run({"ip", "link", "add", "xsa", "netns", ns_[0], "type", "veth", "peer", "name", kPortA,
             "netns", ns_[1]})
                .status == 0 &&
        run({"ip", "link", "add", "xsb", "netns", ns_[2], "type", "veth", "peer", "name", kPortB,
             "netns", ns_[1]})
                .status == 0;
  ok_ = ok_ && run({"ip", "-n", ns_[0], "link", "set", "dev", "xsa", "up"}).status == 0 &&
        run({"ip", "-n", ns_[2], "link", "set", "dev", "xsb", "up"}).status == 0 &&
        run({"ip", "-n", ns_[1], "link", "set", "dev", kPortA, "up"}).status == 0 &&
        run({"ip", "-n", ns_[1], "link", "set", "dev", kPortB, "up"}).status == 0;
  stats_path_ = "/tmp/" + base + "-switch.json";
  // A veth reports carrier a moment after both ends are up.
  ok_ = ok_ && e2e::eventually(
                   [&] {
                     auto r = run({"ip", "-n", ns_[1], "-o", "link", "show", "up"});
                     return r.output.find("LOWER_UP") != std::string::npos &&
                            r.output.find(kPortA) != std::string::npos &&
                            r.output.find(kPortB) != std::string::npos &&
                            r.output.find("NO-CARRIER") == std::string::npos;
                   },
                   std::chrono::seconds(10));
}

SwitchFabric::~SwitchFabric() {
  if (switch_) {
    int status = 0;
    stop_switch(&status);
  }
  for (const auto& ns : ns_)
    run({"ip", "netns", "del", ns});
  std::error_code ec;
  std::filesystem::remove(stats_path_, ec);
}

bool SwitchFabric::start_switch(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip",   "netns",  "exec", ns_[1],         switch_bin(), "--port",
                                   kPortA, "--port", kPortB, "--stats-json", stats_path_};
  argv.insert(argv.end(), args.begin(), args.end());
  std::error_code ec;
  std::filesystem::remove(stats_path_, ec);
  last_sequence_ = 0;
  switch_ = std::make_unique<e2e::Child>(argv);  // `ip netns exec` execs: its pid is the switch's
  return switch_->read_line(std::chrono::seconds(10)) == "ready";
}

std::optional<nlohmann::json> SwitchFabric::read_stats() const {
  std::ifstream in(stats_path_);
  if (!in) return std::nullopt;
  auto doc = nlohmann::json::parse(in, nullptr, false);
  if (doc.is_discarded()) return std::nullopt;
  return doc;
}

std::optional<nlohmann::json> SwitchFabric::stats_now() {
  if (!switch_) return std::nullopt;
  kill(switch_->pid(), SIGUSR1);
  std::optional<nlohmann::json> doc;
  // Polled every millisecond: the switch answers in well under one when scheduled, and tests
  // that pace their sending by its counters should not wait longer than it does.
  const bool got = test::eventually(
      [&] {
        doc = read_stats();
        return doc && (*doc)["sequence"].get<std::uint64_t>() > last_sequence_;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(1));
  if (!got) return std::nullopt;
  last_sequence_ = (*doc)["sequence"].get<std::uint64_t>();
  return doc;
}

std::optional<nlohmann::json> SwitchFabric::stop_switch(int* status) {
  if (!switch_) return std::nullopt;
  kill(switch_->pid(), SIGTERM);
  *status = switch_->wait(std::chrono::seconds(10));
  switch_.reset();
  auto doc = read_stats();
  if (!doc || (*doc)["sequence"].get<std::uint64_t>() <= last_sequence_) return std::nullopt;
  return doc;
}

nlohmann::json SwitchFabric::port(const nlohmann::json& stats, const std::string& name) {
  for (const auto& p : stats["ports"])
    if (p["name"] == name) return p;
  return nlohmann::json::object();
}

}  // namespace xroce::swtest
