// `xroce up [IFNAME] [--port afxdp|udp] [--name DEV] [--cpus LIST] [--github-env FILE]` and
// `xroce down [IFNAME|DEV]`: one command for a CI job to get an RDMA device and the variables
// its tests need, and one to remove it.
//
// up picks the interface of the default route when none is named (IPv4, else IPv6); in a
// loopback-only network namespace (a container started without a network) it takes `lo` with
// the UDP port, the only port that serves a loopback netdev. It adds the device (starting
// xroced if needed; a device already on that interface is reused), waits until the port is
// ACTIVE, and prints the variables of `xroce env` plus XROCE_DEVICE as eval-able `export`
// lines, or appends them as NAME=VALUE lines to the file --github-env names (GitHub Actions'
// $GITHUB_ENV). Progress goes to stderr so that `eval "$(xroce up)"` works.
//
// down deletes the device up made (named by its interface or its own name); xroced exits with
// its last device, removing its run directory, device nodes and XDP program.
#include <fmt/core.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "app_env.h"
#include "commands.h"
#include "daemon_launch.h"
#include "xroce/control.h"

namespace xroce::cli {

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);
constexpr const char* kDefaultNamePrefix = "xroce_";

struct UpArgs {
  std::string ifname;
  std::string port;  // "" = afxdp, or udp on lo
  std::string name;
  std::string github_env;
  std::string cpus;  // "" = the workers run wherever the scheduler puts them
  double timeout_s = 30;
};

// The interface of the lowest-metric default route in /proc/net/route (this namespace's
// IPv4 table), "" if there is none.
std::string ipv4_default_route_interface() {
  std::ifstream in("/proc/net/route");
  std::string line;
  std::getline(in, line);  // header
  std::string best;
  unsigned long best_metric = ~0ul;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string iface, destination, gateway, mask;
    unsigned long flags = 0, refcnt = 0, use = 0, metric = 0;
    fields >> iface >> destination >> gateway >> std::hex >> flags >> std::dec >> refcnt >> use >>
        metric >> mask;
    constexpr unsigned long kRouteUp = 0x1;  // RTF_UP
    if (!fields || destination != "00000000" || mask != "00000000" || !(flags & kRouteUp)) continue;
    if (metric < best_metric) {
      best = iface;
      best_metric = metric;
    }
  }
  return best;
}

// The same for IPv6 (/proc/net/ipv6_route: destination, prefix length, ..., metric, ..., flags,
// device), skipping the unreachable default routes the kernel keeps on lo.
std::string ipv6_default_route_interface() {
  std::ifstream in("/proc/net/ipv6_route");
  std::string line;
  std::string best;
  unsigned long best_metric = ~0ul;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string dst, dst_len, src, src_len, next_hop, metric_hex, refcnt, use, flags_hex, iface;
    fields >> dst >> dst_len >> src >> src_len >> next_hop >> metric_hex >> refcnt >> use >>
        flags_hex >> iface;
    if (!fields || dst != std::string(32, '0') || dst_len != "00" || iface == "lo") continue;
    const unsigned long metric = std::stoul(metric_hex, nullptr, 16);
    if (metric < best_metric) {
      best = iface;
      best_metric = metric;
    }
  }
  return best;
}

// Every interface of this namespace but the loopback ones.
std::vector<std::string> non_loopback_interfaces() {
  std::vector<std::string> out;
  struct if_nameindex* all = if_nameindex();
  if (all == nullptr) return out;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  for (struct if_nameindex* i = all; i->if_index != 0; ++i) {
    ifreq req{};
    std::snprintf(req.ifr_name, sizeof req.ifr_name, "%s", i->if_name);
    const bool loopback =
        fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &req) == 0 && (req.ifr_flags & IFF_LOOPBACK) != 0;
    if (!loopback) out.emplace_back(i->if_name);
  }
  if (fd >= 0) close(fd);
  if_freenameindex(all);
  return out;
}

// The interface up uses when none is named; error text in `error` when there is no choice.
std::string pick_interface(std::string& error) {
  if (std::string v4 = ipv4_default_route_interface(); !v4.empty()) return v4;
  if (std::string v6 = ipv6_default_route_interface(); !v6.empty()) return v6;
  const auto others = non_loopback_interfaces();
  if (others.empty()) return "lo";
  std::string names;
  for (const auto& n : others)
    names += (names.empty() ? "" : ", ") + n;
  error = fmt::format("no default route; name the interface (this namespace has {})", names);
  return {};
}

