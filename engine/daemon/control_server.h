// xroced's control plane: the loop that serves the control socket (include/xroce/control.h),
// the signals and the netlink events, over the devices it serves (control_devices.h) and the
// sessions of its clients (control_session.h). Each request goes through the ops table
// (control_ops.h).
//
// Threading: one thread runs run(); every member is touched only from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/control_devices.h"
#include "daemon/control_ops.h"
#include "daemon/control_session.h"
#include "daemon/lifetime.h"
#include "daemon/netdev.h"
#include "xroce/run_dir.h"

namespace xroce::daemon {

class ControlServer {
 public:
  ControlServer(control::RunPaths paths, Lifetime lifetime);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Takes the namespace's lock (EEXIST if another daemon holds it), clears what a dead daemon
  // left, and listens. 0 or errno.
  int start();
  // Serves until SIGTERM/SIGINT, until the last device is deleted, or, on demand, until
  // nothing is left to serve (Lifetime). Returns the exit status.
  int run();

 private:
  // How often the loop wakes while anything is served: counters, exited clients.
  static constexpr int kTickMs = Devices::kCounterRefreshMs;

  void accept_sessions();
  // Whether an on-demand daemon is done (LifetimeRule::done) now, with what it serves.
  bool done_on_demand();
  void serve(Session& session);
  Reply answer(Session& session, ReceivedMessage& message, const control::Header& header,
               std::span<const std::byte> datagram);
  void send_reply(Session& session, const control::Header& request, Reply reply);
  void drop(Session& session);
  // Drops the sessions marked closing, those whose opener exited, and those whose context's
  // image is gone (exec).
  void sweep_sessions();
  // Whether the process image a session's context was opened for still runs (true for a
  // session without a context).
  bool image_alive(const Session& session);
  void send_event(const DeviceEvent& event);
  void shutdown();

  control::RunPaths paths_;
  LifetimeRule lifetime_;
  Devices devices_;
  Sessions sessions_;
  NetlinkWatcher netlink_;
  Fd lock_;
  bool owns_run_dir_ = false;  // we hold the lock: the run directory is ours to clean
  Fd listener_;
  Fd epoll_;
  Fd signals_;
  bool stop_ = false;
  std::vector<std::byte> receive_buffer_;
};

}  // namespace xroce::daemon
