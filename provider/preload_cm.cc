// libxroce-preload.so, rdma_cm part: serves librdmacm's kernel interface (the rdma_cm
// character device, drivers/infiniband/core/ucma.c's ABI) for the xroce daemon of this network
// namespace, so unmodified librdmacm (rdma-core 44) works. The choice and its measurements are
// in engine/daemon/README.md ("rdma_cm").
//
// librdmacm opens /dev/infiniband/rdma_cm (util/open_cdev.c: open(O_RDWR|O_CLOEXEC), then
// fstat() must say "character device"), issues every command as a write() of struct
// rdma_ucm_cmd_hdr + input whose results the kernel copies to the command's `response` pointer
// before write() returns, blocks in the GET_EVENT write() unless the fd is O_NONBLOCK, and
// lets applications poll()/epoll the fd for events. Here:
//   open    -> an eventfd (the channel's fd) and a control connection to the daemon that holds
//              the other reference to the eventfd (Op::cm_open); the daemon keeps the eventfd
//              readable exactly while the channel has events, so poll and epoll work unchanged;
//   fstat   -> as the eventfd, but a character device;
//   write   -> Op::cm_command with the command bytes; the reply is copied to `response`.
//              GET_EVENT on a blocking channel waits in poll() on the eventfd and asks again;
//   close   -> closes the control connection: the daemon destroys the channel's ids as the
//              kernel does when the file is released (DREQ, REJ), as it does when the process
//              dies.
// Only a path whose $SYSFS_PATH/class/misc/rdma_cm/xroce_control exists is taken over (the
// tree `xroce env`/`exec` point at); anything else goes to libc unchanged, and so does every
// other fd: the cost for them is one atomic load per write() and close().
//
// The same open() also serves files under /sys/class/infiniband from the daemon's tree (see
// preload_sysfs.cc, which does the same for stat, opendir and readlink).
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_user_cm.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "preload_libc.h"
#include "xroce/control.h"
#include "xroce/control_client.h"

