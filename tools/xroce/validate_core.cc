#include "validate_core.h"

#include <arpa/inet.h>
#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <regex>
#include <sstream>
#include <string_view>

namespace xroce::cli::validate {

namespace {

constexpr int kBthBytes = 12;
constexpr int kRethBytes = 16;
constexpr int kImmDtBytes = 4;
constexpr int kIcrcBytes = 4;
constexpr int kUdpBytes = 8;
constexpr int kIpv4Bytes = 20;
constexpr int kIpv6Bytes = 40;
constexpr std::array<int, 5> kRoceMtus = {256, 512, 1024, 2048, 4096};

// Bounds on what a validating host may ask the serving peer for.
constexpr int kMaxIterations = 100000;
constexpr int kMaxPingpongBytes = 1 << 20;
constexpr int kMinTcpPort = 1024;
constexpr int kMaxQpTimeout = 31;  // the 5-bit Local ACK Timeout (C9-140)

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// "key:\tvalue" of an ibv_devinfo line; false if the line has no colon.
bool key_value(const std::string& line, std::string& key, std::string& value) {
  const auto colon = line.find(':');
  if (colon == std::string::npos) return false;
  key = trim(line.substr(0, colon));
  value = trim(line.substr(colon + 1));
  return true;
}

// The 16 bytes of a GID or address: IPv4 as IPv4-mapped IPv6.
std::optional<std::array<std::uint8_t, 16>> address_bytes(const std::string& text) {
  std::array<std::uint8_t, 16> out{};
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    out[10] = out[11] = 0xff;
    std::memcpy(out.data() + 12, &v4, 4);
    return out;
  }
  if (inet_pton(AF_INET6, text.c_str(), out.data()) == 1) return out;
  return std::nullopt;
}

// Two decimals, or four below 0.1 (atomic message rates in Mmsg/s).
std::string fmt_double(double v) {
  return v != 0 && v < 0.1 ? fmt::format("{:.4f}", v) : fmt::format("{:.2f}", v);
}

}  // namespace

bool is_roce_mtu(int bytes) {
  return std::find(kRoceMtus.begin(), kRoceMtus.end(), bytes) != kRoceMtus.end();
}

int largest_roce_ip_packet(int mtu, bool ipv6) {
  return (ipv6 ? kIpv6Bytes : kIpv4Bytes) + kUdpBytes + kBthBytes + kRethBytes + kImmDtBytes + mtu +
         kIcrcBytes;
}

int roce_mtu_for_ip_packet(int ip_bytes, bool ipv6) {
  int best = 0;
  for (int mtu : kRoceMtus)
    if (largest_roce_ip_packet(mtu, ipv6) <= ip_bytes) best = mtu;
  return best;
}

std::vector<VerbsDevice> parse_ibv_devinfo(const std::string& text) {
  std::vector<VerbsDevice> out;
  std::istringstream lines(text);
  int port = 0;
  const std::regex gid_re(R"(^GID\[\s*(\d+)\]$)");
  for (std::string line; std::getline(lines, line);) {
    std::string key, value;
    if (!key_value(line, key, value)) continue;
    if (key == "hca_id") {
      out.emplace_back();
      out.back().name = value;
      port = 0;
      continue;
    }
    if (out.empty()) continue;
    VerbsDevice& d = out.back();
    if (key == "port") {
      port = std::atoi(value.c_str());
      continue;
    }
    if (port != 1) continue;
    std::smatch m;
    if (key == "state") {
      d.port_state = value.substr(0, value.find(' '));
    } else if (key == "active_mtu") {
      d.active_mtu = std::atoi(value.c_str());
    } else if (key == "max_mtu") {
      d.max_mtu = std::atoi(value.c_str());
    } else if (key == "link_layer") {
      d.link_layer = value;
    } else if (std::regex_match(key, m, gid_re)) {
      // The GID itself contains colons: take everything after "GID[ n]:".
      const std::string rest = trim(line.substr(line.find(']') + 2));
      const auto comma = rest.find(',');
      d.gids.push_back(Gid{std::atoi(m[1].str().c_str()), trim(rest.substr(0, comma)),
                           comma == std::string::npos ? "" : trim(rest.substr(comma + 1))});
    }
  }
  return out;
}

