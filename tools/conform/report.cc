#include "report.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <map>

#include "wire/pcap.h"

namespace xroce::conform {

Totals totals(const std::vector<CaseResult>& results) {
  Totals t;
  for (const CaseResult& r : results) {
    if (r.outcome == Outcome::kPass) ++t.pass;
    if (r.outcome == Outcome::kFail) ++t.fail;
    if (r.outcome == Outcome::kNotApplicable) ++t.not_applicable;
  }
  return t;
}

std::string text_report(const std::vector<CaseResult>& results, const std::string& device) {
  std::string out = fmt::format("xroce conform: {} cases against {}\n", results.size(), device);
  std::map<std::string, Totals> chapters;
  for (const CaseResult& r : results) {
    out += fmt::format("{:<5} {:<48} {}\n", to_string(r.outcome), r.c->name, r.c->rule);
    Totals& t = chapters[r.c->chapter];
    if (r.outcome == Outcome::kPass) ++t.pass;
    if (r.outcome == Outcome::kFail) ++t.fail;
    if (r.outcome == Outcome::kNotApplicable) ++t.not_applicable;
    if (r.outcome == Outcome::kNotApplicable)
      out += fmt::format("      not applicable: {}\n", r.expected);
    if (r.outcome != Outcome::kFail) continue;
    out += fmt::format("      expected: {}\n      seen:     {}\n", r.expected, r.seen);
    for (const LoggedFrame& f : r.frames) {
      out += fmt::format("      {:>10.3f} ms {} {}\n", static_cast<double>(f.at_ns) / 1e6,
                         f.from_peer ? "peer ->" : "<- dev ", describe(f.bytes));
    }
  }
  out += fmt::format("\n{:<44} {:>5} {:>5} {:>5}\n", "chapter", "pass", "fail", "n/a");
  for (const auto& [chapter, t] : chapters) {
    out += fmt::format("{:<44} {:>5} {:>5} {:>5}\n", chapter, t.pass, t.fail, t.not_applicable);
  }
  const Totals all = totals(results);
  out += fmt::format("{:<44} {:>5} {:>5} {:>5}\n", "total", all.pass, all.fail, all.not_applicable);
  return out;
}

std::string json_report(const std::vector<CaseResult>& results, const std::string& device) {
  nlohmann::json cases = nlohmann::json::array();
  for (const CaseResult& r : results) {
    nlohmann::json c = {{"name", r.c->name},
                        {"chapter", r.c->chapter},
                        {"rule", r.c->rule},
                        {"title", r.c->title},
                        {"result", to_string(r.outcome)}};
    if (r.outcome == Outcome::kFail) {
      c["expected"] = r.expected;
      c["seen"] = r.seen;
      nlohmann::json frames = nlohmann::json::array();
      for (const LoggedFrame& f : r.frames) {
        frames.push_back({{"at_ns", f.at_ns},
                          {"from", f.from_peer ? "peer" : "device"},
                          {"frame", describe(f.bytes)}});
      }
      c["frames"] = frames;
    }
    if (r.outcome == Outcome::kNotApplicable) c["why"] = r.expected;
    cases.push_back(c);
  }
  const Totals t = totals(results);
  const nlohmann::json j = {
      {"device", device},
      {"summary", {{"pass", t.pass}, {"fail", t.fail}, {"not_applicable", t.not_applicable}}},
      {"cases", cases}};
  return j.dump(2) + "\n";
}

std::vector<std::uint8_t> pcap_report(const std::vector<CaseResult>& results) {
  wire::pcap::Writer w;
  std::uint64_t base_ns = 0;
  for (const CaseResult& r : results) {
    std::uint64_t last = 0;
    for (const LoggedFrame& f : r.frames) {
      const std::uint64_t first = r.frames.front().at_ns;
      last = f.at_ns - first;
      w.add(f.bytes, base_ns + last);
    }
    base_ns += last + 1'000'000'000;
  }
  return w.bytes();
}

}  // namespace xroce::conform