namespace {

using xroce::preload::libc;
using xroce::preload::sysfs_tree_path;

constexpr const char* kRdmaCmPath = "/dev/infiniband/rdma_cm";
constexpr int kMaxChannels = 256;
constexpr int kControlTimeoutMs = 30'000;

struct Channel {
  std::atomic<int> fd{-1};
  std::mutex lock;  // serialises this channel's commands on its control connection
  xroce::control::ControlClient* control = nullptr;
  std::uint32_t file = 0;  // the daemon's name for the channel (MIGRATE_ID)
  // Which open of this slot a command was issued on: a write() that began before its channel
  // was closed must not go on with the next channel that takes the slot.
  std::atomic<std::uint64_t> generation{0};
};

// A call on a channel closed since the write() began.
constexpr int kReleased = -1;

// Constant-initialised: interposed functions may run before any constructor.
Channel g_channels[kMaxChannels];
std::atomic<int> g_open_channels{0};
std::mutex g_table_lock;  // taking and releasing slots

std::atomic<void*> g_libc_open{nullptr}, g_libc_open64{nullptr}, g_libc_close{nullptr},
    g_libc_write{nullptr}, g_libc_fstat{nullptr}, g_libc_fstat64{nullptr};

using OpenFn = int (*)(const char*, int, ...);
using CloseFn = int (*)(int);
using WriteFn = ssize_t (*)(int, const void*, size_t);
using FstatFn = int (*)(int, struct stat*);

Channel* channel_of(int fd) {
  if (fd < 0 || g_open_channels.load(std::memory_order_acquire) == 0) return nullptr;
  for (auto& c : g_channels) {
    if (c.fd.load(std::memory_order_acquire) == fd) return &c;
  }
  return nullptr;
}

// The daemon's control socket, if this environment's sysfs tree has an xroce rdma_cm.
std::string control_socket_path() {
  const char* sysfs = std::getenv("SYSFS_PATH");
  std::ifstream in(std::string(sysfs != nullptr ? sysfs : "/sys") + "/class/misc/rdma_cm/" +
                   xroce::control::kControlPathFile);
  std::string path;
  std::getline(in, path);
  return path;
}

int open_channel(int flags) {
  const std::string socket = control_socket_path();
  auto* control = new xroce::control::ControlClient();
  if (socket.empty() || control->connect(socket, kControlTimeoutMs) != 0) {
    delete control;
    errno = ENODEV;
    return -1;
  }
  const int efd = eventfd(0, ((flags & O_CLOEXEC) != 0 ? EFD_CLOEXEC : 0) |
                                 ((flags & O_NONBLOCK) != 0 ? EFD_NONBLOCK : 0));
  if (efd < 0) {
    delete control;
    return -1;
  }
  xroce::control::HandleReply reply{};
  if (int err = control->call(xroce::control::Op::cm_open, nullptr, 0, &reply, sizeof reply,
                              std::span(&efd, 1))) {
    delete control;
    libc<CloseFn>(g_libc_close, "close")(efd);
    errno = err == EIO ? ENODEV : err;
    return -1;
  }
  std::lock_guard<std::mutex> guard(g_table_lock);
  for (auto& c : g_channels) {
    if (c.fd.load() != -1) continue;
    c.control = control;
    c.file = reply.handle;
    c.generation.fetch_add(1, std::memory_order_acq_rel);
    c.fd.store(efd, std::memory_order_release);
    g_open_channels.fetch_add(1);
    return efd;
  }
  delete control;
  libc<CloseFn>(g_libc_close, "close")(efd);
  errno = EMFILE;
  return -1;
}

void release_channel(Channel& c) {
  std::lock_guard<std::mutex> guard(g_table_lock);
  std::lock_guard<std::mutex> command(c.lock);
  delete c.control;  // the daemon releases the channel's ids
  c.control = nullptr;
  c.fd.store(-1, std::memory_order_release);
  g_open_channels.fetch_sub(1);
}

// The command's `response` pointer: the first field of every command that has one, except
// CREATE_ID's (after the uid).
void* response_pointer(std::uint32_t cmd, const std::vector<char>& body) {
  const std::size_t at = cmd == RDMA_USER_CM_CMD_CREATE_ID
                             ? offsetof(rdma_ucm_create_id, response)
                             : offsetof(rdma_ucm_destroy_id, response);
  std::uint64_t p = 0;
  if (body.size() < sizeof(rdma_ucm_cmd_hdr) + at + sizeof p) return nullptr;
  std::memcpy(&p, body.data() + sizeof(rdma_ucm_cmd_hdr) + at, sizeof p);
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p));
}

// One command on the open `generation` of the channel: 0, an errno, or kReleased.
int call(Channel& c, std::uint64_t generation, const std::vector<char>& body,
         std::vector<char>& reply) {
  std::lock_guard<std::mutex> guard(c.lock);
  if (c.control == nullptr || c.generation.load(std::memory_order_acquire) != generation) {
    return kReleased;
  }
  std::fill(reply.begin(), reply.end(), 0);
  const int err = c.control->call(xroce::control::Op::cm_command, body.data(), body.size(),
                                  reply.data(), reply.size());
  return err == EIO ? ENODEV : err;
}

// What a thread blocked in GET_EVENT sees when another thread closes the channel: the kernel's
// write() holds the file, so close() neither wakes nor fails it and it waits for an event that
// never comes, until the process exits (rping's CM thread is in GET_EVENT when main destroys
// the channel and returns). Returning an error instead made such a program fail at its end.
[[noreturn]] void wait_for_process_exit() {
  for (;;)
    pause();
}

