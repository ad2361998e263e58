#include "net/xdp_steering.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/core.h>
#include <linux/magic.h>
#include <net/if.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <xdp/libxdp.h>

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "net/bpf_log.h"
#include "xroce_steer.h"
#include "xroce_steer.skel.h"

namespace xroce::net {
namespace {

constexpr const char* kProgramName = "xroce_steer";
constexpr const char* kBpffsPath = "/sys/fs/bpf";

Err<PortError> xdp_error(std::string what, int err) {
  return Err{PortError{std::move(what), err}};
}

// Collects the ids of xroce_steer programs attached to ifindex, and the mode they run in.
std::vector<std::uint32_t> find_ours(int ifindex, xdp_attach_mode* mode) {
  std::vector<std::uint32_t> ids;
  xdp_multiprog* mp = xdp_multiprog__get_from_ifindex(ifindex);
  if (libxdp_get_error(mp) || !mp) return ids;
  *mode = xdp_multiprog__attach_mode(mp);
  if (xdp_multiprog__is_legacy(mp)) {
    xdp_program* p = xdp_multiprog__main_prog(mp);
    if (p && std::strcmp(xdp_program__name(p), kProgramName) == 0) {
      ids.push_back(xdp_program__id(p));
    }
  } else {
    for (xdp_program* p = xdp_multiprog__next_prog(nullptr, mp); p;
         p = xdp_multiprog__next_prog(p, mp)) {
      if (std::strcmp(xdp_program__name(p), kProgramName) == 0) ids.push_back(xdp_program__id(p));
    }
  }
  xdp_multiprog__close(mp);
  return ids;
}

// Observed with libxdp 1.3.1 in its single-program (legacy) mode, which it falls back to when
// the dispatcher cannot load: xdp_program__close and xdp_multiprog__close leave duplicated
// program fds open, and an open fd pins the program in the kernel after its detach. Once
// libxdp is done with a program, this closes every fd of this process that still refers to
// that program id (and only those).
void close_leaked_program_fds(std::uint32_t prog_id) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  std::vector<int> leaked;
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == dirfd(dir)) continue;
    char link[64] = {};
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(path.c_str(), link, sizeof(link) - 1) < 0) continue;
    if (std::strcmp(link, "anon_inode:bpf-prog") != 0) continue;
    bpf_prog_info info{};
    std::uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.id == prog_id) leaked.push_back(fd);
  }
  closedir(dir);
  for (int fd : leaked)
    close(fd);
}

}  // namespace

Result<int, PortError> ensure_bpffs_mounted() {
  struct statfs st {};
  if (statfs(kBpffsPath, &st) == 0 && st.f_type == BPF_FS_MAGIC) return 0;
  if (mount("bpf", kBpffsPath, "bpf", 0, "mode=0700") < 0) {
    return Err{PortError{"mount bpffs at /sys/fs/bpf", errno}};
  }
  return 1;
}

Result<int, PortError> XdpSteering::remove_stale(int ifindex) {
  xdp_attach_mode mode = XDP_MODE_UNSPEC;
  const std::vector<std::uint32_t> ids = find_ours(ifindex, &mode);
  int removed = 0;
  for (std::uint32_t id : ids) {
    xdp_program* p = xdp_program__from_id(id);
    if (libxdp_get_error(p) || !p) continue;  // gone meanwhile
    const int rc = xdp_program__detach(p, ifindex, mode, 0);
    xdp_program__close(p);
    close_leaked_program_fds(id);
    if (rc < 0) return xdp_error(fmt::format("detach stale program id {}", id), -rc);
    ++removed;
  }
  return removed;
}

Result<std::shared_ptr<XdpSteering>, PortError> XdpSteering::attach(const std::string& ifname,
                                                                    XdpAttachMode mode) {
  route_bpf_library_output();
  (void)take_bpf_library_messages();  // anything said before this attach is not about it
  std::shared_ptr<XdpSteering> s(new XdpSteering());
  s->ifname_ = ifname;
  s->ifindex_ = static_cast<int>(if_nametoindex(ifname.c_str()));
  if (s->ifindex_ == 0) return Err{PortError{"no interface " + ifname, errno}};
  if (auto m = ensure_bpffs_mounted(); !m) return Err{m.error()};
  auto stale = remove_stale(s->ifindex_);
  if (!stale) return Err{stale.error()};
  s->stale_removed_ = *stale;
  if (auto r = s->load_and_attach(mode); !r) return Err{r.error()};
  log_line(s->attach_summary_);
  return s;
}

Result<int, PortError> XdpSteering::load_and_attach(XdpAttachMode mode) {
  const xdp_attach_mode tries[2] = {XDP_MODE_NATIVE, XDP_MODE_SKB};
  int last_err = 0;
  std::string native_refused;  // why native XDP was not used, when it was tried
  for (xdp_attach_mode m : tries) {
    if ((m == XDP_MODE_NATIVE && mode == XdpAttachMode::kSkb) ||
        (m == XDP_MODE_SKB && mode == XdpAttachMode::kNative)) {
      continue;
    }
    // A fresh object per try: a failed attach may leave the previous one half loaded.
    skel_ = xroce_steer__open();
    if (!skel_) return Err{PortError{"open BPF skeleton", errno}};
    skel_->rodata->cfg_roce_udp_port = XROCE_ROCE_UDP_PORT;
    prog_ = xdp_program__from_bpf_obj(skel_->obj, nullptr);
    if (const long e = libxdp_get_error(prog_); e || !prog_) {
      prog_ = nullptr;
      return xdp_error("libxdp: program from skeleton", static_cast<int>(-e));
    }
    // Frames larger than a page arrive in several buffers (multi-buffer XDP).
    xdp_program__set_xdp_frags_support(prog_, true);
    const int rc = xdp_program__attach(prog_, ifindex_, m, 0);
    const std::string said = take_bpf_library_messages();
    if (rc == 0) {
      native_ = m == XDP_MODE_NATIVE;
      attach_summary_ = summarize_attach(native_refused, said);
      return 0;
    }
    last_err = -rc;
    if (m == XDP_MODE_NATIVE) native_refused = std::strerror(-rc);
    xdp_program__close(prog_);
    prog_ = nullptr;
    xroce_steer__destroy(skel_);
    skel_ = nullptr;
  }
  return xdp_error("libxdp: attach xroce_steer to " + ifname_, last_err);
}

