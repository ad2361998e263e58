// `xroce sim`: runs one workload scenario of the transport core over the simulated network
// and prints a JSON summary. Exit 0 only if nothing was lost, corrupted or duplicated.
#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "commands.h"
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
          {"frames_sent", s.frames_sent},
          {"frames_dropped_bad", s.frames_dropped_bad},
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
