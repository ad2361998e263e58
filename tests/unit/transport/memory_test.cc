// Registered memory: LocalMemory and the MR table's keys (reproducible or random), bounds and
// access checks; AccessTurn, what a worker's turn keeps of its lookups.
#include "transport/memory.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/eventually.h"

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

// The MR table's and the windows' tests run twice: looking every key up afresh, and with all of
// a test inside one worker's turn (AccessTurn), where a check reuses what the turn resolved a key
// to before, so that every change the test makes must reach the next check all the same.
std::string turn_name(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "InATurn" : "Afresh";
}

class MrTableTest : public ::testing::TestWithParam<bool> {
 protected:
  MrTableTest() {
    if (GetParam()) turn.emplace();
  }
  std::optional<AccessTurn> turn;
  LocalMemory mem;
  MemoryRegionTable mrs{mem};
  std::uint64_t base = mem.allocate(4096);
};

TEST_P(MrTableTest, LocalCheckEnforcesKeyBoundsAndLocalWrite) {
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

TEST_P(MrTableTest, RemoteCheckNeedsTheRemoteFlag) {
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

TEST_P(MrTableTest, DeregisteredAndInvalidatedKeysStopWorkingAndAreNotReused) {
  const MemoryRegion a = mrs.register_region(base, 64, access::kRemoteRead);
  ASSERT_EQ(mrs.deregister(a.lkey), 0);
  EXPECT_EQ(mrs.check_remote(a.rkey, base, 8, access::kRemoteRead).error(), MemError::kInvalidKey);
  EXPECT_EQ(mrs.deregister(a.lkey), EINVAL);
  const MemoryRegion b = mrs.register_region(base, 64, access::kRemoteRead);
  EXPECT_EQ(b.lkey.value() >> 8, a.lkey.value() >> 8);  // the slot is re-used...
  EXPECT_EQ(mrs.check_remote(a.rkey, base, 8, access::kRemoteRead).error(), MemError::kInvalidKey);
  // ...and a region registered with ibv_reg_mr cannot be invalidated (o10-37.2.26: only type 2
  // windows; rxe_invalidate_mr refuses user regions too).
  EXPECT_FALSE(mrs.invalidate(b.rkey));
  EXPECT_TRUE(mrs.check_remote(b.rkey, base, 8, access::kRemoteRead));
}

INSTANTIATE_TEST_SUITE_P(Turns, MrTableTest, ::testing::Bool(), turn_name);

// ibv_reg_mr_iova: requests name addresses from the iova on; the check hands back where the
// bytes are in the process.
TEST(MemoryRegionTable, IovaTranslatesToTheProcessAddress) {
  LocalMemory mem;
  MemoryRegionTable mrs(mem);
  const std::uint64_t base = mem.allocate(4096);
  const MemoryRegion mr = mrs.register_region(base, 4096, access::kLocalWrite | access::kRemoteRead,
                                              std::uint64_t{0x1000});
  EXPECT_EQ(mr.iova, 0x1000u);
  EXPECT_EQ(*mrs.check_remote(mr.rkey, 0x1010, 16, access::kRemoteRead), base + 0x10);
  EXPECT_EQ(*mrs.check_local(mr.lkey, 0x1FFF, 1, access::kLocalWrite), base + 0xFFF);
  EXPECT_EQ(mrs.check_remote(mr.rkey, base, 8, access::kRemoteRead).error(),
            MemError::kOutOfBounds);  // the process address is not a name the region answers to
  EXPECT_EQ(mrs.check_local(mr.lkey, 0x0FFF, 2, 0).error(), MemError::kOutOfBounds);
}

// ibv_rereg_mr: translation and access change in place under the same keys (rxe_rereg_user_mr):
// the keys now name the new range with the new rights, and nothing of the old range.
TEST(MemoryRegionTable, ReregisterChangesTranslationAndAccessUnderTheSameKeys) {
  LocalMemory mem;
  MemoryRegionTable mrs(mem);
  const std::uint64_t a = mem.allocate(256);
  const std::uint64_t b = mem.allocate(512);
  const MemoryRegion mr = mrs.register_region(a, 256, access::kLocalWrite | access::kRemoteWrite);
  auto moved = mrs.reregister(mr.lkey, {b, 512, b, access::kLocalWrite});
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->rkey, mr.rkey);
  EXPECT_EQ(moved->lkey, mr.lkey);
  EXPECT_EQ(mrs.check_local(mr.lkey, a, 1, 0).error(), MemError::kOutOfBounds);
  EXPECT_EQ(*mrs.check_local(moved->lkey, b + 500, 12, access::kLocalWrite), b + 500);
  EXPECT_EQ(mrs.check_remote(moved->rkey, b, 8, access::kRemoteWrite).error(),
            MemError::kAccessDenied);
  EXPECT_EQ(mrs.reregister(wire::Lkey(mr.lkey.value() ^ 0x1), {}).error(), EINVAL);
}

// A worker's turn that checked a key before an ibv_rereg_mr checks it after by the new rights and
// range, and one that checked it before ibv_dereg_mr finds it gone: the change moved the table's
// version, so what the turn kept is not used.
TEST(MemoryRegionTable, ATurnSeesReregistrationAndDeregistrationAtItsNextCheck) {
  LocalMemory mem;
  MemoryRegionTable mrs(mem);
  const std::uint64_t a = mem.allocate(256);
  const MemoryRegion mr = mrs.register_region(a, 256, access::kLocalWrite | access::kRemoteWrite);
  const AccessTurn turn;
  EXPECT_EQ(*mrs.check_remote(mr.rkey, a + 8, 8, access::kRemoteWrite), a + 8);
  EXPECT_EQ(*mrs.check_remote(mr.rkey, a + 16, 8, access::kRemoteWrite), a + 16);  // as kept
  ASSERT_TRUE(mrs.reregister(mr.lkey, {std::nullopt, 128, std::nullopt, access::kLocalWrite}));
  EXPECT_EQ(mrs.check_remote(mr.rkey, a + 8, 8, access::kRemoteWrite).error(),
            MemError::kAccessDenied);
  EXPECT_EQ(mrs.check_local(mr.lkey, a + 200, 8, 0).error(), MemError::kOutOfBounds);
  EXPECT_EQ(*mrs.check_local(mr.lkey, a + 120, 8, access::kLocalWrite), a + 120);
  ASSERT_EQ(mrs.deregister(mr.lkey), 0);
  EXPECT_EQ(mrs.check_local(mr.lkey, a + 120, 8, 0).error(), MemError::kInvalidKey);
}

// More keys in one turn than it keeps: every check still answers by the table, and a
// deregistration in the middle reaches the keys kept and the keys not kept alike.
TEST(MemoryRegionTable, ATurnCheckingManyKeysAnswersEachByTheTable) {
  LocalMemory mem;
  MemoryRegionTable mrs(mem);
  std::vector<MemoryRegion> regions;
  std::vector<std::uint64_t> bases;
  for (int i = 0; i < 20; ++i) {
    bases.push_back(mem.allocate(64));
    regions.push_back(mrs.register_region(bases.back(), 64, access::kRemoteRead));
  }
  const AccessTurn turn;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < regions.size(); ++i) {
      EXPECT_EQ(*mrs.check_remote(regions[i].rkey, bases[i] + 8, 8, access::kRemoteRead),
                bases[i] + 8);
      EXPECT_EQ(
          mrs.check_remote(regions[i].rkey, bases[(i + 1) % regions.size()], 8, access::kRemoteRead)
              .error(),
          MemError::kOutOfBounds);
    }
  }
  ASSERT_EQ(mrs.deregister(regions[19].lkey), 0);  // kept by the turn, the last checked
  ASSERT_EQ(mrs.deregister(regions[0].lkey), 0);   // not kept any more
  EXPECT_EQ(mrs.check_remote(regions[19].rkey, bases[19], 8, access::kRemoteRead).error(),
            MemError::kInvalidKey);
  EXPECT_EQ(mrs.check_remote(regions[0].rkey, bases[0], 8, access::kRemoteRead).error(),
            MemError::kInvalidKey);
  EXPECT_TRUE(mrs.check_remote(regions[18].rkey, bases[18], 8, access::kRemoteRead));
}

