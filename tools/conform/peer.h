// The scripted peer: builds RoCEv2 frames with the wire codec, sends them over a Link, and
// waits for the target's answers, keeping every frame both ways for the report and --pcap.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "target.h"
#include "wire/frame.h"

namespace xroce::conform {

struct LoggedFrame {
  std::uint64_t at_ns = 0;
  bool from_peer = false;
  Frame bytes;
};

// A received frame, decoded. `decoded` is nullopt when the codec refused it.
struct Reply {
  Frame bytes;
  std::optional<wire::DecodedFrame> decoded;
  const wire::TransportHeaders& hdr() const { return decoded->hdr; }
  wire::Opcode opcode() const { return decoded->hdr.bth.opcode; }
  std::uint32_t psn() const { return decoded->hdr.bth.psn.value(); }
  wire::Bytes payload() const { return decoded->payload; }
};

// A case's failure: what it expected and what it saw. Thrown by Peer and Case helpers, caught
// by the runner; the frames come from the peer's log.
struct CaseFailure {
  std::string expected;
  std::string seen;
};
// The device lacks what the case needs.
struct NotApplicable {
  std::string why;
};

class Peer {
 public:
  Peer(Link& link, const Endpoints& ends) : link_(link), ends_(ends) {}

  std::uint64_t now_ns() { return link_.now_ns(); }

  // Frame addresses for a packet from the peer; tweak fields before send_frame if a case needs.
  wire::FrameAddress address() const;
  Frame build(const wire::TransportHeaders& hdr, wire::Bytes payload = {},
              const wire::FrameAddress* addr = nullptr) const;
  void send(const wire::TransportHeaders& hdr, wire::Bytes payload = {});
  void send_frame(const Frame& frame);

  // The next frame for `peer_qpn` (others are logged and skipped) within wait_ns.
  std::optional<Reply> receive(std::uint32_t peer_qpn, std::uint64_t wait_ns);
  // As receive, but a missing frame is a CaseFailure naming `what`.
  Reply expect(std::uint32_t peer_qpn, const std::string& what, std::uint64_t wait_ns);
  // Fails when any frame for peer_qpn arrives within wait_ns.
  void expect_silence(std::uint32_t peer_qpn, const std::string& why, std::uint64_t wait_ns);
  void idle(std::uint64_t wait_ns) { link_.idle_until(link_.now_ns() + wait_ns); }

  const std::vector<LoggedFrame>& log() const { return log_; }

 private:
  Link& link_;
  Endpoints ends_;
  std::vector<LoggedFrame> log_;
};

// One line describing a frame (opcode, PSN, AETH, lengths) for reports.
std::string describe(const Frame& frame);

}  // namespace xroce::conform
