#include "daemon/control_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/core.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace xroce::daemon {

namespace {

void add_to_epoll(int epoll_fd, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
}

// Receives one datagram and at most one passed descriptor.
ssize_t receive_message(int fd, std::vector<char>& buf, int& passed_fd) {
  passed_fd = -1;
  iovec iov{buf.data(), buf.size()};
  alignas(cmsghdr) char control_buf[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control_buf;
  msg.msg_controllen = sizeof(control_buf);
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      std::memcpy(&passed_fd, CMSG_DATA(c), sizeof(int));
    }
  }
  return n;
}

}  // namespace

ControlServer::ControlServer(RunPaths paths) : paths_(std::move(paths)), tree_(paths_.sysfs_root) {}

ControlServer::~ControlServer() {
  shutdown();
}

int ControlServer::start() {
  lock_fd_ = lock_run_dir(paths_);
  if (lock_fd_ < 0) return -lock_fd_;
  owns_run_dir_ = true;
  reclaim_stale_run_dirs(paths_);
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(lock_fd_, 0) != 0 || write(lock_fd_, pid.data(), pid.size()) < 0) return errno;

  tree_.clear_stale();
  if (const int err = tree_.write_rdma_cm(paths_.control_socket)) return err;
  reclaim_stale_device_nodes();
  unlink(paths_.control_socket.c_str());
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return errno;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (paths_.control_socket.size() >= sizeof(addr.sun_path)) return ENAMETOOLONG;
  std::strcpy(addr.sun_path, paths_.control_socket.c_str());
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return errno;
  // Any local user may open a device, as with /dev/infiniband/uverbs*; link add/del check root.
  chmod(paths_.control_socket.c_str(), 0666);
  if (listen(listen_fd_, 64) != 0) return errno;

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signal_fd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (signal_fd_ < 0 || epoll_fd_ < 0) return errno;
  add_to_epoll(epoll_fd_, listen_fd_);
  add_to_epoll(epoll_fd_, signal_fd_);
  add_to_epoll(epoll_fd_, cm_.wake_fd());
  if (netlink_.fd() >= 0) add_to_epoll(epoll_fd_, netlink_.fd());
  return 0;
}

int ControlServer::run() {
  epoll_event events[32];
  while (!stop_) {
    int timeout_ms = devices_.empty() ? -1 : kCounterRefreshMs;
    if (const int cm_ms = cm_.next_timeout_ms(); cm_ms >= 0)
      timeout_ms = timeout_ms < 0 ? cm_ms : std::min(timeout_ms, cm_ms);
    const int n = epoll_wait(epoll_fd_, events, 32, timeout_ms);
    if (n < 0 && errno != EINTR) return 1;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        accept_client();
      } else if (fd == signal_fd_) {
        stop_ = true;
      } else if (fd == netlink_.fd()) {
        if (netlink_.drain()) refresh_netdevs();
      } else if (clients_.count(fd) != 0) {
        serve_client(fd);
      }
    }
    cm_.run_pending();  // QP1 MADs the workers handed over, and the CM's timers
    if (served_any_ && devices_.empty()) stop_ = true;
    refresh_hw_counters();
  }
  shutdown();
  return 0;
}

void ControlServer::accept_client() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      close(fd);
      continue;
    }
    Client client;
    client.id = next_client_++;
    client.pid = cred.pid;
    client.uid = cred.uid;
    clients_.emplace(fd, client);
    add_to_epoll(epoll_fd_, fd);
  }
}

void ControlServer::serve_client(int fd) {
  std::vector<char> buf(control::kMaxMessageBytes);
  int passed_fd = -1;
  const ssize_t n = receive_message(fd, buf, passed_fd);
  if (n <= 0) {
    if (passed_fd >= 0) close(passed_fd);
    drop_client(fd);
    return;
  }
  control::Header header;
  if (static_cast<std::size_t>(n) < sizeof(header)) {
    drop_client(fd);
    return;
  }
  std::memcpy(&header, buf.data(), sizeof(header));
  Reply reply;
  if (header.magic != control::kMagic || header.version != control::kVersion) {
    reply.status = EPROTO;
  } else {
    const std::string body(buf.data() + sizeof(header),
                           static_cast<std::size_t>(n) - sizeof(header));
    reply = dispatch(clients_.at(fd), header.op, body, passed_fd);
  }
  header.status = reply.status;
  std::string out(reinterpret_cast<const char*>(&header), sizeof(header));
  if (reply.status == 0) out += reply.body;
  send_reply(fd, out, reply.status == 0 ? reply.fds : std::vector<int>{});
}

// One datagram, with the reply's descriptors (still owned by their objects: the kernel gives
// the client its own copies).
void ControlServer::send_reply(int fd, const std::string& out, const std::vector<int>& fds) {
  iovec iov{const_cast<char*>(out.data()), out.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control_buf[CMSG_SPACE(sizeof(int) * control::kMaxReplyFds)] = {};
  if (!fds.empty() && fds.size() <= static_cast<std::size_t>(control::kMaxReplyFds)) {
    msg.msg_control = control_buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cmsg), fds.data(), sizeof(int) * fds.size());
  }
  sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void ControlServer::drop_client(int fd) {
  auto it = clients_.find(fd);
  if (it != clients_.end()) {
    cm_.close_file(it->second.id);       // its cm ids go as the kernel's on close: DREQs, REJs
    release_shared_regions(it->second);  // while the PDs still hold the process's memory
    if (auto* dev = device_of(it->second)) dev->release_client(it->second.id);
    if (it->second.event_fd >= 0) close(it->second.event_fd);
    for (const auto& [handle, channel_fd] : it->second.channels)
      close(channel_fd);
    clients_.erase(it);
  }
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
}