// One line: the mode chosen (native or generic XDP; through libxdp's dispatcher or alone) and
// why, from the refusals and the libraries' own messages of the attempt that worked.
std::string XdpSteering::summarize_attach(const std::string& native_refused,
                                          const std::string& said) const {
  std::string line = fmt::format("xdp: {} on {}: {}", kProgramName, ifname_,
                                 native_ ? "native (driver) mode" : "generic (SKB) mode");
  if (!native_) {
    line += native_refused.empty() ? " (asked for)"
                                   : fmt::format(" (native attach refused: {})", native_refused);
  }
  bool legacy = false;
  xdp_multiprog* mp = xdp_multiprog__get_from_ifindex(ifindex_);
  if (!libxdp_get_error(mp) && mp) {
    legacy = xdp_multiprog__is_legacy(mp);
    xdp_multiprog__close(mp);
  }
  if (!legacy) return line + ", through libxdp's dispatcher";
  // The first thing the libraries said is the cause; what follows is their advice about it.
  const std::string cause = said.substr(0, said.find("; "));
  return line + fmt::format(", alone: libxdp's dispatcher could not load{}",
                            cause.empty() ? std::string() : " (" + cause + ")");
}

XdpSteering::~XdpSteering() {
  const std::uint32_t id = program_id();
  if (prog_) {
    xdp_program__detach(prog_, ifindex_, native_ ? XDP_MODE_NATIVE : XDP_MODE_SKB, 0);
    xdp_program__close(prog_);
  }
  if (skel_) xroce_steer__destroy(skel_);
  if (id != 0) close_leaked_program_fds(id);
}

std::uint32_t XdpSteering::program_id() const {
  return prog_ ? xdp_program__id(prog_) : 0;
}

Result<int, PortError> XdpSteering::add_local_ip(const Ip16& ip) {
  const std::uint8_t one = 1;
  int rc = 0;
  if (is_v4_mapped(ip)) {
    std::uint32_t key;  // network byte order, as in the IPv4 header
    std::memcpy(&key, ip.data() + 12, 4);
    rc = bpf_map__update_elem(skel_->maps.local_ipv4, &key, sizeof(key), &one, sizeof(one), 0);
  } else {
    xroce_ipv6_key key;
    std::memcpy(key.addr, ip.data(), 16);
    rc = bpf_map__update_elem(skel_->maps.local_ipv6, &key, sizeof(key), &one, sizeof(one), 0);
  }
  if (rc < 0) return xdp_error("add local address to the steering map", -rc);
  return 0;
}

void XdpSteering::remove_local_ip(const Ip16& ip) {
  // ENOENT when it was never added: nothing to do either way.
  if (is_v4_mapped(ip)) {
    std::uint32_t key;
    std::memcpy(&key, ip.data() + 12, 4);
    (void)bpf_map__delete_elem(skel_->maps.local_ipv4, &key, sizeof(key), 0);
  } else {
    xroce_ipv6_key key;
    std::memcpy(key.addr, ip.data(), 16);
    (void)bpf_map__delete_elem(skel_->maps.local_ipv6, &key, sizeof(key), 0);
  }
}

Result<int, PortError> XdpSteering::set_queue_socket(std::uint32_t queue, int xsk_fd) {
  const int rc =
      bpf_map__update_elem(skel_->maps.xsks, &queue, sizeof(queue), &xsk_fd, sizeof(xsk_fd), 0);
  if (rc < 0) return xdp_error(fmt::format("XSKMAP[{}] = socket", queue), -rc);
  return 0;
}

void XdpSteering::clear_queue_socket(std::uint32_t queue) {
  // ENOENT when the socket already left the map (closing a socket removes it).
  (void)bpf_map__delete_elem(skel_->maps.xsks, &queue, sizeof(queue), 0);
}

XdpCounters XdpSteering::counters() const {
  XdpCounters out;
  const int cpus = libbpf_num_possible_cpus();
  if (cpus <= 0) return out;
  std::vector<std::uint64_t> per_cpu(static_cast<std::size_t>(cpus));
  std::uint64_t* fields[XROCE_COUNTER_COUNT] = {&out.redirected, &out.passed, &out.malformed};
  for (std::uint32_t i = 0; i < XROCE_COUNTER_COUNT; ++i) {
    if (bpf_map__lookup_elem(skel_->maps.counters, &i, sizeof(i), per_cpu.data(),
                             per_cpu.size() * sizeof(std::uint64_t), 0) < 0) {
      continue;
    }
    for (std::uint64_t v : per_cpu)
      *fields[i] += v;
  }
  return out;
}

}  // namespace xroce::net