// A worker in a turn checks a key; the control thread deregisters it; the worker's next check in
// the same turn, made after it learned of the deregistration, refuses the key.
TEST(MemoryRegionTable, AnotherThreadsDeregistrationReachesATurnInProgress) {
  LocalMemory mem;
  MemoryRegionTable mrs(mem);
  const std::uint64_t a = mem.allocate(256);
  const MemoryRegion mr = mrs.register_region(a, 256, access::kRemoteRead);
  std::atomic<int> step{0};
  bool first_ok = false;
  MemError second = MemError::kOutOfBounds;
  std::thread worker([&] {
    const AccessTurn turn;
    first_ok = static_cast<bool>(mrs.check_remote(mr.rkey, a, 8, access::kRemoteRead));
    step = 1;
    if (!test::eventually([&] { return step.load() == 2; })) return;  // `second` stays wrong
    const auto r = mrs.check_remote(mr.rkey, a, 8, access::kRemoteRead);
    if (!r) second = r.error();
  });
  const bool checked = test::eventually([&] { return step.load() == 1; });
  EXPECT_TRUE(checked) << "the worker made no first check";
  EXPECT_EQ(mrs.deregister(mr.lkey), 0);
  step = 2;
  worker.join();
  EXPECT_TRUE(first_ok);
  EXPECT_EQ(second, MemError::kInvalidKey);
}

