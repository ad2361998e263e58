// The RDMA devices of this host (network namespace) as verbs programs see them, for both sides
// of `xroce validate`: this namespace's xroce devices (seen with `xroce env`'s variables) and
// any other verbs device (rxe, an RNIC) libibverbs finds on its own.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "app_env.h"
#include "validate_core.h"

namespace xroce::cli::validate {

struct LocalDevices {
  std::vector<VerbsDevice> devices;
  std::set<std::string> xroce;  // the names among them that are xroce devices
};

// Reads `ibv_devinfo -v` once as it is and once with `xroce env`'s variables (when this
// namespace has xroce devices), merged by name.
LocalDevices find_local_devices();
// The environment a verbs program needs for `device`: `xroce env`'s for an xroce device,
// nothing for another.
Environment environment_for(const LocalDevices& local, const std::string& device);
const VerbsDevice* find_device(const LocalDevices& local, const std::string& name);

}  // namespace xroce::cli::validate