std::optional<int> roce_v2_gid_index(const VerbsDevice& device, const std::string& address) {
  const auto want = address_bytes(address);
  if (!want) return std::nullopt;
  for (const auto& g : device.gids) {
    if (g.type != "RoCE v2") continue;
    const auto have = address_bytes(g.gid);
    if (have && *have == *want) return g.index;
  }
  return std::nullopt;
}

std::optional<std::string> exchange_address(const std::string& peer, const VerbsDevice& device) {
  in_addr v4{};
  if (inet_pton(AF_INET, peer.c_str(), &v4) == 1) return peer;
  constexpr std::string_view kMapped = "::ffff:";
  for (const auto& g : device.gids) {
    if (g.type != "RoCE v2" || !g.gid.starts_with(kMapped)) continue;
    const std::string address = g.gid.substr(kMapped.size());
    if (inet_pton(AF_INET, address.c_str(), &v4) == 1) return address;
  }
  return std::nullopt;
}

const char* ecn_name(int codepoint) {
  switch (codepoint & 3) {
    case 0:
      return "Not-ECT";
    case 1:
      return "ECT(1)";
    case 2:
      return "ECT(0)";
    default:
      return "CE";
  }
}

const std::vector<PerftestSpec>& perftest_matrix() {
  static const std::vector<PerftestSpec> matrix = {
      {"write_bw", "ib_write_bw", {"-s", "65536"}, false},
      {"read_bw", "ib_read_bw", {"-s", "65536"}, false},
      {"send_bw", "ib_send_bw", {"-s", "65536"}, false},
      {"atomic_fa_bw", "ib_atomic_bw", {"-A", "FETCH_AND_ADD"}, false},
      {"atomic_cs_bw", "ib_atomic_bw", {"-A", "CMP_AND_SWAP"}, false},
      {"write_lat", "ib_write_lat", {"-s", "8"}, true},
      {"read_lat", "ib_read_lat", {"-s", "8"}, true},
      {"send_lat", "ib_send_lat", {"-s", "8"}, true},
      {"atomic_fa_lat", "ib_atomic_lat", {"-A", "FETCH_AND_ADD"}, true},
      {"atomic_cs_lat", "ib_atomic_lat", {"-A", "CMP_AND_SWAP"}, true},
  };
  return matrix;
}

const PerftestSpec* find_perftest(const std::string& name) {
  for (const auto& s : perftest_matrix())
    if (s.name == name) return &s;
  return nullptr;
}

std::vector<std::string> perftest_argv(const PerftestSpec& spec, const PerftestRun& run) {
  std::vector<std::string> argv = {spec.program,
                                   "-d",
                                   run.device,
                                   "-x",
                                   std::to_string(run.gid_index),
                                   "-m",
                                   std::to_string(run.mtu),
                                   "-p",
                                   std::to_string(run.tcp_port),
                                   "-n",
                                   std::to_string(run.iterations),
                                   "-F"};
  if (run.qp_timeout != 0) argv.insert(argv.end(), {"-u", std::to_string(run.qp_timeout)});
  if (!spec.latency) argv.push_back("--report_gbits");
  argv.insert(argv.end(), spec.options.begin(), spec.options.end());
  if (!run.peer.empty()) argv.push_back(run.peer);
  return argv;
}

