// `xroce exporter --listen ADDR:PORT [--device NAME ...]`: the counters of `xroce stat` and the
// per-QP figures of `xroce qp show` for Prometheus, in its text exposition format (version
// 0.0.4), from a small HTTP server: GET /metrics (or /). Every scrape reads the daemon afresh.
//
//   xroce_<counter>_total{device,port}        every counter of `xroce stat` (hw_counters names)
//   xroce_port_active{device,port,netdev}     1 when the port is ACTIVE
//   xroce_port_<stat>_total{device,port}      the ports' statistics of `xroce stat` ("port":
//                                             frames, drops, offloads), summed over queues;
//                                             xroce_port_queues, xroce_port_tx_pending,
//                                             xroce_port_receive_frames,
//                                             xroce_port_inflight_budget_psns and
//                                             xroce_port_inflight_psns gauges
//   xroce_qp_<counter>_total{device,qpn,type,peer}   payload bytes, packets, retransmissions,
//                                                     timeouts, adaptive retransmissions,
//                                                     NAKs, RNR NAKs, CNPs, CE marks
//   xroce_qp_rate_mbps, _target_rate_mbps, _alpha    DCQCN state (gauges)
//   xroce_qp_rtt_seconds, _rtt_min_seconds           round-trip estimate (when measured)
//   xroce_scrape_error{device}                        1 when a device could not be read
//
// Single-threaded: one connection at a time, closed after the answer (scrapes are seconds
// apart). Listens only where told (use 127.0.0.1 unless the metrics may leave the host: they
// name peers and QPNs). SIGINT/SIGTERM end it.
#include <arpa/inet.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commands.h"
#include "telemetry.h"
#include "xroce/fd.h"

namespace xroce::cli {

namespace {

// The figures of `xroce stat`'s port line that are levels, not counts: its queues, the sends
// in flight, how many frames a port holds received, and the device's in-flight budget and use.
constexpr std::array<std::string_view, 5> kPortGauges = {"queues", "tx_pending", "receive_frames",
                                                         "inflight_budget_psns", "inflight_psns"};

constexpr int kReadTimeoutMs = 2000;
constexpr std::size_t kMaxRequestBytes = 8192;

struct ExporterArgs {
  std::string listen = "127.0.0.1:9465";
  std::vector<std::string> devices;
};

volatile std::sig_atomic_t g_stop = 0;
void on_stop_signal(int) {
  g_stop = 1;
}

// Per-QP counters of qp_show and their metric names (without xroce_qp_ and _total).
constexpr std::pair<const char*, const char*> kQpCounters[] = {
    {"payload_bytes_sent", "payload_bytes_sent"},
    {"payload_bytes_received", "payload_bytes_received"},
    {"packets_sent", "packets_sent"},
    {"packets_received", "packets_received"},
    {"retransmits", "retransmitted_packets"},
    {"timeouts", "timeouts"},
    {"adaptive_retransmits", "adaptive_retransmits"},
    {"resend_timeouts", "resend_timeouts"},
    {"tail_probes", "tail_probes"},
    {"probe_gaps", "probe_gaps"},
    {"resend_repeats", "resend_repeats"},
    {"replay_gap_retries", "replay_gap_retries"},
    {"read_responses_ahead", "read_responses_ahead"},
    {"read_ranges_asked", "read_ranges_asked"},
    {"replays_reordered", "replays_reordered"},
    {"loss_window_reductions", "loss_window_reductions"},
    {"naks_sent", "naks_sent"},
    {"naks_received", "naks_received"},
    {"rnr_naks_sent", "rnr_naks_sent"},
    {"rnr_naks_received", "rnr_naks_received"},
    {"receives_pulled_late", "receives_pulled_late"},
    {"duplicate_requests", "duplicate_requests"},
    {"out_of_sequence", "out_of_sequence"},
    {"np_cnp_sent", "np_cnp_sent"},
    {"rp_cnp_handled", "rp_cnp_handled"},
    {"cnps_received", "cnps_received"},
    {"ecn_ce_received", "ecn_ce_received"},
};
constexpr std::pair<const char*, const char*> kQpGauges[] = {
    {"rate_mbps", "rate_mbps"},
    {"target_rate_mbps", "target_rate_mbps"},
    {"alpha", "alpha"},
    {"send_queue_depth", "send_queue_depth"},
    {"loss_window_psns", "loss_window_psns"},
};

// A label value with \, " and newline escaped.
std::string label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// The families collected over all devices, so each gets one HELP/TYPE header.
class Exposition {
 public:
  void add(const std::string& family, const char* type, const char* help, const std::string& labels,
           const std::string& value) {
    for (auto& f : families_) {
      if (f.name == family) {
        f.samples += fmt::format("{}{{{}}} {}\n", family, labels, value);
        return;
      }
    }
    families_.push_back(
        {family, fmt::format("# HELP {} {}\n# TYPE {} {}\n", family, help, family, type) +
                     fmt::format("{}{{{}}} {}\n", family, labels, value)});
  }
  std::string text() const {
    std::string out;
    for (const auto& f : families_)
      out += f.samples;
    return out;
  }

