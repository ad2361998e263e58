// Request and reply bodies of the control protocol (include/xroce/control.h): fixed-size,
// trivially copyable structs carried as raw bytes in host byte order.
#pragma once

#include <cstring>
#include <string>
#include <type_traits>

namespace xroce::daemon {

// Copies a request body into `out`; false when the body is shorter than the struct.
template <typename T>
bool parse(const std::string& body, T& out) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (body.size() < sizeof(T)) return false;
  std::memcpy(&out, body.data(), sizeof(T));
  return true;
}

// The bytes of a reply body.
template <typename T>
std::string bytes_of(const T& value) {
  static_assert(std::is_trivially_copyable_v<T>);
  return std::string(reinterpret_cast<const char*>(&value), sizeof(T));
}

}  // namespace xroce::daemon
