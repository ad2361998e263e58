#include "daemon/control_server.h"

#include <malloc.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "xroce/control_message.h"

namespace xroce::daemon {

namespace {

// What an epoll event is about: the high half says which kind, the low half which descriptor.
enum class Watch : uint32_t {
  kConnection = 0,
  kOpenerExit = 1,
  kListener,
  kSignals,
  kNetlink,
  kCm,  // the rdma_cm service's wake eventfd (QP1 MADs the workers handed over)
};

uint64_t tag(Watch kind, int fd) {
  return uint64_t{static_cast<uint32_t>(kind)} << 32 | static_cast<uint32_t>(fd);
}

void watch(int epoll_fd, int fd, uint64_t data) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = data;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
}

}  // namespace

ControlServer::ControlServer(control::RunPaths paths, Lifetime lifetime)
    : paths_(std::move(paths)),
      lifetime_(lifetime, LifetimeRule::Clock::now()),
      devices_(paths_),
      receive_buffer_(control::kMaxMessageBytes) {}

ControlServer::~ControlServer() {
  shutdown();
}

int ControlServer::start() {
  const int lock = control::lock_run_dir(paths_);
  if (lock < 0) return -lock;
  lock_.reset(lock);
  owns_run_dir_ = true;
  control::reclaim_stale_run_dirs(paths_);
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(lock_.get(), 0) != 0 || write(lock_.get(), pid.data(), pid.size()) < 0) {
    return errno;
  }

  devices_.tree().clear_stale();
  if (const int err = devices_.tree().write_rdma_cm(paths_.control_socket)) return err;
  reclaim_stale_device_nodes();
  unlink(paths_.control_socket.c_str());
  listener_.reset(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener_.valid()) return errno;
  if (int err = prepare_listening_socket(listener_.get())) return err;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (paths_.control_socket.size() >= sizeof(addr.sun_path)) return ENAMETOOLONG;
  std::strcpy(addr.sun_path, paths_.control_socket.c_str());
  if (bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return errno;
  // Any local user may open a device, as with /dev/infiniband/uverbs*; link add/del check root.
  chmod(paths_.control_socket.c_str(), 0666);
  if (listen(listener_.get(), 64) != 0) return errno;

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signals_.reset(signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!signals_.valid() || !epoll_.valid()) return errno;
  watch(epoll_.get(), listener_.get(), tag(Watch::kListener, listener_.get()));
  watch(epoll_.get(), signals_.get(), tag(Watch::kSignals, signals_.get()));
  if (netlink_.fd() >= 0) watch(epoll_.get(), netlink_.fd(), tag(Watch::kNetlink, netlink_.fd()));
  const int cm_fd = devices_.cm().wake_fd();
  watch(epoll_.get(), cm_fd, tag(Watch::kCm, cm_fd));
  return 0;
}

int ControlServer::run() {
  epoll_event events[32];
  while (!stop_) {
    const bool idle = devices_.empty() && sessions_.by_connection().empty();
    int timeout_ms = idle ? lifetime_.wait_ms(LifetimeRule::Clock::now()) : kTickMs;
    if (const int cm_ms = devices_.cm().next_timeout_ms(); cm_ms >= 0)
      timeout_ms = timeout_ms < 0 ? cm_ms : std::min(timeout_ms, cm_ms);
    const int n = epoll_wait(epoll_.get(), events, 32, timeout_ms);
    if (n < 0 && errno != EINTR) return 1;
    for (int i = 0; i < n; ++i) {
      const auto kind = static_cast<Watch>(events[i].data.u64 >> 32);
      const int fd = static_cast<int>(events[i].data.u64 & 0xffffffffu);
      switch (kind) {
        case Watch::kListener:
          accept_sessions();
          break;
        case Watch::kSignals:
          stop_ = true;
          break;
        case Watch::kNetlink:
          if (netlink_.drain()) {
            for (const DeviceEvent& event : devices_.refresh_netdevs())
              send_event(event);
          }
          break;
        case Watch::kConnection:
          if (Session* session = sessions_.find_by_connection(fd)) serve(*session);
          break;
        case Watch::kOpenerExit:
          if (Session* session = sessions_.find_by_connection(fd)) session->closing = true;
          break;
        case Watch::kCm:
          break;  // run_pending below
      }
    }
    devices_.cm().run_pending();  // QP1 MADs the workers handed over, and the CM's timers
    sweep_sessions();
    if (devices_.served_any() && devices_.empty()) stop_ = true;
    if (!stop_ && done_on_demand()) {
      accept_sessions();  // one that connected since epoll_wait is served, not cut off
      stop_ = done_on_demand();
    }
    devices_.refresh_hw_counters();
  }
  shutdown();
  return 0;
}

bool ControlServer::done_on_demand() {
  const bool serving = !devices_.empty() || !sessions_.by_connection().empty();
  return lifetime_.done(serving, LifetimeRule::Clock::now());
}