 private:
  struct Family {
    std::string name;
    std::string samples;
  };
  std::vector<Family> families_;
};

void expose_device(Exposition& e, const DeviceSnapshot& s) {
  const std::string dev = fmt::format("device=\"{}\",port=\"1\"", label(s.device));
  e.add("xroce_port_active", "gauge", "1 when the device's port is ACTIVE",
        dev + fmt::format(",netdev=\"{}\"", label(s.link.value("netdev", ""))),
        s.link.value("state", "") == "ACTIVE" ? "1" : "0");
  for (auto it = s.counters.begin(); it != s.counters.end(); ++it) {
    e.add(fmt::format("xroce_{}_total", it.key()), "counter",
          "xroce stat counter (hw_counters name)", dev,
          std::to_string(it.value().get<std::uint64_t>()));
  }
  // The ports' own statistics (`xroce stat`'s "port"): counters but for kPortGauges.
  if (s.port.is_object()) {
    for (auto it = s.port.begin(); it != s.port.end(); ++it) {
      if (!it.value().is_number_unsigned()) continue;  // mode
      if (std::find(kPortGauges.begin(), kPortGauges.end(), it.key()) != kPortGauges.end()) {
        e.add(fmt::format("xroce_port_{}", it.key()), "gauge", "xroce stat port figure", dev,
              std::to_string(it.value().get<std::uint64_t>()));
      } else {
        e.add(fmt::format("xroce_port_{}_total", it.key()), "counter",
              "xroce stat port counter, summed over the queues", dev,
              std::to_string(it.value().get<std::uint64_t>()));
      }
    }
  }
  for (const auto& qp : s.qps) {
    const std::string labels =
        fmt::format("device=\"{}\",qpn=\"{}\",type=\"{}\",peer=\"{}\"", label(s.device),
                    qp.value("qpn", 0u), label(qp.value("type", "")), label(qp.value("peer", "")));
    for (const auto& [field, name] : kQpCounters) {
      e.add(fmt::format("xroce_qp_{}_total", name), "counter", "per-QP transport counter", labels,
            std::to_string(qp.value(field, std::uint64_t{0})));
    }
    for (const auto& [field, name] : kQpGauges) {
      e.add(fmt::format("xroce_qp_{}", name), "gauge", "per-QP DCQCN and queue state", labels,
            fmt::format("{}", qp.value(field, 0.0)));
    }
    if (qp.value("rtt_samples", 0) > 0) {
      e.add("xroce_qp_rtt_seconds", "gauge", "smoothed request-to-ACK round-trip time", labels,
            fmt::format("{:.9f}", qp.value("rtt_us", 0.0) / 1e6));
      e.add("xroce_qp_rtt_min_seconds", "gauge", "smallest request-to-ACK round-trip time", labels,
            fmt::format("{:.9f}", qp.value("rtt_min_us", 0.0) / 1e6));
    }
  }
}

std::string metrics(TelemetryClient& client, const std::vector<std::string>& only) {
  Exposition e;
  std::string error;
  std::vector<std::string> devices = only;
  if (devices.empty()) {
    if (auto links = client.links(error)) {
      for (const auto& l : *links)
        devices.push_back(l.value("ifname", ""));
    }
  }
  for (const auto& d : devices) {
    auto snap = client.snapshot(d, error);
    e.add("xroce_scrape_error", "gauge", "1 when the device could not be read",
          fmt::format("device=\"{}\"", label(d)), snap ? "0" : "1");
    if (snap) expose_device(e, *snap);
  }
  return e.text();
}

// Reads the request head; answers GET /metrics or / with the exposition, others with 404/405.
void serve_one(int fd, TelemetryClient& client, const std::vector<std::string>& devices) {
  std::string request;
  char buf[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequestBytes) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, kReadTimeoutMs) <= 0) return;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return;
    request.append(buf, static_cast<std::size_t>(n));
  }
  const auto line_end = request.find("\r\n");
  const std::string line = request.substr(0, line_end);
  std::string status = "200 OK";
  std::string type = "text/plain; version=0.0.4; charset=utf-8";
  std::string body;
  if (line.rfind("GET ", 0) != 0) {
    status = "405 Method Not Allowed";
    body = "only GET\n";
  } else if (line.rfind("GET /metrics ", 0) == 0 || line.rfind("GET / ", 0) == 0) {
    body = metrics(client, devices);
  } else {
    status = "404 Not Found";
    body = "try /metrics\n";
  }
  const std::string reply =
      fmt::format(
          "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
          status, type, body.size()) +
      body;
  std::size_t sent = 0;
  while (sent < reply.size()) {
    const ssize_t n = send(fd, reply.data() + sent, reply.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<std::size_t>(n);
  }
}

