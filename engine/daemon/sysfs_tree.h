// The sysfs-shaped tree and device node through which unmodified libibverbs finds a device
// (docs/ARCHITECTURE.md decision 2).
//
// libibverbs (rdma-core 44, no RDMA netlink in the kernel) scans
// $SYSFS_PATH/class/infiniband_verbs/*, reads ibdev/dev/abi_version there, reads node_type,
// node_guid... under $SYSFS_PATH/class/infiniband/<ibdev>, and then stats and opens
// /dev/infiniband/<uverbs name> (RDMA_CDEV_DIR is compiled in: the node cannot live elsewhere)
// and checks it is a character device whose number equals `dev`. We give it a c 1:7 node
// (/dev/full's number, on which every command fails): the provider never uses that fd.
//
// Files are replaced atomically (write a temporary, rename) so a reader never sees half a value.
#pragma once

#include <string>

#include "device/device.h"

namespace xroce::daemon {

// The uverbs ABI version libibverbs 44 accepts (IB_USER_VERBS_ABI_VERSION).
inline constexpr int kUverbsAbiVersion = 6;
inline constexpr const char* kCdevDir = "/dev/infiniband";

class SysfsTree {
 public:
  explicit SysfsTree(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  // Removes the tree a previous daemon of this namespace left.
  void clear_stale();
  // 0 or errno. Writes everything about the device, including the GID table and port files.
  int write_device(const device::Device& device, const std::string& uverbs_name,
                   const std::string& control_socket);
  // Rewrites the files that follow the netdev: port state, MTU-derived rate, GIDs.
  int write_port(const device::Device& device);
  void remove_device(const std::string& ibdev, const std::string& uverbs_name);
  // class/misc/rdma_cm: librdmacm's check_abi_version_sysfs reads abi_version there (4,
  // RDMA_USER_CM_ABI_VERSION); libxroce-preload.so reads the control socket's path from
  // xroce_control, and serves /dev/infiniband/rdma_cm only where that file exists. 0 or errno.
  int write_rdma_cm(const std::string& control_socket);

 private:
  std::string ibdev_dir(const std::string& ibdev) const;

  std::string root_;
};

// Creates /dev/infiniband/uverbsN as c 1:7 for the lowest N not taken by a live daemon or a
// real device, and records this process as its owner (<run root>/nodes/uverbsN); returns its
// name, or empty with errno set.
std::string create_device_node();
// Removes a node this process owns; anything else is left alone.
void remove_device_node(const std::string& uverbs_name);
// Removes the c 1:7 nodes whose owning daemon is gone (killed before it could clean up).
void reclaim_stale_device_nodes();

}  // namespace xroce::daemon
