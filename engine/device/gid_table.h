// The port's GID table: RoCE v2 GIDs built from the netdev's IP addresses.
//
// An IPv4 address a.b.c.d becomes the IPv4-mapped GID ::ffff:a.b.c.d, an IPv6 address is its
// own GID. Like the kernel's GID cache, an entry keeps its index for as long as its address
// exists (applications take the index from ibv_devinfo and hold on to it); a removed address
// frees its slot, and a new one takes the lowest free slot.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace xroce::device {

using Gid = std::array<uint8_t, 16>;

inline constexpr std::size_t kGidTableLength = 16;

// An address as the netdev reports it: 4 bytes (IPv4) or 16 bytes (IPv6), network order.
struct IpAddress {
  bool v6 = false;
  std::array<uint8_t, 16> bytes{};

  static IpAddress v4_from(const uint8_t (&addr)[4]);
  static IpAddress v6_from(const uint8_t (&addr)[16]);
  bool operator==(const IpAddress&) const = default;
};

Gid gid_from_address(const IpAddress& address);
bool is_zero(const Gid& gid);
// The text sysfs shows for a GID: eight colon-separated groups of four hex digits.
std::string gid_sysfs_text(const Gid& gid);
// The usual text form (::ffff:198.18.0.1, 2001:2::1), as ibv_devinfo prints it.
std::string gid_display_text(const Gid& gid);

class GidTable {
 public:
  // Brings the table in line with the netdev's current addresses. Returns true if any entry
  // changed. Addresses beyond the table's capacity are left out.
  bool update(const std::vector<IpAddress>& addresses);

  const Gid& at(std::size_t index) const { return entries_[index]; }
  std::size_t size() const { return entries_.size(); }
  std::optional<std::size_t> find(const Gid& gid) const;

 private:
  std::array<Gid, kGidTableLength> entries_{};
};

}  // namespace xroce::device
