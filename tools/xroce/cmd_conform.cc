// `xroce conform`: the RoCEv2 conformance suite (tools/conform) against a device on the wire.
//
//   xroce conform --dev IFNAME --peer IP [--peer-gid N] [--agent HOST:PORT] [--cases GLOB]
//                 [--json] [--pcap F] [--cnp] [--list]
//
// IFNAME is the link the scripted peer sends on (AF_PACKET, needs CAP_NET_RAW); IP is the
// target device's RoCE address, where xroce-conform-agent also listens (port 18516 unless
// --agent says otherwise); N is the target's GID index for that address (default: the agent
// takes the device's first IPv4-mapped GID). --cnp says the device generates CNPs for CE-marked
// packets. Exit status 0 when no case failed, 1 when one did, 2 on a setup error.
#include <fmt/core.h>

#include <fstream>
#include <memory>
#include <vector>

#include "case.h"
#include "commands.h"
#include "report.h"
#include "wire_side.h"

namespace xroce::cli {
namespace {

struct ConformFlags {
  std::string dev;
  std::string peer;
  int peer_gid = -1;  // the agent finds the IPv4-mapped GID
  std::string agent;
  std::string cases;
  bool json = false;
  std::string pcap;
  bool cnp = false;
  bool list = false;
};

void list_cases(const std::string& glob) {
  for (const conform::Case& c : conform::all_cases()) {
    if (conform::case_selected(c, glob)) fmt::print("{:<48} {}\n", c.name, c.rule);
  }
}

int run_conform(const ConformFlags& f) {
  using namespace conform;
  std::string host = f.peer;
  std::uint16_t port = 18516;
  if (!f.agent.empty()) {
    const auto colon = f.agent.rfind(':');
    host = f.agent.substr(0, colon);
    if (colon != std::string::npos)
      port = static_cast<std::uint16_t>(std::stoi(f.agent.substr(colon + 1)));
  }
  AgentTarget target(host, port, interface_ipv4(f.dev), f.peer_gid, f.cnp);
  const Endpoints ends = discover_endpoints(f.dev, f.peer);
  PacketLink link(f.dev, ends);
  std::vector<CaseResult> results;
  std::uint32_t peer_qpn = 0x100;
  for (const Case& c : all_cases()) {
    if (!case_selected(c, f.cases)) continue;
    results.push_back(run_case(c, target, link, ends, Timing{}, peer_qpn++));
    if (!f.json) {
      const CaseResult& r = results.back();
      fmt::print(stderr, "{:<5} {}\n", to_string(r.outcome), c.name);
    }
  }
  const std::string device = fmt::format("{} at {}", target.capabilities().name, f.peer);
  fmt::print("{}", f.json ? json_report(results, device) : text_report(results, device));
  if (!f.pcap.empty()) {
    const auto bytes = pcap_report(results);
    std::ofstream out(f.pcap, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      fmt::print(stderr, "xroce conform: cannot write {}\n", f.pcap);
      return 2;
    }
  }
  return totals(results).fail == 0 ? 0 : 1;
}

}  // namespace

void register_conform(CLI::App& app, ExitStatus& status) {
  auto flags = std::make_shared<ConformFlags>();
  auto* cmd = app.add_subcommand("conform", "Run the RoCEv2 conformance suite against a device");
  cmd->add_option("--dev", flags->dev, "Interface the scripted peer sends on");
  cmd->add_option("--peer", flags->peer, "The target device's IPv4 address");
  cmd->add_option("--peer-gid", flags->peer_gid, "The target's GID index for that address");
  cmd->add_option("--agent", flags->agent, "Where xroce-conform-agent listens (HOST:PORT)");
  cmd->add_option("--cases", flags->cases, "Only the cases whose name matches this glob");
  cmd->add_flag("--json", flags->json, "Print the results as JSON");
  cmd->add_option("--pcap", flags->pcap, "Write the exchanged frames to this pcap file");
  cmd->add_flag("--cnp", flags->cnp, "The device generates CNPs for CE-marked packets");
  cmd->add_flag("--list", flags->list, "List the cases and their rules, run nothing");
  cmd->callback([flags, &status] {
    if (flags->list) {
      list_cases(flags->cases);
      return;
    }
    if (flags->dev.empty() || flags->peer.empty()) {
      fmt::print(stderr, "xroce conform: --dev and --peer are required (or --list)\n");
      status.code = 2;
      return;
    }
    try {
      status.code = run_conform(*flags);
    } catch (const std::exception& e) {
      fmt::print(stderr, "xroce conform: {}\n", e.what());
      status.code = 2;
    }
  });
}

}  // namespace xroce::cli
