// The congestion-control ops (include/xroce/control.h: cc_show, cc_set, cc_profile) behind
// `xroce cc show|set|profile`. The device's settings live in ServedDevice::cc on the control
// thread; every worker holds a copy that push_cc replaces with a command, so a change reaches
// the existing QPs at their next event (engine/cc/README.md) and no worker ever reads memory the
// control thread writes.
//
// Names: engine/cc/params.h's table, except the per-priority enables, which the CLI spells
// rp_enable.P / np_enable.P (the table's rp_enable/P is accepted too); rp_enable and np_enable
// set all eight priorities, and line_rate_mbps (xroce's own) the rate QPs connected from then on
// start at and recover to. A request is applied to a copy and only if every assignment in it is
// valid, so a rejected `cc set` changes nothing.
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "daemon/control_ops.h"
#include "xroce/control_message.h"

namespace xroce::daemon {

namespace {

constexpr std::string_view kRpEnable = "rp_enable";
constexpr std::string_view kNpEnable = "np_enable";
constexpr std::string_view kLineRate = "line_rate_mbps";
constexpr double kDefaultLineRateMbps = 100'000;
constexpr std::int64_t kMaxLineRateMbps = 10'000'000;  // 10 Tb/s

// rp_enable/3 -> rp_enable.3 (the CLI's spelling) and back.
std::string display_name(std::string_view table_name) {
  std::string out(table_name);
  if (const auto slash = out.find('/'); slash != std::string::npos) out[slash] = '.';
  return out;
}
std::string table_name(std::string_view display) {
  std::string out(display);
  for (const std::string_view prefix : {kRpEnable, kNpEnable}) {
    if (out.size() == prefix.size() + 2 && out.compare(0, prefix.size(), prefix) == 0 &&
        out[prefix.size()] == '.')
      out[prefix.size()] = '/';
  }
  return out;
}

std::string known_names() {
  std::string out;
  for (const cc::ParamInfo& p : cc::param_table())
    out += display_name(p.name) + ", ";
  return out + std::string(kRpEnable) + ", " + std::string(kNpEnable) + ", " +
         std::string(kLineRate);
}

std::optional<std::int64_t> parse_integer(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// Applies one NAME=VALUE to `cc`; the error message says what was wrong and what is allowed.
std::optional<std::string> apply(cc::CcDevice& cc, std::string_view assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return "'" + std::string(assignment) + "' is not NAME=VALUE";
  const std::string_view name = assignment.substr(0, eq);
  const std::string_view value = assignment.substr(eq + 1);
  if (name == kLineRate) {
    const auto v = parse_integer(value);
    if (!v || *v < 1 || *v > kMaxLineRateMbps)
      return "line_rate_mbps: '" + std::string(value) + "' is not an integer in 1.." +
             std::to_string(kMaxLineRateMbps);
    cc.line_rate_mbps = static_cast<double>(*v);
    return std::nullopt;
  }
  if (name == kRpEnable || name == kNpEnable) {  // every priority
    for (int p = 0; p < cc::kPriorities; ++p) {
      auto r = cc::set_param(cc.params, std::string(name) + "/" + std::to_string(p), value);
      if (!r) return std::string(name) + ": '" + std::string(value) + "' is not 0 or 1";
    }
    return std::nullopt;
  }
  const std::string table = table_name(name);
  if (cc::find_param(table) == nullptr)
    return "unknown parameter '" + std::string(name) + "'; known: " + known_names();
  auto r = cc::set_param(cc.params, table, value);
  if (!r) {
    std::string message = r.error().message;
    if (const auto at = message.find(table); at != std::string::npos)
      message.replace(at, table.size(), name);
    return message;
  }
  return std::nullopt;
}

nlohmann::ordered_json enables_json(std::uint32_t mask) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (int p = 0; p < cc::kPriorities; ++p)
    out.push_back((mask >> p) & 1);
  return out;
}

nlohmann::ordered_json cc_json(const std::string& device, const cc::CcDevice& cc,
                               const std::string& profile) {
  nlohmann::ordered_json params = nlohmann::ordered_json::object();
  nlohmann::ordered_json rp = nlohmann::ordered_json::array();
  nlohmann::ordered_json np = nlohmann::ordered_json::array();
  nlohmann::ordered_json extension = nlohmann::ordered_json::array();
  for (const cc::ParamInfo& p : cc::param_table()) {
    const std::string name = display_name(p.name);
    params[name] = p.get(cc.params, p.index);
    switch (p.section) {
      case cc::ParamSection::kReactionPoint:
        rp.push_back(name);
        break;
      case cc::ParamSection::kNotificationPoint:
        np.push_back(name);
        break;
      case cc::ParamSection::kExtension:
        extension.push_back(name);
        break;
    }
  }
  return {{"device", device},
          {"profile", profile},
          {"line_rate_mbps", cc.line_rate_mbps},
          {"rp_enable", enables_json(cc.params.rp_enable_mask)},
          {"np_enable", enables_json(cc.params.np_enable_mask)},
          {"params", params},
          {"roce_rp", rp},
          {"roce_np", np},
          {"extension", extension}};
}

std::string result_reply(const std::string& device, const cc::CcDevice& cc,
                         const std::string& profile) {
  return nlohmann::ordered_json{{"ok", true}, {"cc", cc_json(device, cc, profile)}}.dump();
}

// The profile a parameter set is, or "<profile>+custom" when a `cc set` moved it off one (the
// enables and the line rate do not count: a profile does not set them).
std::string profile_label(const cc::DcqcnParams& params, const std::string& base) {
  auto reference = cc::profile_by_name(base);
  if (!reference) return base;
  reference->rp_enable_mask = params.rp_enable_mask;
  reference->np_enable_mask = params.np_enable_mask;
  return *reference == params ? base : base + "+custom";
}

std::string base_profile(const std::string& label) {
  return label.substr(0, label.find('+'));
}

}  // namespace

double line_rate_mbps(const std::string& netdev) {
  std::ifstream speed("/sys/class/net/" + netdev + "/speed");
  long long mbps = 0;
  if (speed >> mbps && mbps > 0) return static_cast<double>(mbps);
  return kDefaultLineRateMbps;  // reading it fails with EINVAL on veth and other virtual links
}

void push_cc(ServedDevice& served) {
  if (!served.runner) return;
  Datapath& datapath = served.runner->datapath();
  const cc::CcDevice cc = served.cc;
  for (std::uint32_t w = 0; w < datapath.worker_count(); ++w) {
    datapath.worker(w).call([&cc](Worker& worker) {
      worker.set_cc_on_worker(cc);
      return 0;
    });
  }
}

namespace ops {

Reply cc_show(OpContext& ctx) {
  const ServedDevice& served = *ctx.served;
  return {0, {}, cc_json(served.model->name(), served.cc, served.cc_profile).dump(), {}};
}

Reply cc_set(OpContext& ctx, const control::CcSetRequest& request) {
  if (ctx.body.size() != sizeof request + request.length) return Reply::error(EINVAL);
  ServedDevice& served = *ctx.served;
  const std::string& name = served.model->name();
  cc::CcDevice next = served.cc;
  const std::string_view text = ctx.body.substr(sizeof request, request.length);
  if (auto error = apply_lines(text, "nothing to set: give NAME=VALUE ...",
                               [&](std::string_view line) { return apply(next, line); })) {
    return {0, {}, set_error_reply(*error), {}};
  }
  served.cc = next;
  served.cc_profile = profile_label(served.cc.params, base_profile(served.cc_profile));
  push_cc(served);
  return {0, {}, result_reply(name, served.cc, served.cc_profile), {}};
}

Reply cc_profile(OpContext& ctx, const control::CcProfileRequest& request) {
  const std::string profile = control::bounded_name(request.profile, sizeof request.profile);
  auto params = cc::profile_by_name(profile);
  if (!params) {
    return {
        0, {}, set_error_reply("unknown profile '" + profile + "'; known: connectx, paper"), {}};
  }
  ServedDevice& served = *ctx.served;
  params->rp_enable_mask = served.cc.params.rp_enable_mask;  // a profile sets no enables
  params->np_enable_mask = served.cc.params.np_enable_mask;
  served.cc.params = *params;
  served.cc_profile = profile;
  push_cc(served);
  return {0, {}, result_reply(served.model->name(), served.cc, served.cc_profile), {}};
}

}  // namespace ops
}  // namespace xroce::daemon
