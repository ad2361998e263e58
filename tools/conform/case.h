// Conformance cases: each names the IBA rule it checks and plays one exchange between the
// scripted peer and the target. A case passes, fails (expected vs seen, with the frames), or is
// not applicable (the device lacks the feature).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "peer.h"
#include "target.h"

namespace xroce::conform {

// How long the peer waits: for an answer that must come, and for silence that must hold.
struct Timing {
  std::uint64_t reply_ns = 200'000'000;
  std::uint64_t silence_ns = 50'000'000;
};

struct CaseContext {
  Target& target;
  Peer& peer;
  Capabilities caps;
  Timing timing;
  std::uint32_t peer_qpn = 0x100;  // the peer's QPN for this case
};

struct Case {
  std::string name;     // e.g. "rc.resp.psn.ahead_send"
  std::string chapter;  // e.g. "9.7 RC responder"
  std::string rule;     // the IBA rule (and the rxe function that enforces the same)
  std::string title;
  std::function<void(CaseContext&)> run;
};

enum class Outcome : std::uint8_t { kPass, kFail, kNotApplicable };
const char* to_string(Outcome o);

struct CaseResult {
  const Case* c = nullptr;
  Outcome outcome = Outcome::kPass;
  std::string expected;  // fail: what the rule asks; n/a: why not applicable
  std::string seen;
  std::vector<LoggedFrame> frames;
};

// Every case, in chapter order.
const std::vector<Case>& all_cases();

// Chapter files add their cases here.
void add_rc_responder_cases(std::vector<Case>& out);
void add_rc_requester_cases(std::vector<Case>& out);
void add_ud_cases(std::vector<Case>& out);
void add_roce_cases(std::vector<Case>& out);

// Runs one case against a target over a link (fresh QPs per case).
CaseResult run_case(const Case& c, Target& target, Link& link, const Endpoints& ends,
                    const Timing& timing, std::uint32_t peer_qpn);

// fnmatch-style selection ("rc.resp.*").
bool case_selected(const Case& c, const std::string& glob);

}  // namespace xroce::conform
