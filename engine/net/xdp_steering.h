// XdpSteering: the XDP steering program (bpf/xroce_steer.bpf.c) attached to one interface
// through libxdp's dispatcher, so that it coexists with other XDP programs. It redirects
// RoCEv2 frames for the device's own addresses into the AF_XDP socket of the receiving queue
// and passes everything else to the kernel.
//
// Lifetime: the object owns the attachment; destroying it detaches the program and leaves
// the interface as it was (other programs in the dispatcher stay). attach() first removes any
// xroce_steer program a crashed process left on the interface (one xroced owns a netdev,
// docs/ARCHITECTURE.md decision 1, so such a program is stale by definition).
//
// Threading: configure (add_local_ip, set_queue_socket) from one thread; the maps themselves
// are safe to update while the program runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "net/port.h"
#include "net/udp_frame.h"

struct xroce_steer;
struct xdp_program;

namespace xroce::net {

enum class XdpAttachMode : std::uint8_t {
  kAuto,    // native (driver) XDP, else generic (SKB)
  kNative,  // driver XDP only
  kSkb,     // generic XDP only
};

struct XdpCounters {
  std::uint64_t redirected = 0;
  std::uint64_t passed = 0;
  std::uint64_t malformed = 0;
};

class XdpSteering {
 public:
  static Result<std::shared_ptr<XdpSteering>, PortError> attach(const std::string& ifname,
                                                                XdpAttachMode mode);
  ~XdpSteering();
  XdpSteering(const XdpSteering&) = delete;
  XdpSteering& operator=(const XdpSteering&) = delete;

  // Removes every xroce_steer program from the interface's XDP dispatcher (or a directly
  // attached one); returns how many it removed.
  static Result<int, PortError> remove_stale(int ifindex);

  // Frames to these addresses are ours (IPv4 in mapped form).
  Result<int, PortError> add_local_ip(const Ip16& ip);
  // Frames to this address go to the kernel again (the address left the interface).
  void remove_local_ip(const Ip16& ip);
  // Frames for `queue` go to this AF_XDP socket from now on; clear to send them to the kernel.
  Result<int, PortError> set_queue_socket(std::uint32_t queue, int xsk_fd);
  void clear_queue_socket(std::uint32_t queue);

  XdpCounters counters() const;
  bool native() const { return native_; }
  int ifindex() const { return ifindex_; }
  const std::string& ifname() const { return ifname_; }
  std::uint32_t program_id() const;
  int stale_programs_removed() const { return stale_removed_; }
  // The mode chosen and why, in one line (also written to xroce's log when attached).
  const std::string& attach_summary() const { return attach_summary_; }

 private:
  XdpSteering() = default;
  Result<int, PortError> load_and_attach(XdpAttachMode mode);
  std::string summarize_attach(const std::string& native_refused, const std::string& said) const;

  std::string ifname_;
  int ifindex_ = 0;
  bool native_ = false;
  int stale_removed_ = 0;
  std::string attach_summary_;
  xroce_steer* skel_ = nullptr;
  xdp_program* prog_ = nullptr;
};

// bpffs must be mounted at /sys/fs/bpf for libxdp's dispatcher; mounts it when missing.
Result<int, PortError> ensure_bpffs_mounted();

}  // namespace xroce::net