class MemoryWindowTest : public ::testing::TestWithParam<bool> {
 protected:
  MemoryWindowTest() {
    if (GetParam()) turn.emplace();
  }
  std::optional<AccessTurn> turn;
  static constexpr wire::Qpn kQp{0x42};
  static constexpr wire::Qpn kOtherQp{0x43};
  LocalMemory mem;
  MemoryRegionTable mrs{mem};
  std::uint64_t base = mem.allocate(4096);
  MemoryRegion mr =
      mrs.register_region(base, 4096, access::kLocalWrite | access::kRemoteWrite | access::kMwBind);

  WindowBind bind(wire::Rkey w, std::uint64_t va, std::uint64_t len, std::uint32_t acc) {
    return WindowBind{
        w, wire::Rkey((w.value() & ~0xFFu) | ((w.value() + 1) & 0xFF)), mr.lkey, va, len, acc};
  }
};

// C10-72/o10-37.2.30: a type 2 window binds once (Free -> Valid), only its QP reaches it, and
// accesses stay inside the window, not merely inside the region.
TEST_P(MemoryWindowTest, Type2BindsOnceAndAnswersOnlyItsQpWithinItsBounds) {
  const wire::Rkey w = *mrs.allocate_window(MwType::kType2);
  EXPECT_EQ(mrs.check_remote(w, base, 8, access::kRemoteWrite, kQp).error(),
            MemError::kInvalidKey);  // Free: nothing to reach
  const WindowBind b = bind(w, base + 256, 512, access::kRemoteWrite);
  ASSERT_TRUE(mrs.bind_window(b, kQp));
  EXPECT_FALSE(mrs.bind_window(bind(b.new_rkey, base, 64, access::kRemoteWrite), kQp));
  EXPECT_EQ(*mrs.check_remote(b.new_rkey, base + 256, 512, access::kRemoteWrite, kQp), base + 256);
  EXPECT_EQ(mrs.check_remote(w, base + 256, 8, access::kRemoteWrite, kQp).error(),
            MemError::kInvalidKey);  // the key byte moved on with the bind
  EXPECT_EQ(mrs.check_remote(b.new_rkey, base + 256, 8, access::kRemoteWrite, kOtherQp).error(),
            MemError::kInvalidKey);
  EXPECT_EQ(mrs.check_remote(b.new_rkey, base + 255, 8, access::kRemoteWrite, kQp).error(),
            MemError::kOutOfBounds);
  EXPECT_EQ(mrs.check_remote(b.new_rkey, base + 256, 8, access::kRemoteRead, kQp).error(),
            MemError::kAccessDenied);
  EXPECT_EQ(mrs.deregister(mr.lkey), EBUSY);  // rxe_dereg_mr: windows still bound
  // LOCAL_INV / SEND_WITH_INV: Valid -> Free, then it can be bound again.
  ASSERT_TRUE(mrs.invalidate(b.new_rkey));
  EXPECT_FALSE(mrs.invalidate(b.new_rkey));
  EXPECT_EQ(mrs.check_remote(b.new_rkey, base + 256, 8, access::kRemoteWrite, kQp).error(),
            MemError::kInvalidKey);
  EXPECT_TRUE(mrs.bind_window(bind(b.new_rkey, base, 64, access::kRemoteWrite), kOtherQp));
  EXPECT_EQ(mrs.deallocate_window(
                wire::Rkey((b.new_rkey.value() & ~0xFFu) | ((b.new_rkey.value() + 1) & 0xFF))),
            0);
  EXPECT_EQ(mrs.deregister(mr.lkey), 0);
}

