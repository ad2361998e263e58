// Packet sequence numbers: 24 bits, compared on a circle (IBA 9.7.1; docs/protocol.md §3.1).
#pragma once

#include <compare>
#include <cstdint>

namespace xroce::wire {

class Psn {
 public:
  static constexpr std::uint32_t kMask = 0xFFFFFF;
  static constexpr std::uint32_t kHalfWindow = 1u << 23;

  constexpr Psn() = default;
  constexpr explicit Psn(std::uint32_t value) : value_(value & kMask) {}

  constexpr std::uint32_t value() const { return value_; }

  // Signed circular distance from `from` to this PSN, in [-2^23, 2^23).
  constexpr std::int32_t distance_from(Psn from) const {
    // Shift the 24-bit difference into the top of a 32-bit word so its sign is the circular sign.
    return static_cast<std::int32_t>((value_ - from.value_) << 8) >> 8;
  }
  constexpr bool after(Psn other) const { return distance_from(other) > 0; }
  constexpr bool before(Psn other) const { return distance_from(other) < 0; }
  constexpr bool at_or_after(Psn other) const { return distance_from(other) >= 0; }
  constexpr bool at_or_before(Psn other) const { return distance_from(other) <= 0; }

  constexpr Psn operator+(std::uint32_t n) const { return Psn(value_ + n); }
  constexpr Psn operator-(std::uint32_t n) const { return Psn(value_ - n); }
  constexpr Psn& operator+=(std::uint32_t n) { return *this = *this + n; }
  constexpr Psn& operator++() { return *this += 1; }
  constexpr bool operator==(const Psn&) const = default;

 private:
  std::uint32_t value_ = 0;
};

// True if `psn` lies in the closed circular range [first, last].
constexpr bool psn_in_range(Psn psn, Psn first, Psn last) {
  return psn.at_or_after(first) && psn.at_or_before(last);
}

}  // namespace xroce::wire