device::Device* ControlServer::device_of(const Client& client) {
  auto it = devices_.find(client.device);
  return it == devices_.end() ? nullptr : it->second.model.get();
}

ControlServer::Reply ControlServer::dispatch(Client& client, control::Op op,
                                             const std::string& body, int passed_fd) {
  if (op == control::Op::cm_open || op == control::Op::cm_command || op == control::Op::cm_show)
    return cm_op(client, op, body, passed_fd);
  if (op == control::Op::hello) return hello(client, body, passed_fd);
  if (op == control::Op::create_comp_channel) return create_comp_channel(client, passed_fd);
  if (op == control::Op::reg_mr) return reg_mr(client, body, passed_fd);
  if (op == control::Op::open_xrcd) return open_xrcd(client, body, passed_fd);
  if (passed_fd >= 0) close(passed_fd);
  switch (op) {
    case control::Op::query_device:
      return query_device(client);
    case control::Op::query_port:
      return query_port(client, body);
    case control::Op::alloc_pd:
      return alloc_pd(client);
    case control::Op::dealloc_pd:
      return dealloc_pd(client, body);
    case control::Op::dereg_mr:
      return dereg_mr(client, body);
    case control::Op::link_add:
      return link_add(client, body);
    case control::Op::link_del:
      return link_del(client, body);
    case control::Op::link_show:
      return link_show();
    case control::Op::stat:
      return stat(body);
    case control::Op::qp_show:
      return qp_show(body);
    case control::Op::cc_show:
      return cc_show(body);
    case control::Op::cc_set:
      return cc_set(client, body);
    case control::Op::cc_profile:
      return cc_profile(client, body);
    case control::Op::create_cq:
      return create_cq(client, body);
    case control::Op::destroy_cq:
      return destroy_cq(client, body);
    case control::Op::resize_cq:
      return resize_cq(client, body);
    case control::Op::create_qp:
      return create_qp(client, body);
    case control::Op::modify_qp:
      return modify_qp(client, body);
    case control::Op::query_qp:
      return query_qp(client, body);
    case control::Op::destroy_qp:
      return destroy_qp(client, body);
    case control::Op::create_srq:
      return create_srq(client, body);
    case control::Op::modify_srq:
      return modify_srq(client, body);
    case control::Op::query_srq:
      return query_srq(client, body);
    case control::Op::destroy_srq:
      return destroy_srq(client, body);
    case control::Op::create_ah:
      return create_ah(client, body);
    case control::Op::destroy_ah:
      return destroy_ah(client, body);
    case control::Op::alloc_mw:
      return alloc_mw(client, body);
    case control::Op::dealloc_mw:
      return dealloc_mw(client, body);
    case control::Op::rereg_mr:
      return rereg_mr(client, body);
    case control::Op::close_xrcd:
      return close_xrcd(client, body);
    case control::Op::open_qp:
      return open_qp(client, body);
    case control::Op::resize_srq:
      return resize_srq(client, body);
    case control::Op::advise_mr:
      return advise_mr(client, body);
    default:
      return {EOPNOTSUPP, {}};
  }
}

void ControlServer::refresh_netdevs() {
  for (auto& [name, served] : devices_) {
    auto& dev = *served.model;
    const uint32_t old_state = device::port_state(dev.netdev());
    auto state = read_netdev(dev.netdev().name);
    device::NetdevState now = dev.netdev();
    if (state) {
      now = *state;
    } else {
      now.up = now.carrier = false;  // the netdev is gone
    }
    const bool port_changed = dev.update_netdev(now);
    const bool gids_changed =
        dev.update_addresses(state ? read_addresses(now.name) : std::vector<device::IpAddress>{});
    if (!port_changed && !gids_changed) continue;
    // New addresses are steered to our sockets from now on, removed ones no longer.
    if (gids_changed && served.runner) served.runner->datapath().set_local_ips(local_ips_of(dev));
    tree_.write_port(dev);
    const uint32_t new_state = device::port_state(now);
    if (new_state != old_state) {
      send_event(name, 1,
                 new_state == device::kPortActive ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR);
    }
    if (gids_changed) send_event(name, 1, IBV_EVENT_GID_CHANGE);
  }
}

void ControlServer::send_event(const std::string& device, uint64_t element, uint32_t event_type) {
  control::AsyncEvent event{element, event_type};
  for (const auto& [fd, client] : clients_) {
    if (client.device == device && client.event_fd >= 0) {
      send(client.event_fd, &event, sizeof(event), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
}

void ControlServer::shutdown() {
  // Clients learn that the device is gone (IBV_EVENT_DEVICE_FATAL), then see their
  // connections close: every later verb fails instead of waiting.
  for (const auto& [name, served] : devices_)
    send_event(name, 0, IBV_EVENT_DEVICE_FATAL);
  while (!clients_.empty())
    drop_client(clients_.begin()->first);
  for (const auto& [name, served] : devices_) {
    cm_.remove_device(name);
    tree_.remove_device(name, served.uverbs);
    remove_device_node(served.uverbs);
  }
  devices_.clear();
  for (int* fd : {&listen_fd_, &signal_fd_, &epoll_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  if (owns_run_dir_) {
    owns_run_dir_ = false;
    remove_run_dir(paths_);
  }
  if (lock_fd_ >= 0) close(lock_fd_);
  lock_fd_ = -1;
}

}  // namespace xroce::daemon
