// `xroce validate --serve` (validate_serve.cc).
#pragma once

#include <string>

#include "validate_channel.h"

namespace xroce::cli::validate {

struct ServeArgs {
  std::string listen;  // "" = every address (IPv6 dual-stack)
  int port = kDefaultServePort;
};

int run_serve(const ServeArgs& args);

}  // namespace xroce::cli::validate
