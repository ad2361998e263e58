#include "wire/icrc.h"

#include <immintrin.h>
#include <isa-l/crc.h>

#include <array>
#include <cassert>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "wire/opcode.h"

namespace xroce::wire {
namespace {

// The raw (un-inverted) CRC register after the 8-byte 0xFF placeholder for the LRH that RoCEv2
// does not have, starting from 0xFFFFFFFF; rxe seeds its CRC with the same value.
constexpr std::uint32_t kRegisterAfterLrhPlaceholder = 0xDEBB20E3;
constexpr std::uint32_t kReflectedPoly = 0xEDB88320;

// ISA-L's folding CRC has a fixed cost of tens of nanoseconds per call; below this many bytes
// small_update is at least as fast (bench_wire: with the switch at 64, 256 or 1024 bytes the
// 1,024- and 4,096-byte ICRCs took the same time; with no ISA-L at all they took 4-8x as long).
constexpr std::size_t kFoldingMinBytes = 64;

// ISA-L 2.30's AVX-512 CRC (crc32_gzip_refl_by16_10) returns without VZEROUPPER. The dirty
// upper state then makes every legacy-SSE instruction that follows (compiler-generated struct
// copies, our own memcpy) pay an SSE/AVX transition penalty: measured here as 4-8x slower ICRC
// and decode. Clear it after each call, on CPUs that have AVX.
// (__builtin_cpu_init first: this runs from a static initializer, perhaps before libgcc's.)
const bool kCpuHasAvx = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") != 0;
}();

inline void clear_upper_vector_state() {
  if (kCpuHasAvx) asm volatile("vzeroupper" ::: "memory");
}

// Slicing-by-8 tables for the reflected CRC-32: table[k][b] is the register contribution of
// byte b followed by k zero bytes.
constexpr auto kSliceTables = [] {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit)
      c = (c & 1) ? (c >> 1) ^ kReflectedPoly : c >> 1;
    t[0][i] = c;
  }
  for (std::size_t k = 1; k < 8; ++k) {
    for (std::size_t i = 0; i < 256; ++i)
      t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  }
  return t;
}();

// Advances the raw CRC register over `n` bytes, eight at a time.
std::uint32_t slice8_update(std::uint32_t reg, const std::uint8_t* p, std::size_t n) {
  const auto& t = kSliceTables;
  for (; n >= 8; p += 8, n -= 8) {
    const std::uint32_t lo = load_icrc(p) ^ reg;  // little-endian word, as the CRC is reflected
    const std::uint32_t hi = load_icrc(p + 4);
    reg = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
          t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; n > 0; ++p, --n)
    reg = (reg >> 8) ^ t[0][(reg ^ *p) & 0xFF];
  return reg;
}

const bool kCpuHasClmul = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("pclmul") != 0;
}();

// Advances the raw CRC register over `n` >= 16 bytes with carry-less multiplies: the register
// is folded into the first 16 bytes, each further 16 bytes are folded in at a distance of 128
// bits, and the 128-bit remainder is reduced to 32 bits (a 64-bit fold, a 32-bit fold, then a
// bit-reflected Barrett reduction); the last n % 16 bytes go through the slicing tables. The
// method is Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ" (2009); the
// constants are those Linux's arch/x86/crypto/crc32-pclmul_asm.S uses for this polynomial (its
// R3/R4 for the 128-bit fold, R5 for the 32-bit fold, P and its Barrett quotient u, all
// bit-reflected). For the 40 or 60 masked header bytes of every packet this is a short chain of
// multiplies with no table lookups; with it a frame's encode and decode each take 4-12 ns less
// than with slicing-by-8 there (bench_wire, frame/encode and frame/decode_and_validate).
__attribute__((target("pclmul,sse2"))) std::uint32_t clmul_update(std::uint32_t reg,
                                                                  const std::uint8_t* p,
                                                                  std::size_t n) {
  assert(n >= 16);
  const __m128i fold128 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);  // hi: R4, lo: R3
  const __m128i fold32 = _mm_set_epi64x(0, 0x0163cd6124);              // R5
  const __m128i barrett = _mm_set_epi64x(0x01F7011641, 0x01DB710641);  // hi: u, lo: P
  const __m128i low32 = _mm_set_epi32(0, 0, 0, -1);
  __m128i x = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)),
                            _mm_cvtsi32_si128(static_cast<int>(reg)));
  p += 16;
  n -= 16;
  for (; n >= 16; p += 16, n -= 16) {
    const __m128i lo = _mm_clmulepi64_si128(x, fold128, 0x00);  // x.lo * R3
    const __m128i hi = _mm_clmulepi64_si128(x, fold128, 0x11);  // x.hi * R4
    x = _mm_xor_si128(_mm_xor_si128(lo, hi), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // 128 -> 64 bits (this appends the 32 zero bits a CRC's remainder needs).
  x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(x, fold128, 0x10));
  // 64 -> 32 bits.
  x = _mm_xor_si128(_mm_srli_si128(x, 4),
                    _mm_clmulepi64_si128(_mm_and_si128(x, low32), fold32, 0x00));
  // Barrett: the remainder lands in bits 32-63.
  __m128i q = _mm_clmulepi64_si128(_mm_and_si128(x, low32), barrett, 0x10);
  q = _mm_clmulepi64_si128(_mm_and_si128(q, low32), barrett, 0x00);
  x = _mm_xor_si128(x, q);
  reg = static_cast<std::uint32_t>(_mm_cvtsi128_si32(_mm_srli_si128(x, 4)));
  return slice8_update(reg, p, n);
}

