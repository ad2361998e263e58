// `xroce stat NAME [--json]`, modelled on iproute2's `rdma statistic show link NAME/1`: the
// device's counters (named as rxe's hw_counters where they mean the same; see
// engine/device/counters.h) and its memory regions with the DMA path each one uses
// (docs/ARCHITECTURE.md decision 5: "shared" mapping or "cma", cross-memory attach).
#include <fmt/core.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "daemon_launch.h"
#include "xroce/control.h"

namespace xroce::cli {

namespace {

struct StatArgs {
  std::string name;
  bool json = false;
};

void print_stat(const std::string& name, const nlohmann::ordered_json& stat) {
  fmt::print("link {}/1", name);
  const auto counters = stat.find("counters");
  if (counters != stat.end() && counters->is_object()) {
    for (auto it = counters->begin(); it != counters->end(); ++it)
      fmt::print(" {} {}", it.key(), it.value().get<std::uint64_t>());
  }
  fmt::print("\n");
  const auto port = stat.find("port");
  if (port != stat.end() && port->is_object()) {
    fmt::print("    port");
    for (auto it = port->begin(); it != port->end(); ++it) {
      if (it.value().is_string()) {
        fmt::print(" {} {}", it.key(), it.value().get<std::string>());
      } else {
        fmt::print(" {} {}", it.key(), it.value().get<std::uint64_t>());
      }
    }
    fmt::print("\n");
  }
  const auto cm = stat.find("cm");
  if (cm != stat.end() && cm->is_object()) {
    fmt::print("    cm");
    for (auto it = cm->begin(); it != cm->end(); ++it) {
      if (it.value().is_object()) {  // REJs by reason
        for (auto r = it.value().begin(); r != it.value().end(); ++r)
          fmt::print(" {}.{} {}", it.key(), r.key(), r.value().get<std::uint64_t>());
      } else {
        fmt::print(" {} {}", it.key(), it.value().get<std::uint64_t>());
      }
    }
    fmt::print("\n");
  }
  const auto mrs = stat.find("memory_regions");
  if (mrs == stat.end() || !mrs->is_array()) return;
  for (const auto& mr : *mrs) {
    fmt::print("    mr {} pid {} addr {:#x} length {} dma {}\n", mr.value("handle", 0u),
               mr.value("pid", 0), mr.value("addr", std::uint64_t{0}),
               mr.value("length", std::uint64_t{0}), mr.value("dma", ""));
  }
}

}  // namespace

// Asks this namespace's daemon for `op` about device `name`; prints errors itself. Shared with
// cmd_qp.cc. Returns the exit status; on 0 `text` holds the reply.
int query_device_text(control::Op op, const std::string& name, const char* what,
                      std::string& text) {
  control::NameRequest request{};
  if (name.empty() || name.size() >= sizeof(request.name)) {
    fmt::print(stderr, "xroce {}: bad device name\n", what);
    return 2;
  }
  std::snprintf(request.name, sizeof(request.name), "%s", name.c_str());
  control::ControlClient client;
  std::string error;
  if (connect_daemon(client, false, error) != 0) {
    fmt::print(stderr, "xroce {}: {}\n", what, error);
    return 1;
  }
  if (int err = client.call_text(op, &request, sizeof(request), text)) {
    fmt::print(stderr, "xroce {}: {}: {}\n", what, name, std::strerror(err));
    return 1;
  }
  return 0;
}

void register_stat(CLI::App& app, ExitStatus& status) {
  auto* cmd = app.add_subcommand("stat", "Show a device's counters and memory regions");
  auto args = std::make_shared<StatArgs>();
  cmd->add_option("name", args->name, "Device name")->required();
  cmd->add_flag("--json,-j", args->json, "Print as JSON");
  cmd->callback([args, &status] {
    std::string text;
    if ((status.code = query_device_text(control::Op::stat, args->name, "stat", text)) != 0) return;
    const auto stat = nlohmann::ordered_json::parse(text, nullptr, false);
    if (!stat.is_object()) {
      fmt::print(stderr, "xroce stat: malformed reply from xroced\n");
      status.code = 1;
      return;
    }
    if (args->json) {
      fmt::print("{}\n", stat.dump());
    } else {
      print_stat(args->name, stat);
    }
  });
}

}  // namespace xroce::cli