// The bind rules of rxe_check_bind_mw: C10-73 (MW_BIND on the region), C10-74 (a writable
// window needs a locally writable region), C10-75 (inside the region), o10-36.2.2 (no zero-based
// type 1), o10-37.2.40 (no zero-length type 2).
TEST_P(MemoryWindowTest, BindRulesRefuseWhatTheSpecForbids) {
  const wire::Rkey w2 = *mrs.allocate_window(MwType::kType2);
  const wire::Rkey w1 = *mrs.allocate_window(MwType::kType1);
  EXPECT_FALSE(mrs.bind_window(bind(w2, base + 4000, 97, access::kRemoteWrite), kQp));  // C10-75
  EXPECT_FALSE(mrs.bind_window(bind(w2, base, 0, access::kRemoteWrite), kQp));
  EXPECT_FALSE(mrs.bind_window(bind(w1, base, 64, access::kRemoteWrite | access::kZeroBased), kQp));
  EXPECT_FALSE(mrs.bind_window(bind(w2, base, 64, access::kOnDemand), kQp));
  const MemoryRegion no_bind = mrs.register_region(base, 64, access::kLocalWrite);
  WindowBind b = bind(w2, base, 64, access::kRemoteRead);
  b.region = no_bind.lkey;
  EXPECT_FALSE(mrs.bind_window(b, kQp));  // C10-73
  const MemoryRegion ro = mrs.register_region(base, 64, access::kMwBind);
  b = bind(w2, base, 64, access::kRemoteWrite);
  b.region = ro.lkey;
  EXPECT_FALSE(mrs.bind_window(b, kQp));  // C10-74
  b.access = access::kRemoteRead;
  EXPECT_TRUE(mrs.bind_window(b, kQp));
}

// Type 1 windows: bound and re-bound by ibv_bind_mw, unbound by a zero-length bind, reachable
// from any QP of the PD, never invalidated by LOCAL_INV / SEND_WITH_INV (o10-37.2.26).
TEST_P(MemoryWindowTest, Type1RebindsAndUnbindsButIsNeverInvalidated) {
  const wire::Rkey w = *mrs.allocate_window(MwType::kType1);
  const WindowBind b = bind(w, base, 128, access::kRemoteWrite);
  ASSERT_TRUE(mrs.bind_window(b, kQp));
  EXPECT_TRUE(mrs.check_remote(b.new_rkey, base + 64, 64, access::kRemoteWrite, kOtherQp));
  EXPECT_FALSE(mrs.invalidate(b.new_rkey));
  const WindowBind again = bind(b.new_rkey, base + 128, 128, access::kRemoteWrite);
  ASSERT_TRUE(mrs.bind_window(again, kQp));
  EXPECT_EQ(mrs.check_remote(again.new_rkey, base, 8, access::kRemoteWrite, kQp).error(),
            MemError::kOutOfBounds);
  const WindowBind off = bind(again.new_rkey, 0, 0, 0);
  ASSERT_TRUE(mrs.bind_window(off, kQp));
  EXPECT_EQ(mrs.check_remote(off.new_rkey, base + 128, 8, access::kRemoteWrite, kQp).error(),
            MemError::kInvalidKey);
  EXPECT_EQ(mrs.deregister(mr.lkey), 0);  // an unbound window holds nothing
}

// IBV_ACCESS_ZERO_BASED: remote VAs are offsets from the window's start.
TEST_P(MemoryWindowTest, ZeroBasedWindowTakesOffsets) {
  const wire::Rkey w = *mrs.allocate_window(MwType::kType2);
  const WindowBind b = bind(w, base + 1024, 256, access::kRemoteWrite | access::kZeroBased);
  ASSERT_TRUE(mrs.bind_window(b, kQp));
  EXPECT_EQ(*mrs.check_remote(b.new_rkey, 0, 256, access::kRemoteWrite, kQp), base + 1024);
  EXPECT_EQ(*mrs.check_remote(b.new_rkey, 255, 1, access::kRemoteWrite, kQp), base + 1279);
  EXPECT_EQ(mrs.check_remote(b.new_rkey, 200, 57, access::kRemoteWrite, kQp).error(),
            MemError::kOutOfBounds);
  EXPECT_EQ(mrs.check_remote(b.new_rkey, base + 1024, 8, access::kRemoteWrite, kQp).error(),
            MemError::kOutOfBounds);
}

