// `xroce sim --incast N ...`: congestion control in the simulator. N senders to one receiver
// through a switch port that ECN-marks, with DCQCN (engine/cc) on or off; prints per-flow
// throughput, Jain's index, utilisation, queue depth and drops, and optionally plots them.
//
// `xroce cc show|set|profile NAME ...` (device builds): a running device's DCQCN parameters
// under their ConnectX names, through xroced's cc_show / cc_set / cc_profile control ops
// (include/xroce/control.h). `set` is all or nothing: one bad assignment changes nothing.
#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cc/params.h"
#include "cc/sim/fluid_model.h"
#include "cc/sim/incast.h"
#include "commands.h"
#ifdef XROCE_HAVE_DEVICE
#include <cstring>

#include "daemon_launch.h"
#include "xroce/control.h"
#endif

namespace xroce::cli {

struct IncastFlags {
  std::uint32_t senders = 0;
  std::string cc = "dcqcn";
  std::string profile = "connectx";
  double duration_ms = 10;
  double warmup = 0.5;
  std::string port = "lossless";
  std::uint64_t kmin = 0, kmax = 0, buffer = 0;
  double pmax = 0;
  std::uint64_t bin_us = 20;
  std::uint32_t message_bytes = 64 * 1024;
  std::uint64_t start_spread_us = 0;
  bool fluid = false;
  std::vector<std::string> cc_set;
  bool json = false;
  bool no_cnp = false;
  bool series = false;
  std::string plot;
};

namespace {

nlohmann::json counters_json(const cc::CcCounters& k) {
  return {{"np_ecn_marked_roce_packets", k.np_ecn_marked_roce_packets},
          {"np_cnp_sent", k.np_cnp_sent},
          {"rp_cnp_handled", k.rp_cnp_handled},
          {"rp_cnp_ignored", k.rp_cnp_ignored},
          {"rate_cuts", k.rate_cuts}};
}

nlohmann::json to_json(const cc::sim::IncastResult& r, bool series) {
  const cc::sim::IncastConfig& c = r.config;
  nlohmann::json flows = nlohmann::json::array();
  for (const auto& f : r.flows) {
    flows.push_back({{"sender", f.sender},
                     {"throughput_gbps", f.throughput_gbps},
                     {"final_rate_gbps", f.final_rate_gbps},
                     {"final_alpha", f.final_alpha},
                     {"writes_completed", f.writes_completed},
                     {"timer_events", f.timer_events},
                     {"byte_events", f.byte_events},
                     {"counters", counters_json(f.counters)}});
    if (series) {
      flows.back()["rate_series_gbps"] = f.rate_series_gbps;
      flows.back()["rc_series_gbps"] = f.rc_series_gbps;
    }
  }
  nlohmann::json out = {
      {"ok", r.ok()},
      {"failure", r.failure},
      {"seed", c.seed},
      {"senders", c.senders},
      {"rate_gbps", c.rate_gbps},
      {"cc", c.cc ? "dcqcn" : "none"},
      {"profile", c.profile},
      {"duration_us", c.duration_us},
      {"start_spread_us", c.start_spread_us},
      {"port",
       {{"mode", c.lossless ? "lossless" : "droptail"},
        {"kmin_bytes", c.kmin_bytes},
        {"kmax_bytes", c.kmax_bytes},
        {"pmax", c.pmax},
        {"buffer_bytes", c.buffer_bytes}}},
      {"window_us", {r.window_start_us, r.window_end_us}},
      {"window_rule",
       "flows start together at line rate; fairness, utilisation, queue and "
       "drops are measured from warmup * duration to the end"},
      {"flows", flows},
      {"fair_share_gbps", r.fair_share_gbps},
      {"jain", r.jain},
      {"utilization", r.utilization},
      {"converged_at_us", r.converged_at_us},
      {"swing",
       {{"bin_us", r.swing_bin_us}, {"cv_mean", r.swing_cv_mean}, {"cv_max", r.swing_cv_max}}},
      {"queue_bytes",
       {{"samples", r.queue.samples},
        {"p50", r.queue.p50_bytes},
        {"p95", r.queue.p95_bytes},
        {"p99", r.queue.p99_bytes},
        {"max", r.queue.max_bytes}}},
      {"drops", r.drops},
      {"drops_total", r.drops_total},
      {"ecn_marked", r.ecn_marked},
      {"pauses", r.pauses},
      {"paused_us", static_cast<double>(r.paused_ns) / 1000},
      {"retransmitted_packets", r.retransmitted_packets},
      {"timeouts", r.timeouts},
      {"counters", counters_json(r.totals)},
      {"frames", r.frames}};
  if (series) {
    out["bin_us"] = static_cast<double>(r.bin_ns) / 1000;
    nlohmann::json q = nlohmann::json::array();
    for (const auto& [t, b] : r.queue_series)
      q.push_back({t, b});
    out["queue_series"] = q;
  }
  return out;
}

void print_text(const cc::sim::IncastResult& r) {
  const cc::sim::IncastConfig& c = r.config;
  fmt::print("incast {}:1 at {} Gb/s, cc {} ({}), {} port, {} ms\n", c.senders, c.rate_gbps,
             c.cc ? "dcqcn" : "none", c.profile, c.lossless ? "lossless" : "drop-tail",
             static_cast<double>(c.duration_us) / 1000);
  for (const auto& f : r.flows)
    fmt::print("  flow {:2}: {:7.3f} Gb/s  (Rc {:7.3f}, alpha {:.3f}, CNPs {})\n", f.sender,
               f.throughput_gbps, f.final_rate_gbps, f.final_alpha, f.counters.rp_cnp_handled);
  fmt::print("window {:.0f}-{:.0f} us: Jain {:.4f}, utilisation {:.1f} %, converged at {} us\n",
             r.window_start_us, r.window_end_us, r.jain, r.utilization * 100, r.converged_at_us);
  fmt::print("queue p50/p95/p99/max {}/{}/{}/{} B, drops {}, pauses {}, ECN marks {}\n",
             r.queue.p50_bytes, r.queue.p95_bytes, r.queue.p99_bytes, r.queue.max_bytes, r.drops,
             r.pauses, r.ecn_marked);
  if (!r.ok()) fmt::print("FAILED: {}\n", r.failure);
}

// The fluid model for the incast just run: its N, rate, marking, parameters and frame size.
cc::sim::FluidResult run_fluid_for(const cc::sim::IncastResult& r) {
  return cc::sim::run_fluid_model(cc::sim::fluid_config_for(r.config));
}

nlohmann::json fluid_json(const cc::sim::FluidResult& f) {
  return {{"model",
           "DCQCN fluid model (DCQCN.md 3.2): identical flows, alpha per CNP, no hyper increase"},
          {"packet_bytes", f.config.packet_bytes},
          {"feedback_delay_us", f.config.feedback_delay_us},
          {"fair_share_gbps", f.fair_share_gbps},
          {"settled_at_us", f.settled_at_us},
          {"rc_min_gbps", f.rc_min_gbps},
          {"rc_max_gbps", f.rc_max_gbps},
          {"queue_mean_bytes", f.queue_mean_bytes},
          {"alpha_mean", f.alpha_mean},
          {"p_mean", f.p_mean}};
}

bool bad(ExitStatus& status, const std::string& why) {
  fmt::print(stderr, "xroce sim --incast: {}\n", why);
  status.code = 2;
  return true;
}

}  // namespace

std::shared_ptr<IncastFlags> add_incast_options(CLI::App* sim) {
  auto f = std::make_shared<IncastFlags>();
  sim->add_option("--incast", f->senders, "Incast: N senders to one receiver (congestion control)");
  sim->add_option("--cc", f->cc, "Incast: dcqcn or none");
  sim->add_option("--profile", f->profile, "Incast: DCQCN parameters, connectx or paper");
  sim->add_option("--cc-set", f->cc_set, "Incast: PARAM=VALUE over the profile (repeatable)");
  sim->add_option("--duration-ms", f->duration_ms, "Incast: simulated time in ms");
  sim->add_option("--warmup", f->warmup,
                  "Incast: fraction of the run before the measurement window (default 0.5)");
  sim->add_option("--port", f->port, "Incast: bottleneck port, lossless or droptail");
  sim->add_option("--kmin", f->kmin, "Incast: ECN Kmin in bytes (0 = scaled default)");
  sim->add_option("--kmax", f->kmax, "Incast: ECN Kmax in bytes (0 = scaled default)");
  sim->add_option("--pmax", f->pmax, "Incast: ECN Pmax (0 = default 0.2)");
  sim->add_option("--buffer", f->buffer, "Incast: bottleneck queue capacity in bytes");
  sim->add_option("--bin-us", f->bin_us, "Incast: time-series bin in microseconds");
  sim->add_option("--message-bytes", f->message_bytes, "Incast: RDMA WRITE size");
  sim->add_option("--start-spread-us", f->start_spread_us,
                  "Incast: each sender starts at a seeded offset in [0, this) (0 = together)");
  sim->add_flag("--fluid", f->fluid,
                "Incast: also run the DCQCN fluid model for the same N, rate, marking and "
                "parameters (in the JSON and dashed in the plot). The model is the paper's "
                "algorithm (alpha per CNP, no hyper increase): meaningful for --profile paper");
  sim->add_flag("--no-cnp", f->no_cnp, "Incast: the receiver sends no CNPs");
  sim->add_flag("--json", f->json, "Incast: print JSON");
  sim->add_flag("--series", f->series,
                "Incast: with --json, add the time series (per-flow rate and Rc, queue depth)");
  sim->add_option("--plot", f->plot, "Incast: write an SVG of the rates and the queue");
  return f;
}

bool run_incast_if_asked(const CLI::App& sim, const IncastFlags& f, ExitStatus& status) {
  if (f.senders == 0) return false;
  cc::sim::IncastConfig c;
  c.senders = f.senders;
  c.seed = sim.get_option("--seed")->as<std::uint64_t>();
  if (sim.count("--seed") == 0) c.seed = 1;
  if (sim.count("--rate-gbps") > 0) c.rate_gbps = sim.get_option("--rate-gbps")->as<double>();
  if (sim.count("--outstanding") > 0)
    c.outstanding = sim.get_option("--outstanding")->as<std::uint32_t>();
  if (sim.count("--delay-us") > 0)
    c.propagation_ns = sim.get_option("--delay-us")->as<std::uint64_t>() * 1000;
  if (sim.count("--mtu") > 0) {
    const auto mtu = sim.get_option("--mtu")->as<unsigned>();
    bool found = false;
    for (unsigned code = 1; code <= 5; ++code) {
      if (transport::mtu_bytes(static_cast<transport::PathMtu>(code)) == mtu) {
        c.mtu = static_cast<transport::PathMtu>(code);
        found = true;
      }
    }
    if (!found) return bad(status, "--mtu must be 256, 512, 1024, 2048 or 4096");
  }
  if (f.cc != "dcqcn" && f.cc != "none") return bad(status, "--cc must be dcqcn or none");
  c.cc = f.cc == "dcqcn";
  const auto params = cc::profile_by_name(f.profile);
  if (!params) return bad(status, "--profile must be connectx or paper");
  c.params = *params;
  c.profile = f.profile;
  for (const auto& a : f.cc_set) {
    auto r = cc::apply_assignment(c.params, a);
    if (!r) return bad(status, r.error().message);
    c.profile += "," + a;
  }
  if (f.port != "lossless" && f.port != "droptail")
    return bad(status, "--port must be lossless or droptail");
  c.lossless = f.port == "lossless";
  if (f.duration_ms <= 0 || f.warmup < 0 || f.warmup >= 1 || c.rate_gbps <= 0 || f.bin_us == 0 ||
      f.message_bytes == 0 || c.outstanding == 0)
    return bad(status, "bad --duration-ms, --warmup, --rate-gbps, --bin-us or --message-bytes");
  c.duration_us = static_cast<std::uint64_t>(f.duration_ms * 1000);
  c.warmup_fraction = f.warmup;
  c.kmin_bytes = f.kmin;
  c.kmax_bytes = f.kmax;
  c.pmax = f.pmax;
  c.buffer_bytes = f.buffer;
  c.bin_us = f.bin_us;
  c.message_bytes = f.message_bytes;
  c.start_spread_us = f.start_spread_us;
  c.cnp_generation = !f.no_cnp;

  const cc::sim::IncastResult r = cc::sim::run_incast(c);
  std::optional<cc::sim::FluidResult> fluid;
  if (f.fluid) fluid = run_fluid_for(r);
  if (f.json) {
    nlohmann::json out = to_json(r, f.series);
    if (fluid) out["fluid"] = fluid_json(*fluid);
    fmt::print("{}\n", out.dump());
  } else {
    print_text(r);
    if (fluid)
      fmt::print("fluid model: settled at {} us, R_C {:.3f}-{:.3f} Gb/s, queue mean {:.1f} KB\n",
                 fluid->settled_at_us, fluid->rc_min_gbps, fluid->rc_max_gbps,
                 fluid->queue_mean_bytes / 1000);
  }
  if (!f.plot.empty()) {
    std::ofstream out(f.plot);
    out << cc::sim::plot_svg(r, fluid ? &*fluid : nullptr);
    if (!out) {
      fmt::print(stderr, "xroce sim --incast: cannot write {}\n", f.plot);
      status.code = 1;
    }
  }
  if (!r.ok()) {
    fmt::print(stderr, "xroce sim --incast: FAILED with seed {}: {}\n  reproduce: {}\n", c.seed,
               r.failure, cc::sim::reproduce_command(r.config));
    status.code = 1;
  }
  return true;
}

#ifdef XROCE_HAVE_DEVICE
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

// One cc op: sends `request` (+ `extra` bytes), prints the reply. Returns the exit status.
int cc_call(control::Op op, const std::string& request, const char* what, bool json) {
  control::ControlClient client;
  std::string error;
  if (connect_daemon(client, false, error) != 0) {
    fmt::print(stderr, "xroce cc {}: {}\n", what, error);
    return 1;
  }
  std::string text;
  if (int err = client.call_text(op, request.data(), request.size(), text)) {
    fmt::print(stderr, "xroce cc {}: {}\n", what,
               err == ENODEV ? "no such device" : std::strerror(err));
    return 1;
  }
  auto reply = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!reply.is_object()) {
    fmt::print(stderr, "xroce cc {}: malformed reply from xroced\n", what);
    return 1;
  }
  if (op != control::Op::cc_show) {
    if (!reply.value("ok", false)) {
      fmt::print(stderr, "xroce cc {}: {}\n", what, reply.value("error", "refused"));
      return 2;
    }
    reply = reply["cc"];
  }
  if (json) {
    fmt::print("{}\n", reply.dump());
  } else {
    print_cc(reply);
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
    fmt::print(stderr, "xroce cc {}: bad device name\n", what);
    return false;
  }
  std::snprintf(field, sizeof field, "%s", name.c_str());
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
    if (!set_name(request.name, show_args->name, "show")) {
      status.code = 2;
      return;
    }
    status.code = cc_call(control::Op::cc_show, request_bytes(request), "show", show_args->json);
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
    if (!set_name(request.name, set_args->name, "set")) {
      status.code = 2;
      return;
    }
    std::string text;
    for (const auto& a : set_args->assignments) {
      if (a.find('\n') != std::string::npos) {
        fmt::print(stderr, "xroce cc set: '{}' is not NAME=VALUE\n", a);
        status.code = 2;
        return;
      }
      text += a + "\n";
    }
    request.length = static_cast<std::uint32_t>(text.size());
    status.code =
        cc_call(control::Op::cc_set, request_bytes(request) + text, "set", set_args->json);
  });

  auto profile_args = std::make_shared<CcArgs>();
  auto* profile = cc->add_subcommand("profile", "Load a parameter profile (enables are kept)");
  profile->add_option("name", profile_args->name, "Device name")->required();
  profile->add_option("profile", profile_args->profile, "connectx or paper")->required();
  profile->add_flag("--json,-j", profile_args->json, "Print the result as JSON");
  profile->callback([profile_args, &status] {
    control::CcProfileRequest request{};
    if (!set_name(request.name, profile_args->name, "profile")) {
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
    status.code =
        cc_call(control::Op::cc_profile, request_bytes(request), "profile", profile_args->json);
  });
}
#endif

}  // namespace xroce::cli
