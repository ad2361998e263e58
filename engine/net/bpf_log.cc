#include "net/bpf_log.h"

#include <bpf/libbpf.h>
#include <xdp/libxdp.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace xroce::net {
namespace {

thread_local std::string t_messages;

bool debug_enabled() {
  const char* v = std::getenv("XROCE_BPF_DEBUG");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

// Formats one library message (without its trailing newline); keeps warnings for the caller's
// summary and prints every level only in debug mode.
int keep(const char* library, bool warning, const char* format, va_list args) {
  char text[512];
  std::vsnprintf(text, sizeof(text), format, args);
  std::string_view said(text);
  while (!said.empty() && (said.back() == '\n' || said.back() == ' '))
    said.remove_suffix(1);
  // libbpf starts its messages with its own name.
  const std::string_view name(library);
  if (said.starts_with(name) && said.substr(name.size()).starts_with(": ")) {
    said.remove_prefix(name.size() + 2);
  }
  if (said.empty()) return 0;
  if (warning) {
    if (!t_messages.empty()) t_messages += "; ";
    t_messages.append(name).append(": ").append(said);
  }
  if (debug_enabled()) {
    std::fprintf(stderr, "xroce: %s: %.*s\n", library, static_cast<int>(said.size()), said.data());
  }
  return 0;
}

int libbpf_print(enum libbpf_print_level level, const char* format, va_list args) {
  return keep("libbpf", level == LIBBPF_WARN, format, args);
}

int libxdp_print(enum libxdp_print_level level, const char* format, va_list args) {
  return keep("libxdp", level == LIBXDP_WARN, format, args);
}

}  // namespace

void route_bpf_library_output() {
  static std::once_flag once;
  std::call_once(once, [] {
    libbpf_set_print(libbpf_print);
    libxdp_set_print(libxdp_print);
  });
}

std::string take_bpf_library_messages() {
  std::string out;
  out.swap(t_messages);
  return out;
}

void log_line(std::string_view line) {
  std::fprintf(stderr, "xroce: %.*s\n", static_cast<int>(line.size()), line.data());
}

}  // namespace xroce::net
