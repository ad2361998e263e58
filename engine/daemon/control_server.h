// xroced's control plane: the devices it serves, the control socket, and the events that keep
// the device model in step with the netdevs (docs/ARCHITECTURE.md decisions 1 and 2).
//
// Threading: one thread runs run(); every member is touched only from it. The packet workers
// (engine/net, engine/transport) are not attached yet; a device records its port kind and
// queue count so that `xroce link show` can say what was asked for.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/cm_service.h"
#include "daemon/datapath_runner.h"
#include "daemon/netdev.h"
#include "daemon/run_dir.h"
#include "daemon/sysfs_tree.h"
#include "device/device.h"
#include "device/dma.h"
#include "xroce/control.h"

namespace xroce::daemon {

class ControlServer {
 public:
  explicit ControlServer(RunPaths paths);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Takes the namespace's lock (EEXIST if another daemon holds it), clears what a dead daemon
  // left, and listens. 0 or errno.
  int start();
  // Serves until SIGTERM/SIGINT or until the last device is deleted. Returns the exit status.
  int run();

 private:
  struct ServedDevice {
    // Before the model, which holds views of it: client processes' memory (decision 5).
    std::shared_ptr<device::ProcessMemoryDirectory> memory;
    std::unique_ptr<device::Device> model;
    std::string uverbs;
    control::PortKind port = control::PortKind::afxdp;
    uint32_t queues = 0;
    // Congestion control as `xroce cc` set it; every worker holds a copy (control_cc.cc).
    cc::CcDevice cc = daemon_cc_defaults();
    std::string cc_profile = "connectx";
    // Last, so it is destroyed first: the workers stop before the model's objects go.
    std::unique_ptr<DatapathRunner> runner;
  };
  struct Client {
    device::ClientId id = 0;
    pid_t pid = 0;
    uid_t uid = 0;
    std::string device;                // after hello
    int event_fd = -1;                 // the context's async event socket (daemon end)
    std::map<uint32_t, int> channels;  // completion channels: handle -> daemon end
    uint32_t next_channel = 1;
    std::map<uint32_t, uint64_t> shared_mrs;  // MRs reached through a shared mapping -> addr
  };
  struct Reply {
    int32_t status = 0;
    std::string body;
    std::vector<int> fds = {};  // passed with the reply; not closed (their objects own them)
  };

  void accept_client();
  void serve_client(int fd);
  void drop_client(int fd);
  Reply dispatch(Client& client, control::Op op, const std::string& body, int passed_fd);
  Reply hello(Client& client, const std::string& body, int passed_fd);
  Reply query_device(const Client& client);
  Reply query_port(const Client& client, const std::string& body);
  Reply alloc_pd(const Client& client);
  Reply dealloc_pd(const Client& client, const std::string& body);
  Reply reg_mr(Client& client, const std::string& body, int memfd);
  Reply dereg_mr(Client& client, const std::string& body);
  // Registered memory through the shared mapping (decision 5): 0 or errno (the region then
  // uses cross-memory attach); takes ownership of memfd.
  int share_region(Client& client, const device::MrKeys& keys, const control::RegMrRequest& request,
                   int memfd);
  void unshare_region(Client& client, uint32_t mr_handle);
  void release_shared_regions(Client& client);
  Reply create_comp_channel(Client& client, int passed_fd);
  Reply link_add(const Client& client, const std::string& body);
  Reply link_del(const Client& client, const std::string& body);
  Reply link_show();
  // control_stat.cc: `xroce stat` and `xroce qp show`.
  Reply stat(const std::string& body);
  // Rewrites every device's ports/1/hw_counters from its workers' counters, at most once per
  // kCounterRefreshMs (the loop wakes that often while devices exist), so readers of the files
  // see counts no older than that without running `xroce stat`.
  void refresh_hw_counters();
  static constexpr int kCounterRefreshMs = 1000;
  Reply qp_show(const std::string& body);
  // control_cc.cc: `xroce cc show|set|profile`.
  Reply cc_show(const std::string& body);
  Reply cc_set(const Client& client, const std::string& body);
  Reply cc_profile(const Client& client, const std::string& body);
  // Gives every worker of the device its congestion-control settings (blocks until each has).
  static void push_cc(ServedDevice& served);
  // The netdev's speed from sysfs, or 100 Gb/s where it has none (veth): the rate a QP starts
  // at and recovers to.
  static double line_rate_mbps(const std::string& netdev);
  // control_queues.cc: the data path objects.
  Reply create_cq(const Client& client, const std::string& body);
  Reply destroy_cq(const Client& client, const std::string& body);
  Reply resize_cq(const Client& client, const std::string& body);
  Reply create_qp(const Client& client, const std::string& body);
  Reply modify_qp(const Client& client, const std::string& body);
  Reply query_qp(const Client& client, const std::string& body);
  Reply destroy_qp(const Client& client, const std::string& body);
  Reply create_srq(const Client& client, const std::string& body);
  Reply modify_srq(const Client& client, const std::string& body);
  Reply query_srq(const Client& client, const std::string& body);
  Reply destroy_srq(const Client& client, const std::string& body);
  Reply create_ah(const Client& client, const std::string& body);
  Reply destroy_ah(const Client& client, const std::string& body);
  // The replies that hand a QP's or an SRQ's rings to the application.
  Reply qp_reply(const device::QueuePair& qp, uint32_t handle);
  Reply srq_reply(const device::SharedReceiveQueue& srq, uint32_t handle);
  // control_transport.cc: memory windows, re-registration, XRC domains, ibv_open_qp, SRQ
  // resize, ibv_advise_mr.
  Reply alloc_mw(const Client& client, const std::string& body);
  Reply dealloc_mw(const Client& client, const std::string& body);
  Reply rereg_mr(Client& client, const std::string& body);
  Reply open_xrcd(const Client& client, const std::string& body, int passed_fd);
  Reply close_xrcd(const Client& client, const std::string& body);
  Reply open_qp(const Client& client, const std::string& body);
  Reply resize_srq(const Client& client, const std::string& body);
  Reply advise_mr(const Client& client, const std::string& body);
  static uint32_t region_access(const device::Device& dev, uint32_t mr_handle);
  // A real device pins what it registers and fails with EFAULT when it is not mapped; xroce
  // checks the process's mappings instead (writable where the access flags ask for writes).
  static bool range_is_mapped(pid_t pid, uint64_t addr, uint64_t length, bool need_write);
  static bool writes_memory(uint32_t access);
  void send_reply(int fd, const std::string& out, const std::vector<int>& fds);
  void refresh_netdevs();
  void send_event(const std::string& device, uint64_t element, uint32_t event_type);
  void shutdown();
  device::Device* device_of(const Client& client);

  // control_cm.cc: the rdma_cm ops.
  Reply cm_op(Client& client, control::Op op, const std::string& body, int passed_fd);

  RunPaths paths_;
  SysfsTree tree_;
  CmService cm_;  // before devices_: it holds pointers into their models and runners
  NetlinkWatcher netlink_;
  int lock_fd_ = -1;
  bool owns_run_dir_ = false;  // we hold the lock: the run directory is ours to clean
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int signal_fd_ = -1;
  bool stop_ = false;
  bool served_any_ = false;
  device::ClientId next_client_ = 1;
  // Which GIDs the devices serve, for loopback between them; outlives every device's data path.
  LoopbackRegistry loopback_;
  std::map<std::string, ServedDevice> devices_;
  std::map<int, Client> clients_;          // by connection fd
  std::uint64_t counters_written_ns_ = 0;  // last refresh_hw_counters
};

}  // namespace xroce::daemon
