#include "case.h"

#include <fnmatch.h>

#include <exception>

namespace xroce::conform {

const char* to_string(Outcome o) {
  switch (o) {
    case Outcome::kPass:
      return "pass";
    case Outcome::kFail:
      return "fail";
    case Outcome::kNotApplicable:
      return "n/a";
  }
  return "?";
}

const char* wc::status_name(std::uint32_t status) {
  static const char* const kNames[] = {
      "SUCCESS",          "LOC_LEN_ERR",       "LOC_QP_OP_ERR",     "LOC_EEC_OP_ERR",
      "LOC_PROT_ERR",     "WR_FLUSH_ERR",      "MW_BIND_ERR",       "BAD_RESP_ERR",
      "LOC_ACCESS_ERR",   "REM_INV_REQ_ERR",   "REM_ACCESS_ERR",    "REM_OP_ERR",
      "RETRY_EXC_ERR",    "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR",  "REM_INV_RD_REQ_ERR",
      "REM_ABORT_ERR",    "INV_EECN_ERR",      "INV_EEC_STATE_ERR", "FATAL_ERR",
      "RESP_TIMEOUT_ERR", "GENERAL_ERR"};
  return status < std::size(kNames) ? kNames[status] : "?";
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> v;
    add_rc_responder_cases(v);
    add_rc_requester_cases(v);
    add_ud_cases(v);
    add_roce_cases(v);
    return v;
  }();
  return cases;
}

bool case_selected(const Case& c, const std::string& glob) {
  return glob.empty() || fnmatch(glob.c_str(), c.name.c_str(), 0) == 0;
}

CaseResult run_case(const Case& c, Target& target, Link& link, const Endpoints& ends,
                    const Timing& timing, std::uint32_t peer_qpn) {
  Peer peer(link, ends);
  CaseContext ctx{target, peer, target.capabilities(), timing, peer_qpn};
  CaseResult r;
  r.c = &c;
  try {
    c.run(ctx);
    r.outcome = Outcome::kPass;
  } catch (const CaseFailure& f) {
    r.outcome = Outcome::kFail;
    r.expected = f.expected;
    r.seen = f.seen;
  } catch (const NotApplicable& n) {
    r.outcome = Outcome::kNotApplicable;
    r.expected = n.why;
  } catch (const std::exception& e) {
    r.outcome = Outcome::kFail;
    r.expected = "the target to carry out the case's verbs";
    r.seen = e.what();
  }
  r.frames = peer.log();
  return r;
}

}  // namespace xroce::conform
