#include "daemon/sysfs_tree.h"

#include "xroce/run_dir.h"

#include "xroce/control.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>

namespace xroce::daemon {

namespace {

namespace fs = std::filesystem;

// The character device behind every uverbs node we make: /dev/full's number. libibverbs checks
// only that the node is a character device with the number in `dev` (open_cdev), and then uses
// the fd as its command fd, which the provider never uses: on /dev/full every write() fails
// (ENOSPC) and every ioctl() fails with ENOTTY, so a command libibverbs sends by itself fails
// cleanly (ibv_create_comp_channel without libxroce-preload.so returns NULL, never an
// uninitialised fd), GID and pkey queries fall back to this tree, and ibv_import_device on
// that fd finds the device and says EOPNOTSUPP (the provider has no import_context).
constexpr unsigned kNodeMajor = 1;
constexpr unsigned kNodeMinor = 7;
constexpr int kMaxNodes = 1024;

int write_file(const fs::path& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return ec.value();
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << '\n';
    if (!out) return EIO;
  }
  fs::rename(tmp, path, ec);
  return ec ? ec.value() : 0;
}

// device/net/<ifname>: the netdev under the device, as the kernel shows an RDMA device's
// netdev (/sys/class/infiniband/<dev>/device/net/<ifname>); tools find the interface there
// (pyverbs' RDMATestCase.get_net_name lists the directory). A link to the netdev's own sysfs
// directory, which resolves in the device's namespace (ip netns exec mounts that namespace's
// /sys). The new entry is made before any other is removed, so a reader never finds none.
int write_netdev_link(const std::string& ibdev, const std::string& ifname) {
  const fs::path net = fs::path(ibdev) / "device" / "net";
  std::error_code ec;
  fs::create_directories(net, ec);
  if (ec) return ec.value();
  if (!fs::is_symlink(net / ifname, ec)) {
    fs::create_directory_symlink(fs::path("/sys/class/net") / ifname, net / ifname, ec);
    if (ec) return ec.value();
  }
  for (const auto& entry : fs::directory_iterator(net, ec)) {
    if (entry.path().filename() != ifname) fs::remove(entry.path(), ec);  // a renamed netdev
  }
  return 0;
}

}  // namespace

std::string SysfsTree::ibdev_dir(const std::string& ibdev) const {
  return root_ + "/class/infiniband/" + ibdev;
}

void SysfsTree::clear_stale() {
  std::error_code ec;
  fs::remove_all(root_, ec);
}

int SysfsTree::write_rdma_cm(const std::string& control_socket) {
  const std::string dir = root_ + "/class/misc/rdma_cm";
  if (int err = write_file(dir + "/abi_version", "4")) return err;
  return write_file(dir + "/" + control::kControlPathFile, control_socket);
}

int SysfsTree::write_device(const device::Device& device, const std::string& uverbs_name,
                            const std::string& control_socket) {
  const std::string verbs = root_ + "/class/infiniband_verbs";
  const std::string abi = std::to_string(kUverbsAbiVersion);
  const std::string ibdev = ibdev_dir(device.name());
  const std::string guid = device::guid_sysfs_text(device.node_guid());
  const std::pair<std::string, std::string> files[] = {
      {verbs + "/abi_version", abi},
      {ibdev + "/node_type", "1: CA"},
      {ibdev + "/node_guid", guid},
      {ibdev + "/sys_image_guid", guid},
      {ibdev + "/fw_ver", device::kFirmwareVersion},
      {ibdev + "/node_desc", "xroce " + device.netdev().name},
      {ibdev + "/hca_type", "xroce"},
      {ibdev + "/" + control::kControlPathFile, control_socket},
  };
  for (const auto& [path, text] : files) {
    if (int err = write_file(path, text)) return err;
  }
  if (int err = write_port(device)) return err;
  // The infiniband_verbs entry last: libibverbs finds the device through it, and everything it
  // then reads must already be there.
  const std::string uverbs = verbs + "/" + uverbs_name;
  const std::pair<std::string, std::string> uverbs_files[] = {
      {uverbs + "/abi_version", abi},
      {uverbs + "/dev", std::to_string(kNodeMajor) + ":" + std::to_string(kNodeMinor)},
      {uverbs + "/ibdev", device.name()},
  };
  for (const auto& [path, text] : uverbs_files) {
    if (int err = write_file(path, text)) return err;
  }
  return 0;
}

