// `xroce validate PEER`: checks a path to a peer before it is trusted with RDMA traffic, as an
// operator would by hand, in one command. The peer runs `xroce validate --serve` (any RDMA
// device: xroce, rxe, an RNIC); it answers probes and starts the servers of each check.
//
// Checks, in order (each named in the report; a failure says why):
//   peer      the peer's serve side answers
//   gid       a local device has a RoCE v2 GID for the address this host reaches PEER from,
//             and the peer a device with a RoCE v2 GID for PEER
//   port      both ports are ACTIVE
//   mtu       the RoCE MTU chosen (--mtu, else the smaller active MTU) is within both ports'
//   path_mtu  DF probes of the largest RoCEv2 packet at that MTU cross the path both ways
//             (validate_core.h largest_roce_ip_packet); if not, the size that does
//   ecn       ECT(0), ECT(1) and CE arrive unchanged both ways (a hop that clears the ECN
//             field leaves DCQCN blind)
//   data      ibv_rc_pingpong -c (buffers checked) over the path at that MTU
//   perftest  write/read/send bandwidth and latency and both atomics (peer runs the servers)
// Then a table on stdout, the JSON report and an SVG chart (--json, --svg); exit status 0 when
// every check passes, 1 when one fails, 2 on bad arguments.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "subprocess.h"
#include "validate_channel.h"
#include "validate_core.h"
#include "validate_local.h"
#include "validate_probe.h"
#include "validate_serve.h"

namespace xroce::cli {

namespace {

using validate::Check;
using Outcome = validate::Check::Outcome;

constexpr auto kConnectDeadline = std::chrono::seconds(5);
constexpr auto kHelloDeadline = std::chrono::seconds(30);
constexpr auto kStartDeadline = std::chrono::seconds(30);
constexpr auto kRunDeadline = std::chrono::seconds(120);
constexpr int kProbeTries = 3;
constexpr int kProbeTimeoutMs = 700;
constexpr int kSmallProbeBytes = 200;
constexpr int kMinIpv4PacketBytes = 576;   // every IPv4 path carries this (RFC 791)
constexpr int kMinIpv6PacketBytes = 1280;  // and every IPv6 path this (RFC 8200)
constexpr int kDscpAf31 = 26;              // a common RoCE traffic class (DSCP 26)

struct ValidateArgs {
  std::string peer;
  bool serve = false;
  std::string listen;
  int serve_port = validate::kDefaultServePort;
  std::string device;
  std::string peer_device;
  int mtu = 0;
  int test_port = 18515;
  std::string json_path;
  std::string svg_path;
  bool quick = false;
  bool skip_perftest = false;
  int qp_timeout = 0;
};

class Validation {
 public:
  explicit Validation(const ValidateArgs& args) : args_(args) { report_.peer = args.peer; }

  int run() {
    if (connect_peer() && choose_devices() && check_ports() && check_mtu()) {
      const bool path_ok = check_path_mtu();
      check_ecn();
      if (!path_ok) {
        // Every RoCE packet of a full MTU would be lost: these would fail for the same reason.
        const std::string why = fmt::format("the path cannot carry RoCE MTU {} (path_mtu)", mtu_);
        add("data", Outcome::kSkip, why);
        if (!args_.skip_perftest) add("perftest", Outcome::kSkip, why);
      } else if (exchange_.empty()) {
        // Not a failure of the path: the programs that test it cannot be started.
        const std::string why = fmt::format(
            "the peer's device {} has no IPv4 address, which the test programs' own TCP exchange "
            "needs (ibv_rc_pingpong and perftest listen on IPv4 only)",
            peer_device_->name);
        add("data", Outcome::kSkip, why);
        if (!args_.skip_perftest) add("perftest", Outcome::kSkip, why);
      } else {
        check_data();
        if (!args_.skip_perftest) run_perftest();
      }
    }
    return finish();
  }

 private:
  void add(const std::string& name, Outcome outcome, const std::string& detail) {
    report_.checks.push_back(Check{name, outcome, detail});
    fmt::print(stderr, "xroce validate: {} {}: {}\n", name,
               outcome == Outcome::kPass   ? "ok"
               : outcome == Outcome::kFail ? "FAILED"
                                           : "skipped",
               detail);
  }

