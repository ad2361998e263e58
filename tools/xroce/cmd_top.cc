// `xroce top NAME [--sort KEY] [--interval-ms N] [--iterations N] [--batch]`: a device's QPs
// live, refreshed every second, as an operator watches a NIC: per-QP payload rate both ways,
// the DCQCN rate and alpha the QP is paced with, its round-trip estimate, retransmissions, RNR
// and NAK counts, CNPs sent (notification point) and handled (reaction point), CE marks seen;
// above them the device's totals. Where the congestion is shows as the QPs whose CNPs and CE
// marks grow and whose DCQCN rate falls below the line rate.
//
// Keys: q quits; r (rate), t (RTT), x (retransmissions), c (CNPs), e (CE marks), n (QPN) sort.
// Without a terminal (or with --batch) each refresh is printed as plain text, one frame after
// the other, for scripts and logs.
#include <fmt/core.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "telemetry.h"

namespace xroce::cli {

namespace {

enum class SortKey { kRate, kRtt, kRetransmits, kCnps, kEcn, kQpn };

struct TopArgs {
  std::string name;
  std::string sort = "rate";
  int interval_ms = 1000;
  int iterations = 0;  // 0: until q
  bool batch = false;
};

volatile std::sig_atomic_t g_stop = 0;
void on_stop_signal(int) {
  g_stop = 1;
}

std::optional<SortKey> sort_key_from_name(const std::string& s) {
  if (s == "rate") return SortKey::kRate;
  if (s == "rtt") return SortKey::kRtt;
  if (s == "retx" || s == "retransmits") return SortKey::kRetransmits;
  if (s == "cnp") return SortKey::kCnps;
  if (s == "ecn") return SortKey::kEcn;
  if (s == "qpn") return SortKey::kQpn;
  return std::nullopt;
}

std::optional<SortKey> sort_key_from_key(char c) {
  switch (c) {
    case 'r':
      return SortKey::kRate;
    case 't':
      return SortKey::kRtt;
    case 'x':
      return SortKey::kRetransmits;
    case 'c':
      return SortKey::kCnps;
    case 'e':
      return SortKey::kEcn;
    case 'n':
      return SortKey::kQpn;
    default:
      return std::nullopt;
  }
}

const char* sort_key_label(SortKey k) {
  switch (k) {
    case SortKey::kRate:
      return "rate";
    case SortKey::kRtt:
      return "rtt";
    case SortKey::kRetransmits:
      return "retx";
    case SortKey::kCnps:
      return "cnp";
    case SortKey::kEcn:
      return "ecn";
    case SortKey::kQpn:
      return "qpn";
  }
  return "?";
}

std::uint64_t u64(const nlohmann::ordered_json& j, const char* key) {
  return j.value(key, std::uint64_t{0});
}

std::uint64_t cnps(const QpRow& r) {
  return u64(r.qp, "np_cnp_sent") + u64(r.qp, "rp_cnp_handled");
}

// Largest first, except QPN (ascending).
void sort_rows(std::vector<QpRow>& rows, SortKey key) {
  auto value = [key](const QpRow& r) -> double {
    switch (key) {
      case SortKey::kRate:
        return r.tx_mbps + r.rx_mbps;
      case SortKey::kRtt:
        return r.qp.value("rtt_us", 0.0);
      case SortKey::kRetransmits:
        return static_cast<double>(u64(r.qp, "retransmits"));
      case SortKey::kCnps:
        return static_cast<double>(cnps(r));
      case SortKey::kEcn:
        return static_cast<double>(u64(r.qp, "ecn_ce_received"));
      case SortKey::kQpn:
        return -static_cast<double>(u64(r.qp, "qpn"));
    }
    return 0;
  };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const QpRow& a, const QpRow& b) { return value(a) > value(b); });
}

std::string rtt_text(const nlohmann::ordered_json& qp) {
  if (u64(qp, "rtt_samples") == 0) return "-";
  return fmt::format("{:.1f}", qp.value("rtt_us", 0.0));
}

// The frame as lines (no terminal control codes).
std::vector<std::string> render(const DeviceSnapshot* before, const DeviceSnapshot& now,
                                SortKey key) {
  std::vector<std::string> lines;
  const auto& link = now.link;
  const auto rate = [&](const char* c) { return counter_rate(before, now, c); };
  lines.push_back(fmt::format(
      "xroce top - {} on {} ({} port, {}), state {}, {} QPs, sorted by {} "
      "(keys: r t x c e n sort, q quits)",
      now.device, link.value("netdev", "?"), link.value("port_kind", "?"),
      link.value("datapath", "?"), link.value("state", "?"), now.qps.size(), sort_key_label(key)));
  lines.push_back(fmt::format(
      "device: tx {:.1f} Mb/s {:.0f} pkt/s  rx {:.1f} Mb/s {:.0f} pkt/s  retries {}  "
      "ecn-marked {} ({:.0f}/s)  cnp sent {} handled {}  rnr {}/{}  seq-naks {}",
      rate("tx_bytes") * 8 / 1e6, rate("sent_pkts"), rate("rx_bytes") * 8 / 1e6, rate("rcvd_pkts"),
      u64(now.counters, "completer_retry_err"), u64(now.counters, "np_ecn_marked_roce_packets"),
      rate("np_ecn_marked_roce_packets"), u64(now.counters, "np_cnp_sent"),
      u64(now.counters, "rp_cnp_handled"), u64(now.counters, "send_rnr_err"),
      u64(now.counters, "rcvd_rnr_err"), u64(now.counters, "rcvd_seq_err")));
  lines.emplace_back();
  lines.push_back(fmt::format(
      "{:>8} {:<4} {:<5} {:<16} {:>9} {:>9} {:>9} {:>6} {:>8} {:>7} {:>5} {:>5} {:>7} {:>7} "
      "{:>8}",
      "QPN", "TYPE", "STATE", "PEER", "TX-Mb/s", "RX-Mb/s", "CC-Mb/s", "ALPHA", "RTT-us", "RETX",
      "RNR", "NAK", "CNP-TX", "CNP-RX", "ECN-CE"));
  auto rows = qp_rows(before, now);
  sort_rows(rows, key);
  for (const auto& r : rows) {
    const auto& q = r.qp;
    lines.push_back(fmt::format(
        "{:>8} {:<4} {:<5} {:<16} {:>9.2f} {:>9.2f} {:>9.1f} {:>6.3f} {:>8} {:>7} {:>5} {:>5} "
        "{:>7} {:>7} {:>8}",
        u64(q, "qpn"), q.value("type", "?"), q.value("state", "?").substr(0, 5),
        q.value("peer", "-").empty() ? "-" : q.value("peer", "-"), r.tx_mbps, r.rx_mbps,
        q.value("rate_mbps", 0.0), q.value("alpha", 0.0), rtt_text(q), u64(q, "retransmits"), r.rnr,
        r.naks, u64(q, "np_cnp_sent"), u64(q, "rp_cnp_handled"), u64(q, "ecn_ce_received")));
  }
  return lines;
}

