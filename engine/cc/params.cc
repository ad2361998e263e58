#include "cc/params.h"

#include <array>
#include <charconv>
#include <string>

namespace xroce::cc {
namespace {

using S = ParamSection;
using wire::Err;

template <std::uint32_t DcqcnParams::*Field>
std::int64_t get_field(const DcqcnParams& p, int /*index*/) {
  return p.*Field;
}
template <std::uint32_t DcqcnParams::*Field>
void set_field(DcqcnParams& p, int /*index*/, std::int64_t value) {
  p.*Field = static_cast<std::uint32_t>(value);
}
template <std::uint32_t DcqcnParams::*Field>
constexpr ParamInfo field(std::string_view name, S section, std::string_view unit,
                          std::string_view description, std::int64_t min, std::int64_t max) {
  return {name, section, unit, description, min, max, 0, &get_field<Field>, &set_field<Field>};
}

template <std::uint32_t DcqcnParams::*Mask>
std::int64_t get_bit(const DcqcnParams& p, int index) {
  return (p.*Mask >> index) & 1;
}
template <std::uint32_t DcqcnParams::*Mask>
void set_bit(DcqcnParams& p, int index, std::int64_t value) {
  const std::uint32_t bit = 1u << index;
  p.*Mask = value != 0 ? (p.*Mask | bit) : (p.*Mask & ~bit);
}
template <std::uint32_t DcqcnParams::*Mask>
constexpr ParamInfo enable_bit(std::string_view name, S section, int priority) {
  return {name,
          section,
          "bool",
          "enable on this priority (sysfs enable/<prio>)",
          0,
          1,
          priority,
          &get_bit<Mask>,
          &set_bit<Mask>};
}

// Ranges are what xroce accepts; where ConnectX's firmware field is narrower (rpg_byte_reset is
// 15 bits there) the wider range lets the paper profile's values in. README.md lists them.
constexpr std::int64_t kMaxRateMbps = 1'000'000;  // 1 Tb/s
constexpr std::int64_t kMaxTimeUs = 1'000'000;    // 1 s
constexpr std::int64_t kMaxBytes = 1'000'000'000;

constexpr std::array kTable = {
    enable_bit<&DcqcnParams::rp_enable_mask>("rp_enable/0", S::kReactionPoint, 0),
    enable_bit<&DcqcnParams::rp_enable_mask>("rp_enable/1", S::kReactionPoint, 1),
    enable_bit<&DcqcnParams::rp_enable_mask>("rp_enable/2", S::kReactionPoint, 2),
    enable_bit<&DcqcnParams::rp_enable_mask>("rp_enable/3", S::kReactionPoint, 3),
    enable_bit<&DcqcnParams::rp_enable_mask>("rp_enable/4", S::kReactionPoint, 4),
    enable_bit<&DcqcnParams::rp_enable_mask>("rp_enable/5", S::kReactionPoint, 5),
    enable_bit<&DcqcnParams::rp_enable_mask>("rp_enable/6", S::kReactionPoint, 6),
    enable_bit<&DcqcnParams::rp_enable_mask>("rp_enable/7", S::kReactionPoint, 7),
    field<&DcqcnParams::rpg_time_reset>("rpg_time_reset", S::kReactionPoint, "us",
                                        "rate-increase timer period T", 1, kMaxTimeUs),
    field<&DcqcnParams::rpg_byte_reset>("rpg_byte_reset", S::kReactionPoint, "bytes",
                                        "bytes sent per byte-counter event B (0 = off)", 0,
                                        kMaxBytes),
    field<&DcqcnParams::rpg_threshold>("rpg_threshold", S::kReactionPoint, "count",
                                       "stage count F that ends fast recovery", 1, 31),
    field<&DcqcnParams::rpg_max_rate>("rpg_max_rate", S::kReactionPoint, "Mb/s",
                                      "ceiling of the rate (0 = line rate)", 0, kMaxRateMbps),
    field<&DcqcnParams::rpg_ai_rate>("rpg_ai_rate", S::kReactionPoint, "Mb/s",
                                     "additive-increase step R_AI", 0, kMaxRateMbps),
    field<&DcqcnParams::rpg_hai_rate>("rpg_hai_rate", S::kReactionPoint, "Mb/s",
                                      "hyper-increase step R_HAI", 0, kMaxRateMbps),
    field<&DcqcnParams::rpg_gd>("rpg_gd", S::kReactionPoint, "log2",
                                "cut Rc by Rc*alpha_fx/2^gd (11 = alpha/2)", 1, 15),
    field<&DcqcnParams::rpg_min_dec_fac>("rpg_min_dec_fac", S::kReactionPoint, "%",
                                         "a cut keeps at least this share of the rate", 1, 100),
    field<&DcqcnParams::rpg_min_rate>("rpg_min_rate", S::kReactionPoint, "Mb/s",
                                      "floor of the rate", 1, kMaxRateMbps),
    field<&DcqcnParams::rate_to_set_on_first_cnp>(
        "rate_to_set_on_first_cnp", S::kReactionPoint, "Mb/s",
        "rate before the first cut of a QP (0 = current rate)", 0, kMaxRateMbps),
    field<&DcqcnParams::dce_tcp_g>("dce_tcp_g", S::kReactionPoint, "/1024",
                                   "alpha weight G: alpha <- G/1024*alpha [+ 1-G/1024]", 0, 1024),
    field<&DcqcnParams::dce_tcp_rtt>("dce_tcp_rtt", S::kReactionPoint, "us",
                                     "alpha update period K", 1, kMaxTimeUs),
    field<&DcqcnParams::rate_reduce_monitor_period>(
        "rate_reduce_monitor_period", S::kReactionPoint, "us",
        "at most one rate cut per period (0 = cut on every CNP)", 0, kMaxTimeUs),
    field<&DcqcnParams::initial_alpha_value>("initial_alpha_value", S::kReactionPoint, "/1024",
                                             "alpha set on the first CNP", 0, 1024),
    field<&DcqcnParams::clamp_tgt_rate>("clamp_tgt_rate", S::kReactionPoint, "bool",
                                        "on a cut, always set the target rate to the rate", 0, 1),
    field<&DcqcnParams::clamp_tgt_rate_ati>(
        "clamp_tgt_rate_ati", S::kReactionPoint, "bool",
        "on a cut, set the target rate to the rate if it increased since the last cut", 0, 1),
    enable_bit<&DcqcnParams::np_enable_mask>("np_enable/0", S::kNotificationPoint, 0),
    enable_bit<&DcqcnParams::np_enable_mask>("np_enable/1", S::kNotificationPoint, 1),
    enable_bit<&DcqcnParams::np_enable_mask>("np_enable/2", S::kNotificationPoint, 2),
    enable_bit<&DcqcnParams::np_enable_mask>("np_enable/3", S::kNotificationPoint, 3),
    enable_bit<&DcqcnParams::np_enable_mask>("np_enable/4", S::kNotificationPoint, 4),
    enable_bit<&DcqcnParams::np_enable_mask>("np_enable/5", S::kNotificationPoint, 5),
    enable_bit<&DcqcnParams::np_enable_mask>("np_enable/6", S::kNotificationPoint, 6),
    enable_bit<&DcqcnParams::np_enable_mask>("np_enable/7", S::kNotificationPoint, 7),
    field<&DcqcnParams::min_time_between_cnps>("min_time_between_cnps", S::kNotificationPoint, "us",
                                               "minimum spacing of CNPs to one QP", 0, kMaxTimeUs),
    field<&DcqcnParams::cnp_dscp>("cnp_dscp", S::kNotificationPoint, "dscp",
                                  "DSCP of the CNPs sent", 0, 63),
    field<&DcqcnParams::cnp_802p_prio>("cnp_802p_prio", S::kNotificationPoint, "pcp",
                                       "802.1p priority of the CNPs sent (VLAN only)", 0, 7),
    field<&DcqcnParams::alpha_update_on_cnp>(
        "alpha_update_on_cnp", S::kExtension, "bool",
        "paper alpha: raise on each CNP, decay every K after the last CNP", 0, 1),
    field<&DcqcnParams::hyper_halves_periods>("hyper_halves_periods", S::kExtension, "bool",
                                              "halve T and B while in hyper increase", 0, 1),
    field<&DcqcnParams::tgt_rate_guard>("tgt_rate_guard", S::kExtension, "bool",
                                        "QCN guard: Rt > 10*Rc at stage 1 divides Rt by 8", 0, 1),
};

constexpr std::array<std::string_view, 2> kProfileNames = {"connectx", "paper"};

Err<ParamError> error(ParamError::Kind kind, std::string message) {
  return Err(ParamError{kind, std::move(message)});
}

std::string known_names() {
  std::string out;
  for (const ParamInfo& p : kTable) {
    if (!out.empty()) out += ", ";
    out += p.name;
  }
  return out;
}

std::optional<std::int64_t> parse_integer(std::string_view text) {
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  }
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

DcqcnParams DcqcnParams::connectx() {
  return DcqcnParams{};
}

DcqcnParams DcqcnParams::paper() {
  DcqcnParams p;
  p.rpg_time_reset = 55;             // T = 55 µs [C16, FM]; the ns-3 sample config uses 60
  p.rpg_byte_reset = 10'000'000;     // B = 10 MB [FM]
  p.rpg_threshold = 5;               // F = 5 [C16, FM, NS3]
  p.rpg_ai_rate = 40;                // R_AI = 40 Mb/s [C16, FM, NS3 config]
  p.rpg_hai_rate = 200;              // R_HAI = 200 Mb/s [NS3 config]; paper value unconfirmed
  p.rpg_gd = 11;                     // cut by alpha/2
  p.rpg_min_dec_fac = 50;            // alpha <= 1 so a cut never exceeds half: no extra bound
  p.rpg_min_rate = 100;              // ns-3 MinRate attribute, 100 Mb/s
  p.rpg_max_rate = 0;                // line rate
  p.rate_to_set_on_first_cnp = 0;    // flows start at line rate
  p.initial_alpha_value = 1024;      // alpha = 1 [C16/FM fluid model]
  p.dce_tcp_g = 1020;                // g = 1/256 = 4/1024 [FM, NS3 config]
  p.dce_tcp_rtt = 55;                // K = 55 µs [C16, FM, NS3]
  p.rate_reduce_monitor_period = 0;  // every CNP cuts [C16, NS3]
  p.clamp_tgt_rate = 1;  // Rt <- Rc on every CNP [docs/protocol.md §5.4 paper rule 1, NS3 config]
  p.clamp_tgt_rate_ati = 0;
  p.min_time_between_cnps = 50;  // N = 50 µs [FM, NS3]
  p.alpha_update_on_cnp = 1;
  p.hyper_halves_periods = 1;
  p.tgt_rate_guard = 1;
  return p;
}

std::optional<DcqcnParams> profile_by_name(std::string_view name) {
  if (name == "connectx") return DcqcnParams::connectx();
  if (name == "paper") return DcqcnParams::paper();
  return std::nullopt;
}

std::span<const std::string_view> profile_names() {
  return kProfileNames;
}

std::span<const ParamInfo> param_table() {
  return kTable;
}

const ParamInfo* find_param(std::string_view name) {
  for (const ParamInfo& p : kTable) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

wire::Result<std::int64_t, ParamError> set_param(DcqcnParams& params, std::string_view name,
                                                 std::int64_t value) {
  const ParamInfo* info = find_param(name);
  if (info == nullptr) {
    return error(ParamError::Kind::kUnknownName,
                 "unknown parameter '" + std::string(name) + "'; known: " + known_names());
  }
  if (value < info->min || value > info->max) {
    return error(ParamError::Kind::kOutOfRange,
                 std::string(name) + "=" + std::to_string(value) + " is out of range [" +
                     std::to_string(info->min) + ", " + std::to_string(info->max) + "] " +
                     std::string(info->unit));
  }
  info->set(params, info->index, value);
  return value;
}

wire::Result<std::int64_t, ParamError> set_param(DcqcnParams& params, std::string_view name,
                                                 std::string_view value) {
  if (find_param(name) == nullptr) return set_param(params, name, std::int64_t{0});
  const std::optional<std::int64_t> parsed = parse_integer(value);
  if (!parsed) {
    return error(ParamError::Kind::kMalformedValue,
                 std::string(name) + ": '" + std::string(value) + "' is not an integer");
  }
  return set_param(params, name, *parsed);
}

wire::Result<std::int64_t, ParamError> apply_assignment(DcqcnParams& params,
                                                        std::string_view assignment) {
  const std::size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return error(ParamError::Kind::kMalformedAssignment,
                 "'" + std::string(assignment) + "' is not PARAM=VALUE");
  }
  return set_param(params, assignment.substr(0, eq), assignment.substr(eq + 1));
}

std::optional<std::int64_t> get_param(const DcqcnParams& params, std::string_view name) {
  const ParamInfo* info = find_param(name);
  if (info == nullptr) return std::nullopt;
  return info->get(params, info->index);
}

std::string_view section_name(ParamSection section) {
  switch (section) {
    case ParamSection::kReactionPoint:
      return "roce_rp";
    case ParamSection::kNotificationPoint:
      return "roce_np";
    case ParamSection::kExtension:
      return "xroce";
  }
  return "?";
}

}  // namespace xroce::cc
