// Opening a verbs device by name, as the probe programs of the e2e tests (verbs_probe,
// attack_probe) do.
#pragma once

#include <infiniband/verbs.h>

#include <cstring>

namespace xroce::e2e {

// A context on the device called `name`, or nullptr (no such device, or ibv_open_device
// failed: errno says why).
inline ibv_context* open_device_named(const char* name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return nullptr;
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n && ctx == nullptr; ++i) {
    if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) ctx = ibv_open_device(list[i]);
  }
  ibv_free_device_list(list);
  return ctx;
}

}  // namespace xroce::e2e