// Raw keyboard input and the alternate screen while top runs; restored on every exit path.
class TerminalSession {
 public:
  TerminalSession() {
    if (tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    fmt::print("\x1b[?1049h\x1b[?25l");  // alternate screen, hide the cursor
    std::fflush(stdout);
  }
  ~TerminalSession() {
    fmt::print("\x1b[?25h\x1b[?1049l");
    std::fflush(stdout);
    if (active_) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  TerminalSession(const TerminalSession&) = delete;
  TerminalSession& operator=(const TerminalSession&) = delete;

  void draw(const std::vector<std::string>& lines) const {
    winsize ws{};
    const bool sized = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0;
    const std::size_t cols = sized ? ws.ws_col : 200;
    const std::size_t rows = sized && ws.ws_row > 0 ? ws.ws_row : 50;
    std::string frame = "\x1b[H\x1b[2J";
    for (std::size_t i = 0; i < lines.size() && i < rows; ++i) {
      frame += lines[i].substr(0, cols);
      if (i + 1 < lines.size() && i + 1 < rows) frame += "\r\n";
    }
    fmt::print("{}", frame);
    std::fflush(stdout);
  }

 private:
  termios saved_{};
  bool active_ = false;
};

// Waits up to `timeout_ms` for a key; returns it, or 0.
char read_key(int timeout_ms) {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0 || !(p.revents & POLLIN)) return 0;
  char c = 0;
  return read(STDIN_FILENO, &c, 1) == 1 ? c : 0;
}

int run_top(const TopArgs& args) {
  auto key = sort_key_from_name(args.sort);
  if (!key) {
    fmt::print(stderr, "xroce top: --sort must be rate, rtt, retx, cnp, ecn or qpn\n");
    return 2;
  }
  const bool interactive = !args.batch && isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
  TelemetryClient client;
  std::string error;
  std::optional<DeviceSnapshot> before = client.snapshot(args.name, error);
  if (!before) {
    fmt::print(stderr, "xroce top: {}\n", error);
    return 1;
  }
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  std::unique_ptr<TerminalSession> terminal;
  if (interactive) terminal = std::make_unique<TerminalSession>();
  auto next_refresh = std::chrono::steady_clock::now();
  for (int frame = 0; !g_stop && (args.iterations == 0 || frame < args.iterations); ++frame) {
    // Wait for the refresh tick, answering keys meanwhile.
    next_refresh += std::chrono::milliseconds(args.interval_ms);
    while (!g_stop) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          next_refresh - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      if (!interactive) {
        poll(nullptr, 0, static_cast<int>(left.count()));
        continue;
      }
      const char c = read_key(static_cast<int>(left.count()));
      if (c == 'q' || c == 'Q') return 0;
      if (auto k = sort_key_from_key(c)) {
        key = k;
        break;  // redraw at once in the new order
      }
    }
    auto now = client.snapshot(args.name, error);
    if (!now) {
      terminal.reset();
      fmt::print(stderr, "xroce top: {}\n", error);
      return 1;
    }
    const auto lines = render(&*before, *now, *key);
    if (terminal) {
      terminal->draw(lines);
    } else {
      for (const auto& l : lines)
        fmt::print("{}\n", l);
      fmt::print("\n");
      std::fflush(stdout);
    }
    before = std::move(now);
  }
  return 0;
}

}  // namespace

void register_top(CLI::App& app, ExitStatus& status) {
  auto* cmd = app.add_subcommand("top", "Watch a device's QPs live (rates, DCQCN, RTT, errors)");
  auto args = std::make_shared<TopArgs>();
  cmd->add_option("name", args->name, "Device name")->required();
  cmd->add_option("--sort", args->sort, "rate (default), rtt, retx, cnp, ecn or qpn");
  cmd->add_option("--interval-ms", args->interval_ms, "Refresh period (default 1000)")
      ->check(CLI::Range(100, 60000));
  cmd->add_option("--iterations", args->iterations, "Stop after this many refreshes (0: never)");
  cmd->add_flag("--batch", args->batch, "Plain text frames, no terminal control");
  cmd->callback([args, &status] { status.code = run_top(*args); });
}

}  // namespace xroce::cli