ssize_t serve_write(int fd, Channel& c, const void* buf, size_t count) {
  const std::uint64_t generation = c.generation.load(std::memory_order_acquire);
  rdma_ucm_cmd_hdr hdr;
  if (count < sizeof hdr) {
    errno = EINVAL;
    return -1;
  }
  std::memcpy(&hdr, buf, sizeof hdr);
  if (count < sizeof hdr + hdr.in) {
    errno = EINVAL;
    return -1;
  }
  const char* bytes = static_cast<const char*>(buf);
  std::vector<char> body(bytes, bytes + sizeof hdr + hdr.in);
  if (hdr.cmd == RDMA_USER_CM_CMD_SET_OPTION && hdr.in >= sizeof(rdma_ucm_set_option)) {
    rdma_ucm_set_option opt;
    std::memcpy(&opt, body.data() + sizeof hdr, sizeof opt);
    const auto* value = reinterpret_cast<const char*>(static_cast<std::uintptr_t>(opt.optval));
    if (opt.optlen > 0 && value == nullptr) {
      errno = EFAULT;
      return -1;
    }
    body.insert(body.end(), value, value + opt.optlen);
  }
  if (hdr.cmd == RDMA_USER_CM_CMD_MIGRATE_ID && hdr.in >= sizeof(rdma_ucm_migrate_id)) {
    rdma_ucm_migrate_id m;
    std::memcpy(&m, body.data() + sizeof hdr, sizeof m);
    const Channel* from = channel_of(static_cast<int>(m.fd));
    if (from == nullptr) {
      errno = EBADF;
      return -1;
    }
    m.fd = from->file;
    std::memcpy(body.data() + sizeof hdr, &m, sizeof m);
  }
  std::vector<char> reply(hdr.out);
  int err;
  const bool get_event = hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT;
  const bool blocking = (fcntl(fd, F_GETFL) & O_NONBLOCK) == 0;
  for (;;) {
    err = call(c, generation, body, reply);
    if (err == kReleased) {
      if (get_event && blocking) wait_for_process_exit();
      err = EBADF;
      break;
    }
    if (err != EAGAIN || !get_event || !blocking) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
  }
  if (err != 0) {
    errno = err;
    return -1;
  }
  if (hdr.out > 0) {
    void* response = response_pointer(hdr.cmd, body);
    if (response != nullptr) std::memcpy(response, reply.data(), reply.size());
  }
  return static_cast<ssize_t>(count);
}

int open_common(const char* path, int flags, mode_t mode, std::atomic<void*>& slot,
                const char* real) {
  if (path != nullptr && std::strcmp(path, kRdmaCmPath) == 0 && !control_socket_path().empty())
    return open_channel(flags);
  const auto open_fn = libc<OpenFn>(slot, real);
  // Reading only: the tree is the daemon's record of its devices, not the program's to change.
  const bool reading = (flags & O_ACCMODE) == O_RDONLY && (flags & O_CREAT) == 0;
  if (const std::string tree = reading ? sysfs_tree_path(path) : std::string(); !tree.empty()) {
    const int saved = errno;
    const int fd = open_fn(tree.c_str(), flags, mode);
    if (fd >= 0) return fd;
    errno = saved;
  }
  return open_fn(path, flags, mode);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if ((flags & (O_CREAT | O_TMPFILE)) != 0) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return open_common(path, flags, mode, g_libc_open, "open");
}

__attribute__((visibility("default"))) int open64(const char* path, int flags, ...) {
  mode_t mode = 0;
  if ((flags & (O_CREAT | O_TMPFILE)) != 0) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return open_common(path, flags, mode, g_libc_open64, "open64");
}

__attribute__((visibility("default"))) int fstat(int fd, struct stat* st) {
  const int r = libc<FstatFn>(g_libc_fstat, "fstat")(fd, st);
  if (r == 0 && channel_of(fd) != nullptr) st->st_mode = S_IFCHR | 0666;
  return r;
}

__attribute__((visibility("default"))) int fstat64(int fd, struct stat64* st) {
  using Fstat64Fn = int (*)(int, struct stat64*);
  const int r = libc<Fstat64Fn>(g_libc_fstat64, "fstat64")(fd, st);
  if (r == 0 && channel_of(fd) != nullptr) st->st_mode = S_IFCHR | 0666;
  return r;
}

__attribute__((visibility("default"))) ssize_t write(int fd, const void* buf, size_t count) {
  if (Channel* c = channel_of(fd)) return serve_write(fd, *c, buf, count);
  return libc<WriteFn>(g_libc_write, "write")(fd, buf, count);
}

__attribute__((visibility("default"))) int close(int fd) {
  if (Channel* c = channel_of(fd)) release_channel(*c);
  return libc<CloseFn>(g_libc_close, "close")(fd);
}

}  // extern "C"
