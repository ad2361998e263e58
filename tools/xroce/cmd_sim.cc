// `xroce sim`: runs one workload scenario of the transport core over the simulated network
// and prints a JSON summary. Exit 0 only if nothing was lost, corrupted or duplicated.
//
// `xroce sim --incast N ...`: congestion control in the simulator. N senders to one receiver
// through a switch port that ECN-marks, with DCQCN (engine/cc) on or off; prints per-flow
// throughput, Jain's index, utilisation, queue depth and drops, and optionally plots them
// (incast_plot.h).
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
#include "incast_plot.h"
#include "transport/sim/workload.h"

namespace xroce::cli {

namespace {

struct SimFlags {
  transport::sim::ScenarioConfig config;
  std::string mix = "all";
  unsigned mtu = 1024;
};

std::optional<transport::PathMtu> parse_mtu(unsigned bytes) {
  for (unsigned code = 1; code <= 5; ++code) {
    const auto m = static_cast<transport::PathMtu>(code);
    if (transport::mtu_bytes(m) == bytes) return m;
  }
  return std::nullopt;
}

nlohmann::json to_json(const transport::sim::Summary& s, const transport::sim::ScenarioConfig& c) {
  nlohmann::json by_kind;
  for (std::size_t i = 0; i < transport::sim::kOpKinds; ++i) {
    by_kind[transport::sim::to_string(static_cast<transport::sim::OpKind>(i))] =
        s.posted_by_kind[i];
  }
  return {{"seed", s.seed},
          {"ok", s.ok()},
          {"posted", s.posted},
          {"posted_unsignaled", s.posted_unsignaled},
          {"completed", s.completed},
          {"received", s.received},
          {"bytes_verified", s.bytes_verified},
          {"data_errors", s.data_errors},
          {"completion_errors", s.completion_errors},
          {"lost", s.lost},
          {"uc_lost", s.uc_lost},
          {"window_binds", s.window_binds},
          {"invalidations", s.invalidations},
          {"retransmitted_packets", s.retransmitted_packets},
          {"naks_sent", s.naks_sent},
          {"timeouts", s.timeouts},
          {"adaptive_retransmits", s.adaptive_retransmits},
          {"resend_timeouts", s.resend_timeouts},
          {"tail_probes", s.tail_probes},
          {"probe_gaps", s.probe_gaps},
          {"resend_repeats", s.resend_repeats},
          {"frames_sent", s.frames_sent},
          {"frames_dropped_bad", s.frames_dropped_bad},
          {"queue_drops", s.queue_drops},
          {"sim_time_us", s.sim_time_us},
          {"ack_timeout_exp", s.timeout_exp},
          {"posted_by_kind", by_kind},
          {"mix", c.mix.to_string()},
          {"nodes", c.nodes},
          {"qps", c.qps},
          {"uc_qps", c.uc_qps},
          {"failure", s.failure}};
}

void run_sim(const SimFlags& f, ExitStatus& status) {
  transport::sim::ScenarioConfig c = f.config;
  const auto mix = transport::sim::Mix::parse(f.mix);
  const auto mtu = parse_mtu(f.mtu);
  if (!mix || !mtu || c.qps == 0 || c.max_outstanding == 0 || c.nodes < 2 || c.nodes > 250) {
    fmt::print(stderr,
               "xroce sim: bad --mix, --mtu (256..4096), --nodes, --qps or --outstanding\n");
    status.code = 2;
    return;
  }
  c.mix = *mix;
  c.mtu = *mtu;
  const transport::sim::Summary s = transport::sim::run_scenario(c);
  fmt::print("{}\n", to_json(s, c).dump());
  if (!s.ok()) {
    fmt::print(stderr, "xroce sim: FAILED with seed {}: {}\n  reproduce: {}\n", s.seed, s.failure,
               transport::sim::reproduce_command(c));
    status.code = 1;
  }
}

// `--incast` and its options: set on the sim command, read with `sim`'s --seed, --rate-gbps,
// --mtu, --outstanding and --delay-us.
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
           "DCQCN fluid model (docs/protocol.md 5.6): identical flows, alpha per CNP, no hyper "
           "increase"},
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
    out << plot_incast_svg(r, fluid ? &*fluid : nullptr);
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

}  // namespace

