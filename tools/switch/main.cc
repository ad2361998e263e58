// xroce-switch: a user-space L2 switch for a middle network namespace, the congestion point
// and impairment tool the tests need on a kernel without RED or netem (README.md here).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

#include "switch.h"

namespace {

// "KMIN,KMAX,PMAX": bytes, bytes, probability.
std::string parse_ecn(const std::string& text, xroce::sw::EcnThresholds& out) {
  std::istringstream in(text);
  char c1 = 0;
  char c2 = 0;
  if (!(in >> out.kmin_bytes >> c1 >> out.kmax_bytes >> c2 >> out.pmax) || c1 != ',' || c2 != ',' ||
      !in.eof()) {
    return "--ecn wants KMIN,KMAX,PMAX (bytes, bytes, probability), got " + text;
  }
  if (out.kmax_bytes < out.kmin_bytes || out.pmax < 0 || out.pmax > 1)
    return "--ecn needs KMIN <= KMAX and 0 <= PMAX <= 1";
  return {};
}

struct Cli {
  std::vector<std::string> ports;
  std::uint64_t rate_mbit = 0;
  std::uint64_t buffer = 1 << 20;
  std::string ecn;
  std::uint64_t seed = 1;
  std::uint64_t drop_nth = 0;
  std::string match_opcode;
  std::string from;
  double loss = 0;
  std::string stats_json;
  bool bleach_ecn = false;
};

int run(const Cli& cli) {
  xroce::sw::SwitchConfig config;
  config.ports = cli.ports;
  config.egress.buffer_bytes = cli.buffer;
  config.egress.rate_mbit = cli.rate_mbit;
  config.seed = cli.seed;
  config.stats_path = cli.stats_json;
  config.bleach_ecn = cli.bleach_ecn;
  if (!cli.ecn.empty()) {
    xroce::sw::EcnThresholds t;
    if (auto err = parse_ecn(cli.ecn, t); !err.empty()) {
      std::fprintf(stderr, "xroce-switch: %s\n", err.c_str());
      return 2;
    }
    config.egress.ecn = t;
  }
  config.impair.drop_nth = cli.drop_nth;
  config.impair.loss = cli.loss;
  if (!cli.match_opcode.empty()) {
    const unsigned long opcode = std::stoul(cli.match_opcode, nullptr, 0);  // 0x.. or decimal
    if (opcode > 0xFF) {
      std::fprintf(stderr, "xroce-switch: --match-opcode must be 0..255\n");
      return 2;
    }
    config.impair.match_opcode = static_cast<std::uint8_t>(opcode);
  }
  if (!cli.from.empty()) config.impair.from_port = cli.from;
  // Signals arrive through a signalfd the loop polls; block them before anything can raise one.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGUSR1})
    sigaddset(&signals, s);
  sigprocmask(SIG_BLOCK, &signals, nullptr);
  const int signal_fd = signalfd(-1, &signals, SFD_CLOEXEC);
  // The rate limiter's waits are tens of microseconds: ask for a tight timer slack.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  xroce::sw::Switch sw(config);
  if (!sw.error().empty()) {
    std::fprintf(stderr, "xroce-switch: %s\n", sw.error().c_str());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  return sw.run(signal_fd);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "xroce-switch: a user-space L2 switch with a rate limit, ECN marking (RED on the "
      "instantaneous queue) and RoCE impairment, for network-namespace tests"};
  auto cli = std::make_shared<Cli>();
  app.add_option("--port", cli->ports, "An interface to switch between (two or more)")
      ->required()
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--rate-mbit", cli->rate_mbit, "Egress rate limit per port, Mbit/s (0: none)");
  app.add_option("--buffer", cli->buffer, "Egress queue limit per port, bytes (drop-tail)")
      ->check(CLI::PositiveNumber);
  app.add_option("--ecn", cli->ecn,
                 "KMIN,KMAX,PMAX: mark ECT packets CE by queue depth in bytes (RED-style)");
  app.add_option("--seed", cli->seed, "Seed of the marking and loss PRNGs");
  app.add_option("--drop-nth", cli->drop_nth, "Drop the Nth matching RoCE frame (UDP 4791)");
  app.add_option("--match-opcode", cli->match_opcode,
                 "Impair only RoCE frames with this BTH opcode (0x.. or decimal)");
  app.add_option("--from", cli->from, "Impair only RoCE frames received on this port");
  app.add_option("--loss", cli->loss, "Drop matching RoCE frames with this probability")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--bleach-ecn", cli->bleach_ecn,
               "Clear the ECN field of every IP packet (a hop that rewrites the TOS byte)");
  app.add_option("--stats-json", cli->stats_json,
                 "Write per-port statistics here on SIGUSR1 and at exit");
  CLI11_PARSE(app, argc, argv);
  if (cli->ports.size() < 2) {
    std::fprintf(stderr, "xroce-switch: give at least two --port interfaces\n");
    return 2;
  }
  if (!cli->from.empty() &&
      std::find(cli->ports.begin(), cli->ports.end(), cli->from) == cli->ports.end()) {
    std::fprintf(stderr, "xroce-switch: --from %s is not one of the ports\n", cli->from.c_str());
    return 2;
  }
  return run(*cli);
}
