// Memory the daemon shares with one client: a sealed memfd, mapped here, whose fd is passed to
// the provider with SCM_RIGHTS (include/xroce/queues.h). The memfd is sealed against shrinking
// and growing before it leaves the daemon, so no client can make the daemon's mapping fault.
#pragma once

#include <cstddef>
#include <cstdint>

#include "wire/result.h"

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

  int fd() const { return fd_; }
  void* base() const { return base_; }
  std::size_t bytes() const { return bytes_; }

 private:
  int fd_ = -1;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
};

// An eventfd (non-blocking, close-on-exec): the doorbell the provider writes when the engine
// sleeps.
class EventFd {
 public:
  EventFd() = default;
  ~EventFd();
  EventFd(EventFd&& other) noexcept;
  EventFd& operator=(EventFd&& other) noexcept;
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;

  static wire::Result<EventFd, int> create();
  int fd() const { return fd_; }
  // Reads and clears the count; returns the count (0 if none was pending).
  uint64_t drain() const;

 private:
  int fd_ = -1;
};

}  // namespace xroce::device
