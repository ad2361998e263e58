// `xroce cc show|set|profile NAME ...` (device builds): a running device's DCQCN parameters
// under their ConnectX names, through xroced's cc_show / cc_set / cc_profile control ops
// (include/xroce/control.h); and `xroce impair show|set NAME ...`, its receive impairment
// (engine/daemon/rx_impairment.h: impair_show / impair_set). `set` is all or nothing: one bad
// assignment changes nothing.
#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cc/params.h"
#include "commands.h"
#include "daemon_launch.h"
#include "xroce/control.h"

namespace xroce::cli {

namespace {

struct CcArgs {
  std::string name;
  std::vector<std::string> assignments;
  std::string profile;
  bool json = false;
};

void print_cc(const nlohmann::ordered_json& cc) {
  fmt::print("cc {} profile {} line_rate_mbps {}\n", cc.value("device", ""),
             cc.value("profile", ""), cc.value("line_rate_mbps", 0.0));
  for (const char* mask : {"rp_enable", "np_enable"}) {
    fmt::print("  {}", mask);
    for (const auto& bit : cc[mask])
      fmt::print(" {}", bit.get<int>());
    fmt::print("\n");
  }
  const auto& params = cc["params"];
  for (const char* section : {"roce_rp", "roce_np", "extension"}) {
    fmt::print("  {}:", section);
    for (const auto& name : cc[section]) {
      const std::string n = name.get<std::string>();
      if (n.rfind("rp_enable.", 0) == 0 || n.rfind("np_enable.", 0) == 0) continue;  // above
      fmt::print(" {} {}", n, params[n].get<std::int64_t>());
    }
    fmt::print("\n");
  }
}

void print_impair(const nlohmann::ordered_json& impair) {
  fmt::print("impair {} loss {} seed {}\n", impair.value("device", ""), impair.value("loss", 0.0),
             impair.value("seed", 0ULL));
}

// One op of `xroce <area> <what>`: sends `request`, prints the reply. A set's reply is
// {"ok", <key>: ...}; a show's is the object itself. Returns the exit status.
struct Area {
  const char* name;  // "cc", "impair"
  control::Op show;
  void (*print)(const nlohmann::ordered_json&);
};
constexpr Area kCc{"cc", control::Op::cc_show, print_cc};
constexpr Area kImpair{"impair", control::Op::impair_show, print_impair};

int area_call(const Area& area, control::Op op, const std::string& request, const char* what,
              bool json) {
  control::ControlClient client;
  std::string error;
  if (connect_daemon(client, false, error) != 0) {
    fmt::print(stderr, "xroce {} {}: {}\n", area.name, what, error);
    return 1;
  }
  std::string text;
  if (int err = client.call_text(op, request.data(), request.size(), text)) {
    fmt::print(stderr, "xroce {} {}: {}\n", area.name, what,
               err == ENODEV ? "no such device" : std::strerror(err));
    return 1;
  }
  auto reply = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!reply.is_object()) {
    fmt::print(stderr, "xroce {} {}: malformed reply from xroced\n", area.name, what);
    return 1;
  }
  if (op != area.show) {
    if (!reply.value("ok", false)) {
      fmt::print(stderr, "xroce {} {}: {}\n", area.name, what, reply.value("error", "refused"));
      return 2;
    }
    reply = reply[area.name];
  }
  if (json) {
    fmt::print("{}\n", reply.dump());
  } else {
    area.print(reply);
  }
  return 0;
}

template <typename T>
std::string request_bytes(const T& request) {
  return std::string(reinterpret_cast<const char*>(&request), sizeof request);
}

// Copies the device name into a request's name field; false (and a message) if it does not fit.
bool set_name(char (&field)[control::kNameBytes], const std::string& name, const char* what) {
  if (name.empty() || name.size() >= sizeof field) {
    fmt::print(stderr, "xroce {}: bad device name\n", what);
    return false;
  }
  std::snprintf(field, sizeof field, "%s", name.c_str());
  return true;
}

// The set ops' text: one "NAME=VALUE" per line; false (and a message) if one holds a newline.
bool assignments_text(const std::vector<std::string>& assignments, const char* what,
                      std::string& text) {
  for (const auto& a : assignments) {
    if (a.find('\n') != std::string::npos) {
      fmt::print(stderr, "xroce {}: '{}' is not NAME=VALUE\n", what, a);
      return false;
    }
    text += a + "\n";
  }
  return true;
}

}  // namespace