// The register after `n` bytes, without ISA-L's fixed cost per call: for the masked headers and
// the short rest of a small packet.
std::uint32_t small_update(std::uint32_t reg, const std::uint8_t* p, std::size_t n) {
  if (kCpuHasClmul && n >= 16) return clmul_update(reg, p, n);
  return slice8_update(reg, p, n);
}

constexpr std::size_t kMaxMaskedBytes = kIpv6HeaderBytes + kUdpHeaderBytes + kBthBytes;
constexpr std::size_t kUdpChecksumOffset = 6;
constexpr std::size_t kBthResv8aOffset = 4;  // FECN, BECN, Resv6a

// Sets the variant fields of the IP, UDP and BTH headers to ones, in place (rxe_icrc.c
// rxe_icrc_hdr; docs/protocol.md §1.7). Returns the length of the masked prefix.
std::size_t mask_variant_fields(std::uint8_t* p, bool v6) {
  std::size_t ip_len;
  if (v6) {
    ip_len = kIpv6HeaderBytes;
    // Version stays; traffic class and flow label become ones.
    p[0] |= 0x0F;
    p[1] = 0xFF;
    p[2] = 0xFF;
    p[3] = 0xFF;
    p[7] = 0xFF;  // hop limit
  } else {
    ip_len = kIpv4HeaderBytes;
    p[1] = 0xFF;   // TOS (DSCP + ECN)
    p[8] = 0xFF;   // TTL
    p[10] = 0xFF;  // header checksum
    p[11] = 0xFF;
  }
  std::uint8_t* udp = p + ip_len;
  udp[kUdpChecksumOffset] = 0xFF;
  udp[kUdpChecksumOffset + 1] = 0xFF;
  udp[kUdpHeaderBytes + kBthResv8aOffset] = 0xFF;
  return ip_len + kUdpHeaderBytes + kBthBytes;
}

}  // namespace

namespace detail {
std::uint32_t crc32_register_update(std::uint32_t reg, Bytes bytes, bool carry_less) {
  return carry_less ? small_update(reg, bytes.data(), bytes.size())
                    : slice8_update(reg, bytes.data(), bytes.size());
}
bool carry_less_available() {
  return kCpuHasClmul;
}
}  // namespace detail

std::uint32_t icrc_compute(Bytes ip_datagram) {
  assert(!ip_datagram.empty());
  const bool v6 = (ip_datagram[0] >> 4) == 6;
  const std::size_t prefix =
      (v6 ? kIpv6HeaderBytes : kIpv4HeaderBytes) + kUdpHeaderBytes + kBthBytes;
  assert(ip_datagram.size() >= prefix);
  std::array<std::uint8_t, kMaxMaskedBytes> masked;
  std::memcpy(masked.data(), ip_datagram.data(), prefix);
  mask_variant_fields(masked.data(), v6);
  const std::uint32_t reg = small_update(kRegisterAfterLrhPlaceholder, masked.data(), prefix);
  const std::uint8_t* rest = ip_datagram.data() + prefix;
  const std::size_t rest_len = ip_datagram.size() - prefix;
  if (rest_len < kFoldingMinBytes) return ~small_update(reg, rest, rest_len);
  // crc32_gzip_refl(previous, ...) continues a zlib-style CRC: it inverts on entry and exit,
  // so it takes the finished value of the prefix.
  const std::uint32_t crc = crc32_gzip_refl(~reg, rest, rest_len);
  clear_upper_vector_state();
  return crc;
}