void register_sim(CLI::App& app, ExitStatus& status) {
  auto* cmd = app.add_subcommand(
      "sim", "Run the transport over the deterministic simulated network and verify every byte");
  auto f = std::make_shared<SimFlags>();
  transport::sim::ScenarioConfig& c = f->config;
  cmd->add_option("--seed", c.seed, "Seed of the run (workload and network)");
  cmd->add_option("--ops", c.ops, "Operations to post, both directions together");
  cmd->add_option("--nodes", c.nodes, "Hosts on the simulated switch (2..250)");
  cmd->add_option("--qps", c.qps, "RC QP pairs between every two nodes");
  cmd->add_option("--uc-qps", c.uc_qps, "UC QP pairs between every two nodes (UC kinds)");
  cmd->add_option("--bottleneck-gbps", c.bottleneck_gbps,
                  "Rate of the switch's port toward each host (0 = the link rate)");
  cmd->add_option("--queue-bytes", c.queue_bytes,
                  "Drop-tail queue of the switch's port toward each host (0 = unbounded)");
  cmd->add_option("--inflight-budget", c.inflight_budget_psns,
                  "Each node's bound on unacknowledged request PSNs over its QPs (0 = none)");
  cmd->add_option("--nic-queue-bytes", c.nic_queue_bytes,
                  "Bytes a node's NIC lets wait ahead of its transmitter before it takes the "
                  "next packet from a QP (0 = unbounded: every packet ready is queued at once)");
  cmd->add_option("--rto-floor-us", c.rto_floor_us,
                  "Floor of the RC QPs' adaptive retransmission timeout (0 = no adaptive "
                  "retransmission: only the Local ACK Timeout resends)");
  cmd->add_option("--resend-probe-floor-us", c.resend_probe_floor_us,
                  "After a NAK's go-back-N, until it is answered, the adaptive timer runs for "
                  "min(RTO, max(this, 4 x the least round trip)) (0 = no probe)");
  cmd->add_option("--loss-window-min-psns", c.loss_window_min_psns,
                  "Floor of the RC requesters' loss window: losses shrink the PSNs a QP keeps "
                  "unacknowledged from 128 down to this (0 = a fixed window of 128)");
  cmd->add_option("--tail-probe-floor-us", c.tail_probe_floor_us,
                  "After silence of min(RTO, max(this, 4 x the least round trip)) with no NAK, "
                  "resend one packet asking for an ACK before any go-back-N (0 = no probe)");
  cmd->add_option("--lossy-tail-probe-floor-us", c.lossy_tail_probe_floor_us,
                  "The tail probe's floor while a QP's loss window is below its top (losses "
                  "seen): min(RTO, max(this, 4 x the least, 2 x the smoothed round trip)), with "
                  "no peak term (0 = the --tail-probe-floor-us timer throughout)");
  cmd->add_option("--lossy-read-tail-probe-floor-us", c.lossy_read_tail_probe_floor_us,
                  "The same floor when the probe would replay a READ, whose answer is the READ's "
                  "responses still due (0 = --lossy-tail-probe-floor-us)");
  cmd->add_option("--selective-read-repair", c.selective_read_repair,
                  "1: READ responses after a gap are placed as they come and only the missing "
                  "ranges are asked for again (the daemon's QPs); 0: a gap asks for the READ "
                  "again from there and resends every later request (rxe's go-back-N)");
  cmd->add_option("--read-repair-floor-us", c.read_repair_floor_us,
                  "While only READ ranges asked for again are missing, the adaptive timer runs "
                  "for min(RTO, max(this, 4 x the least round trip)) and asks for them again "
                  "(0 = --resend-probe-floor-us)");
  cmd->add_option("--jitter-us", c.jitter_us,
                  "Extra delay, uniform up to this, of every frame a host sends (order kept)");
  cmd->add_option("--stall-every-us", c.stall_every_us,
                  "Each node's NIC stops (a descheduled worker) at intervals uniform up to twice "
                  "this (0 = never)");
  cmd->add_option("--stall-max-us", c.stall_max_us,
                  "Length of a stall, uniform up to this: no frame taken, sent or timer fired");
  cmd->add_option("--path-stall-every-us", c.path_stall_every_us,
                  "Each host's outgoing link holds its frames (a descheduled relay) at intervals "
                  "uniform up to twice this (0 = never); the NICs and their timers run on");
  cmd->add_option("--path-stall-max-us", c.path_stall_max_us,
                  "Length of a path stall, uniform up to this; held frames arrive in order");
  cmd->add_option("--mix", f->mix,
                  "all, or kind[=weight],... of send, send_imm, send_inv, write, write_imm, "
                  "read, cas, faa, atomic_write, flush, mw_write, uc_send, uc_write, "
                  "uc_write_imm; groups atomic, mw, uc");
  cmd->add_option("--mtu", f->mtu, "Path MTU in bytes (256, 512, 1024, 2048, 4096)");
  cmd->add_option("--loss", c.loss, "Frame loss probability per hop");
  cmd->add_option("--reorder", c.reorder, "Frame reordering probability");
  cmd->add_option("--dup", c.dup, "Frame duplication probability");
  cmd->add_option("--corrupt", c.corrupt, "Frame corruption probability (caught by the ICRC)");
  cmd->add_option("--delay-us", c.delay_us, "One-way propagation delay in microseconds");
  cmd->add_option("--rate-gbps", c.rate_gbps, "Link rate in Gbit/s (0 = infinite)");
  cmd->add_option("--max-msg", c.max_msg_bytes, "Largest message in bytes");
  cmd->add_option("--outstanding", c.max_outstanding, "Work requests in flight per QP");
  auto incast = add_incast_options(cmd);
  cmd->callback([f, incast, cmd, &status] {
    if (run_incast_if_asked(*cmd, *incast, status)) return;
    run_sim(*f, status);
  });
}

}  // namespace xroce::cli
