#include "device/gid_table.h"

#include <arpa/inet.h>
#include <fmt/core.h>

#include <algorithm>
#include <cstring>

namespace xroce::device {

IpAddress IpAddress::v4_from(const uint8_t (&addr)[4]) {
  IpAddress a;
  std::copy(std::begin(addr), std::end(addr), a.bytes.begin());
  return a;
}

IpAddress IpAddress::v6_from(const uint8_t (&addr)[16]) {
  IpAddress a;
  a.v6 = true;
  std::copy(std::begin(addr), std::end(addr), a.bytes.begin());
  return a;
}

Gid gid_from_address(const IpAddress& address) {
  if (address.v6) return address.bytes;
  Gid gid{};
  gid[10] = 0xff;
  gid[11] = 0xff;
  std::copy_n(address.bytes.begin(), 4, gid.begin() + 12);
  return gid;
}

bool is_zero(const Gid& gid) {
  return std::all_of(gid.begin(), gid.end(), [](uint8_t b) { return b == 0; });
}

std::string gid_sysfs_text(const Gid& gid) {
  std::string out;
  for (std::size_t i = 0; i < gid.size(); i += 2) {
    if (i != 0) out += ':';
    out += fmt::format("{:02x}{:02x}", gid[i], gid[i + 1]);
  }
  return out;
}

std::string gid_display_text(const Gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.data(), text, sizeof(text));
  return text;
}

std::optional<std::size_t> GidTable::find(const Gid& gid) const {
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (!is_zero(entries_[i]) && entries_[i] == gid) return i;
  }
  return std::nullopt;
}

bool GidTable::update(const std::vector<IpAddress>& addresses) {
  std::vector<Gid> wanted;
  for (const auto& a : addresses) {
    Gid gid = gid_from_address(a);
    if (!is_zero(gid) && std::find(wanted.begin(), wanted.end(), gid) == wanted.end()) {
      wanted.push_back(gid);
    }
  }
  bool changed = false;
  for (auto& entry : entries_) {
    if (!is_zero(entry) && std::find(wanted.begin(), wanted.end(), entry) == wanted.end()) {
      entry = Gid{};
      changed = true;
    }
  }
  for (const auto& gid : wanted) {
    if (find(gid)) continue;
    auto slot = std::find_if(entries_.begin(), entries_.end(), is_zero);
    if (slot == entries_.end()) break;
    *slot = gid;
    changed = true;
  }
  return changed;
}

}  // namespace xroce::device
