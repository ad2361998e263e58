// What the fuzz targets share: a property check that aborts (so libFuzzer records the input),
// and the input read front to back as bytes, words and raw structs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace xroce::fuzz {

inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

// The input, read front to back; zeros once it runs out.
struct Input {
  const std::uint8_t* data;
  std::size_t size;

  std::uint8_t byte() {
    if (size == 0) return 0;
    --size;
    return *data++;
  }
  std::uint32_t word() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
      v = v << 8 | byte();
    return v;
  }
  // Up to n bytes (fewer when the input ends).
  std::string bytes(std::size_t n) {
    n = std::min(n, size);
    std::string out(reinterpret_cast<const char*>(data), n);
    data += n;
    size -= n;
    return out;
  }
  // A struct of arbitrary bytes.
  template <typename T>
  T raw() {
    T value{};
    auto* out = reinterpret_cast<std::uint8_t*>(&value);
    for (std::size_t i = 0; i < sizeof value; ++i)
      out[i] = byte();
    return value;
  }
};

}  // namespace xroce::fuzz