void ControlServer::accept_sessions() {
  for (;;) {
    Fd connection(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!connection.valid()) return;
    const int fd = connection.get();
    Session* session = sessions_.add(std::move(connection));
    if (session == nullptr) continue;  // over quota, or already gone: closed
    lifetime_.client_came();
    watch(epoll_.get(), fd, tag(Watch::kConnection, fd));
    watch(epoll_.get(), session->peer.pidfd(), tag(Watch::kOpenerExit, fd));
  }
}

void ControlServer::serve(Session& session) {
  ReceivedMessage message;  // owns every descriptor that came with the datagram
  const int err = receive_message(session.connection.get(), receive_buffer_, message);
  if (err == EAGAIN) return;
  if (err != 0 || message.closed) {
    drop(session);
    return;
  }
  const auto datagram = std::span<const std::byte>(receive_buffer_.data(), message.bytes);
  if (datagram.size() < sizeof(control::Header)) {
    drop(session);  // not even a header to answer to
    return;
  }
  control::Header header;
  std::memcpy(&header, datagram.data(), sizeof header);
  send_reply(session, header, answer(session, message, header, datagram));
}

Reply ControlServer::answer(Session& session, ReceivedMessage& message,
                            const control::Header& header, std::span<const std::byte> datagram) {
  if (!control::decode_header(datagram) || message.truncated) return Reply::error(EPROTO);
  // Only the process that opened the connection, and for a context only while its image (the
  // address space it registered memory in) is the one that runs.
  if (!session.peer.sent_by_opener(message.sender)) return Reply::error(EPERM);
  if (!image_alive(session)) {
    session.closing = true;  // the image it was opened for is gone: so is the connection
    return Reply::error(EPERM);
  }
  OpContext ctx{devices_, sessions_, session, *message.sender, message, control::body_of(datagram)};
  return dispatch(ctx, header.op);
}

// One datagram, with the reply's descriptors (closed here once sent: the client has its own
// copies and the daemon keeps what it needs elsewhere). A text reply goes in pages.
void ControlServer::send_reply(Session& session, const control::Header& request, Reply reply) {
  if (reply.status == 0 && reply.text) {
    reply.status = start_text(sessions_, session, std::move(*reply.text));
    if (reply.status == 0) reply.body = take_text_page(session);
  }
  const bool ok = reply.status == 0;
  const std::string out = control::encode_message(request.op, request.seq, reply.status,
                                                  ok ? reply.body : std::string());
  std::vector<int> fds;
  if (ok) {
    for (const Fd& fd : reply.fds)
      fds.push_back(fd.get());
  }
  (void)send_message(session.connection.get(), std::as_bytes(std::span(out)), fds, MSG_DONTWAIT);
}

void ControlServer::drop(Session& session) {
  const bool had_context = session.has_context();
  devices_.cm().close_file(session.id);  // its cm ids go as the kernel's on close: DREQs, REJs
  release_context(devices_, session);
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, session.peer.pidfd(), nullptr);
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, session.connection.get(), nullptr);
  sessions_.remove(session.connection.get());
  // A context may have held thousands of objects: give their memory back to the system, so a
  // client that floods the device leaves the daemon's RSS as it found it.
  if (had_context) malloc_trim(0);
}

void ControlServer::sweep_sessions() {
  std::vector<Session*> going;
  for (auto& [fd, session] : sessions_.by_connection()) {
    // The opener exited, or the image its context was opened for went (exec): what it
    // registered can no longer be reached, and nothing more may be asked on its behalf.
    if (!session->closing && (session->peer.exited() || !image_alive(*session))) {
      session->closing = true;
    }
    if (session->closing) going.push_back(session.get());
  }
  for (Session* session : going)
    drop(*session);
}

bool ControlServer::image_alive(const Session& session) {
  ServedDevice* served = devices_.find(session.device);
  if (served == nullptr) return true;  // no context: no image to outlive
  const auto memory = served->memory->find(session.id);
  return memory != nullptr && memory->check_alive();
}

void ControlServer::send_event(const DeviceEvent& event) {
  control::AsyncEvent record{event.element, event.event_type};
  for (const auto& [fd, session] : sessions_.by_connection()) {
    if (session->device == event.device && session->event_socket.valid()) {
      (void)send_message(session->event_socket.get(), bytes_of_object(record), {}, MSG_DONTWAIT);
    }
  }
}

// Every context sees its connection close: its provider reports IBV_EVENT_DEVICE_FATAL and
// flushes the outstanding work, and every later verb fails instead of waiting.
void ControlServer::shutdown() {
  while (!sessions_.by_connection().empty())
    drop(*sessions_.by_connection().begin()->second);
  devices_.remove_all();
  listener_.reset();
  signals_.reset();
  epoll_.reset();
  if (owns_run_dir_) {
    owns_run_dir_ = false;
    control::remove_run_dir(paths_);
  }
  lock_.reset();
}

}  // namespace xroce::daemon
