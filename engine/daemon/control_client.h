// A client's end of the control socket (include/xroce/control.h): the provider and the CLI.
//
// Thread-safety: none; callers serialise (the provider holds a mutex per context).
// Failure: a daemon that is gone gives EIO at once (never a hang); a daemon that does not
// answer within the receive timeout gives ETIMEDOUT.
#pragma once

#include <cstddef>
#include <string>

#include "xroce/control.h"

namespace xroce::daemon {

class ControlClient {
 public:
  ControlClient() = default;
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;
  ControlClient(ControlClient&& other) noexcept;
  ControlClient& operator=(ControlClient&& other) noexcept;

  // 0 or a positive errno.
  int connect(const std::string& socket_path, int timeout_ms);
  bool connected() const { return fd_ >= 0; }

  // Sends one request (header + body, plus pass_fd if >= 0) and waits for its reply. Returns
  // the reply status (0 or positive errno); on 0 copies up to reply_len body bytes to reply.
  int call(control::Op op, const void* request, std::size_t request_len, void* reply,
           std::size_t reply_len, int pass_fd = -1);
  // For replies that carry descriptors: up to `max_fds` of them are stored in fds[] (the rest
  // set to -1); the caller owns them. On an error status none are kept.
  int call_fds(control::Op op, const void* request, std::size_t request_len, void* reply,
               std::size_t reply_len, int* fds, int max_fds);
  // For replies that carry text (control::TextReply).
  int call_text(control::Op op, const void* request, std::size_t request_len, std::string& text);

 private:
  int exchange(control::Op op, const void* request, std::size_t request_len, int pass_fd,
               std::string& reply_body, int* fds = nullptr, int max_fds = 0);

  int fd_ = -1;
  uint32_t seq_ = 0;
};

}  // namespace xroce::daemon
