// libxroce-rdmav34.so: the rdma-core provider that makes an xroced device an ibverbs device.
//
// Private structs wrap the verbs structs, as rdma-core providers do. Verbs reach the daemon
// over the context's control connection (include/xroce/control.h); every verb the device
// cannot do yet stays libibverbs' dummy and fails with EOPNOTSUPP. Verbs return positive errno
// (or NULL with errno set); nothing throws across the C ABI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "daemon/control_client.h"
#include "xroce/provider_abi.h"

namespace xroce::provider {

struct Device {
  verbs_device vdev;           // must be first: libibverbs frees nothing of ours, but casts to it
  xroce_device_extension ext;  // right after vdev: libxroce-preload.so looks for it there
  char control_path[108];
};
static_assert(offsetof(Device, ext) == sizeof(verbs_device));

// What a context keeps beside the verbs_context that libibverbs allocates for us (calloc'd, so
// it holds only a pointer to this C++ object).
struct ContextState {
  std::mutex lock;  // serialises the control connection
  daemon::ControlClient control;
};

struct Context {
  verbs_context ibv_ctx;  // must be first
  ContextState* state;
};

struct Pd {
  ::ibv_pd pd;
};

struct Mr {
  ::verbs_mr vmr;
};

// ibv_context sits at the end of verbs_context ("grows up" fields come first): container_of.
inline Context* to_context(ibv_context* ctx) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(ctx) -
                                    offsetof(Context, ibv_ctx.context));
}

// A control call on the context's connection; errors that mean "the daemon is gone" come back
// as EIO, the errno of a device that has died under its users.
int call(ibv_context* ctx, control::Op op, const void* request, std::size_t request_len,
         void* reply, std::size_t reply_len, int pass_fd = -1);

// ibv_create_comp_channel for xroce contexts, reached through libxroce-preload.so.
ibv_comp_channel* create_comp_channel(ibv_context* ctx);

}  // namespace xroce::provider
