// Encoding and decoding the datagrams of the control protocol (include/xroce/control.h): a
// Header, then a body of fixed-size trivially copyable structs in host byte order. Pure
// functions, shared by the daemon, the client and the fuzzers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "xroce/control.h"

namespace xroce::control {

// Header, then body.
std::string encode_message(Op op, uint32_t seq, int32_t status, std::string_view body);

// The header of a datagram when it is one of ours: at least a Header long, with our magic and
// version. Anything else is nullopt.
std::optional<Header> decode_header(std::span<const std::byte> datagram);

// The body that follows the header (decode_header must have accepted the datagram).
inline std::string_view body_of(std::span<const std::byte> datagram) {
  return {reinterpret_cast<const char*>(datagram.data()) + sizeof(Header),
          datagram.size() - sizeof(Header)};
}

// The bytes of a body struct.
template <typename T>
std::string body_bytes(const T& value) {
  static_assert(std::is_trivially_copyable_v<T>);
  return std::string(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Copies the leading sizeof(T) bytes of `body` into `out`; false when the body is shorter.
template <typename T>
bool read_body(std::string_view body, T& out) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (body.size() < sizeof(T)) return false;
  std::memcpy(&out, body.data(), sizeof(T));
  return true;
}

// A NUL-terminated name from a fixed-size field, never reading past it.
inline std::string bounded_name(const char* field, std::size_t capacity) {
  return std::string(field, strnlen(field, capacity));
}

}  // namespace xroce::control