  bool connect_peer() {
    std::string error;
    if (channel_.connect(args_.peer, args_.serve_port, kConnectDeadline, error) != 0) {
      add("peer", Outcome::kFail,
          fmt::format("cannot reach `xroce validate --serve` on {} ({}); start it on the peer",
                      args_.peer, error));
      return false;
    }
    const auto hello = channel_.call({{"op", "hello"}}, kHelloDeadline);
    if (!hello || !hello->value("ok", false)) {
      add("peer", Outcome::kFail, "the peer's serve side did not answer hello");
      return false;
    }
    for (const auto& d : (*hello)["devices"]) {
      validate::VerbsDevice v;
      v.name = d.value("name", "");
      v.port_state = d.value("port_state", "");
      v.active_mtu = d.value("active_mtu", 0);
      v.max_mtu = d.value("max_mtu", 0);
      v.link_layer = d.value("link_layer", "");
      for (const auto& g : d["gids"])
        v.gids.push_back({g.value("index", 0), g.value("gid", ""), g.value("type", "")});
      peer_devices_.push_back(std::move(v));
    }
    if (probe_.open(args_.peer, args_.serve_port, error) != 0) {
      add("peer", Outcome::kFail, error);
      return false;
    }
    add("peer", Outcome::kPass,
        fmt::format("serve side on {} port {} answers; {} device(s) there", args_.peer,
                    args_.serve_port, peer_devices_.size()));
    return true;
  }

  bool choose_devices() {
    local_ = validate::find_local_devices();
    const std::string source = probe_.local_address();
    std::optional<int> local_gid;
    for (const auto& d : local_.devices) {
      if (!args_.device.empty() && d.name != args_.device) continue;
      if (auto g = validate::roce_v2_gid_index(d, source)) {
        local_device_ = &d;
        local_gid = g;
        break;
      }
    }
    if (local_device_ == nullptr) {
      add("gid", Outcome::kFail,
          fmt::format("no local RDMA device{} has a RoCE v2 GID for {}, the address this host "
                      "reaches {} from (`xroce up` its interface?)",
                      args_.device.empty() ? "" : " named " + args_.device, source, args_.peer));
      return false;
    }
    std::optional<int> peer_gid;
    for (const auto& d : peer_devices_) {
      if (!args_.peer_device.empty() && d.name != args_.peer_device) continue;
      if (auto g = validate::roce_v2_gid_index(d, args_.peer)) {
        peer_device_ = &d;
        peer_gid = g;
        break;
      }
    }
    if (peer_device_ == nullptr) {
      add("gid", Outcome::kFail,
          fmt::format("no RDMA device on the peer has a RoCE v2 GID for {} ({} device(s) "
                      "there)",
                      args_.peer, peer_devices_.size()));
      return false;
    }
    local_gid_index_ = *local_gid;
    peer_gid_index_ = *peer_gid;
    exchange_ = validate::exchange_address(args_.peer, *peer_device_).value_or("");
    report_.local_device = local_device_->name;
    report_.local_gid = fmt::format("{} [{}]", source, local_gid_index_);
    report_.peer_device = peer_device_->name;
    report_.peer_gid = fmt::format("{} [{}]", args_.peer, peer_gid_index_);
    add("gid", Outcome::kPass,
        fmt::format("local {} GID {} = {}, peer {} GID {} = {} (RoCE v2)", local_device_->name,
                    local_gid_index_, source, peer_device_->name, peer_gid_index_, args_.peer));
    return true;
  }

  bool check_ports() {
    const bool local_up = local_device_->port_state == "PORT_ACTIVE";
    const bool peer_up = peer_device_->port_state == "PORT_ACTIVE";
    if (!local_up || !peer_up) {
      add("port", Outcome::kFail,
          fmt::format("port 1 of {} is {}, of the peer's {} is {}", local_device_->name,
                      local_device_->port_state, peer_device_->name, peer_device_->port_state));
      return false;
    }
    add("port", Outcome::kPass, "both ports ACTIVE");
    return true;
  }

