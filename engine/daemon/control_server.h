// xroced's control plane: the loop that serves the control socket (include/xroce/control.h),
// the signals and the netlink events, over the devices it serves (control_devices.h) and the
// sessions of its clients (control_session.h). Each request goes through the ops table
// (control_ops.h).
//
// Threading: one thread runs run(); every member is touched only from it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "daemon/control_devices.h"
#include "daemon/control_ops.h"
#include "daemon/control_session.h"
#include "daemon/netdev.h"
#include "xroce/run_dir.h"

namespace xroce::daemon {

// How long a daemon runs.
enum class Lifetime {
  // Until SIGTERM/SIGINT, or until its last device is deleted: xroced run by hand or by
  // systemd (packaging/systemd/xroced.service).
  kService,
  // Started by `xroce link add` or `xroce up` to serve their request: as kService, and also
  // once it has served no device and no client for kUnusedGraceMs after a client came (the add
  // that started it failed), or when none came within kFirstClientMs (its launcher died). A
  // failed add so leaves no daemon behind, in a namespace that may be deleted next.
  kOnDemand,
};

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

  // How long an on-demand daemon waits for the client that started it: the launcher connects
  // as soon as it reads "ok", so this only ends a daemon whose launcher died first.
  static constexpr int kFirstClientMs = 15000;
  // How long an on-demand daemon stays with nothing to serve once a client came: the launcher
  // that read "ok" may be about to connect while another client comes and goes.
  static constexpr int kUnusedGraceMs = 100;

 private:
  // How often the loop wakes while anything is served: counters, exited clients.
  static constexpr int kTickMs = Devices::kCounterRefreshMs;

  void accept_sessions();
  // Whether an on-demand daemon is done (Lifetime::kOnDemand): no device and no client, for
  // kUnusedGraceMs since a client came, or since it started until kFirstClientMs if none came.
  bool done_on_demand();
  // epoll_wait's timeout while nothing is served: until done_on_demand() may become true, or
  // -1 (a service, or clients still to come and go).
  int on_demand_wait_ms() const;
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
  Lifetime lifetime_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  bool had_client_ = false;  // a session was accepted, whatever became of it
  std::optional<std::chrono::steady_clock::time_point> unused_since_;
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