TEST_P(MemoryWindowTest, WindowTypesAndKeysAreChecked) {
  EXPECT_EQ(mrs.allocate_window(static_cast<MwType>(3)).error(), EINVAL);
  const wire::Rkey w = *mrs.allocate_window(MwType::kType2);
  EXPECT_FALSE(mrs.check_remote(w, base, 8, 0, kQp));
  EXPECT_EQ(mrs.deallocate_window(wire::Rkey(w.value() + 0x100)), EINVAL);  // no such window
  EXPECT_EQ(mrs.deallocate_window(wire::Rkey(w.value() ^ 0x1)), 0);         // any key byte of it
  EXPECT_FALSE(mrs.check_remote(w, base, 8, 0, kQp));
  EXPECT_EQ(mrs.deallocate_window(w), EINVAL);
  const wire::Rkey again = *mrs.allocate_window(MwType::kType2);
  EXPECT_NE(again, w);  // the slot is re-used under a different key byte
}

// With random key bits (the daemon's), a key says nothing of the next one: neither the index
// nor the key byte follows from it, keys stay unique, and stale keys still match nothing.
INSTANTIATE_TEST_SUITE_P(Turns, MemoryWindowTest, ::testing::Bool(), turn_name);

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
    const MemoryRegion r = mrs.register_region(base, 64, access::kRemoteRead);
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
  ASSERT_EQ(mrs.deregister(live[3].lkey), 0);
  EXPECT_EQ(mrs.check_remote(live[3].rkey, base, 8, access::kRemoteRead).error(),
            MemError::kInvalidKey);
  const MemoryRegion again = mrs.register_region(base, 64, access::kRemoteRead);  // slot reused
  EXPECT_NE(again.rkey, live[3].rkey);
  EXPECT_EQ(mrs.check_remote(live[3].rkey, base, 8, access::kRemoteRead).error(),
            MemError::kInvalidKey);
  EXPECT_TRUE(mrs.check_remote(again.rkey, base, 8, access::kRemoteRead));
  EXPECT_EQ(mrs.check_remote(wire::Rkey(0), base, 8, access::kRemoteRead).error(),
            MemError::kInvalidKey);
}

// A window's R_Key is as unguessable as a region's: a random index no region or other window
// uses, which its binds keep while the low 8 bits become the key byte the consumer chose
// (ibv_inc_rkey); a deallocated window's keys match nothing, whatever the slot holds next.
TEST(MrTableRandomKeys, WindowKeysAreRandomAndKeepTheConsumersKeyByte) {
  LocalMemory mem;
  const std::uint64_t base = mem.allocate(4096);
  std::mt19937 rng(20261202);
  MemoryRegionTable mrs(mem, [&] { return static_cast<std::uint32_t>(rng()); });
  const MemoryRegion mr =
      mrs.register_region(base, 4096, access::kLocalWrite | access::kRemoteWrite | access::kMwBind);
  std::set<std::uint32_t> indices{mr.rkey.value() >> 8};
  std::vector<wire::Rkey> windows;
  for (int i = 0; i < 64; ++i) {
    const wire::Rkey w = *mrs.allocate_window(i % 2 == 0 ? MwType::kType2 : MwType::kType1);
    EXPECT_NE(w.value() >> 8, 0u);
    EXPECT_TRUE(indices.insert(w.value() >> 8).second) << "index shared with another key";
    windows.push_back(w);
  }
  int sequential = 0;
  for (std::size_t i = 1; i < windows.size(); ++i)
    sequential += (windows[i].value() >> 8) == (windows[i - 1].value() >> 8) + 1 ? 1 : 0;
  EXPECT_LT(sequential, 3);

  constexpr wire::Qpn kQp{0x42};
  const wire::Rkey w = windows[0];
  const wire::Rkey bound((w.value() & ~0xFFu) | 0xA5);  // the consumer's key byte
  ASSERT_TRUE(mrs.bind_window(WindowBind{w, bound, mr.lkey, base, 64, access::kRemoteWrite}, kQp));
  EXPECT_EQ(*mrs.check_remote(bound, base + 8, 8, access::kRemoteWrite, kQp), base + 8);
  EXPECT_EQ(mrs.check_remote(wire::Rkey(bound.value() ^ 0x100), base, 8, access::kRemoteWrite, kQp)
                .error(),
            MemError::kInvalidKey);  // a neighbouring index is no key at all
  ASSERT_TRUE(mrs.invalidate(bound));
  ASSERT_EQ(mrs.deallocate_window(bound), 0);
  const wire::Rkey next = *mrs.allocate_window(MwType::kType2);  // takes the freed slot
  EXPECT_NE(next.value() >> 8, bound.value() >> 8);
  EXPECT_FALSE(mrs.find_window(bound));
  EXPECT_EQ(mrs.deallocate_window(bound), EINVAL);
  EXPECT_TRUE(mrs.find_window(next));
}

