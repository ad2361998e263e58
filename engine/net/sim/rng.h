// The simulator's only source of randomness: xoshiro256** seeded through splitmix64, with our
// own conversions to doubles and bounded integers, so a seed gives the same numbers on every
// machine and standard library (std::*_distribution does not).
#pragma once

#include <cstdint>

namespace xroce::net::sim {

// splitmix64: expands one 64-bit seed into well-mixed state words.
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) { reseed(seed); }

  void reseed(std::uint64_t seed) {
    std::uint64_t sm = seed;
    for (auto& word : s_)
      word = splitmix64(sm);
  }

  // xoshiro256** (Blackman and Vigna).
  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1): the top 53 bits as a fraction of 2^53 (exact in a double).
  double uniform01() {
    constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;
    return static_cast<double>(next_u64() >> 11) * kTwoToMinus53;
  }

  // True with probability p (p <= 0: never, p >= 1: always; no draw is made in either case).
  bool bernoulli(double p) {
    if (p <= 0.0) return false;
    if (p >= 1.0) return true;
    return uniform01() < p;
  }

  // Uniform in [0, bound) for bound > 0, without modulo bias (rejection sampling).
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    std::uint64_t x;
    do {
      x = next_u64();
    } while (x >= limit);
    return x % bound;
  }

  // Uniform in [lo, hi] inclusive (lo <= hi).
  std::uint64_t between(std::uint64_t lo, std::uint64_t hi) {
    if (hi - lo == UINT64_MAX) return next_u64();
    return lo + below(hi - lo + 1);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4]{};
};

}  // namespace xroce::net::sim
