// `xroce conform`: the RoCEv2 conformance suite (tools/conform) against a device on the wire.
//
//   xroce conform --dev IFNAME --peer IP [--peer-gid N] [--cases GLOB] [--json] [--pcap F]
//                 [--agent HOST:PORT | --local-agent | --agent-ns NS] [--agent-dev IBDEV]
//                 [--cnp] [--list]
//
// IFNAME is the link the scripted peer sends on (AF_PACKET, needs CAP_NET_RAW and, to solicit
// the target's MAC, CAP_NET_ADMIN); IP is the target device's RoCE address, IPv4 or IPv6. The
// target is driven by xroce-conform-agent: one already listening at IP (port 18516) or at
// --agent, or one this command starts itself (--local-agent here, --agent-ns NS in network
// namespace NS: the target on the other end of a veth) with the environment `xroce exec` gives
// verbs programs. N is the target's GID index for IP (default: the agent finds the GID equal to
// IP). --cnp says the device generates CNPs for CE-marked packets. Exit status 0 when no case
// failed, 1 when one did, 2 on a setup error.
#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

#include "case.h"
#include "commands.h"
#include "report.h"
#include "wire_side.h"
#ifdef XROCE_HAVE_DEVICE
#include "app_env.h"
#include "daemon_launch.h"
#endif

namespace xroce::cli {
namespace {

constexpr std::uint16_t kAgentPort = 18516;

struct ConformFlags {
  std::string dev;
  std::string peer;
  int peer_gid = -1;  // the agent finds the GID of --peer
  std::string agent;
  bool local_agent = false;
  std::string agent_ns;
  std::string agent_dev;
  std::string cases;
  bool json = false;
  std::string pcap;
  bool cnp = false;
  bool list = false;
};

void list_cases(const std::string& glob) {
  for (const conform::Case& c : conform::all_cases()) {
    if (conform::case_selected(c, glob)) fmt::print("{:<48} {}\n", c.name, c.rule);
  }
}

std::uint64_t monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000u +
         static_cast<std::uint64_t>(ts.tv_nsec) / 1'000'000u;
}

std::string agent_binary() {
#ifdef XROCE_HAVE_DEVICE
  const std::string beside = self_dir() + "/xroce-conform-agent";  // build tree and bindir
  if (access(beside.c_str(), X_OK) == 0) return beside;
#endif
  return "xroce-conform-agent";  // from PATH
}

// In the child, before exec: joins namespace `netns` (a name under /run/netns, as `ip netns`
// keeps them, or a path) and takes the environment `xroce exec` gives there. Never returns on
// failure.
void enter_agent_namespace(const std::string& netns) {
  if (!netns.empty()) {
    const std::string path = netns.find('/') == std::string::npos ? "/run/netns/" + netns : netns;
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      fmt::print(stderr, "xroce conform: network namespace {}: {}\n", path, std::strerror(errno));
      _exit(127);
    }
    close(fd);
  }
#ifdef XROCE_HAVE_DEVICE
  apply_environment(app_environment());
#endif
}

// xroce-conform-agent started for this run (--local-agent, --agent-ns): a child process, in
// the namespace asked for, serving one connection on a port it picks (--port 0 --once), which
// it prints once it listens. The destructor waits for it to leave (it does when the connection
// closes) and kills it past a deadline; it also dies with this process (PR_SET_PDEATHSIG).
class LocalAgent {
 public:
  LocalAgent(const std::string& netns, const std::string& ibdev) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe: " + errno_text());
    std::vector<std::string> args = {agent_binary(), "--port", "0", "--once"};
    if (!ibdev.empty()) args.insert(args.end(), {"--dev", ibdev});
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork: " + errno_text());
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      enter_agent_namespace(netns);
      dup2(out[1], STDOUT_FILENO);
      std::vector<char*> argv;
      for (auto& a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp(argv[0], argv.data());
      fmt::print(stderr, "xroce conform: {}: {}\n", args[0], std::strerror(errno));
      _exit(127);
    }
    close(out[1]);
    out_fd_ = out[0];
    try {
      port_ = read_port();
    } catch (...) {
      stop();
      throw;
    }
  }
  ~LocalAgent() { stop(); }
  LocalAgent(const LocalAgent&) = delete;
  LocalAgent& operator=(const LocalAgent&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  static std::string errno_text() { return std::strerror(errno); }

  // The agent's "... listening on port P" line, within a deadline.
  std::uint16_t read_port() {
    constexpr std::uint64_t kListenDeadlineMs = 30'000;
    const std::uint64_t until = monotonic_ms() + kListenDeadlineMs;
    std::string text;
    while (monotonic_ms() < until) {
      pollfd p{out_fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(until - monotonic_ms())) <= 0) continue;
      char buf[512];
      const ssize_t n = read(out_fd_, buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, static_cast<std::size_t>(n));
      const std::size_t at = text.find("listening on port ");
      if (at != std::string::npos && text.find('\n', at) != std::string::npos) {
        return static_cast<std::uint16_t>(std::stoul(text.substr(at + 18)));
      }
    }
    throw std::runtime_error("xroce-conform-agent did not start listening (it printed: " + text +
                             ")");
  }

  void stop() {
    if (out_fd_ >= 0) close(out_fd_);
    out_fd_ = -1;
    if (pid_ <= 0) return;
    constexpr std::uint64_t kLeaveDeadlineMs = 5'000;
    const std::uint64_t until = monotonic_ms() + kLeaveDeadlineMs;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (monotonic_ms() >= until) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      poll(nullptr, 0, 10);  // the agent leaves once the connection is closed
    }
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::uint16_t port_ = 0;
};