  bool check_mtu() {
    const int local_mtu = local_device_->active_mtu;
    const int peer_mtu = peer_device_->active_mtu;
    mtu_ = args_.mtu != 0 ? args_.mtu : std::min(local_mtu, peer_mtu);
    report_.roce_mtu = mtu_;
    if (!validate::is_roce_mtu(mtu_)) {
      add("mtu", Outcome::kFail, fmt::format("{} is not a RoCE MTU", mtu_));
      return false;
    }
    if (mtu_ > local_mtu || mtu_ > peer_mtu) {
      add("mtu", Outcome::kFail,
          fmt::format("RoCE MTU {} is above the active MTU of {} ({}) or of the peer's {} ({})",
                      mtu_, local_device_->name, local_mtu, peer_device_->name, peer_mtu));
      return false;
    }
    add("mtu", Outcome::kPass,
        fmt::format("RoCE MTU {} (active: local {}, peer {})", mtu_, local_mtu, peer_mtu));
    return true;
  }

  bool check_path_mtu() {
    const bool v6 = probe_.ipv6();
    const int needed = validate::largest_roce_ip_packet(mtu_, v6);
    std::string error;
    if (probe_.probe(needed, 0, needed, 0, kProbeTries, kProbeTimeoutMs, error)) {
      add("path_mtu", Outcome::kPass,
          fmt::format("{}-byte packets with DF set (the largest RoCEv2 packet at MTU {}) cross "
                      "both ways",
                      needed, mtu_));
      return true;
    }
    // Which way fails, and the largest packet that does cross toward the peer.
    const bool forward =
        probe_.probe(needed, 0, kSmallProbeBytes, 0, kProbeTries, kProbeTimeoutMs, error)
            .has_value();
    // Binary search between the size every path carries and the one that failed; when the
    // forward direction carried it, the return path is the narrower one and is searched.
    int low = v6 ? kMinIpv6PacketBytes : kMinIpv4PacketBytes;
    int high = needed;
    while (high - low > 1) {
      const int mid = (low + high) / 2;
      const bool ok =
          forward
              ? probe_.probe(kSmallProbeBytes, 0, mid, 0, 2, kProbeTimeoutMs, error).has_value()
              : probe_.probe(mid, 0, kSmallProbeBytes, 0, 2, kProbeTimeoutMs, error).has_value();
      (ok ? low : high) = mid;
    }
    const int fits = validate::roce_mtu_for_ip_packet(low, v6);
    add("path_mtu", Outcome::kFail,
        fmt::format("{}-byte packets with DF set (the largest RoCEv2 packet at MTU {}) do not "
                    "reach {}; the largest that does is {} bytes ({}){}",
                    needed, mtu_, forward ? "back from the peer" : "the peer", low,
                    fits ? fmt::format("RoCE MTU {} would fit", fits) : "no RoCE MTU fits",
                    error.empty() ? "" : "; " + error));
    return false;
  }

  void check_ecn() {
    std::vector<std::string> problems;
    std::string dscp_note;
    for (int codepoint : {2, 1, 3}) {  // ECT(0), ECT(1), CE
      const int tos = kDscpAf31 << 2 | codepoint;
      std::string error;
      const auto a = probe_.probe(kSmallProbeBytes, tos, kSmallProbeBytes, tos, kProbeTries,
                                  kProbeTimeoutMs, error);
      const char* name = validate::ecn_name(codepoint);
      if (!a) {
        problems.push_back(fmt::format("no answer to a probe marked {}", name));
        continue;
      }
      if ((a->peer_got_tos & 3) != codepoint) {
        problems.push_back(fmt::format("{} sent to the peer arrived as {}", name,
                                       validate::ecn_name(a->peer_got_tos)));
      }
      if (a->reply_tos < 0 || (a->reply_tos & 3) != codepoint) {
        problems.push_back(fmt::format("{} sent by the peer arrived as {}", name,
                                       validate::ecn_name(a->reply_tos < 0 ? 0 : a->reply_tos)));
      }
      if ((a->peer_got_tos >> 2) != kDscpAf31 || (a->reply_tos >> 2) != kDscpAf31) {
        dscp_note = fmt::format("; note: DSCP {} arrived as {} toward the peer and {} back",
                                kDscpAf31, a->peer_got_tos >> 2, a->reply_tos >> 2);
      }
    }
    if (problems.empty()) {
      add("ecn", Outcome::kPass, "ECT(0), ECT(1) and CE arrive unchanged both ways" + dscp_note);
      return;
    }
    std::string detail;
    for (const auto& p : problems)
      detail += (detail.empty() ? "" : "; ") + p;
    add("ecn", Outcome::kFail,
        detail +
            ": a hop rewrites the ECN field, so switches cannot signal congestion and "
            "DCQCN cannot react" +
            dscp_note);
  }

