// `xroce wire samples` and `xroce wire decode`: the golden capture, and a RoCEv2 dissector for
// captures (docs/protocol.md §1). Text output is one line per frame; --json gives every field.
#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "wire/frame.h"
#include "wire/pcap.h"
#include "wire/samples.h"

namespace xroce::cli {
namespace {

using nlohmann::json;
namespace w = xroce::wire;

std::string mac_string(const w::MacAddr& m) {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4],
                     m[5]);
}

// Frames that are not RoCEv2 at all are skipped, not errors.
bool is_not_roce(w::FrameError e) {
  return e == w::FrameError::kNotIp || e == w::FrameError::kNotUdp || e == w::FrameError::kNotRoce;
}

const char* aeth_type_name(w::AethType t) {
  switch (t) {
    case w::AethType::kAck:
      return "ACK";
    case w::AethType::kRnrNak:
      return "RNR_NAK";
    case w::AethType::kReserved:
      return "reserved";
    case w::AethType::kNak:
      return "NAK";
  }
  return "?";
}

const char* nak_name(std::uint8_t code) {
  switch (code) {
    case 0:
      return "PSN sequence error";
    case 1:
      return "invalid request";
    case 2:
      return "remote access error";
    case 3:
      return "remote operational error";
    case 4:
      return "invalid RD request";
  }
  return "reserved";
}

json aeth_json(const w::Aeth& a) {
  json j = {{"syndrome", a.syndrome},
            {"type", aeth_type_name(a.type())},
            {"value", a.value()},
            {"msn", a.msn}};
  if (a.is_ack()) {
    auto credits = w::aeth_credits(a.value());
    j["credits"] = credits ? json(*credits) : json(nullptr);
  } else if (a.is_rnr_nak()) {
    j["rnr_timer_us"] = w::rnr_timer_us(a.value());
  } else if (a.is_nak()) {
    j["nak"] = nak_name(a.value());
  }
  return j;
}

json vlan_json(const w::VlanTag& t) {
  return {{"tpid", t.tpid},
          {"tci", t.tci},
          {"pcp", t.tci >> 13},
          {"dei", (t.tci >> 12) & 1},
          {"vid", t.tci & 0xFFF}};
}

json addr_json(const w::DecodedFrame& f) {
  const w::FrameAddress& a = f.addr;
  json eth = {{"src", mac_string(a.src_mac)}, {"dst", mac_string(a.dst_mac)}};
  if (a.vlan_tci) eth["vlan"] = vlan_json(w::VlanTag{a.vlan_tpid, *a.vlan_tci});
  if (a.outer_vlan) eth["outer_vlan"] = vlan_json(*a.outer_vlan);
  const bool v4 = a.src_ip.is_v4();
  json ip = {{"version", v4 ? 4 : 6},
             {"src", w::to_string(a.src_ip)},
             {"dst", w::to_string(a.dst_ip)},
             {"traffic_class", a.traffic_class},
             {"dscp", a.traffic_class >> 2},
             {"ecn", w::to_string(static_cast<w::Ecn>(a.traffic_class & 3))},
             {"hop_limit", a.hop_limit}};
  if (v4) {
    ip["id"] = a.ipv4_id;
    ip["df"] = a.ipv4_dont_fragment;
    ip["checksum"] = f.ipv4_checksum;
  } else {
    ip["flow_label"] = a.flow_label;
  }
  return {{"eth", eth}, {"ip", ip}};
}

