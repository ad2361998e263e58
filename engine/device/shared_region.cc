#include "device/shared_region.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace xroce::device {

namespace {
constexpr std::size_t kPageBytes = 4096;
}

SharedRegion::~SharedRegion() {
  if (base_ != nullptr) munmap(base_, bytes_);
  if (fd_ >= 0) close(fd_);
}

SharedRegion::SharedRegion(SharedRegion&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

SharedRegion& SharedRegion::operator=(SharedRegion&& other) noexcept {
  if (this != &other) {
    SharedRegion old(std::move(*this));
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

wire::Result<SharedRegion, int> SharedRegion::create(const char* name, std::size_t bytes) {
  if (bytes == 0) return wire::Err{EINVAL};
  SharedRegion region;
  region.bytes_ = (bytes + kPageBytes - 1) & ~(kPageBytes - 1);
  region.fd_ = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (region.fd_ < 0) return wire::Err{errno};
  if (ftruncate(region.fd_, static_cast<off_t>(region.bytes_)) != 0) return wire::Err{errno};
  if (fcntl(region.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return wire::Err{errno};
  }
  void* base = mmap(nullptr, region.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, region.fd_, 0);
  if (base == MAP_FAILED) return wire::Err{errno == EAGAIN ? ENOMEM : errno};
  region.base_ = base;
  return region;
}

EventFd::~EventFd() {
  if (fd_ >= 0) close(fd_);
}

EventFd::EventFd(EventFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

EventFd& EventFd::operator=(EventFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

wire::Result<EventFd, int> EventFd::create() {
  EventFd e;
  e.fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (e.fd_ < 0) return wire::Err{errno};
  return e;
}

uint64_t EventFd::drain() const {
  uint64_t count = 0;
  if (read(fd_, &count, sizeof(count)) != static_cast<ssize_t>(sizeof(count))) return 0;
  return count;
}

}  // namespace xroce::device