int SysfsTree::write_port(const device::Device& device) {
  const std::string port = ibdev_dir(device.name()) + "/ports/1";
  const auto& netdev = device.netdev();
  const std::pair<std::string, std::string> files[] = {
      {port + "/state", device::port_state_sysfs_text(device::port_state(netdev))},
      {port + "/phys_state", device::phys_state_sysfs_text(device::phys_state(netdev))},
      {port + "/rate", device::rate_sysfs_text(device::link_rate_for(netdev.speed_mbps))},
      {port + "/link_layer", "Ethernet"},
      {port + "/lid", "0x0"},
      {port + "/sm_lid", "0x0"},
      {port + "/lid_mask_count", "0"},
      {port + "/sm_sl", "0"},
      {port + "/cap_mask", "0x00010000"},
      {port + "/pkeys/0", "0xffff"},
  };
  for (const auto& [path, text] : files) {
    if (int err = write_file(path, text)) return err;
  }
  if (int err = write_netdev_link(ibdev_dir(device.name()), netdev.name)) return err;
  // Every slot has all three files: libibverbs' GID table fallback reads each of them for
  // every index below gid_tbl_len, empty slots included.
  const auto& gids = device.gids();
  for (std::size_t i = 0; i < gids.size(); ++i) {
    const std::string n = std::to_string(i);
    if (int err = write_file(port + "/gids/" + n, device::gid_sysfs_text(gids.at(i)))) return err;
    if (int err = write_file(port + "/gid_attrs/types/" + n, "RoCE v2")) return err;
    if (int err = write_file(port + "/gid_attrs/ndevs/" + n, netdev.name)) return err;
  }
  return 0;
}

void SysfsTree::remove_device(const std::string& ibdev, const std::string& uverbs_name) {
  std::error_code ec;
  fs::remove_all(root_ + "/class/infiniband_verbs/" + uverbs_name, ec);
  fs::remove_all(ibdev_dir(ibdev), ec);
}

namespace {

// /dev is shared by every network namespace, so uverbs names are shared by every daemon: each
// node we make is recorded in <run root>/nodes/<name> with the owner's pid, and a node whose
// owner is gone (a daemon that was killed) may be taken back by any daemon.
std::string registry_path(const std::string& name) {
  return control::run_root() + "/nodes/" + name;
}
std::string node_path(const std::string& name) {
  return std::string(kCdevDir) + "/" + name;
}

// A node that is being created has no registry entry for a moment; one older than this
// without an entry was left by a daemon that died in between.
constexpr auto kUnregisteredGraceSeconds = 10;

bool is_our_kind_of_node(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) &&
         st.st_rdev == makedev(kNodeMajor, kNodeMinor);
}

pid_t registered_owner(const std::string& name) {
  std::ifstream in(registry_path(name));
  pid_t pid = 0;
  in >> pid;
  return pid;
}

bool owner_is_gone(const std::string& name) {
  const pid_t pid = registered_owner(name);
  if (pid > 0) return kill(pid, 0) != 0 && errno == ESRCH;
  struct stat st {};
  if (lstat(node_path(name).c_str(), &st) != 0) return false;
  return time(nullptr) - st.st_ctime > kUnregisteredGraceSeconds;
}

void unlink_node(const std::string& name) {
  unlink(node_path(name).c_str());
  unlink(registry_path(name).c_str());
}

}  // namespace

std::string create_device_node() {
  if (mkdir(kCdevDir, 0755) != 0 && errno != EEXIST) return {};
  std::error_code ec;
  fs::create_directories(control::run_root() + "/nodes", ec);
  if (ec) {
    errno = ec.value();
    return {};
  }
  for (int n = 0; n < kMaxNodes; ++n) {
    const std::string name = "uverbs" + std::to_string(n);
    const std::string path = node_path(name);
    // mknod's own errno decides: the checks in between (a registry file another daemon has not
    // written yet, a node it just unlinked) set errno of their own, which mean "taken", not a
    // failure.
    auto make = [&path] {
      return mknod(path.c_str(), S_IFCHR | 0666, makedev(kNodeMajor, kNodeMinor)) == 0 ? 0 : errno;
    };
    int err = make();
    if (err == EEXIST && is_our_kind_of_node(path) && owner_is_gone(name)) {
      unlink_node(name);
      err = make();
    }
    if (err == 0) {
      chmod(path.c_str(), 0666);  // mknod applies the umask
      std::ofstream(registry_path(name)) << getpid() << '\n';
      return name;
    }
    if (err != EEXIST) {
      errno = err;
      return {};
    }
  }
  errno = ENOSPC;
  return {};
}

void remove_device_node(const std::string& uverbs_name) {
  // Only a node of ours: never a real device's, never another daemon's.
  if (uverbs_name.rfind("uverbs", 0) != 0 || !is_our_kind_of_node(node_path(uverbs_name))) return;
  if (registered_owner(uverbs_name) == getpid()) unlink_node(uverbs_name);
}

void reclaim_stale_device_nodes() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kCdevDir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("uverbs", 0) == 0 && is_our_kind_of_node(entry.path().string()) &&
        owner_is_gone(name)) {
      unlink_node(name);
    }
  }
}

}  // namespace xroce::daemon
