// Where libbpf's and libxdp's messages go. Left alone, both print every fallback they try to
// stderr: on a host that refuses the libxdp dispatcher (freplace programs) every attach prints
// libbpf's "permission error while running as root; try raising 'ulimit -l'" and libxdp's
// fallback to single-program mode, though the attach then works. xroce takes both libraries'
// output: the messages of an attach are kept on the calling thread, so the code that attaches
// can say in its own single line which mode it chose and why, and they are printed only when
// XROCE_BPF_DEBUG is set (to anything but empty or "0").
//
// Threading: route_bpf_library_output() may be called from any thread, any number of times;
// the messages are kept per thread.
#pragma once

#include <string>
#include <string_view>

namespace xroce::net {

// Installs xroce's print functions in libbpf and libxdp (once per process).
void route_bpf_library_output();

// The warnings libbpf and libxdp gave on this thread since the last call, "; "-joined, each
// prefixed with its library; empty if none.
std::string take_bpf_library_messages();

// One line of xroce's log: standard error, "xroce: " and the line.
void log_line(std::string_view line);

}  // namespace xroce::net
