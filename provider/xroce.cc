#include "provider/xroce.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "provider/device_death.h"
#include "provider/queues.h"
#include "provider/verbs.h"

namespace xroce::provider {

namespace {

// How long a verb waits for a daemon that is alive but does not answer.
constexpr int kControlTimeoutMs = 10000;

// The loader matches us by device name (we have no kernel driver id or modalias):
// rdma_device:N<ibdev>; every xroce device is named by the user, so match any name and let
// match_device check that the device really is one of ours.
const verbs_match_ent kMatchTable[] = {
    {nullptr, {"rdma_device:*N*"}, 0, 0, XROCE_VERBS_MATCH_MODALIAS},
    {nullptr, {nullptr}, 0, 0, XROCE_VERBS_MATCH_SENTINEL},
};

bool read_control_path(const char* ibdev_path, char* out, std::size_t size) {
  char path[IBV_SYSFS_PATH_MAX + 32];
  std::snprintf(path, sizeof(path), "%s/%s", ibdev_path, control::kControlPathFile);
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  const bool ok = std::fgets(out, static_cast<int>(size), f) != nullptr;
  std::fclose(f);
  if (!ok) return false;
  out[std::strcspn(out, "\n")] = '\0';
  return out[0] == '/';
}

// A device is ours when its sysfs directory names an xroce control socket.
bool match_device(verbs_sysfs_dev* sysfs_dev) {
  char control_path[108];
  return read_control_path(sysfs_dev->ibdev_path, control_path, sizeof(control_path));
}

verbs_device* alloc_device(verbs_sysfs_dev* sysfs_dev) {
  auto* dev = new (std::nothrow) Device{};
  if (dev == nullptr) return nullptr;
  if (!read_control_path(sysfs_dev->ibdev_path, dev->control_path, sizeof(dev->control_path))) {
    delete dev;
    return nullptr;
  }
  dev->ext.magic = kXroceDeviceExtensionMagic;
  dev->ext.create_comp_channel = create_comp_channel;
  return &dev->vdev;
}

void uninit_device(verbs_device* vdev) {
  delete reinterpret_cast<Device*>(vdev);
}

// A context is a connection to the daemon on which we say hello with the context's event
// socket and our own /proc/self/mem and /proc/self/maps: the daemon reaches the memory we
// register only through them, with our own rights, and only while this program image runs.
int connect_context(Context* ctx, Device* dev) {
  ctx->state = new (std::nothrow) ContextState;
  if (ctx->state == nullptr) return ENOMEM;
  if (int err = ctx->state->control.connect(dev->control_path, kControlTimeoutMs)) {
    return err == ENOENT || err == ECONNREFUSED ? ENODEV : err;
  }
  int events[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, events) != 0) return errno;
  Fd app_end(events[0]);
  Fd daemon_end(events[1]);
  Fd mem(open("/proc/self/mem", O_RDWR | O_CLOEXEC));
  Fd maps(open("/proc/self/maps", O_RDONLY | O_CLOEXEC));
  if (!mem.valid() || !maps.valid()) return errno;
  control::HelloRequest hello{};
  std::snprintf(hello.ibdev, sizeof(hello.ibdev), "%s", dev->vdev.device.name);
  control::HelloReply reply{};
  const int passed[] = {daemon_end.get(), mem.get(), maps.get()};
  Fd received[2];  // the doorbell, the page of ready bits
  if (int err = ctx->state->control.call_fds(control::Op::hello, &hello, sizeof(hello), &reply,
                                             sizeof(reply), received, passed)) {
    return err;
  }
  ctx->state->doorbell = std::move(received[0]);
  if (int err = ctx->state->page.map(received[1].release(), sizeof(queues::ContextPage))) {
    return err;
  }
  // ibv_get_async_event() reads struct ib_uverbs_async_event_desc records from async_fd; the
  // daemon writes exactly those (control::AsyncEvent), and so do we when it dies.
  ctx->ibv_ctx.context.async_fd = app_end.release();
  ctx->state->event_writer = std::move(daemon_end);
  return start_death_watch(ctx);
}

verbs_context* alloc_context(ibv_device* ibdev, int cmd_fd, void* private_data) {
  (void)private_data;
  auto* ctx = static_cast<Context*>(
      abi::init_and_alloc_context(ibdev, cmd_fd, sizeof(Context), offsetof(Context, ibv_ctx)));
  if (ctx == nullptr) return nullptr;
  // cmd_fd stays libibverbs': the daemon's c 1:7 node (/dev/full), on which the commands
  // libibverbs sends by itself fail cleanly (engine/daemon/sysfs_tree.cc). Verbs go to the
  // daemon over the control connection instead.
  (void)cmd_fd;
  const int err = connect_context(ctx, reinterpret_cast<Device*>(ibdev));
  if (err != 0) {
    delete ctx->state;
    verbs_uninit_context(&ctx->ibv_ctx);
    std::free(ctx);
    errno = err;
    return nullptr;
  }
  // One completion vector, as rxe: apps pass comp_vector 0 and check it is below this.
  ctx->ibv_ctx.context.num_comp_vectors = 1;
  verbs_set_ops(&ctx->ibv_ctx, &kContextOps);
  return &ctx->ibv_ctx;
}

const verbs_device_ops kDeviceOps = {
    .name = "xroce",
    .match_min_abi_version = 0,
    .match_max_abi_version = 0xffffffff,
    .match_table = kMatchTable,
    .static_providers = nullptr,
    .match_device = match_device,
    .alloc_context = alloc_context,
    .import_context = nullptr,
    .alloc_device = alloc_device,
    .uninit_device = uninit_device,
};

__attribute__((constructor)) void register_driver() {
  verbs_register_driver_34(&kDeviceOps);
}

}  // namespace

