// `xroce validate --serve`: the peer's side of `xroce validate`. It answers the UDP probes
// (validate_probe.h) and, over the JSON-lines channel (validate_channel.h), lists this host's
// RDMA devices and starts the servers of the checks a validating host asks for: only the
// perftest programs of the matrix and ibv_rc_pingpong, on its own devices, with command lines it
// composes itself from bounded numbers (validate_core.h server_argv_for), so a client cannot
// make it run anything else.
//
// Requests (one JSON object per line) and answers:
//   {"op":"hello"}                         -> {"ok":true,"version":1,"devices":[...]}
//   {"op":"perftest"|"pingpong", ...}      -> {"ok":true,"id":N} once the server listens on
//                                             its TCP port, or {"ok":false,"error","output"}
//   {"op":"wait","id":N,"timeout_ms":T}    -> {"ok":true,"status":S,"output":"..."}
// One validating host is served at a time: a "wait" blocks the loop until that server exits.
#include <arpa/inet.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "subprocess.h"
#include "validate_channel.h"
#include "validate_local.h"
#include "validate_probe.h"
#include "validate_serve.h"
#include "xroce/fd.h"

namespace xroce::cli::validate {

namespace {

constexpr auto kListenDeadline = std::chrono::seconds(20);
constexpr int kMaxWaitMs = 300'000;
// The end of a server's output that goes back to the validating host. Kept under one
// 1500-byte packet: the channel crosses the very path being checked, which may drop larger
// segments without telling TCP (a smaller-MTU hop that sends no ICMP).
constexpr std::size_t kOutputTailBytes = 1024;
constexpr int kTcpListenState = 0x0A;

volatile std::sig_atomic_t g_stop = 0;
void on_stop_signal(int) {
  g_stop = 1;
}

// Whether something in this network namespace listens on TCP `port` (/proc/net/tcp, tcp6).
bool tcp_listening(int port) {
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const auto colon = local.rfind(':');
      if (colon == std::string::npos) continue;
      if (std::stoi(local.substr(colon + 1), nullptr, 16) == port &&
          std::stoi(state, nullptr, 16) == kTcpListenState) {
        return true;
      }
    }
  }
  return false;
}

std::string tail(const std::string& s) {
  return s.size() > kOutputTailBytes ? s.substr(s.size() - kOutputTailBytes) : s;
}

nlohmann::json devices_json(const LocalDevices& local) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& d : local.devices) {
    nlohmann::json gids = nlohmann::json::array();
    for (const auto& g : d.gids)
      gids.push_back({{"index", g.index}, {"gid", g.gid}, {"type", g.type}});
    out.push_back({{"name", d.name},
                   {"kind", local.xroce.count(d.name) ? "xroce" : "verbs"},
                   {"port_state", d.port_state},
                   {"active_mtu", d.active_mtu},
                   {"max_mtu", d.max_mtu},
                   {"link_layer", d.link_layer},
                   {"gids", gids}});
  }
  return out;
}

class Responder {
 public:
  nlohmann::json handle(const nlohmann::json& request) {
    const std::string op = request.value("op", "");
    if (op == "hello") {
      local_ = find_local_devices();
      return {{"ok", true}, {"version", 1}, {"devices", devices_json(local_)}};
    }
    if (op == "perftest" || op == "pingpong") return start(request);
    if (op == "wait") return wait(request);
    return {{"ok", false}, {"error", fmt::format("unknown op '{}'", op)}};
  }

 private:
  nlohmann::json start(const nlohmann::json& request) {
    std::string error;
    const auto argv = server_argv_for(request, local_.devices, error);
    if (!argv) return {{"ok", false}, {"error", error}};
    const int port = request.value("port", 0);
    if (tcp_listening(port)) {
      return {{"ok", false}, {"error", fmt::format("TCP port {} is already in use here", port)}};
    }
    auto program =
        std::make_unique<Program>(*argv, environment_for(local_, request.value("device", "")));
    if (!program->started()) return {{"ok", false}, {"error", "cannot start " + argv->at(0)}};
    const auto until = std::chrono::steady_clock::now() + kListenDeadline;
    while (!tcp_listening(port)) {
      if (program->exited() || std::chrono::steady_clock::now() >= until) {
        const auto r = program->wait(std::chrono::milliseconds(0));
        return {{"ok", false},
                {"error", fmt::format("{} did not listen on port {} (status {})", argv->at(0), port,
                                      r.status)},
                {"output", tail(r.output)}};
      }
      poll(nullptr, 0, 20);
    }
    const int id = ++next_id_;
    programs_[id] = std::move(program);
    return {{"ok", true}, {"id", id}};
  }