  // Starts a server on the peer, runs the client here, collects both. The client's result,
  // with `error` set when either side failed.
  ProgramResult run_pair(nlohmann::json request, const std::vector<std::string>& client_argv,
                         std::string& error) {
    request["device"] = peer_device_->name;
    request["gid_index"] = peer_gid_index_;
    request["mtu"] = mtu_;
    const auto started = channel_.call(request, kStartDeadline);
    if (!started || !started->value("ok", false)) {
      error = started ? fmt::format("the peer could not start its server: {}",
                                    started->value("error", "?"))
                      : "the peer did not answer";
      return {};
    }
    const auto client = run_program(
        client_argv, validate::environment_for(local_, local_device_->name), kRunDeadline);
    const auto server =
        channel_.call({{"op", "wait"}, {"id", started->value("id", 0)}, {"timeout_ms", 15000}},
                      std::chrono::seconds(30));
    const int server_status = server ? server->value("status", -1) : -1;
    const std::string server_says =
        server ? validate::failure_line(server->value("output", "")) : "no answer";
    if (client.status != 0) {
      error =
          fmt::format("{} exited {}: {}; the peer's exited {}: {}", client_argv[0], client.status,
                      validate::failure_line(client.output), server_status, server_says);
    } else if (server_status != 0) {
      error =
          fmt::format("the peer's {} exited {}: {}", client_argv[0], server_status, server_says);
    }
    return client;
  }

  int next_test_port() { return args_.test_port + test_index_++; }

  void check_data() {
    const int size = 16 * mtu_;
    const int iterations = args_.quick ? 10 : 50;
    const int port = next_test_port();
    std::string error;
    const auto client =
        run_pair({{"op", "pingpong"}, {"port", port}, {"size", size}, {"iterations", iterations}},
                 validate::pingpong_argv(local_device_->name, local_gid_index_, mtu_, port, size,
                                         iterations, exchange_),
                 error);
    if (error.empty() &&
        client.output.find(std::to_string(iterations) + " iters in") == std::string::npos) {
      error = "ibv_rc_pingpong did not report its iterations";
    }
    if (!error.empty()) {
      add("data", Outcome::kFail, error);
      return;
    }
    add("data", Outcome::kPass,
        fmt::format("ibv_rc_pingpong -c: {} x {} bytes each way, buffers checked", iterations,
                    size));
  }

  void run_perftest() {
    int failed = 0;
    for (const auto& spec : validate::perftest_matrix()) {
      const int iterations = args_.quick ? 50 : 500;
      const int port = next_test_port();
      std::string error;
      const auto client =
          run_pair({{"op", "perftest"},
                    {"test", spec.name},
                    {"port", port},
                    {"iterations", iterations},
                    {"qp_timeout", args_.qp_timeout}},
                   validate::perftest_argv(spec, {local_device_->name, local_gid_index_, mtu_, port,
                                                  iterations, args_.qp_timeout, exchange_}),
                   error);
      validate::PerftestRow row{spec.name, spec.latency, false, {}, error};
      if (error.empty()) {
        if (auto r = validate::parse_perftest(client.output, spec.latency)) {
          row.ok = true;
          row.result = *r;
        } else {
          row.error = "no result row in its output: " + validate::failure_line(client.output);
        }
      }
      if (!row.ok) ++failed;
      fmt::print(stderr, "xroce validate: perftest {} {}\n", spec.name,
                 row.ok ? "ok" : "FAILED: " + row.error);
      report_.perftest.push_back(std::move(row));
    }
    const int total = static_cast<int>(validate::perftest_matrix().size());
    if (failed == 0) {
      add("perftest", Outcome::kPass, fmt::format("{} of {} runs completed", total, total));
    } else {
      std::string names;
      for (const auto& r : report_.perftest)
        if (!r.ok) names += (names.empty() ? "" : ", ") + r.name;
      add("perftest", Outcome::kFail,
          fmt::format("{} of {} runs failed: {}", failed, total, names));
    }
  }