std::optional<nlohmann::json> show_links(std::string& error) {
  control::ControlClient client;
  if (connect_daemon(client, false, error) != 0) return nlohmann::json::array();
  std::string text;
  if (const int err = client.call_text(control::Op::link_show, nullptr, 0, text)) {
    error = fmt::format("link show: {}", std::strerror(err));
    return std::nullopt;
  }
  auto links = nlohmann::json::parse(text, nullptr, false);
  if (!links.is_array()) {
    error = "malformed link show reply from xroced";
    return std::nullopt;
  }
  return links;
}

// The device on `ifname` (or named `ifname`), or null.
nlohmann::json find_link(const nlohmann::json& links, const std::string& ifname_or_name) {
  for (const auto& l : links) {
    if (l.value("netdev", "") == ifname_or_name || l.value("ifname", "") == ifname_or_name)
      return l;
  }
  return nullptr;
}

int add_link(const std::string& name, const std::string& ifname, control::PortKind port,
             const std::string& cpus, std::string& error) {
  control::LinkAddRequest request{};
  if (!cpus.empty() && !(error = set_worker_cpus(cpus, request)).empty()) return EINVAL;
  if (name.empty() || name.size() >= sizeof request.name) {
    error = fmt::format("bad device name '{}'", name);
    return EINVAL;
  }
  if (ifname.size() >= sizeof request.netdev) {
    error = fmt::format("bad interface name '{}'", ifname);
    return EINVAL;
  }
  std::snprintf(request.name, sizeof request.name, "%s", name.c_str());
  std::snprintf(request.netdev, sizeof request.netdev, "%s", ifname.c_str());
  request.port = port;
  request.queues = 0;
  control::ControlClient client;
  bool reached = false;
  if (const int err = add_device(client, request, reached, error)) {
    if (!reached) return err;
    error = fmt::format("add {} on {} (port {}): {}", name, ifname,
                        port == control::PortKind::udp ? "udp" : "afxdp", std::strerror(err));
    return err;
  }
  return 0;
}

