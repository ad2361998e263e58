// The rdma_cm ops of the control protocol (include/xroce/control.h): one connection per
// librdmacm event channel, opened by libxroce-preload.so, and `xroce cm show`.
#include <unistd.h>

#include "daemon/control_body.h"
#include "daemon/control_server.h"

namespace xroce::daemon {

ControlServer::Reply ControlServer::cm_op(Client& client, control::Op op, const std::string& body,
                                          int passed_fd) {
  switch (op) {
    case control::Op::cm_open: {
      if (!client.device.empty()) {  // a verbs context is not an event channel
        if (passed_fd >= 0) close(passed_fd);
        return {EINVAL, {}};
      }
      const int err = cm_.open_file(client.id, client.pid, passed_fd);
      control::HandleReply reply{static_cast<uint32_t>(client.id)};
      return {err, err == 0 ? bytes_of(reply) : std::string{}};
    }
    case control::Op::cm_command: {
      if (passed_fd >= 0) close(passed_fd);
      std::string response;
      const int err = cm_.command(client.id, body, response);
      return {err, err == 0 ? response : std::string{}};
    }
    case control::Op::cm_show: {
      if (passed_fd >= 0) close(passed_fd);
      control::NameRequest request{};
      if (!parse(body, request)) return {EINVAL, {}};
      request.name[sizeof(request.name) - 1] = '\0';
      const std::string text = cm_.show(request.name);
      if (text.empty()) return {ENODEV, {}};
      control::TextReply reply{static_cast<uint32_t>(text.size())};
      return {0, bytes_of(reply) + text};
    }
    default:
      if (passed_fd >= 0) close(passed_fd);
      return {EOPNOTSUPP, {}};
  }
}

}  // namespace xroce::daemon
