// `xroce qp show NAME [--json]`, modelled on iproute2's `rdma resource show qp link NAME/1`:
// every QP of the device with its type, state, PSNs, peer, owning worker and retransmissions,
// and its DCQCN state: rate_mbps (the rate it is paced at), target_rate_mbps, alpha, cc_stage.
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "xroce/control.h"

namespace xroce::cli {

int query_device_text(control::Op op, const std::string& name, const char* what,
                      std::string& text);  // cmd_stat.cc

namespace {

struct QpShowArgs {
  std::string name;
  bool json = false;
};

void print_qp(const std::string& name, const nlohmann::ordered_json& qp) {
  fmt::print(
      "link {}/1 lqpn {} type {} state {} sq-psn {} unacked-psn {} rq-psn {} rqpn {} peer {} "
      "worker {} pid {} retransmits {} timeouts {} rate-mbps {:.1f} target-rate-mbps {:.1f} "
      "alpha {:.4f} cc {} rtt-us {:.0f} loss-window {}\n",
      name, qp.value("qpn", 0u), qp.value("type", ""), qp.value("state", ""),
      qp.value("sq_psn", 0u), qp.value("unacked_psn", 0u), qp.value("rq_psn", 0u),
      qp.value("dest_qpn", 0u), qp.value("peer", "-"), qp.value("worker", 0u), qp.value("pid", 0),
      qp.value("retransmits", std::uint64_t{0}), qp.value("timeouts", std::uint64_t{0}),
      qp.value("rate_mbps", 0.0), qp.value("target_rate_mbps", 0.0), qp.value("alpha", 0.0),
      qp.value("cc_stage", "none"), qp.value("rtt_us", 0.0), qp.value("loss_window_psns", 0u));
}

}  // namespace

void register_qp(CLI::App& app, ExitStatus& status) {
  auto* qp = app.add_subcommand("qp", "Queue pairs");
  qp->require_subcommand(1);
  auto* cmd = qp->add_subcommand("show", "Show a device's queue pairs");
  auto args = std::make_shared<QpShowArgs>();
  cmd->add_option("name", args->name, "Device name")->required();
  cmd->add_flag("--json,-j", args->json, "Print as JSON");
  cmd->callback([args, &status] {
    std::string text;
    if ((status.code = query_device_text(control::Op::qp_show, args->name, "qp show", text)) != 0)
      return;
    const auto qps = nlohmann::ordered_json::parse(text, nullptr, false);
    if (!qps.is_array()) {
      fmt::print(stderr, "xroce qp show: malformed reply from xroced\n");
      status.code = 1;
      return;
    }
    if (args->json) {
      fmt::print("{}\n", qps.dump());
      return;
    }
    for (const auto& q : qps)
      print_qp(args->name, q);
  });
}

}  // namespace xroce::cli
