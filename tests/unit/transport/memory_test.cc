// Registered memory: LocalMemory and the MR table's keys (reproducible or random), bounds and
// access checks.
#include "transport/memory.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <set>
#include <vector>

namespace xroce::transport {
namespace {

TEST(LocalMemory, ReadsBackWhatWasWrittenAndRefusesOutsideBuffers) {
  LocalMemory mem;
  const std::uint64_t a = mem.allocate(64);
  const std::uint64_t b = mem.allocate(16);
  EXPECT_GE(b, a + 64);
  const std::array<std::uint8_t, 4> in{1, 2, 3, 4};
  ASSERT_TRUE(mem.write(a + 60, in));
  std::array<std::uint8_t, 4> out{};
  ASSERT_TRUE(mem.read(a + 60, out));
  EXPECT_EQ(out, in);
  EXPECT_FALSE(mem.write(a + 61, in));  // one byte past the end
  EXPECT_FALSE(mem.read(a - 1, out));
  EXPECT_FALSE(mem.read(b + 16, std::span<std::uint8_t>(out.data(), 1)));
}

TEST(LocalMemory, AtomicsReturnTheOriginalValue) {
  LocalMemory mem;
  const std::uint64_t a = mem.allocate(16);
  std::uint64_t orig = 99;
  ASSERT_TRUE(mem.atomic_fetch_add(a, 5, &orig));
  EXPECT_EQ(orig, 0u);
  ASSERT_TRUE(mem.atomic_cmp_swap(a, 4, 100, &orig));  // compare fails: no swap
  EXPECT_EQ(orig, 5u);
  ASSERT_TRUE(mem.atomic_cmp_swap(a, 5, 100, &orig));
  EXPECT_EQ(orig, 5u);
  ASSERT_TRUE(mem.atomic_fetch_add(a, 0, &orig));
  EXPECT_EQ(orig, 100u);
  EXPECT_FALSE(mem.atomic_fetch_add(a + 12, 1, &orig));
}

class MrTableTest : public ::testing::Test {
 protected:
  LocalMemory mem;
  MemoryRegionTable mrs{mem};
  std::uint64_t base = mem.allocate(4096);
};

TEST_F(MrTableTest, LocalCheckEnforcesKeyBoundsAndLocalWrite) {
  const MemoryRegion ro = mrs.register_region(base, 1024, access::kRemoteRead);
  const MemoryRegion rw = mrs.register_region(base + 1024, 1024, access::kLocalWrite);
  EXPECT_TRUE(mrs.check_local(ro.lkey, base, 1024, 0));
  EXPECT_EQ(mrs.check_local(ro.lkey, base, 1025, 0).error(), MemError::kOutOfBounds);
  EXPECT_EQ(mrs.check_local(ro.lkey, base - 1, 1, 0).error(), MemError::kOutOfBounds);
  EXPECT_EQ(mrs.check_local(ro.lkey, base, 8, access::kLocalWrite).error(),
            MemError::kAccessDenied);
  EXPECT_TRUE(mrs.check_local(rw.lkey, base + 2047, 1, access::kLocalWrite));
  EXPECT_EQ(mrs.check_local(wire::Lkey(0xDEAD00), base, 1, 0).error(), MemError::kInvalidKey);
}

TEST_F(MrTableTest, RemoteCheckNeedsTheRemoteFlag) {
  const MemoryRegion mr =
      mrs.register_region(base, 4096, access::kLocalWrite | access::kRemoteWrite);
  EXPECT_TRUE(mrs.check_remote(mr.rkey, base + 8, 8, access::kRemoteWrite));
  EXPECT_EQ(mrs.check_remote(mr.rkey, base, 8, access::kRemoteRead).error(),
            MemError::kAccessDenied);
  EXPECT_EQ(mrs.check_remote(mr.rkey, base + 4090, 8, access::kRemoteWrite).error(),
            MemError::kOutOfBounds);
  // Huge lengths must not wrap around the address space.
  EXPECT_EQ(mrs.check_remote(mr.rkey, base + 8, ~std::uint64_t{0}, access::kRemoteWrite).error(),
            MemError::kOutOfBounds);
}

TEST_F(MrTableTest, DeregisteredAndInvalidatedKeysStopWorkingAndAreNotReused) {
  const MemoryRegion a = mrs.register_region(base, 64, access::kRemoteRead);
  ASSERT_TRUE(mrs.deregister(a.lkey));
  EXPECT_EQ(mrs.check_remote(a.rkey, base, 8, access::kRemoteRead).error(), MemError::kInvalidKey);
  EXPECT_FALSE(mrs.deregister(a.lkey));
  const MemoryRegion b = mrs.register_region(base, 64, access::kRemoteRead);
  EXPECT_NE(b.rkey, a.rkey);  // same slot, new generation
  EXPECT_EQ(mrs.check_remote(a.rkey, base, 8, access::kRemoteRead).error(), MemError::kInvalidKey);
  ASSERT_TRUE(mrs.invalidate(b.rkey));
  EXPECT_FALSE(mrs.check_remote(b.rkey, base, 8, access::kRemoteRead));
  EXPECT_FALSE(mrs.invalidate(b.rkey));
}

// With random key bits (the daemon's), a key says nothing of the next one: neither the index
// nor the key byte follows from it, keys stay unique, and stale keys still match nothing.
TEST(MrTableRandomKeys, KeysComeFromTheGivenBitsAndStayUnique) {
  LocalMemory mem;
  const std::uint64_t base = mem.allocate(4096);
  std::mt19937 rng(20261214);
  std::vector<std::uint32_t> drawn;
  MemoryRegionTable mrs(mem, [&] {
    // Every third draw repeats the previous index: the table must draw again.
    const std::uint32_t bits = drawn.size() % 3 == 2 ? drawn.back() ^ 0x5a : rng();
    drawn.push_back(bits);
    return bits;
  });
  std::set<std::uint32_t> indices;
  std::vector<MemoryRegion> live;
  for (int i = 0; i < 200; ++i) {
    const MemoryRegion& r = mrs.register_region(base, 64, access::kRemoteRead);
    EXPECT_EQ(r.lkey.value(), r.rkey.value());
    EXPECT_NE(r.rkey.value() >> 8, 0u);
    EXPECT_TRUE(indices.insert(r.rkey.value() >> 8).second) << "index reused while live";
    live.push_back(r);
  }
  // Consecutive registrations are not consecutive keys (rxe's pool index would be).
  int sequential = 0;
  for (std::size_t i = 1; i < live.size(); ++i)
    sequential += (live[i].rkey.value() >> 8) == (live[i - 1].rkey.value() >> 8) + 1 ? 1 : 0;
  EXPECT_LT(sequential, 3);
  for (const MemoryRegion& r : live)
    EXPECT_TRUE(mrs.check_remote(r.rkey, base, 8, access::kRemoteRead));
  // A key with the right index and another key byte is refused.
  const wire::Rkey wrong_byte(live[7].rkey.value() ^ 0x01);
  EXPECT_EQ(mrs.check_remote(wrong_byte, base, 8, access::kRemoteRead).error(),
            MemError::kInvalidKey);
  ASSERT_TRUE(mrs.deregister(live[3].lkey));
  EXPECT_EQ(mrs.check_remote(live[3].rkey, base, 8, access::kRemoteRead).error(),
            MemError::kInvalidKey);
  const MemoryRegion& again = mrs.register_region(base, 64, access::kRemoteRead);  // slot reused
  EXPECT_NE(again.rkey, live[3].rkey);
  EXPECT_EQ(mrs.check_remote(live[3].rkey, base, 8, access::kRemoteRead).error(),
            MemError::kInvalidKey);
  EXPECT_TRUE(mrs.check_remote(again.rkey, base, 8, access::kRemoteRead));
  EXPECT_EQ(mrs.check_remote(wire::Rkey(0), base, 8, access::kRemoteRead).error(),
            MemError::kInvalidKey);
}

}  // namespace
}  // namespace xroce::transport
