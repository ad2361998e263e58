// What the preload library's interposed libc functions share: reaching libc's own definition,
// and the sysfs tree the daemon keeps for its devices.
#pragma once

#include <dlfcn.h>

#include <atomic>
#include <string>

namespace xroce::preload {

// libc's definition of an interposed function, looked up once per slot (dlsym costs
// microseconds; some interposed functions run on every write() and close() of the process).
// Two threads racing on the first call both find the same function. Slots must be
// constant-initialised: interposed functions may run before any constructor.
template <typename Fn>
Fn libc(std::atomic<void*>& slot, const char* name) {
  void* fn = slot.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = dlsym(RTLD_NEXT, name);
    slot.store(fn, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(fn);
}

// $SYSFS_PATH + the part of `path` after "/sys", for a path under /sys/class/infiniband (and
// infiniband_verbs) while SYSFS_PATH names another tree; "" otherwise. The caller tries this
// path first and the program's own when the tree lacks it, so a host's real RDMA devices stay
// visible beside xroce's.
std::string sysfs_tree_path(const char* path);

}  // namespace xroce::preload
