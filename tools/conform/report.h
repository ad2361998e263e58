// What `xroce conform` prints: a line per case, a summary table per chapter, JSON, and the
// exchanged frames as a pcap.
#pragma once

#include <string>
#include <vector>

#include "case.h"

namespace xroce::conform {

struct Totals {
  int pass = 0;
  int fail = 0;
  int not_applicable = 0;
};
Totals totals(const std::vector<CaseResult>& results);

// One line per case (failures with expected, seen and the frames), then the chapter table.
std::string text_report(const std::vector<CaseResult>& results, const std::string& device);
std::string json_report(const std::vector<CaseResult>& results, const std::string& device);
// Every case's frames in one capture, cases separated in time by one second.
std::vector<std::uint8_t> pcap_report(const std::vector<CaseResult>& results);

}  // namespace xroce::conform