  int finish() {
    const std::string stem = "xroce-validate-" + args_.peer;
    const std::string json_path = args_.json_path.empty() ? stem + ".json" : args_.json_path;
    const std::string svg_path = args_.svg_path.empty() ? stem + ".svg" : args_.svg_path;
    std::ofstream(json_path) << report_.to_json().dump(2) << "\n";
    std::ofstream(svg_path) << report_.svg();
    fmt::print("{}", report_.table());
    fmt::print("report: {} and {}\n", json_path, svg_path);
    for (const auto& c : report_.checks) {
      if (c.outcome == Outcome::kFail)
        fmt::print(stderr, "xroce validate: {} failed: {}\n", c.name, c.detail);
    }
    return report_.passed() ? 0 : 1;
  }

  const ValidateArgs& args_;
  validate::Report report_;
  validate::LineChannel channel_;
  validate::ProbeClient probe_;
  validate::LocalDevices local_;
  std::vector<validate::VerbsDevice> peer_devices_;
  const validate::VerbsDevice* local_device_ = nullptr;
  const validate::VerbsDevice* peer_device_ = nullptr;
  int local_gid_index_ = 0;
  int peer_gid_index_ = 0;
  // The peer address the test programs' TCP exchange connects to (validate::exchange_address);
  // empty when the peer has none.
  std::string exchange_;
  int mtu_ = 0;
  int test_index_ = 0;
};

}  // namespace

void register_validate(CLI::App& app, ExitStatus& status) {
  auto* cmd = app.add_subcommand(
      "validate", "Check the path to a peer: GIDs, path MTU, ECN, data, a perftest matrix");
  auto args = std::make_shared<ValidateArgs>();
  cmd->add_option("peer", args->peer, "The peer's address (it runs `xroce validate --serve`)");
  cmd->add_flag("--serve", args->serve, "Be the peer: answer probes, start perftest servers");
  cmd->add_option("--listen", args->listen, "--serve: listen on this address (default: all)");
  cmd->add_option("--serve-port", args->serve_port, "TCP and UDP port of the serve side (18600)");
  cmd->add_option("--device", args->device, "Local device (default: the one with the GID)");
  cmd->add_option("--peer-device", args->peer_device, "The peer's device (default: by GID)");
  cmd->add_option("--mtu", args->mtu, "RoCE MTU (default: the smaller active MTU)");
  cmd->add_option("--test-port", args->test_port, "First TCP port of the test programs (18515)");
  cmd->add_option("--json", args->json_path, "JSON report (default xroce-validate-PEER.json)");
  cmd->add_option("--svg", args->svg_path, "SVG chart (default xroce-validate-PEER.svg)");
  cmd->add_flag("--quick", args->quick, "Fewer iterations");
  cmd->add_option("--qp-timeout", args->qp_timeout,
                  "perftest's ACK timeout exponent (-u) on both sides, for slow peers such as "
                  "emulated VMs (default: perftest's, 14 = 67 ms)")
      ->check(CLI::Range(0, 31));
  cmd->add_flag("--skip-perftest", args->skip_perftest, "Only the path checks and the data check");
  cmd->callback([args, &status] {
    if (args->serve) {
      status.code = validate::run_serve({args->listen, args->serve_port});
      return;
    }
    if (args->peer.empty()) {
      fmt::print(stderr, "xroce validate: name the PEER (or --serve on the peer)\n");
      status.code = 2;
      return;
    }
    status.code = Validation(*args).run();
  });
}

}  // namespace xroce::cli
