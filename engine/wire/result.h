// A value or a typed error, for decoders and other pure functions that can fail on input.
// (std::expected is C++23; this is the part of it the engine needs.)
#pragma once

#include <cassert>
#include <utility>
#include <variant>

namespace xroce::wire {

template <typename E>
struct Err {
  // A constructor, not an aggregate: clang 14 (the fuzz build) lacks C++20 parenthesized
  // aggregate initialization, so `Err(e)` would not compile there.
  constexpr explicit Err(E e) : error(std::move(e)) {}
  E error;
};
template <typename E>
Err(E) -> Err<E>;

template <typename T, typename E>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT implicit
  Result(Err<E> e) : v_(std::in_place_index<1>, e.error) {}          // NOLINT implicit

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() {
    assert(ok());
    return std::get<0>(v_);
  }
  const T& value() const {
    assert(ok());
    return std::get<0>(v_);
  }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  E error() const {
    assert(!ok());
    return std::get<1>(v_);
  }

 private:
  std::variant<T, E> v_;
};

}  // namespace xroce::wire
