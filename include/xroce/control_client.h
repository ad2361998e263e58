// A client's end of the control socket (include/xroce/control.h): the provider and the CLI.
//
// Thread-safety: none; callers serialise (the provider holds a mutex per context).
// Failure: a daemon that is gone gives EIO at once (never a hang); a daemon that does not
// answer within the receive timeout gives ETIMEDOUT.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "xroce/control.h"
#include "xroce/fd.h"

namespace xroce::control {

class ControlClient {
 public:
  ControlClient() = default;
  ControlClient(ControlClient&&) noexcept = default;
  ControlClient& operator=(ControlClient&&) noexcept = default;

  // 0 or a positive errno.
  int connect(const std::string& socket_path, int timeout_ms);
  bool connected() const { return fd_.valid(); }
  // The connection's descriptor, for a caller that waits for the daemon to go away (it reads
  // nothing from it).
  int fd() const { return fd_.get(); }
  // Shuts the connection down (the daemon sees it close; a thread polling fd() wakes up).
  void shutdown();

  // Sends one request (header + body, plus pass_fds) and waits for its reply. Returns the reply
  // status (0 or positive errno); on 0 copies reply_len body bytes to `reply` (EIO if the reply
  // is shorter).
  int call(Op op, const void* request, std::size_t request_len, void* reply, std::size_t reply_len,
           std::span<const int> pass_fds = {});
  // For replies that carry descriptors: exactly fds.size() of them, owned by the caller on
  // success (EIO if fewer came); on any error none are kept.
  int call_fds(Op op, const void* request, std::size_t request_len, void* reply,
               std::size_t reply_len, std::span<Fd> fds, std::span<const int> pass_fds = {});
  // For replies that carry text (TextReply): the whole text, however many pages it takes.
  int call_text(Op op, const void* request, std::size_t request_len, std::string& text);

 private:
  int exchange(Op op, const void* request, std::size_t request_len, std::span<const int> pass_fds,
               std::string& reply_body, std::span<Fd> fds);

  Fd fd_;
  uint32_t seq_ = 0;
};

}  // namespace xroce::control
