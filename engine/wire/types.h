// Strong types for wire quantities that must not be mixed with each other or with integers.
#pragma once

#include <compare>
#include <cstdint>

namespace xroce::wire {

template <typename Tag, typename Rep>
class Strong {
 public:
  constexpr Strong() = default;
  constexpr explicit Strong(Rep value) : value_(value) {}
  constexpr Rep value() const { return value_; }
  constexpr auto operator<=>(const Strong&) const = default;

 private:
  Rep value_{};
};

struct QpnTag {};
struct RkeyTag {};
struct LkeyTag {};
struct QkeyTag {};

// Queue pair number, 24 bits on the wire.
class Qpn : public Strong<QpnTag, std::uint32_t> {
 public:
  static constexpr std::uint32_t kMask = 0xFFFFFF;
  static constexpr std::uint32_t kMulticast = 0xFFFFFF;
  constexpr Qpn() = default;
  constexpr explicit Qpn(std::uint32_t v) : Strong(v & kMask) {}
};
using Rkey = Strong<RkeyTag, std::uint32_t>;
using Lkey = Strong<LkeyTag, std::uint32_t>;
using Qkey = Strong<QkeyTag, std::uint32_t>;

// Q_Key used by the GSI (QP1), docs/protocol.md §4.
inline constexpr Qkey kGsiQkey{0x80010000};
// Default partition, full member: what rxe always sends.
inline constexpr std::uint16_t kDefaultPkey = 0xFFFF;
// IANA port for RoCEv2.
inline constexpr std::uint16_t kRoceV2Port = 4791;

}  // namespace xroce::wire