// "HOST:PORT", "[IPv6]:PORT", or a bare host (then the default port).
std::pair<std::string, std::uint16_t> agent_address(const std::string& text) {
  if (text.starts_with('[')) {
    const std::size_t close_at = text.find(']');
    if (close_at == std::string::npos) throw std::runtime_error("--agent: no ']' in " + text);
    const std::string rest = text.substr(close_at + 1);
    return {
        text.substr(1, close_at - 1),
        rest.starts_with(':') ? static_cast<std::uint16_t>(std::stoi(rest.substr(1))) : kAgentPort};
  }
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || text.find(':') != colon) return {text, kAgentPort};
  return {text.substr(0, colon), static_cast<std::uint16_t>(std::stoi(text.substr(colon + 1)))};
}

int run_conform(const ConformFlags& f) {
  using namespace conform;
  const Endpoints ends = discover_endpoints(f.dev, f.peer);
  std::optional<LocalAgent> local;  // outlives the connection to it (declared first)
  std::string host = f.peer;
  std::uint16_t port = kAgentPort;
  if (f.local_agent || !f.agent_ns.empty()) {
    local.emplace(f.agent_ns, f.agent_dev);
    port = local->port();
    // An agent in this namespace is reached here; one in NS at the target's address, which is
    // NS's own.
    if (f.local_agent) host = "localhost";
  } else if (!f.agent.empty()) {
    std::tie(host, port) = agent_address(f.agent);
  }
  AgentTarget target(host, port, ends, f.peer_gid, f.cnp);
  PacketLink link(f.dev, ends);
  std::vector<CaseResult> results;
  std::uint32_t peer_qpn = 0x100;
  for (const Case& c : all_cases()) {
    if (!case_selected(c, f.cases)) continue;
    results.push_back(run_case(c, target, link, ends, Timing{}, peer_qpn++));
    if (!f.json) {
      const CaseResult& r = results.back();
      fmt::print(stderr, "{:<5} {}\n", to_string(r.outcome), c.name);
    }
  }
  const std::string device = fmt::format("{} at {}", target.capabilities().name, f.peer);
  fmt::print("{}", f.json ? json_report(results, device) : text_report(results, device));
  if (!f.pcap.empty()) {
    const auto bytes = pcap_report(results);
    std::ofstream out(f.pcap, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      fmt::print(stderr, "xroce conform: cannot write {}\n", f.pcap);
      return 2;
    }
  }
  return totals(results).fail == 0 ? 0 : 1;
}

}  // namespace

void register_conform(CLI::App& app, ExitStatus& status) {
  auto flags = std::make_shared<ConformFlags>();
  auto* cmd = app.add_subcommand("conform", "Run the RoCEv2 conformance suite against a device");
  cmd->add_option("--dev", flags->dev, "Interface the scripted peer sends on");
  cmd->add_option("--peer", flags->peer, "The target device's IPv4 or IPv6 address");
  cmd->add_option("--peer-gid", flags->peer_gid, "The target's GID index for that address");
  auto* agent =
      cmd->add_option("--agent", flags->agent, "Where xroce-conform-agent listens (HOST:PORT)");
  auto* local = cmd->add_flag("--local-agent", flags->local_agent,
                              "Start xroce-conform-agent here (the target is a local device)");
  auto* ns = cmd->add_option("--agent-ns", flags->agent_ns,
                             "Start xroce-conform-agent in this network namespace");
  agent->excludes(local)->excludes(ns);
  cmd->add_option("--agent-dev", flags->agent_dev,
                  "The RDMA device a started agent opens (default: the first)");
  cmd->add_option("--cases", flags->cases, "Only the cases whose name matches this glob");
  cmd->add_flag("--json", flags->json, "Print the results as JSON");
  cmd->add_option("--pcap", flags->pcap, "Write the exchanged frames to this pcap file");
  cmd->add_flag("--cnp", flags->cnp, "The device generates CNPs for CE-marked packets");
  cmd->add_flag("--list", flags->list, "List the cases and their rules, run nothing");
  cmd->callback([flags, &status] {
    if (flags->list) {
      list_cases(flags->cases);
      return;
    }
    if (flags->dev.empty() || flags->peer.empty()) {
      fmt::print(stderr, "xroce conform: --dev and --peer are required (or --list)\n");
      status.code = 2;
      return;
    }
    try {
      status.code = run_conform(*flags);
    } catch (const std::exception& e) {
      fmt::print(stderr, "xroce conform: {}\n", e.what());
      status.code = 2;
    }
  });
}

}  // namespace xroce::cli
