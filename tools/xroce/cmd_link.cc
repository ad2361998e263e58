// `xroce link ...`, modelled on iproute2's `rdma link`:
//   xroce link add NAME netdev IFNAME [port afxdp|udp] [queues N] [cpus LIST] [--wait-s S]
//   xroce link del NAME
//   xroce link show [NAME] [--json]
// `cpus LIST` binds the device's workers, worker i to the i-th CPU of LIST (round robin), as a
// NIC's queue interrupts are bound to CPUs (engine/daemon/README.md, "Where the workers run").
// `link add` returns once the port is ACTIVE, as the verbs programs started after it need it
// (perftest refuses a port in any other state), or says within --wait-s why it is not.
// `link del` of a daemon's last device returns once that daemon has exited, so that a `link
// add` right after it starts a new one on a clean run directory.
#include <fmt/core.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "daemon_launch.h"
#include "xroce/control.h"

namespace xroce::cli {

namespace {

struct LinkAddArgs {
  std::string name;
  std::vector<std::string> words;  // netdev IFNAME [port KIND] [queues N] [cpus LIST]
  double wait_s = 10;
};

// Parses the iproute2-style keyword/value words; returns an error text or empty.
std::string parse_link_add(const LinkAddArgs& args, control::LinkAddRequest& request) {
  if (args.name.empty() || args.name.size() >= sizeof(request.name)) return "bad device name";
  std::snprintf(request.name, sizeof(request.name), "%s", args.name.c_str());
  bool have_netdev = false;
  for (std::size_t i = 0; i < args.words.size(); i += 2) {
    if (i + 1 >= args.words.size()) return fmt::format("'{}' needs a value", args.words[i]);
    const std::string& key = args.words[i];
    const std::string& value = args.words[i + 1];
    if (key == "netdev") {
      if (value.empty() || value.size() >= sizeof(request.netdev)) return "bad netdev name";
      std::snprintf(request.netdev, sizeof(request.netdev), "%s", value.c_str());
      have_netdev = true;
    } else if (key == "port") {
      if (value == "afxdp") {
        request.port = control::PortKind::afxdp;
      } else if (value == "udp") {
        request.port = control::PortKind::udp;
      } else {
        return fmt::format("port must be afxdp or udp, not '{}'", value);
      }
    } else if (key == "queues") {
      char* end = nullptr;
      const unsigned long n = std::strtoul(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || n == 0 || n > 1024) {
        return fmt::format("queues must be 1..1024, not '{}'", value);
      }
      request.queues = static_cast<uint32_t>(n);
    } else if (key == "cpus") {
      if (std::string error = set_worker_cpus(value, request); !error.empty()) return error;
    } else {
      return fmt::format("unknown keyword '{}'", key);
    }
  }
  if (!have_netdev) return "netdev IFNAME is required";
  // The daemon refuses it too, but could only answer EOPNOTSUPP: the reason belongs here.
  if (request.port == control::PortKind::udp && request.queues > 1) {
    return fmt::format(
        "queues {}: a udp port has one queue and one worker (port afxdp has one "
        "worker per queue)",
        request.queues);
  }
  return "";
}

int fail(const std::string& what, int err) {
  fmt::print(stderr, "xroce link: {}: {}\n", what, std::strerror(err));
  return 1;
}

constexpr auto kPollInterval = std::chrono::milliseconds(10);
constexpr int kDaemonExitDeadlineMs = 10000;

// The devices the daemon serves (link_show), or nullopt if it cannot say.
std::optional<nlohmann::json> links_of(control::ControlClient& client) {
  std::string text;
  if (client.call_text(control::Op::link_show, nullptr, 0, text) != 0) return std::nullopt;
  auto links = nlohmann::json::parse(text, nullptr, false);
  if (!links.is_array()) return std::nullopt;
  return links;
}

std::string port_state_of(const nlohmann::json& links, const std::string& name) {
  for (const auto& l : links) {
    if (l.value("ifname", "") == name) return l.value("state", "");
  }
  return "";
}

// Why a device's port is not ACTIVE, from its netdev's state as xroced last read it.
std::string why_not_active(const nlohmann::json& links, const std::string& name) {
  for (const auto& l : links) {
    if (l.value("ifname", "") != name) continue;
    const std::string netdev = l.value("netdev", "");
    if (!l.value("netdev_up", false)) {
      return fmt::format("netdev {} is down (ip link set {} up)", netdev, netdev);
    }
    if (!l.value("netdev_carrier", false)) {
      return fmt::format("netdev {} has no carrier (a veth's peer must be up too)", netdev);
    }
    return fmt::format("port state {}", l.value("state", "?"));
  }
  return "xroced no longer lists it";
}

// Polls the daemon until `name`'s port is ACTIVE; false (with `why`) at the deadline.
bool wait_active(control::ControlClient& client, const std::string& name, double wait_s,
                 std::string& why) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(wait_s));
  for (;;) {
    const auto links = links_of(client);
    if (!links) {
      why = "xroced did not answer link show";
      return false;
    }
    if (port_state_of(*links, name) == "ACTIVE") return true;
    if (std::chrono::steady_clock::now() >= deadline) {
      why = why_not_active(*links, name);
      return false;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

void register_add(CLI::App& link, ExitStatus& status) {
  auto* cmd = link.add_subcommand("add", "Add a device on a netdev (starts xroced if needed)");
  auto args = std::make_shared<LinkAddArgs>();
  cmd->add_option("name", args->name, "Device name, e.g. xroce0")->required();
  cmd->add_option("args", args->words, "netdev IFNAME [port afxdp|udp] [queues N] [cpus LIST]")
      ->required();
  cmd->add_option("--wait-s", args->wait_s,
                  "Seconds to wait for the port to be ACTIVE (default 10; 0: do not wait)")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->callback([args, &status] {
    control::LinkAddRequest request{};
    if (const std::string error = parse_link_add(*args, request); !error.empty()) {
      fmt::print(stderr, "xroce link add: {}\n", error);
      status.code = 2;
      return;
    }
    control::ControlClient client;
    std::string error;
    bool reached = false;
    if (const int err = add_device(client, request, reached, error)) {
      if (!reached) {
        fmt::print(stderr, "xroce link add: {}\n", error);
        status.code = 1;
      } else {
        status.code = fail(fmt::format("add {} on {}", args->name, request.netdev), err);
      }
      return;
    }
    if (args->wait_s <= 0) return;
    std::string why;
    if (!wait_active(client, args->name, args->wait_s, why)) {
      fmt::print(stderr,
                 "xroce link add: {}: port not ACTIVE after {} s: {}; the device stays added "
                 "(xroce link del {} removes it)\n",
                 args->name, args->wait_s, why, args->name);
      status.code = 1;
    }
  });
}

void register_del(CLI::App& link, ExitStatus& status) {
  auto* cmd = link.add_subcommand("del", "Delete a device");
  auto name = std::make_shared<std::string>();
  cmd->add_option("name", *name, "Device name")->required();
  cmd->callback([name, &status] {
    control::LinkDelRequest request{};
    std::snprintf(request.name, sizeof(request.name), "%s", name->c_str());
    control::ControlClient client;
    std::string error;
    if (connect_daemon(client, false, error) != 0) {
      fmt::print(stderr, "xroce link del: {}\n", error);
      status.code = 1;
      return;
    }
    const auto paths = control::run_paths_for_current_netns();
    const pid_t pid = daemon_pid(paths);
    if (int err = client.call(control::Op::link_del, &request, sizeof(request), nullptr, 0)) {
      status.code = fail(fmt::format("del {}", *name), err);
      return;
    }
    // The daemon exits with its last device (it may already have closed this connection): wait
    // for it, so that a `link add` right after this finds no daemon half way out.
    const auto links = links_of(client);
    const bool last = !links || links->empty();
    if (last && !wait_process_gone(pid, kDaemonExitDeadlineMs)) {
      fmt::print(stderr, "xroce link del: {}: xroced (pid {}) did not exit within {} s\n", *name,
                 pid, kDaemonExitDeadlineMs / 1000);
      status.code = 1;
    }
  });
}

void print_link(const nlohmann::json& link) {
  fmt::print("link {}/{} state {} physical_state {} netdev {} uverbs {} mtu {} port {}",
             link.value("ifname", ""), link.value("port", 1), link.value("state", ""),
             link.value("physical_state", ""), link.value("netdev", ""), link.value("uverbs", ""),
             link.value("mtu", 0), link.value("port_kind", ""));
  fmt::print(" queues {} datapath {}", link.value("queues", 0), link.value("datapath", ""));
  const std::string cpus = link.value("cpus", "");
  if (!cpus.empty()) fmt::print(" cpus {}", cpus);
  fmt::print("\n");
  for (const auto& gid : link.value("gids", nlohmann::json::array())) {
    fmt::print("    gid {} {} {}\n", gid.value("index", 0), gid.value("gid", ""),
               gid.value("type", ""));
  }
}

void register_show(CLI::App& link, ExitStatus& status) {
  auto* cmd = link.add_subcommand("show", "Show devices");
  struct Args {
    std::string name;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("name", args->name, "Only this device");
  cmd->add_flag("--json,-j", args->json, "Print as JSON");
  cmd->callback([args, &status] {
    control::ControlClient client;
    std::string error;
    std::string text = "[]";
    if (connect_daemon(client, false, error) == 0) {
      if (int err = client.call_text(control::Op::link_show, nullptr, 0, text)) {
        status.code = fail("show", err);
        return;
      }
    }
    auto links = nlohmann::json::parse(text, nullptr, false);
    if (!links.is_array()) {
      status.code = fail("show", EPROTO);
      return;
    }
    nlohmann::json shown = nlohmann::json::array();
    for (const auto& l : links) {
      if (args->name.empty() || l.value("ifname", "") == args->name) shown.push_back(l);
    }
    if (!args->name.empty() && shown.empty()) {
      status.code = fail(fmt::format("show {}", args->name), ENODEV);
      return;
    }
    if (args->json) {
      fmt::print("{}\n", shown.dump());
      return;
    }
    for (const auto& l : shown)
      print_link(l);
  });
}

}  // namespace

void register_link(CLI::App& app, ExitStatus& status) {
  auto* link = app.add_subcommand("link", "Devices: add, del, show");
  link->require_subcommand(1);
  register_add(*link, status);
  register_del(*link, status);
  register_show(*link, status);
}

}  // namespace xroce::cli
