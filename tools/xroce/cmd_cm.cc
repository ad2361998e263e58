// `xroce cm show NAME [--json]`: the device's rdma_cm ids, by process, with what the
// connection manager knows of each: listener or connection, its rdma_cm state and the IB CM
// state of its connection, local and remote IP address and port, the QPs it joins.
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

struct CmShowArgs {
  std::string name;
  bool json = false;
};

void print_id(const std::string& name, const nlohmann::ordered_json& id) {
  fmt::print("link {}/1 pid {} id {} {} state {} cm-state {} local {} remote {} qpn {} rqpn {}\n",
             name, id.value("pid", 0), id.value("id", 0u), id.value("role", ""),
             id.value("state", ""), id.value("cm_state", "-"), id.value("local", ""),
             id.value("remote", "-").empty() ? "-" : id.value("remote", "-"), id.value("qpn", 0u),
             id.value("remote_qpn", 0u));
}

}  // namespace

void register_cm(CLI::App& app, ExitStatus& status) {
  auto* cm = app.add_subcommand("cm", "rdma_cm connections and listeners");
  cm->require_subcommand(1);
  auto* cmd = cm->add_subcommand("show", "Show a device's rdma_cm ids, by process");
  auto args = std::make_shared<CmShowArgs>();
  cmd->add_option("name", args->name, "Device name")->required();
  cmd->add_flag("--json,-j", args->json, "Print as JSON");
  cmd->callback([args, &status] {
    std::string text;
    if ((status.code = query_device_text(control::Op::cm_show, args->name, "cm show", text)) != 0)
      return;
    const auto reply = nlohmann::ordered_json::parse(text, nullptr, false);
    if (!reply.is_object() || !reply.contains("ids")) {
      fmt::print(stderr, "xroce cm show: malformed reply from xroced\n");
      status.code = 1;
      return;
    }
    if (args->json) {
      fmt::print("{}\n", reply.dump());
      return;
    }
    for (const auto& id : reply["ids"])
      print_id(args->name, id);
  });
}

}  // namespace xroce::cli
