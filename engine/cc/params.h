// DCQCN parameters, named, unit-ed and defaulted like ConnectX's ecn/roce_rp and ecn/roce_np
// (docs/protocol.md §5.5), two profiles, and one table that the CLI (`xroce cc show|set|profile`)
// and any JSON output are derived from. Pure: no I/O.
//
// Every value is an integer in the unit the table gives, exactly as the firmware takes it; the
// engine converts (µs -> ns, /1024 -> fraction) where it uses them. Changing a value at run time
// takes effect at the next event a reaction or notification point handles.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "wire/result.h"

namespace xroce::cc {

inline constexpr int kPriorities = 8;
inline constexpr std::uint32_t kAllPriorities = 0xFF;

struct DcqcnParams {
  // ---- roce_rp: reaction point (sender) ----
  std::uint32_t rp_enable_mask = kAllPriorities;  // bit p = roce_rp/enable/<p>
  std::uint32_t rpg_time_reset = 300;             // µs, rate-increase timer period T
  std::uint32_t rpg_byte_reset = 32767;           // bytes, byte-counter period B; 0 = off
  std::uint32_t rpg_threshold = 1;                // F, stages before leaving fast recovery
  std::uint32_t rpg_max_rate = 0;                 // Mb/s, 0 = line rate
  std::uint32_t rpg_ai_rate = 5;                  // Mb/s, additive-increase step R_AI
  std::uint32_t rpg_hai_rate = 50;                // Mb/s, hyper-increase step R_HAI
  std::uint32_t rpg_gd = 11;                      // cut = Rc * alpha_fx / 2^rpg_gd
  std::uint32_t rpg_min_dec_fac = 50;             // %, a cut keeps at least this share of Rc
  std::uint32_t rpg_min_rate = 1;                 // Mb/s, floor of Rc
  std::uint32_t rate_to_set_on_first_cnp = 0;     // Mb/s, 0 = keep the current rate
  std::uint32_t dce_tcp_g = 1019;                 // /1024: alpha <- (G/1024) alpha [+ 1 - G/1024]
  std::uint32_t dce_tcp_rtt = 1;                  // µs, alpha update period K
  std::uint32_t rate_reduce_monitor_period = 4;   // µs, at most one cut per period; 0 = per CNP
  std::uint32_t initial_alpha_value = 1023;       // /1024, alpha set on the first CNP
  std::uint32_t clamp_tgt_rate = 0;               // bool: on a cut always Rt <- Rc
  std::uint32_t clamp_tgt_rate_ati = 1;           // bool: Rt <- Rc if a stage counter is > 0

  // ---- roce_np: notification point (receiver) ----
  std::uint32_t np_enable_mask = kAllPriorities;  // bit p = roce_np/enable/<p>
  std::uint32_t min_time_between_cnps = 4;        // µs, per QP
  std::uint32_t cnp_dscp = 48;
  std::uint32_t cnp_802p_prio = 6;

  // ---- xroce extensions: the author simulator's behaviour where ConnectX has no knob ----
  std::uint32_t alpha_update_on_cnp = 0;   // bool: paper alpha (per CNP, decay K after last CNP)
  std::uint32_t hyper_halves_periods = 0;  // bool: T/2 and B/2 while in hyper increase
  std::uint32_t tgt_rate_guard = 0;        // bool: QCN rule, Rt > 10 Rc at stage 1 -> Rt / 8

  bool rp_enabled(int priority) const { return (rp_enable_mask >> (priority & 7)) & 1; }
  bool np_enabled(int priority) const { return (np_enable_mask >> (priority & 7)) & 1; }

  // NVIDIA ConnectX firmware defaults (docs/protocol.md §5.5, a real `mlxconfig q` dump).
  static DcqcnParams connectx();
  // The DCQCN paper's values as docs/protocol.md §5.5 gives them (best evidence), with the author
  // simulator's behaviour where the paper is silent. See engine/cc/README.md.
  static DcqcnParams paper();

  bool operator==(const DcqcnParams&) const = default;
};

// "connectx" or "paper"; nullopt for anything else.
std::optional<DcqcnParams> profile_by_name(std::string_view name);
std::span<const std::string_view> profile_names();

enum class ParamSection { kReactionPoint, kNotificationPoint, kExtension };

// One row of the parameter table. `index` is the priority for the per-priority enables and
// unused (0) otherwise; get/set take it back so one function serves eight rows.
struct ParamInfo {
  std::string_view name;
  ParamSection section;
  std::string_view unit;
  std::string_view description;
  std::int64_t min;
  std::int64_t max;
  int index;
  std::int64_t (*get)(const DcqcnParams&, int index);
  void (*set)(DcqcnParams&, int index, std::int64_t value);
};

// Every parameter, in display order.
std::span<const ParamInfo> param_table();
const ParamInfo* find_param(std::string_view name);

struct ParamError {
  enum class Kind { kUnknownName, kMalformedValue, kOutOfRange, kMalformedAssignment };
  Kind kind;
  std::string message;  // says what was wrong and what is allowed
};

// Sets one parameter after checking its range; on error `params` is unchanged.
wire::Result<std::int64_t, ParamError> set_param(DcqcnParams& params, std::string_view name,
                                                 std::int64_t value);
// Parses a decimal (or 0x hex) integer value, then sets it.
wire::Result<std::int64_t, ParamError> set_param(DcqcnParams& params, std::string_view name,
                                                 std::string_view value);
// "NAME=VALUE", as `xroce cc set` takes it.
wire::Result<std::int64_t, ParamError> apply_assignment(DcqcnParams& params,
                                                        std::string_view assignment);
std::optional<std::int64_t> get_param(const DcqcnParams& params, std::string_view name);

std::string_view section_name(ParamSection section);

}  // namespace xroce::cc