void free_context(ibv_context* ibctx) {
  Context* ctx = to_context(ibctx);
  stop_death_watch(ctx->state);
  delete ctx->state;  // closes the control connection: the daemon releases what we held
  verbs_uninit_context(&ctx->ibv_ctx);
  std::free(ctx);
}

namespace {

// Verbs that give an object back: on a dead device the object is gone already.
bool releases(control::Op op) {
  switch (op) {
    case control::Op::dealloc_pd:
    case control::Op::dereg_mr:
    case control::Op::destroy_cq:
    case control::Op::destroy_qp:
    case control::Op::destroy_srq:
    case control::Op::destroy_ah:
      return true;
    default:
      return false;
  }
}

}  // namespace

int call(ibv_context* ctx, control::Op op, const void* request, std::size_t request_len,
         void* reply, std::size_t reply_len, int pass_fd) {
  ContextState* state = to_context(ctx)->state;
  // A device that died released everything (device_death.h).
  if (state->dead.load() && releases(op)) return 0;
  std::lock_guard guard(state->lock);
  const int err = pass_fd >= 0 ? state->control.call(op, request, request_len, reply, reply_len,
                                                     std::span(&pass_fd, 1))
                               : state->control.call(op, request, request_len, reply, reply_len);
  return err == ETIMEDOUT ? EIO : err;
}

int call_fds(ibv_context* ctx, control::Op op, const void* request, std::size_t request_len,
             void* reply, std::size_t reply_len, std::span<Fd> fds) {
  ContextState* state = to_context(ctx)->state;
  std::lock_guard guard(state->lock);
  const int err = state->control.call_fds(op, request, request_len, reply, reply_len, fds);
  return err == ETIMEDOUT ? EIO : err;
}

int context_doorbell(ibv_context* ctx) {
  return to_context(ctx)->state->doorbell.get();
}

queues::ContextPage* context_page(ibv_context* ctx) {
  return static_cast<queues::ContextPage*>(to_context(ctx)->state->page.base);
}

uint32_t channel_handle(ibv_comp_channel* channel) {
  ContextState* state = to_context(channel->context)->state;
  std::lock_guard guard(state->lock);
  auto it = state->channels.find(channel);
  return it == state->channels.end() ? 0 : it->second.handle;
}

// The channel's fd is one end of a socketpair made here, in the application, as the kernel
// would make it in the application's fd table; the daemon gets the other end and will write
// control::CompletionEvent records on it, which ibv_get_cq_event() reads unchanged.
ibv_comp_channel* create_comp_channel(ibv_context* ctx) {
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) return nullptr;
  control::HandleReply reply{};
  const int err =
      call(ctx, control::Op::create_comp_channel, nullptr, 0, &reply, sizeof(reply), ends[1]);
  // Kept, to announce flush completions should the device die (device_death.h).
  Fd daemon_end(ends[1]);
  // libibverbs frees the channel with free() in ibv_destroy_comp_channel.
  auto* channel = static_cast<ibv_comp_channel*>(std::calloc(1, sizeof(ibv_comp_channel)));
  if (err != 0 || channel == nullptr) {
    close(ends[0]);
    std::free(channel);
    errno = err != 0 ? err : ENOMEM;
    return nullptr;
  }
  channel->context = ctx;
  channel->fd = ends[0];
  channel->refcnt = 0;
  {
    ContextState* state = to_context(ctx)->state;
    std::lock_guard guard(state->lock);
    state->channels[channel] = ContextState::Channel{reply.handle, std::move(daemon_end)};
  }
  return channel;
}

}  // namespace xroce::provider
