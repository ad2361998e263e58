#include "device/counters_report.h"

#include <fmt/core.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <system_error>

namespace xroce::device {

namespace {

// Adds the growth of one transport counter; a counter that went down (the QP was reset and
// its counters restarted) adds its new value.
void add_growth(CounterBlock& block, Counter c, std::uint64_t now, std::uint64_t reported) {
  const std::uint64_t grown = now >= reported ? now - reported : now;
  if (grown != 0) block.add(c, grown);
}

int write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "we");
  if (f == nullptr) return errno;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return EIO;
  return std::rename(tmp.c_str(), path.c_str()) == 0 ? 0 : errno;
}

}  // namespace

void feed_qp_counters(CounterBlock& block, const transport::QpCounters& now,
                      transport::QpCounters& reported) {
  add_growth(block, Counter::kDuplicateRequest, now.duplicate_requests,
             reported.duplicate_requests);
  add_growth(block, Counter::kOutOfSeqRequest, now.out_of_sequence, reported.out_of_sequence);
  add_growth(block, Counter::kRcvdRnrErr, now.rnr_naks_received, reported.rnr_naks_received);
  add_growth(block, Counter::kSendRnrErr, now.rnr_naks_sent, reported.rnr_naks_sent);
  add_growth(block, Counter::kRcvdSeqErr, now.naks_received - now.rnr_naks_received,
             reported.naks_received - reported.rnr_naks_received);
  add_growth(block, Counter::kCompleterRetryErr, now.timeouts, reported.timeouts);
  add_growth(block, Counter::kAdaptiveRetransmits, now.adaptive_retransmits,
             reported.adaptive_retransmits);
  add_growth(block, Counter::kResendTimeouts, now.resend_timeouts, reported.resend_timeouts);
  add_growth(block, Counter::kTailProbes, now.tail_probes, reported.tail_probes);
  add_growth(block, Counter::kProbeGaps, now.probe_gaps, reported.probe_gaps);
  add_growth(block, Counter::kResendRepeats, now.resend_repeats, reported.resend_repeats);
  add_growth(block, Counter::kReplaysReordered, now.replays_reordered, reported.replays_reordered);
  add_growth(block, Counter::kReplayGapRetries, now.replay_gap_retries,
             reported.replay_gap_retries);
  add_growth(block, Counter::kReadResponsesAhead, now.read_responses_ahead,
             reported.read_responses_ahead);
  add_growth(block, Counter::kReadRangesAsked, now.read_ranges_asked, reported.read_ranges_asked);
  add_growth(block, Counter::kReceivesPulledLate, now.receives_pulled_late,
             reported.receives_pulled_late);
  add_growth(block, Counter::kCnpRcvd, now.cnps_received, reported.cnps_received);
  add_growth(block, Counter::kNpEcnMarkedRocePackets, now.ecn_ce_received,
             reported.ecn_ce_received);
  add_growth(block, Counter::kRespRemoteAccessErrors, now.rkey_violations,
             reported.rkey_violations);
  reported = now;
}

namespace {

// The error counters of one completion that is neither a success nor a flush.
void feed_error_completion(CounterBlock& block, const transport::Completion& completion) {
  using transport::WcStatus;
  block.add(completion.is_recv() ? Counter::kRespCqeError : Counter::kReqCqeError);
  switch (completion.status) {
    case WcStatus::kRetryExcErr:
      block.add(Counter::kRetryExceededErr);
      return;
    case WcStatus::kRnrRetryExcErr:
      block.add(Counter::kRetryRnrExceededErr);
      return;
    case WcStatus::kRemAccessErr:
      if (!completion.is_recv()) block.add(Counter::kReqRemoteAccessErrors);
      return;
    case WcStatus::kRemInvReqErr:
      if (!completion.is_recv()) block.add(Counter::kReqRemoteInvalidRequest);
      return;
    default:
      return;
  }
}

}  // namespace

void feed_completion(CounterBlock& block, const transport::Completion& completion) {
  using transport::WcOpcode;
  using transport::WcStatus;
  if (completion.status == WcStatus::kWrFlushErr) return;
  if (completion.status != WcStatus::kSuccess) {
    feed_error_completion(block, completion);
    return;
  }
  if (completion.is_recv()) {
    block.add(Counter::kRdmaRecvs);
  } else if (completion.opcode == WcOpcode::kSend) {
    block.add(Counter::kRdmaSends);
  }
}

