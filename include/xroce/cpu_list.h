// CPU lists as Linux writes them (cpuset(7) "List format", /sys/devices/system/cpu/online,
// taskset -c): CPU numbers and ranges separated by commas, "1", "0-3", "0,2-3". `xroce link add
// ... cpus LIST` binds a device's workers with one (engine/daemon/README.md, "Where the workers
// run"); the CLI and xroced parse it with this one function. Strides ("0-8:2") are not taken.
#pragma once

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xroce {

// The CPUs `text` names, ascending and each once; empty with `error` set when it is not a list
// or names a CPU at or past CPU_SETSIZE (no cpu_set_t holds it).
inline std::vector<std::uint32_t> parse_cpu_list(std::string_view text, std::string& error) {
  std::vector<std::uint32_t> cpus;
  error.clear();
  auto bad = [&](std::string why) {
    error = "'" + std::string(text) + "' is not a CPU list (" + why + "; e.g. 1 or 0-3 or 0,2)";
    cpus.clear();
    return cpus;
  };
  auto number = [](std::string_view s, std::uint32_t& n) {
    if (s.empty()) return false;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    return ec == std::errc() && end == s.data() + s.size();
  };
  if (text.empty()) return bad("empty");
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const std::size_t dash = item.find('-');
    std::uint32_t first = 0;
    std::uint32_t last = 0;
    if (dash == std::string_view::npos) {
      if (!number(item, first)) return bad("'" + std::string(item) + "' is not a CPU number");
      last = first;
    } else if (!number(item.substr(0, dash), first) || !number(item.substr(dash + 1), last) ||
               last < first) {
      return bad("'" + std::string(item) + "' is not a range FIRST-LAST");
    }
    if (last >= CPU_SETSIZE) return bad("CPU " + std::to_string(last) + " is past the last one");
    for (std::uint32_t c = first; c <= last; ++c)
      cpus.push_back(c);
    start = comma + 1;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

// `cpus` (ascending) written back as a list, ranges joined: {0,1,2,5} -> "0-2,5".
inline std::string format_cpu_list(const std::vector<std::uint32_t>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1)
      ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

// The CPUs the calling thread may run on (sched_getaffinity: online, and within its cpuset and
// affinity), ascending; empty when the kernel does not say.
inline std::vector<std::uint32_t> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<std::uint32_t> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (std::uint32_t c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// The first CPU of `cpus` the calling thread may not run on, or -1 when it may run on all of
// them (or the kernel does not say).
inline int first_cpu_not_allowed(const std::vector<std::uint32_t>& cpus) {
  const std::vector<std::uint32_t> allowed = allowed_cpus();
  if (allowed.empty()) return -1;
  for (std::uint32_t c : cpus)
    if (!std::binary_search(allowed.begin(), allowed.end(), c)) return static_cast<int>(c);
  return -1;
}

}  // namespace xroce