  nlohmann::json wait(const nlohmann::json& request) {
    const auto it = programs_.find(request.value("id", 0));
    if (it == programs_.end()) return {{"ok", false}, {"error", "no such server"}};
    const int timeout_ms = std::clamp(request.value("timeout_ms", 60'000), 0, kMaxWaitMs);
    const auto r = it->second->wait(std::chrono::milliseconds(timeout_ms));
    programs_.erase(it);
    return {
        {"ok", true}, {"status", r.status}, {"timed_out", r.timed_out}, {"output", tail(r.output)}};
  }

  LocalDevices local_;
  std::map<int, std::unique_ptr<Program>> programs_;
  int next_id_ = 0;
};

int listen_tcp(const std::string& addr, int port, std::string& error) {
  // The probe responder's address rules, for a stream socket.
  sockaddr_storage a{};
  socklen_t len = 0;
  in_addr v4{};
  if (!addr.empty() && inet_pton(AF_INET, addr.c_str(), &v4) == 1) {
    auto* s = reinterpret_cast<sockaddr_in*>(&a);
    s->sin_family = AF_INET;
    s->sin_port = htons(static_cast<std::uint16_t>(port));
    s->sin_addr = v4;
    len = sizeof *s;
  } else {
    auto* s = reinterpret_cast<sockaddr_in6*>(&a);
    s->sin6_family = AF_INET6;
    s->sin6_port = htons(static_cast<std::uint16_t>(port));
    if (!addr.empty() && inet_pton(AF_INET6, addr.c_str(), &s->sin6_addr) != 1) {
      error = fmt::format("bad listen address '{}'", addr);
      return -1;
    }
    len = sizeof *s;
  }
  const int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  const int off = 0;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      (a.ss_family == AF_INET6 &&
       setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off) != 0) ||
      bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd, 4) != 0) {
    error = fmt::format("cannot listen on TCP port {}: {}", port, std::strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int run_serve(const ServeArgs& args) {
  std::string error;
  const Fd listener(listen_tcp(args.listen, args.port, error));
  if (listener.get() < 0) {
    fmt::print(stderr, "xroce validate --serve: {}\n", error);
    return 1;
  }
  const Fd udp(open_probe_responder(args.listen, args.port, error));
  if (udp.get() < 0) {
    fmt::print(stderr, "xroce validate --serve: {}\n", error);
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  fmt::print("xroce validate: serving on port {} (TCP and UDP)\n", args.port);
  std::fflush(stdout);

  Responder responder;
  std::vector<LineChannel> clients;
  while (!g_stop) {
    std::vector<pollfd> fds = {{listener.get(), POLLIN, 0}, {udp.get(), POLLIN, 0}};
    for (const auto& c : clients)
      fds.push_back({c.fd(), POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      const int fd = accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) clients.emplace_back(fd);
    }
    if (fds[1].revents & POLLIN) answer_one_probe(udp.get());
    for (std::size_t i = 0; i < clients.size(); ++i) {
      if (!(fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const bool open = clients[i].fill();
      while (auto line = clients[i].take_line()) {
        const auto request = nlohmann::json::parse(*line, nullptr, false);
        clients[i].send(request.is_discarded()
                            ? nlohmann::json{{"ok", false}, {"error", "not JSON"}}
                            : responder.handle(request));
      }
      if (!open) clients[i] = LineChannel();
    }
    std::erase_if(clients, [](const LineChannel& c) { return c.fd() < 0; });
  }
  return 0;
}

}  // namespace xroce::cli::validate