// ADDR:PORT or [ADDR6]:PORT; a listening socket, or -1 with `error` set.
int listen_on(const std::string& where, std::string& error) {
  const auto colon = where.rfind(':');
  if (colon == std::string::npos || colon + 1 == where.size()) {
    error = fmt::format("--listen needs ADDR:PORT, not '{}'", where);
    return -1;
  }
  std::string host = where.substr(0, colon);
  const int port = std::atoi(where.c_str() + colon + 1);
  if (port <= 0 || port > 65535) {
    error = fmt::format("bad port in '{}'", where);
    return -1;
  }
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&addr);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<std::uint16_t>(port));
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &a6->sin6_addr) != 1) {
      error = fmt::format("bad IPv6 address in '{}'", where);
      return -1;
    }
    len = sizeof *a6;
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&addr);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<std::uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) != 1) {
      error = fmt::format("bad IPv4 address in '{}'", where);
      return -1;
    }
    len = sizeof *a4;
  }
  const int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 16) != 0) {
    error = fmt::format("cannot listen on {}: {}", where, std::strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

int run_exporter(const ExporterArgs& args) {
  std::string error;
  const Fd listener(listen_on(args.listen, error));
  if (listener.get() < 0) {
    fmt::print(stderr, "xroce exporter: {}\n", error);
    return 1;
  }
  // sigaction without SA_RESTART, so that poll() returns on SIGTERM.
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  fmt::print("xroce exporter: serving http://{}/metrics\n", args.listen);
  std::fflush(stdout);
  TelemetryClient client;
  while (!g_stop) {
    pollfd p{listener.get(), POLLIN, 0};
    if (poll(&p, 1, -1) <= 0) continue;
    const Fd conn(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() >= 0) serve_one(conn.get(), client, args.devices);
  }
  return 0;
}

}  // namespace

void register_exporter(CLI::App& app, ExitStatus& status) {
  auto* cmd = app.add_subcommand(
      "exporter", "Serve the counters and per-QP figures to Prometheus (text format, HTTP)");
  auto args = std::make_shared<ExporterArgs>();
  cmd->add_option("--listen", args->listen, "ADDR:PORT or [ADDR6]:PORT (default 127.0.0.1:9465)");
  cmd->add_option("--device", args->devices, "Only these devices (default: every one)");
  cmd->callback([args, &status] { status.code = run_exporter(*args); });
}

}  // namespace xroce::cli