json headers_json(const w::TransportHeaders& h) {
  const w::Bth& b = h.bth;
  json j;
  j["bth"] = {{"opcode", static_cast<int>(b.opcode)},
              {"opcode_name", std::string(h.info().name)},
              {"se", b.solicited},
              {"m", b.mig_req},
              {"pad_count", b.pad_count},
              {"tver", b.tver},
              {"pkey", b.pkey},
              {"fecn", b.fecn},
              {"becn", b.becn},
              {"resv6a", b.resv6a},
              {"dest_qp", b.dest_qp.value()},
              {"ack_req", b.ack_req},
              {"resv7", b.resv7},
              {"psn", b.psn.value()}};
  if (h.deth) j["deth"] = {{"qkey", h.deth->qkey.value()}, {"src_qp", h.deth->src_qp.value()}};
  if (h.xrc_srqn) j["xrceth"] = {{"xrc_srqn", *h.xrc_srqn}};
  if (h.feth) {
    j["feth"] = {{"placement_type", h.feth->placement}, {"selectivity", h.feth->selectivity}};
  }
  if (h.reth) {
    j["reth"] = {
        {"va", h.reth->va}, {"rkey", h.reth->rkey.value()}, {"dma_length", h.reth->dma_length}};
  }
  if (h.atomic_eth) {
    j["atomic_eth"] = {{"va", h.atomic_eth->va},
                       {"rkey", h.atomic_eth->rkey.value()},
                       {"swap_add", h.atomic_eth->swap_add},
                       {"compare", h.atomic_eth->compare}};
  }
  if (h.aeth) j["aeth"] = aeth_json(*h.aeth);
  if (h.atomic_ack_orig) j["atomic_ack_eth"] = {{"orig", *h.atomic_ack_orig}};
  if (h.imm) j["immdt"] = *h.imm;
  if (h.ieth) j["ieth"] = h.ieth->value();
  return j;
}

json frame_json(std::size_t index, const w::pcap::Record& r) {
  json j = {{"frame", index}, {"timestamp_ns", r.timestamp_ns}, {"length", r.data.size()}};
  w::DecodedFrame f;
  const auto err = w::decode_frame_into(r.data, f);
  if (err && is_not_roce(*err)) {
    j["status"] = "skipped";
    j["reason"] = w::to_string(*err);
    return j;
  }
  j.update(addr_json(f));  // as far as decoding got
  if (f.udp_length != 0) {
    j["udp"] = {{"src_port", f.addr.udp_src_port},
                {"dst_port", w::kRoceV2Port},
                {"length", f.udp_length},
                {"checksum", f.udp_checksum}};
  }
  if (err) {
    j["status"] = "error";
    j["error"] = w::to_string(*err);
    if (*err == w::FrameError::kBadHeaders) j["header_error"] = w::to_string(f.header_error);
    return j;
  }
  j["status"] = "ok";
  j.update(headers_json(f.hdr));
  j["payload_length"] = f.payload.size();
  j["icrc"] = f.icrc_ok ? "ok" : "bad";
  j["icrc_value"] = fmt::format("0x{:08x}", f.icrc_wire);
  return j;
}

std::string headers_text(const w::TransportHeaders& h) {
  std::string s;
  if (h.deth)
    s += fmt::format(" deth qkey=0x{:08x} src_qp=0x{:06x}", h.deth->qkey.value(),
                     h.deth->src_qp.value());
  if (h.xrc_srqn) s += fmt::format(" xrceth srqn=0x{:06x}", *h.xrc_srqn);
  if (h.feth) {
    s += fmt::format(" feth placement=0x{:x} selectivity={}", h.feth->placement,
                     h.feth->selectivity);
  }
  if (h.reth)
    s += fmt::format(" reth va=0x{:x} rkey=0x{:x} len={}", h.reth->va, h.reth->rkey.value(),
                     h.reth->dma_length);
  if (h.atomic_eth) {
    s += fmt::format(" atomic va=0x{:x} rkey=0x{:x} swap_add=0x{:x} compare=0x{:x}",
                     h.atomic_eth->va, h.atomic_eth->rkey.value(), h.atomic_eth->swap_add,
                     h.atomic_eth->compare);
  }
  if (h.aeth) {
    const w::Aeth& a = *h.aeth;
    s += fmt::format(" aeth {}", aeth_type_name(a.type()));
    if (a.is_rnr_nak()) s += fmt::format(" timer={}us", w::rnr_timer_us(a.value()));
    if (a.is_nak()) s += fmt::format(" ({})", nak_name(a.value()));
    if (a.is_ack()) s += fmt::format(" credit_code={}", a.value());
    s += fmt::format(" msn={}", a.msn);
  }
  if (h.atomic_ack_orig) s += fmt::format(" orig=0x{:x}", *h.atomic_ack_orig);
  if (h.imm) s += fmt::format(" imm=0x{:08x}", *h.imm);
  if (h.ieth) s += fmt::format(" ieth=0x{:08x}", h.ieth->value());
  return s;
}