namespace {

constexpr std::size_t kIpv4IdOffset = 4;

// The 16 columns of the linear map from an IPv4 identification to the change it makes to the
// ICRC of a datagram of one length, in echelon form: by_top[b] is a combination of columns
// whose highest set bit is b (or 0), and ids[b] the identification bits that produce it.
struct IdSolver {
  std::array<std::uint32_t, 32> by_top{};
  std::array<std::uint16_t, 32> ids{};
  std::array<std::uint32_t, 16> columns{};  // the change each identification bit makes

  explicit IdSolver(std::size_t datagram_bytes) {
    std::vector<std::uint8_t> zero(datagram_bytes, 0);
    zero[0] = 0x45;  // IPv4, 20-byte header: selects icrc_compute's IPv4 masks
    const std::uint32_t base = icrc_compute(Bytes(zero.data(), zero.size()));
    for (int bit = 0; bit < 16; ++bit) {
      const auto id = static_cast<std::uint16_t>(1u << bit);
      store_be16(zero.data() + kIpv4IdOffset, id);
      std::uint32_t v = icrc_compute(Bytes(zero.data(), zero.size())) ^ base;
      columns[static_cast<std::size_t>(bit)] = v;
      std::uint16_t combo = id;
      reduce(v, combo);
      if (v != 0) {
        const int top = 31 - __builtin_clz(v);
        by_top[static_cast<std::size_t>(top)] = v;
        ids[static_cast<std::size_t>(top)] = combo;
      }
    }
  }

  // Eliminates from v, highest bit first, every bit the basis covers; id follows along.
  void reduce(std::uint32_t& v, std::uint16_t& id) const {
    for (int top = 31; top >= 0 && v != 0; --top) {
      const auto k = static_cast<std::size_t>(top);
      if ((v >> top & 1u) != 0 && by_top[k] != 0) {
        v ^= by_top[k];
        id ^= ids[k];
      }
    }
  }
};

const IdSolver& id_solver_for(std::size_t datagram_bytes) {
  // Few lengths occur on a link (full MTU segments and a handful of short ones); keep the
  // cache small and per thread (ports run on their own workers).
  thread_local std::unordered_map<std::size_t, IdSolver> cache;
  if (auto it = cache.find(datagram_bytes); it != cache.end()) return it->second;
  if (cache.size() >= 64) cache.clear();
  return cache.emplace(datagram_bytes, IdSolver(datagram_bytes)).first->second;
}

// An IPv4 datagram that holds the IP and UDP headers and a BTH: the solver's domain.
bool id_solvable(Bytes ip_datagram) {
  return ip_datagram.size() >= kIpv4HeaderBytes + kUdpHeaderBytes + kBthBytes &&
         (ip_datagram[0] >> 4) == 4;
}

}  // namespace

std::optional<std::uint16_t> icrc_solve_ipv4_id(Bytes ip_datagram, std::uint32_t icrc_wire) {
  if (!id_solvable(ip_datagram)) return std::nullopt;
  return icrc_solve_ipv4_id(ip_datagram, icrc_wire, icrc_compute(ip_datagram));
}

std::optional<std::uint16_t> icrc_solve_ipv4_id(Bytes ip_datagram, std::uint32_t icrc_wire,
                                                std::uint32_t icrc_now) {
  if (!id_solvable(ip_datagram)) return std::nullopt;
  assert(icrc_now == icrc_compute(ip_datagram));
  const std::uint16_t current = load_be16(ip_datagram.data() + kIpv4IdOffset);
  std::uint32_t difference = icrc_now ^ icrc_wire;
  if (difference == 0) return current;
  std::uint16_t change = 0;
  id_solver_for(ip_datagram.size()).reduce(difference, change);
  if (difference != 0) return std::nullopt;
  return static_cast<std::uint16_t>(current ^ change);
}

std::uint32_t icrc_ipv4_id_change(std::size_t datagram_bytes, std::uint16_t id_change) {
  assert(datagram_bytes >= kIpv4HeaderBytes + kUdpHeaderBytes + kBthBytes);
  if (id_change == 0) return 0;
  const IdSolver& solver = id_solver_for(datagram_bytes);
  std::uint32_t change = 0;
  for (unsigned bit = 0; bit < 16; ++bit) {
    if ((id_change >> bit & 1u) != 0) change ^= solver.columns[bit];
  }
  return change;
}

}  // namespace xroce::wire
