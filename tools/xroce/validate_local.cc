#include "validate_local.h"

#include <algorithm>
#include <chrono>

#include "subprocess.h"
#include "telemetry.h"

namespace xroce::cli::validate {

namespace {

constexpr auto kDevinfoDeadline = std::chrono::seconds(20);

}  // namespace

LocalDevices find_local_devices() {
  LocalDevices local;
  TelemetryClient daemon;
  std::string error;
  if (auto links = daemon.links(error)) {
    for (const auto& l : *links)
      local.xroce.insert(l.value("ifname", ""));
  }
  const auto plain = run_program({"ibv_devinfo", "-v"}, {}, kDevinfoDeadline);
  local.devices = parse_ibv_devinfo(plain.output);
  if (local.xroce.empty()) return local;
  const auto with_env = run_program({"ibv_devinfo", "-v"}, app_environment(), kDevinfoDeadline);
  for (auto& d : parse_ibv_devinfo(with_env.output)) {
    if (!local.xroce.count(d.name)) continue;
    std::erase_if(local.devices, [&](const VerbsDevice& old) { return old.name == d.name; });
    local.devices.push_back(std::move(d));
  }
  return local;
}

Environment environment_for(const LocalDevices& local, const std::string& device) {
  return local.xroce.count(device) ? app_environment() : Environment{};
}

const VerbsDevice* find_device(const LocalDevices& local, const std::string& name) {
  for (const auto& d : local.devices)
    if (d.name == name) return &d;
  return nullptr;
}

}  // namespace xroce::cli::validate
