// Memory the daemon shares with one client: a sealed memfd, mapped here, whose descriptor is
// passed to the provider once, with SCM_RIGHTS, in the reply that creates the object
// (include/xroce/queues.h), and then closed: the mapping keeps the pages, so neither side holds
// a descriptor per object. The memfd is sealed against shrinking and growing before it leaves
// the daemon, so no client can make the daemon's mapping fault.
#pragma once

#include <cstddef>
#include <cstdint>

#include "wire/result.h"
#include "xroce/fd.h"

namespace xroce::device {

class SharedRegion {
 public:
  SharedRegion() = default;
  ~SharedRegion();
  SharedRegion(SharedRegion&& other) noexcept;
  SharedRegion& operator=(SharedRegion&& other) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  // A zeroed region of `bytes` bytes (rounded up to pages). ENOMEM or the system's errno.
  static wire::Result<SharedRegion, int> create(const char* name, std::size_t bytes);

  // The memfd, for the reply that hands it to the client; invalid once taken.
  Fd take_fd() { return std::move(fd_); }
  // A duplicate of the memfd, which the region keeps: for a region more than one context maps
  // (an XRC target QP's, which ibv_open_qp hands to each context that opens it). Invalid if
  // the memfd was taken or cannot be duplicated.
  Fd share_fd() const;
  void* base() const { return base_; }
  std::size_t bytes() const { return bytes_; }

 private:
  Fd fd_;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
};

// An eventfd (non-blocking, close-on-exec): a context's doorbell, which the provider writes when
// the engine sleeps. The system's errno on failure.
wire::Result<Fd, int> create_doorbell();

}  // namespace xroce::device
