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
}

SharedRegion::SharedRegion(SharedRegion&& other) noexcept
    : fd_(std::move(other.fd_)),
      base_(std::exchange(other.base_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

SharedRegion& SharedRegion::operator=(SharedRegion&& other) noexcept {
  if (this != &other) {
    SharedRegion old(std::move(*this));
    fd_ = std::move(other.fd_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

wire::Result<SharedRegion, int> SharedRegion::create(const char* name, std::size_t bytes) {
  if (bytes == 0) return wire::Err{EINVAL};
  SharedRegion region;
  region.bytes_ = (bytes + kPageBytes - 1) & ~(kPageBytes - 1);
  region.fd_.reset(memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  const int fd = region.fd_.get();
  if (fd < 0) return wire::Err{errno};
  if (ftruncate(fd, static_cast<off_t>(region.bytes_)) != 0) return wire::Err{errno};
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return wire::Err{errno};
  }
  void* base = mmap(nullptr, region.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return wire::Err{errno == EAGAIN ? ENOMEM : errno};
  region.base_ = base;
  return region;
}

Fd SharedRegion::share_fd() const {
  if (!fd_.valid()) return Fd();
  return Fd(fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0));
}

wire::Result<Fd, int> create_doorbell() {
  Fd fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!fd.valid()) return wire::Err{errno};
  return fd;
}

}  // namespace xroce::device
