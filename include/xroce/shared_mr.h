// The provider's half of the shared-mapping DMA path (docs/ARCHITECTURE.md decision 5; the daemon's
// half is engine/device/dma.h): re-back a registered buffer with a memfd so the daemon can map
// the same pages. In the shared library because the DMA benchmark plays a client with it too.
//
// provider/verbs.cc's reg_mr calls it before asking the daemon to register the region:
//
//   int memfd = xroce::control::share_region(addr, length);
//   if (memfd >= 0) { send it with the request (SCM_RIGHTS), then close(memfd); }
//   else            { register anyway: the daemon uses cross-memory attach for the region }
//
// and, when the daemon did not map it (reply MrDma::kCrossMemory, or an error), or from
// dereg_mr after the daemon has forgotten a region that was shared:
//
//   xroce::control::unshare_region(addr, length, memfd_inode);
//
// What share_region does: checks that [addr, addr + length) is page-aligned, whole pages, and
// lies entirely in private anonymous read-write mappings (malloc'ed / mmap'ed memory, not files,
// not the stack, not already shared); creates a memfd of that size, sealed against shrinking and
// growing; copies the current contents into it; and maps it MAP_SHARED | MAP_FIXED over the
// range, so the application's pointer stays valid and now reaches the memfd's pages.
//
// Limits, inherent to re-backing from user space (documented, not hidden):
//   - Stores another thread of the application makes into the range between the copy and the
//     remap are lost. Registering a buffer other threads are writing at that instant is racy.
//   - After fork(), the child shares the pages with the parent instead of copying them on write
//     (ibv_fork_init's MADV_DONTFORK semantics are not reproduced).
//   - Re-registering an already shared range returns -ENOTSUP (the range is no
//     longer anonymous); the second region then uses cross-memory attach, which still reaches
//     the same pages.
//
// No exceptions, no allocation beyond reading /proc/self/maps; safe to call from the provider.
#pragma once

#include <cstddef>

namespace xroce::control {

// Returns a memfd (O_CLOEXEC) now backing the range, or a negative errno: -EINVAL (not
// page-aligned / empty), -ENOTSUP (not private anonymous read-write memory), or the errno of a
// failed system call (the range is then left as it was).
int share_region(void* addr, std::size_t length);

// Puts private anonymous pages with the same contents back under a range share_region re-backed
// (so the memfd's pages are freed and a later registration can share the range again). 0 or a
// negative errno: -ENOENT, leaving the range alone, when it is no longer wholly mapped by
// share_region's memfd (of inode `inode`, the memfd's st_ino, when not 0) — the application
// unmapped or re-mapped it meanwhile.
int unshare_region(void* addr, std::size_t length, unsigned long inode = 0);

}  // namespace xroce::control
