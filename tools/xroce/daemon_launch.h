// Finding, starting and reaching the xroced of the current network namespace, for the CLI.
#pragma once

#include <string>

#include "xroce/control_client.h"
#include "xroce/run_dir.h"

namespace xroce::cli {

// Directory holding the running xroce executable.
std::string self_dir();
// Connects to this namespace's daemon; if none runs and start_if_missing, starts one and
// waits (up to a deadline) until it serves. 0 or errno; `error` gets a human explanation.
int connect_daemon(control::ControlClient& client, bool start_if_missing, std::string& error);

}  // namespace xroce::cli