// Polls link show until the device's port is ACTIVE or the deadline passes.
bool wait_active(const std::string& name, double timeout_s, std::string& error) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
  std::string last_state = "unknown";
  while (true) {
    if (auto links = show_links(error)) {
      const auto link = find_link(*links, name);
      if (link.is_object()) {
        last_state = link.value("state", "unknown");
        if (last_state == "ACTIVE") return true;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(kPollInterval);
  }
  error = fmt::format("{} is not ACTIVE after {} s (state {}; is the interface up?)", name,
                      timeout_s, last_state);
  return false;
}

Environment up_environment(const std::string& device) {
  Environment env = app_environment();
  env.emplace_back("XROCE_DEVICE", device);
  return env;
}

int write_github_env(const std::string& path, const Environment& env) {
  std::ofstream out(path, std::ios::app);
  for (const auto& [key, value] : env)
    out << key << '=' << value << '\n';
  out.flush();
  if (!out) {
    fmt::print(stderr, "xroce up: cannot append to {}: {}\n", path, std::strerror(errno));
    return 1;
  }
  return 0;
}

int run_up(const UpArgs& args) {
  std::string error;
  std::string ifname = args.ifname;
  if (ifname.empty() && (ifname = pick_interface(error)).empty()) {
    fmt::print(stderr, "xroce up: {}\n", error);
    return 1;
  }
  const bool loopback = ifname == "lo";
  std::string port = args.port.empty() ? (loopback ? "udp" : "afxdp") : args.port;
  if (port != "afxdp" && port != "udp") {
    fmt::print(stderr, "xroce up: --port must be afxdp or udp, not '{}'\n", port);
    return 2;
  }
  control::LinkAddRequest checked{};
  if (!args.cpus.empty()) {
    if (const std::string why = set_worker_cpus(args.cpus, checked); !why.empty()) {
      fmt::print(stderr, "xroce up: --{}\n", why);
      return 2;
    }
  }
  auto links = show_links(error);
  if (!links) {
    fmt::print(stderr, "xroce up: {}\n", error);
    return 1;
  }
  std::string name;
  if (const auto existing = find_link(*links, ifname); existing.is_object()) {
    name = existing.value("ifname", "");
    fmt::print(stderr, "xroce up: {} already serves {}\n", name, ifname);
    const std::string bound = existing.value("cpus", "");
    if (!args.cpus.empty() && bound != checked.cpus) {
      fmt::print(stderr, "xroce up: its workers stay {} (xroce down, then up, to change that)\n",
                 bound.empty() ? std::string("unbound") : "on CPUs " + bound);
    }
  } else {
    name = args.name.empty() ? kDefaultNamePrefix + ifname : args.name;
    const auto kind = port == "udp" ? control::PortKind::udp : control::PortKind::afxdp;
    if (const int err = add_link(name, ifname, kind, args.cpus, error); err != 0) {
      fmt::print(stderr, "xroce up: {}\n", error);
      return 1;
    }
    fmt::print(stderr, "xroce up: {} on {} (port {})\n", name, ifname, port);
  }
  if (!wait_active(name, args.timeout_s, error)) {
    fmt::print(stderr, "xroce up: {}\n", error);
    return 1;
  }
  const Environment env = up_environment(name);
  if (!args.github_env.empty()) return write_github_env(args.github_env, env);
  for (const auto& [key, value] : env)
    fmt::print("export {}={}\n", key, shell_quote(value));
  return 0;
}

int run_down(const std::string& ifname_or_name) {
  std::string error;
  std::string wanted = ifname_or_name;
  if (wanted.empty() && (wanted = pick_interface(error)).empty()) {
    fmt::print(stderr, "xroce down: {}\n", error);
    return 1;
  }
  auto links = show_links(error);
  if (!links) {
    fmt::print(stderr, "xroce down: {}\n", error);
    return 1;
  }
  const auto link = find_link(*links, wanted);
  if (!link.is_object()) {
    fmt::print(stderr, "xroce down: no xroce device on or named '{}'\n", wanted);
    return 1;
  }
  control::LinkDelRequest request{};
  std::snprintf(request.name, sizeof request.name, "%s", link.value("ifname", "").c_str());
  control::ControlClient client;
  if (connect_daemon(client, false, error) != 0) {
    fmt::print(stderr, "xroce down: {}\n", error);
    return 1;
  }
  if (const int err = client.call(control::Op::link_del, &request, sizeof request, nullptr, 0)) {
    fmt::print(stderr, "xroce down: del {}: {}\n", request.name, std::strerror(err));
    return 1;
  }
  fmt::print(stderr, "xroce down: {} removed from {}\n", request.name,
             link.value("netdev", std::string()));
  return 0;
}

}  // namespace

void register_up(CLI::App& app, ExitStatus& status) {
  auto* cmd = app.add_subcommand(
      "up", "Bring a device up on an interface, wait for ACTIVE, print the variables (CI jobs)");
  auto args = std::make_shared<UpArgs>();
  cmd->add_option("ifname", args->ifname,
                  "Interface (default: the default route's, or lo when it is the only one)");
  cmd->add_option("--port", args->port, "afxdp (default) or udp (default on lo)");
  cmd->add_option("--name", args->name, "Device name (default xroce_IFNAME)");
  cmd->add_option("--github-env", args->github_env,
                  "Append NAME=VALUE lines to this file ($GITHUB_ENV) instead of printing");
  cmd->add_option("--timeout", args->timeout_s, "Seconds to wait for ACTIVE (default 30)");
  cmd->add_option("--cpus", args->cpus,
                  "CPUs for the device's workers, a CPU list such as 1 or 0-3 (link add's cpus)");
  cmd->callback([args, &status] { status.code = run_up(*args); });
}

void register_down(CLI::App& app, ExitStatus& status) {
  auto* cmd = app.add_subcommand("down", "Remove the device `xroce up` made");
  auto target = std::make_shared<std::string>();
  cmd->add_option("target", *target, "Its interface or device name (default: as up picks)");
  cmd->callback([target, &status] { status.code = run_down(*target); });
}

}  // namespace xroce::cli