std::vector<std::string> pingpong_argv(const std::string& device, int gid_index, int mtu,
                                       int tcp_port, int size, int iterations,
                                       const std::string& peer) {
  std::vector<std::string> argv = {"ibv_rc_pingpong",
                                   "-d",
                                   device,
                                   "-g",
                                   std::to_string(gid_index),
                                   "-m",
                                   std::to_string(mtu),
                                   "-p",
                                   std::to_string(tcp_port),
                                   "-s",
                                   std::to_string(size),
                                   "-n",
                                   std::to_string(iterations),
                                   "-c"};
  if (!peer.empty()) argv.push_back(peer);
  return argv;
}

std::string failure_line(const std::string& output) {
  static const std::regex telling(R"(error|fail|couldn't|unable|timeout|timed out|refused)",
                                  std::regex::icase);
  std::istringstream lines(output);
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    line = trim(line);
    if (line.empty()) continue;
    if (std::regex_search(line, telling)) return line;
    last = line;
  }
  return last;
}

std::optional<PerftestResult> parse_perftest(const std::string& output, bool latency) {
  std::istringstream lines(output);
  bool after_header = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("#bytes") != std::string::npos) {
      after_header = true;
      continue;
    }
    if (!after_header) continue;
    std::istringstream fields(line);
    std::vector<double> v;
    for (double x; fields >> x;)
      v.push_back(x);
    if (v.size() < (latency ? 7u : 4u)) continue;
    PerftestResult r;
    r.bytes = static_cast<std::uint64_t>(v[0]);
    r.iterations = static_cast<std::uint64_t>(v[1]);
    if (latency) {
      // t_min t_max t_typical t_avg t_stdev 99% 99.9%
      r.lat_min_us = v[2];
      r.lat_typical_us = v[4];
      r.lat_avg_us = v[5];
      r.lat_p99_us = v.size() > 7 ? v[7] : 0;
    } else {
      // BW peak, BW average, MsgRate
      r.bw_peak_gbps = v[2];
      r.bw_avg_gbps = v[3];
      r.msg_rate_mpps = v.size() > 4 ? v[4] : 0;
    }
    return r;
  }
  return std::nullopt;
}

std::optional<std::vector<std::string>> server_argv_for(const nlohmann::json& request,
                                                        const std::vector<VerbsDevice>& devices,
                                                        std::string& error) {
  if (!request.is_object()) {
    error = "request is not a JSON object";
    return std::nullopt;
  }
  const std::string op = request.value("op", "");
  const std::string device = request.value("device", "");
  const int gid_index = request.value("gid_index", -1);
  const int mtu = request.value("mtu", 0);
  const int port = request.value("port", 0);
  const int iterations = request.value("iterations", 0);
  const bool known_device =
      std::any_of(devices.begin(), devices.end(), [&](const auto& d) { return d.name == device; });
  if (!known_device) {
    error = fmt::format("no device '{}' here", device);
  } else if (gid_index < 0 || gid_index > 255) {
    error = "gid_index must be 0..255";
  } else if (!is_roce_mtu(mtu)) {
    error = "mtu must be 256, 512, 1024, 2048 or 4096";
  } else if (port < kMinTcpPort || port > 65535) {
    error = fmt::format("port must be {}..65535", kMinTcpPort);
  } else if (iterations < 5 || iterations > kMaxIterations) {
    error = fmt::format("iterations must be 5..{}", kMaxIterations);
  }
  if (!error.empty()) return std::nullopt;
  if (op == "pingpong") {
    const int size = request.value("size", 0);
    if (size < 1 || size > kMaxPingpongBytes) {
      error = fmt::format("size must be 1..{}", kMaxPingpongBytes);
      return std::nullopt;
    }
    return pingpong_argv(device, gid_index, mtu, port, size, iterations, "");
  }
  if (op == "perftest") {
    const PerftestSpec* spec = find_perftest(request.value("test", ""));
    if (spec == nullptr) {
      error = fmt::format("unknown test '{}'", request.value("test", ""));
      return std::nullopt;
    }
    const int qp_timeout = request.value("qp_timeout", 0);
    if (qp_timeout < 0 || qp_timeout > kMaxQpTimeout) {
      error = fmt::format("qp_timeout must be 0..{}", kMaxQpTimeout);
      return std::nullopt;
    }
    return perftest_argv(*spec, {device, gid_index, mtu, port, iterations, qp_timeout, ""});
  }
  error = fmt::format("unknown op '{}'", op);
  return std::nullopt;
}