std::string counters_json(const CounterValues& values) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < kCounterCount; ++i)
    j[std::string(kCounterNames[i])] = values[i];
  return j.dump();
}

int write_hw_counters(const std::string& port_dir, const CounterValues& values) {
  const std::string dir = port_dir + "/hw_counters";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ec.value();
  for (std::size_t i = 0; i < kCounterCount; ++i) {
    const int err = write_atomically(fmt::format("{}/{}", dir, kCounterNames[i]),
                                     fmt::format("{}\n", values[i]));
    if (err != 0) return err;
  }
  return write_atomically(dir + "/lifespan", fmt::format("{}\n", kCounterLifespanMs));
}

namespace {
const char* qp_type_name(transport::QpType type) {
  switch (type) {
    case transport::QpType::kRc:
      return "RC";
    case transport::QpType::kUc:
      return "UC";
    case transport::QpType::kUd:
      return "UD";
    case transport::QpType::kXrcSend:
      return "XRC_SEND";
    case transport::QpType::kXrcRecv:
      return "XRC_RECV";
  }
  return "?";
}
}  // namespace

nlohmann::ordered_json qp_show_json(const transport::Qp& qp, const QpShowContext& context) {
  const transport::QpCounters& c = qp.counters();
  nlohmann::ordered_json j;
  j["qpn"] = qp.qpn().value();
  j["type"] = qp_type_name(qp.type());
  j["state"] = transport::to_string(qp.state());
  j["sq_psn"] = qp.next_send_psn().value();
  j["unacked_psn"] = qp.oldest_unacked_psn().value();
  j["rq_psn"] = qp.expected_psn().value();
  j["dest_qpn"] = qp.attr().dest_qp_num.value();
  j["peer"] = context.peer;
  j["worker"] = context.worker;
  j["pid"] = context.pid;
  j["send_queue_depth"] = qp.send_queue_depth();
  j["retransmits"] = c.retransmitted_packets;
  j["timeouts"] = c.timeouts;
  j["adaptive_retransmits"] = c.adaptive_retransmits;
  j["resend_timeouts"] = c.resend_timeouts;
  j["tail_probes"] = c.tail_probes;
  j["probe_gaps"] = c.probe_gaps;
  j["resend_repeats"] = c.resend_repeats;
  j["replay_gap_retries"] = c.replay_gap_retries;
  j["read_responses_ahead"] = c.read_responses_ahead;
  j["read_ranges_asked"] = c.read_ranges_asked;
  j["naks_received"] = c.naks_received;
  j["rnr_naks_received"] = c.rnr_naks_received;
  j["packets_sent"] = c.packets_sent;
  j["packets_received"] = c.packets_received;
  // For per-QP rates and `xroce top` / `xroce exporter`: payload bytes both ways, the other
  // transport counters, and the requester's round-trip estimate (transport/rtt.h).
  j["payload_bytes_sent"] = c.payload_bytes_sent;
  j["payload_bytes_received"] = c.payload_bytes_received;
  j["naks_sent"] = c.naks_sent;
  j["rnr_naks_sent"] = c.rnr_naks_sent;
  j["receives_pulled_late"] = c.receives_pulled_late;
  j["duplicate_requests"] = c.duplicate_requests;
  j["replays_reordered"] = c.replays_reordered;
  j["out_of_sequence"] = c.out_of_sequence;
  j["cnps_received"] = c.cnps_received;
  j["ecn_ce_received"] = c.ecn_ce_received;
  const transport::RttEstimator& rtt = qp.rtt();
  j["rtt_samples"] = rtt.samples();
  j["rtt_us"] = static_cast<double>(rtt.smoothed_ns()) / 1000.0;
  j["rtt_min_us"] = static_cast<double>(rtt.min_ns()) / 1000.0;
  j["rtt_latest_us"] = static_cast<double>(rtt.latest_ns()) / 1000.0;
  j["rtt_peak_us"] = static_cast<double>(rtt.peak_ns()) / 1000.0;
  j["loss_window_psns"] = qp.loss_window().psns();
  j["loss_window_reductions"] = qp.loss_window().reductions();
  return j;
}

}  // namespace xroce::device
