// An owned file descriptor, closed on destruction (STYLE.md §11: RAII for every resource).
#pragma once

#include <unistd.h>

namespace xroce::daemon {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace xroce::daemon
