// The namespace's rdma_cm device, served to librdmacm through libxroce-preload.so (decision in
// README.md "rdma_cm"): the ucma command interface of the kernel's drivers/infiniband/core/
// ucma.c over the control socket, with engine/cm's RdmaCm behind it and the devices' QP1 MADs
// through their workers.
//
// A client connection opened with Op::cm_open is one event channel (one open of
// /dev/infiniband/rdma_cm: a ucma "file"); it passes an eventfd that is the channel's fd in the
// application. The daemon keeps that eventfd readable exactly while the file has events
// (written to 1 when the queue fills, read back to 0 when it empties), so poll/epoll on the
// channel behave as on the kernel's; GET_EVENT itself is an Op::cm_command.
//
// Threading: everything runs on the control thread except deliver_mad_on_worker(), which a
// device's workers call for every frame to QP1; it queues the frame under a mutex (QP1 carries
// only management traffic, never the data path) and wakes the control thread's wake_fd().
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cm/rdma_cm.h"
#include "daemon/datapath_runner.h"
#include "device/device.h"

namespace xroce::daemon {

// Source address and device for a destination, from the namespace's routing table: the source
// address the kernel would pick for a datagram to it (a connected UDP socket's name), on the
// device whose GID table holds that address.
class KernelRouteResolver final : public cm::Resolver {
 public:
  using DeviceOfIp = std::function<std::optional<std::uint32_t>(const wire::IpAddr&)>;
  explicit KernelRouteResolver(DeviceOfIp device_of) : device_of_(std::move(device_of)) {}
  wire::Result<cm::Route, int> resolve(const wire::IpAddr& src, const wire::IpAddr& dst,
                                       std::uint32_t dst_scope_id) override;

 private:
  DeviceOfIp device_of_;
};

// What `xroce stat` adds for the CM (names as printed).
struct CmStat {
  std::uint64_t mads_sent = 0;
  std::uint64_t mads_received = 0;
  std::uint64_t mads_retried = 0;
  std::uint64_t mads_dropped = 0;
  std::uint64_t timeouts = 0;  // handshakes and DREQs given up after their MAD retries
  std::map<std::string, std::uint64_t> rej_sent;  // by reason name
  std::map<std::string, std::uint64_t> rej_received;
};

class CmService {
 public:
  CmService();
  ~CmService();
  CmService(const CmService&) = delete;
  CmService& operator=(const CmService&) = delete;

  int wake_fd() const { return wake_fd_; }
  // Milliseconds until the CM's next timer, for the control loop's epoll_wait (-1: none).
  int next_timeout_ms() const;
  // The control loop: after wake_fd() became readable or a timeout.
  void run_pending();

  // Devices (link add/del). The runner's workers get the QP1 hook.
  void add_device(const std::string& name, device::Device& device, DatapathRunner& runner);
  void remove_device(const std::string& name);

  // The control ops. `client` identifies the connection (one file each), `pid` its process.
  // Op::cm_open: takes ownership of `event_fd`. Returns 0 or errno.
  int open_file(std::uint64_t client, pid_t pid, int event_fd);
  // Op::cm_command: `command` is the ucma write() buffer (struct rdma_ucm_cmd_hdr and its
  // input; SET_OPTION followed by the option value). On success `response` holds what the
  // kernel would copy to the command's response pointer.
  int command(std::uint64_t client, const std::string& command, std::string& response);
  // The connection closed (the channel was closed, or its process exited or was killed).
  void close_file(std::uint64_t client);
  bool is_file(std::uint64_t client) const { return files_.count(client) != 0; }

  // `xroce cm show NAME`: the device's ids by process, as JSON.
  std::string show(const std::string& device) const;
  std::optional<CmStat> stat(const std::string& device) const;

 private:
  struct File {
    pid_t pid = 0;
    int event_fd = -1;
    bool readable = false;  // what we last made event_fd say
  };
  struct ServedDevice {
    std::uint32_t index = 0;
    device::Device* model = nullptr;
    DatapathRunner* runner = nullptr;
    std::uint32_t gsi_psn = 0;
  };
  struct InboundFrame {
    std::uint32_t device;
    std::vector<std::uint8_t> bytes;
  };

  void deliver_mad_on_worker(std::uint32_t device, wire::Bytes frame);
  void refresh_addresses();
  std::optional<std::uint32_t> device_of(const wire::IpAddr& ip) const;
  const ServedDevice* served(std::uint32_t index) const;
  // The index of our GID `gid` in its device's table (0 if none has it).
  std::uint8_t sgid_index_of(const cm::Gid& gid) const;
  void send_pending_mads();
  void sync_readiness();
  int dispatch(std::uint64_t file, std::uint32_t cmd, const std::string& in,
               const std::string& extra, std::string& response);

  KernelRouteResolver resolver_;
  cm::RdmaCm cm_;
  int wake_fd_ = -1;
  std::uint32_t next_index_ = 0;
  std::map<std::string, ServedDevice> devices_;
  std::map<std::uint64_t, File> files_;
  std::uint64_t gsi_dropped_ = 0;  // frames to QP1 that are not CM MADs
  std::mutex inbound_lock_;
  std::vector<InboundFrame> inbound_;  // guarded by inbound_lock_
};

}  // namespace xroce::daemon