void register_cc(CLI::App& app, ExitStatus& status) {
  auto* cc = app.add_subcommand("cc", "Congestion control (DCQCN) of a device");
  cc->require_subcommand(1);

  auto show_args = std::make_shared<CcArgs>();
  auto* show = cc->add_subcommand("show", "Show every roce_rp / roce_np parameter");
  show->add_option("name", show_args->name, "Device name")->required();
  show->add_flag("--json,-j", show_args->json, "Print as JSON");
  show->callback([show_args, &status] {
    control::NameRequest request{};
    if (!set_name(request.name, show_args->name, "cc show")) {
      status.code = 2;
      return;
    }
    status.code =
        area_call(kCc, control::Op::cc_show, request_bytes(request), "show", show_args->json);
  });

  auto set_args = std::make_shared<CcArgs>();
  auto* set = cc->add_subcommand("set", "Set parameters: PARAM=VALUE ... (all or nothing)");
  set->add_option("name", set_args->name, "Device name")->required();
  set->add_option("assignments", set_args->assignments,
                  "PARAM=VALUE (rp_enable.P / np_enable.P per priority, rp_enable / np_enable "
                  "for all)")
      ->required();
  set->add_flag("--json,-j", set_args->json, "Print the result as JSON");
  set->callback([set_args, &status] {
    control::CcSetRequest request{};
    if (!set_name(request.name, set_args->name, "cc set")) {
      status.code = 2;
      return;
    }
    std::string text;
    if (!assignments_text(set_args->assignments, "cc set", text)) {
      status.code = 2;
      return;
    }
    request.length = static_cast<std::uint32_t>(text.size());
    status.code =
        area_call(kCc, control::Op::cc_set, request_bytes(request) + text, "set", set_args->json);
  });

  auto profile_args = std::make_shared<CcArgs>();
  auto* profile = cc->add_subcommand("profile", "Load a parameter profile (enables are kept)");
  profile->add_option("name", profile_args->name, "Device name")->required();
  profile->add_option("profile", profile_args->profile, "connectx or paper")->required();
  profile->add_flag("--json,-j", profile_args->json, "Print the result as JSON");
  profile->callback([profile_args, &status] {
    control::CcProfileRequest request{};
    if (!set_name(request.name, profile_args->name, "cc profile")) {
      status.code = 2;
      return;
    }
    if (profile_args->profile.size() >= sizeof request.profile) {
      fmt::print(stderr, "xroce cc profile: unknown profile '{}'; known: connectx, paper\n",
                 profile_args->profile);
      status.code = 2;
      return;
    }
    std::snprintf(request.profile, sizeof request.profile, "%s", profile_args->profile.c_str());
    status.code = area_call(kCc, control::Op::cc_profile, request_bytes(request), "profile",
                            profile_args->json);
  });
}

void register_impair(CLI::App& app, ExitStatus& status) {
  auto* impair = app.add_subcommand(
      "impair", "Receive impairment of a device: drop a fraction of its RoCE packets at random");
  impair->require_subcommand(1);
  auto show_args = std::make_shared<CcArgs>();
  auto* show = impair->add_subcommand("show", "Show the loss probability and seed");
  show->add_option("name", show_args->name, "Device name")->required();
  show->add_flag("--json,-j", show_args->json, "Print as JSON");
  show->callback([show_args, &status] {
    control::NameRequest request{};
    if (!set_name(request.name, show_args->name, "impair show")) {
      status.code = 2;
      return;
    }
    status.code = area_call(kImpair, control::Op::impair_show, request_bytes(request), "show",
                            show_args->json);
  });
  auto set_args = std::make_shared<CcArgs>();
  auto* set = impair->add_subcommand(
      "set", "Set loss=P (a probability in [0, 1); 0 turns it off) and/or seed=N (all or nothing)");
  set->add_option("name", set_args->name, "Device name")->required();
  set->add_option("assignments", set_args->assignments, "loss=P seed=N")->required();
  set->add_flag("--json,-j", set_args->json, "Print the result as JSON");
  set->callback([set_args, &status] {
    control::ImpairSetRequest request{};
    if (!set_name(request.name, set_args->name, "impair set")) {
      status.code = 2;
      return;
    }
    std::string text;
    if (!assignments_text(set_args->assignments, "impair set", text)) {
      status.code = 2;
      return;
    }
    request.length = static_cast<std::uint32_t>(text.size());
    status.code = area_call(kImpair, control::Op::impair_set, request_bytes(request) + text, "set",
                            set_args->json);
  });
}

}  // namespace xroce::cli