// --- AccessTurn ---------------------------------------------------------------------------

TEST(AccessTurn, KeepsNothingOutsideATurn) {
  const std::uint64_t keeper = AccessTurn::new_keeper();
  auto value = std::make_shared<int>(7);
  EXPECT_FALSE(AccessTurn::open());
  AccessTurn::keep(keeper, 1, value);
  EXPECT_EQ(AccessTurn::kept(keeper, 1), nullptr);
  EXPECT_EQ(value.use_count(), 1);
}

TEST(AccessTurn, KeepsAValueAtItsVersionUntilTheOutermostTurnCloses) {
  const std::uint64_t keeper = AccessTurn::new_keeper();
  std::weak_ptr<int> watch;
  {
    const AccessTurn turn;
    EXPECT_TRUE(AccessTurn::open());
    auto value = std::make_shared<int>(7);
    watch = value;
    AccessTurn::keep(keeper, 3, std::move(value));
    {
      const AccessTurn inner;  // nested: closing it lets nothing go
      const auto* kept = AccessTurn::kept(keeper, 3);
      ASSERT_NE(kept, nullptr);
      EXPECT_EQ(*static_cast<const int*>(kept->get()), 7);
    }
    EXPECT_FALSE(watch.expired());
    ASSERT_NE(AccessTurn::kept(keeper, 3), nullptr);
    // Another version of the same keeper finds nothing: the keeper changed since.
    EXPECT_EQ(AccessTurn::kept(keeper, 4), nullptr);
    // Keeping a newer version replaces the old one, which is let go at once.
    auto newer = std::make_shared<int>(8);
    std::weak_ptr<int> watch_newer = newer;
    AccessTurn::keep(keeper, 4, std::move(newer));
    EXPECT_TRUE(watch.expired());
    EXPECT_EQ(AccessTurn::kept(keeper, 3), nullptr);
    watch = watch_newer;
    EXPECT_FALSE(watch.expired());
  }
  EXPECT_FALSE(AccessTurn::open());
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(AccessTurn::kept(keeper, 4), nullptr);
}

TEST(AccessTurn, OneKeeperMoreThanATurnHoldsReplacesTheOldestAndOtherThreadsSeeNothing) {
  std::vector<std::uint64_t> keepers;
  for (std::size_t i = 0; i <= AccessTurn::kKept; ++i)
    keepers.push_back(AccessTurn::new_keeper());
  const AccessTurn turn;
  for (std::size_t i = 0; i < keepers.size(); ++i)
    AccessTurn::keep(keepers[i], 1, std::make_shared<std::size_t>(i));
  EXPECT_EQ(AccessTurn::kept(keepers[0], 1), nullptr);  // the oldest made room
  for (std::size_t i = 1; i < keepers.size(); ++i) {
    const auto* kept = AccessTurn::kept(keepers[i], 1);
    ASSERT_NE(kept, nullptr) << i;
    EXPECT_EQ(*static_cast<const std::size_t*>(kept->get()), i);
  }
  // A turn belongs to its thread.
  bool other_open = true;
  const std::shared_ptr<const void>* other_kept = AccessTurn::kept(keepers[1], 1);
  std::thread([&] {
    other_open = AccessTurn::open();
    other_kept = AccessTurn::kept(keepers[1], 1);
  }).join();
  EXPECT_FALSE(other_open);
  EXPECT_EQ(other_kept, nullptr);
}

}  // namespace
}  // namespace xroce::transport