// ---- the report ----------------------------------------------------------------------------

namespace {

const char* outcome_name(Check::Outcome o) {
  switch (o) {
    case Check::Outcome::kPass:
      return "pass";
    case Check::Outcome::kFail:
      return "FAIL";
    case Check::Outcome::kSkip:
      return "skip";
  }
  return "?";
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// One horizontal bar chart: a title, then a bar per row scaled to the largest value.
std::string bar_chart(int y, const std::string& title, const std::string& unit,
                      const std::vector<std::pair<std::string, double>>& rows) {
  constexpr int kLabelWidth = 130;
  constexpr int kBarWidth = 420;
  constexpr int kRowHeight = 22;
  double largest = 0;
  for (const auto& [name, v] : rows)
    largest = std::max(largest, v);
  std::string out =
      fmt::format("<text x=\"10\" y=\"{}\" font-size=\"15\" font-weight=\"bold\">{}</text>\n", y,
                  xml_escape(title));
  y += 10;
  for (const auto& [name, v] : rows) {
    const int width = largest > 0 ? static_cast<int>(v / largest * kBarWidth) : 0;
    out += fmt::format("<text x=\"10\" y=\"{}\" font-size=\"12\">{}</text>\n", y + 15,
                       xml_escape(name));
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"16\" fill=\"#4878a8\"/>\n",
                       kLabelWidth, y + 3, std::max(width, 1));
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\">{} {}</text>\n",
                       kLabelWidth + std::max(width, 1) + 6, y + 15, fmt_double(v), unit);
    y += kRowHeight;
  }
  return out;
}

}  // namespace

bool Report::passed() const {
  return std::none_of(checks.begin(), checks.end(),
                      [](const Check& c) { return c.outcome == Check::Outcome::kFail; });
}

nlohmann::ordered_json Report::to_json() const {
  nlohmann::ordered_json j;
  j["peer"] = peer;
  j["passed"] = passed();
  j["local"] = {{"device", local_device}, {"gid", local_gid}};
  j["peer_device"] = {{"device", peer_device}, {"gid", peer_gid}};
  j["roce_mtu"] = roce_mtu;
  j["checks"] = nlohmann::ordered_json::array();
  for (const auto& c : checks) {
    j["checks"].push_back(
        {{"name", c.name}, {"result", outcome_name(c.outcome)}, {"detail", c.detail}});
  }
  j["perftest"] = nlohmann::ordered_json::array();
  for (const auto& p : perftest) {
    nlohmann::ordered_json r = {{"test", p.name}, {"ok", p.ok}};
    if (!p.ok) r["error"] = p.error;
    if (p.ok) {
      r["bytes"] = p.result.bytes;
      r["iterations"] = p.result.iterations;
      if (p.latency) {
        r["t_min_us"] = p.result.lat_min_us;
        r["t_typical_us"] = p.result.lat_typical_us;
        r["t_avg_us"] = p.result.lat_avg_us;
        r["t_p99_us"] = p.result.lat_p99_us;
      } else {
        r["bw_peak_gbps"] = p.result.bw_peak_gbps;
        r["bw_avg_gbps"] = p.result.bw_avg_gbps;
        r["msg_rate_mpps"] = p.result.msg_rate_mpps;
      }
    }
    j["perftest"].push_back(r);
  }
  return j;
}

