// Finding, starting and reaching the xroced of the current network namespace, for the CLI.
#pragma once

#include <sys/types.h>

#include <string>

#include "xroce/control.h"
#include "xroce/control_client.h"
#include "xroce/run_dir.h"

namespace xroce::cli {

// Directory holding the running xroce executable.
std::string self_dir();
// Connects to this namespace's daemon; if none runs and start_if_missing, starts one and
// waits (up to a deadline) until it serves. A daemon still on its way out (its last device was
// just deleted) is waited for first, so the new one starts with a run directory of its own.
// 0 or errno; `error` gets a human explanation. `started` (if given) gets the pid of the daemon
// this call started, else 0.
int connect_daemon(control::ControlClient& client, bool start_if_missing, std::string& error,
                   pid_t* started = nullptr);
// Asks this namespace's daemon to add the device `request` describes, starting the daemon if
// none runs. When the add fails and this call started the daemon, that daemon exits (an
// on-demand daemon with nothing to serve, engine/daemon/control_server.h), and this waits until
// it has: a failed add leaves no daemon behind, and the next add starts a new one. 0 or errno:
// `reached` false when no daemon could be reached (`error` says why), else the errno is the
// daemon's answer to the add. `client` stays connected after a successful add.
int add_device(control::ControlClient& client, const control::LinkAddRequest& request,
               bool& reached, std::string& error);

// The pid in the namespace's lock file (the running daemon's, or one that is exiting), or 0.
pid_t daemon_pid(const control::RunPaths& paths);
// Waits until process `pid` has exited, up to `deadline_ms`; true once it is gone (or was).
bool wait_process_gone(pid_t pid, int deadline_ms);

// Puts the CPU list `list` (link add's `cpus`, up's `--cpus`) in `request`, written back as
// Linux writes lists; "" when done, else why not: not a list, or a CPU this process may not
// run on (the daemon it starts inherits its CPUs).
std::string set_worker_cpus(const std::string& list, control::LinkAddRequest& request);

}  // namespace xroce::cli
