// Whole-number settings read from the environment (the provider's XROCE_POLL_* knobs, the
// daemon's XROCE_DOORBELL_MODERATION_US): one parser, so that every knob takes the same text.
#pragma once

#include <cstdint>
#include <cstdlib>

namespace xroce {

// The value of environment variable `name` as a whole number, or `fallback` when it is unset,
// empty, not a number or above UINT32_MAX.
inline std::uint32_t env_count(const char* name, std::uint32_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  return (*end == '\0' && n <= UINT32_MAX) ? static_cast<std::uint32_t>(n) : fallback;
}

}  // namespace xroce