std::string Report::table() const {
  std::string out = fmt::format(
      "xroce validate {}: local {} (gid {}), peer {} (gid {}), RoCE MTU {}\n\n", peer,
      local_device.empty() ? "-" : local_device, local_gid.empty() ? "-" : local_gid,
      peer_device.empty() ? "-" : peer_device, peer_gid.empty() ? "-" : peer_gid, roce_mtu);
  out += fmt::format("{:<10} {:<6} {}\n", "CHECK", "RESULT", "DETAIL");
  for (const auto& c : checks)
    out += fmt::format("{:<10} {:<6} {}\n", c.name, outcome_name(c.outcome), c.detail);
  if (!perftest.empty()) {
    out += fmt::format("\n{:<14} {:>8} {:>7} {:>12} {:>10} {:>10} {:>10}\n", "PERFTEST", "BYTES",
                       "ITERS", "BW-avg Gb/s", "Mmsg/s", "t_typ us", "t_p99 us");
    for (const auto& p : perftest) {
      if (!p.ok) {
        out += fmt::format("{:<14} FAIL: {}\n", p.name, p.error);
      } else if (p.latency) {
        out += fmt::format("{:<14} {:>8} {:>7} {:>12} {:>10} {:>10.2f} {:>10.2f}\n", p.name,
                           p.result.bytes, p.result.iterations, "-", "-", p.result.lat_typical_us,
                           p.result.lat_p99_us);
      } else {
        out += fmt::format("{:<14} {:>8} {:>7} {:>12.3f} {:>10.4f} {:>10} {:>10}\n", p.name,
                           p.result.bytes, p.result.iterations, p.result.bw_avg_gbps,
                           p.result.msg_rate_mpps, "-", "-");
      }
    }
  }
  out += fmt::format("\n{}\n", passed() ? "PASSED" : "FAILED");
  return out;
}

std::string Report::svg() const {
  std::vector<std::pair<std::string, double>> bw;
  std::vector<std::pair<std::string, double>> atomics;  // 8-byte messages: a rate, not Gb/s
  std::vector<std::pair<std::string, double>> lat;
  for (const auto& p : perftest) {
    if (!p.ok) continue;
    if (p.latency) {
      lat.emplace_back(p.name, p.result.lat_typical_us);
    } else if (p.name.starts_with("atomic")) {
      atomics.emplace_back(p.name, p.result.msg_rate_mpps);
    } else {
      bw.emplace_back(p.name, p.result.bw_avg_gbps);
    }
  }
  int y = 30;
  std::string body = fmt::format(
      "<text x=\"10\" y=\"{}\" font-size=\"17\" font-weight=\"bold\">xroce validate {}: "
      "{}</text>\n",
      y, xml_escape(peer), passed() ? "passed" : "FAILED");
  y += 30;
  for (const auto& c : checks) {
    const char* colour = c.outcome == Check::Outcome::kFail   ? "#c03030"
                         : c.outcome == Check::Outcome::kPass ? "#308030"
                                                              : "#808080";
    body += fmt::format(
        "<text x=\"10\" y=\"{}\" font-size=\"12\"><tspan fill=\"{}\" font-weight=\"bold\">{} "
        "{}</tspan> {}</text>\n",
        y, colour, outcome_name(c.outcome), xml_escape(c.name), xml_escape(c.detail));
    y += 18;
  }
  y += 20;
  if (!bw.empty()) {
    body += bar_chart(y, "Bandwidth (average)", "Gb/s", bw);
    y += 10 + 22 * static_cast<int>(bw.size()) + 30;
  }
  if (!atomics.empty()) {
    body += bar_chart(y, "Atomic operations", "Mmsg/s", atomics);
    y += 10 + 22 * static_cast<int>(atomics.size()) + 30;
  }
  if (!lat.empty()) {
    body += bar_chart(y, "Latency (typical)", "us", lat);
    y += 10 + 22 * static_cast<int>(lat.size()) + 30;
  }
  return fmt::format(
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{}\" "
             "font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" "
             "fill=\"white\"/>\n",
             y) +
         body + "</svg>\n";
}

}  // namespace xroce::cli::validate