std::string frame_text(std::size_t index, const w::pcap::Record& r) {
  w::DecodedFrame f;
  const auto err = w::decode_frame_into(r.data, f);
  if (err && is_not_roce(*err)) return fmt::format("{} skipped: {}", index, w::to_string(*err));
  if (err) {
    std::string reason = w::to_string(*err);
    if (*err == w::FrameError::kBadHeaders)
      reason += fmt::format(" ({})", to_string(f.header_error));
    return fmt::format("{} error: {}", index, reason);
  }
  const w::Bth& b = f.hdr.bth;
  return fmt::format("{} {}:{} > {} {} qp=0x{:06x} psn={}{}{}{}{} pad={} payload={}{} icrc={}",
                     index, w::to_string(f.addr.src_ip), f.addr.udp_src_port,
                     w::to_string(f.addr.dst_ip), f.hdr.info().name, b.dest_qp.value(),
                     b.psn.value(), b.ack_req ? " A" : "", b.solicited ? " SE" : "",
                     b.becn ? " BECN" : "", b.fecn ? " FECN" : "", b.pad_count, f.payload.size(),
                     headers_text(f.hdr), f.icrc_ok ? "ok" : "bad");
}

std::vector<std::uint8_t> read_file(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = static_cast<bool>(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int run_decode(const std::string& path, bool as_json) {
  bool ok = false;
  const auto bytes = read_file(path, &ok);
  if (!ok) {
    fmt::print(stderr, "xroce wire decode: cannot read {}\n", path);
    return 1;
  }
  auto file = w::pcap::parse(bytes);
  if (!file) {
    fmt::print(stderr, "xroce wire decode: {}: {}\n", path, w::pcap::to_string(file.error()));
    return 1;
  }
  if (file->link_type != w::pcap::kLinkTypeEthernet) {
    fmt::print(stderr, "xroce wire decode: {}: link type {} is not Ethernet\n", path,
               file->link_type);
    return 1;
  }
  json all = json::array();
  for (std::size_t i = 0; i < file->records.size(); ++i) {
    if (as_json) {
      all.push_back(frame_json(i + 1, file->records[i]));
    } else {
      fmt::print("{}\n", frame_text(i + 1, file->records[i]));
    }
  }
  if (as_json) fmt::print("{}\n", all.dump(1));
  return 0;
}

int run_samples(const std::string& path) {
  w::pcap::Writer writer;
  const auto samples = w::golden_samples();
  // One frame per microsecond from a fixed epoch, so the capture is the same on every run.
  constexpr std::uint64_t kEpochNs = 1'700'000'000'000'000'000;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    writer.add(samples[i].frame, kEpochNs + i * 1000);
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(writer.bytes().data()),
            static_cast<std::streamsize>(writer.bytes().size()));
  if (!out.flush()) {
    fmt::print(stderr, "xroce wire samples: cannot write {}\n", path);
    return 1;
  }
  fmt::print("wrote {} frames to {}\n", samples.size(), path);
  return 0;
}

}  // namespace

void register_wire(CLI::App& app, ExitStatus& status) {
  auto* wire = app.add_subcommand("wire", "RoCEv2 frames: golden samples and capture decoding");
  wire->require_subcommand(1);

  auto* samples =
      wire->add_subcommand("samples",
                           "Write one valid frame of every supported opcode (IPv4/IPv6, with and "
                           "without VLAN), ACKs with every NAK code and RNR timer, and a CNP");
  auto out_path = std::make_shared<std::string>();
  samples->add_option("-w,--write", *out_path, "pcap file to write")->required();
  samples->callback([out_path, &status] { status.code = run_samples(*out_path); });

  auto* decode = wire->add_subcommand(
      "decode", "Decode every RoCEv2 frame of a pcap file, with its ICRC status");
  auto in_path = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  decode->add_option("file", *in_path, "pcap file to read")->required();
  decode->add_flag("--json", *as_json, "Print a JSON array with every field of every frame");
  decode->callback([in_path, as_json, &status] { status.code = run_decode(*in_path, *as_json); });
}

}  // namespace xroce::cli
