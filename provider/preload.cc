// libxroce-preload.so: the libibverbs entry points that bypass the provider, for xroce devices
// (docs/ARCHITECTURE.md decision 3; measurements and the choice in engine/daemon/README.md).
//
// `xroce exec` and `xroce env` put this library in LD_PRELOAD. It defines
// ibv_create_comp_channel, which the dynamic linker then binds ahead of libibverbs' own (an
// unversioned definition satisfies the application's IBVERBS_1.0 reference). For a context of
// an xroce device it asks the provider for a channel; for any other device it calls
// libibverbs' version, so other RDMA devices in the same process behave as without it.
//
// It is loaded into every program `xroce exec` starts, verbs user or not: what it interposes
// costs other calls an atomic load at most. The rdma_cm part (preload_cm.cc) uses the control
// protocol's client, and with it libstdc++.
#include <dlfcn.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

#include "xroce/provider_abi.h"

namespace {

using CreateCompChannel = ibv_comp_channel* (*)(ibv_context*);

const xroce_device_extension* xroce_extension(ibv_context* context) {
  if (context == nullptr || context->device == nullptr) return nullptr;
  // Every device libibverbs hands out is a verbs_device; ours carries the extension behind it.
  const auto* vdev = reinterpret_cast<const verbs_device*>(context->device);
  if (vdev->ops == nullptr || vdev->ops->name == nullptr ||
      std::strcmp(vdev->ops->name, "xroce") != 0) {
    return nullptr;
  }
  const auto* ext = reinterpret_cast<const xroce_device_extension*>(vdev + 1);
  return ext->magic == kXroceDeviceExtensionMagic ? ext : nullptr;
}

// Looked up on each call (channels are created rarely), which keeps this library free of
// C++ runtime needs such as guarded statics.
CreateCompChannel libibverbs_create_comp_channel() {
  return reinterpret_cast<CreateCompChannel>(
      dlvsym(RTLD_NEXT, "ibv_create_comp_channel", "IBVERBS_1.0"));
}

}  // namespace

extern "C" __attribute__((visibility("default"))) ibv_comp_channel* ibv_create_comp_channel(
    ibv_context* context) {
  if (const auto* ext = xroce_extension(context)) return ext->create_comp_channel(context);
  const CreateCompChannel next = libibverbs_create_comp_channel();
  if (next == nullptr) {
    errno = ENOSYS;
    return nullptr;
  }
  return next(context);
}
