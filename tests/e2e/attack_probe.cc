// xroce_attack_probe's attacks on the control protocol (attack_probe.h lists every mode).
#include "attack_probe.h"
#include "open_device.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "xroce/control.h"
#include "xroce/control_message.h"
#include "xroce/fd.h"
#include "xroce/fd_passing.h"

namespace xroce::attack {

namespace {

using control::Op;

// The device's control socket, as the provider finds it ($SYSFS_PATH from `xroce exec`).
std::string control_path(const char* dev) {
  const char* sysfs = std::getenv("SYSFS_PATH");
  std::ifstream in(std::string(sysfs != nullptr ? sysfs : "/sys") + "/class/infiniband/" + dev +
                   "/" + control::kControlPathFile);
  std::string path;
  std::getline(in, path);
  return path;
}

Fd connect_daemon(const char* dev) {
  const std::string path = control_path(dev);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) return Fd();
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  Fd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  timeval tv{5, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return Fd();
  return fd;
}

// One request on `fd` (any bytes after the header: `body`), its reply's status; EIO when the
// daemon closed the connection or sent nothing back.
int call(int fd, Op op, const std::string& body, std::span<const int> fds = {},
         Fd* reply_fd = nullptr, std::string* reply = nullptr) {
  static uint32_t seq = 0;
  const std::string out = control::encode_message(op, ++seq, 0, body);
  if (send_message(fd, std::as_bytes(std::span(out)), fds) != 0) return EIO;
  std::vector<std::byte> in(control::kMaxMessageBytes);
  ReceivedMessage message;
  if (receive_message(fd, in, message) != 0 || message.closed) return EIO;
  const auto header = control::decode_header(std::span<const std::byte>(in.data(), message.bytes));
  if (!header) return EIO;
  if (reply_fd != nullptr) *reply_fd = message.take(0);
  if (reply != nullptr) {
    *reply = std::string(control::body_of(std::span<const std::byte>(in.data(), message.bytes)));
  }
  return header->status;
}

// Says hello as the provider does: the event socket and this process's own image.
int hello(int fd, const char* dev) {
  int events[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, events) != 0) return errno;
  Fd app(events[0]);
  Fd daemon_end(events[1]);
  Fd mem(open("/proc/self/mem", O_RDWR | O_CLOEXEC));
  Fd maps(open("/proc/self/maps", O_RDONLY | O_CLOEXEC));
  control::HelloRequest request{};
  std::snprintf(request.ibdev, sizeof request.ibdev, "%s", dev);
  const int fds[] = {daemon_end.get(), mem.get(), maps.get()};
  Fd doorbell;
  return call(fd, Op::hello, control::body_bytes(request), fds, &doorbell);
}

int alloc_pd(int fd, uint32_t* handle = nullptr) {
  std::string reply;
  const int status = call(fd, Op::alloc_pd, {}, {}, nullptr, &reply);
  control::HandleReply pd{};
  if (status == 0 && handle != nullptr && control::read_body(reply, pd)) *handle = pd.handle;
  return status;
}

int reg_mr(int fd, uint32_t pd, const void* addr, uint64_t length) {
  control::RegMrRequest request{};
  request.pd_handle = pd;
  request.access = 1 | 2 | 4;  // local write, remote write, remote read
  request.addr = request.iova = reinterpret_cast<uint64_t>(addr);
  request.length = length;
  return call(fd, Op::reg_mr, control::body_bytes(request));
}

void say(const char* key, int status) {
  std::printf("%s %s\n", key, status == 0 ? "ok" : strerrorname_np(status));
  std::fflush(stdout);
}

// A fresh eventfd for a message to carry (the caller closes its copy after sending).
int scrap_fd() {
  return eventfd(0, EFD_CLOEXEC);
}

// The connection survives an exec of its opener (its close-on-exec flag cleared, the strongest
// case): the child that inherited it, and the new image itself, ask over it.
int inherit_after_exec(const char* dev, char** program) {
  Fd conn = connect_daemon(dev);
  uint32_t pd = 0;
  if (!conn.valid() || hello(conn.get(), dev) != 0 || alloc_pd(conn.get(), &pd) != 0) {
    std::printf("setup failed\n");
    return 1;
  }
  static char parent_page[4096] __attribute__((aligned(4096))) = {1};
  fcntl(conn.get(), F_SETFD, 0);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child == 0) {
    // Wait (with a deadline) until the parent runs another program: its exe changes (or, for a
    // setuid program, can no longer be read at all).
    char before[256] = {};
    const std::string exe = "/proc/" + std::to_string(parent) + "/exe";
    (void)!readlink(exe.c_str(), before, sizeof before - 1);
    bool execd = false;
    for (int i = 0; i < 500 && !execd; ++i) {
      char now[256] = {};
      execd = readlink(exe.c_str(), now, sizeof now - 1) < 0 || std::strcmp(now, before) != 0;
      if (!execd) usleep(10'000);
    }
    std::printf("parent_execd %s\n", execd ? "yes" : "no");
    say("child_reg_mr", reg_mr(conn.get(), pd, parent_page, sizeof parent_page));
    say("child_alloc_pd", alloc_pd(conn.get()));
    say("child_hello", hello(conn.get(), dev));
    std::printf("done\n");
    std::fflush(stdout);
    _exit(0);
  }
  std::printf("connection_fd %d\n", conn.get());
  std::fflush(stdout);
  // "FD" in the program's arguments stands for the connection's descriptor number.
  const std::string fd_number = std::to_string(conn.get());
  for (char** arg = program; *arg != nullptr; ++arg) {
    if (std::strcmp(*arg, "FD") == 0) *arg = const_cast<char*>(fd_number.c_str());
  }
  execv(program[0], program);
  std::printf("exec failed: %s\n", std::strerror(errno));
  return 1;
}

// The probe exec'd into itself with the connection of its former image.
int use_inherited(int fd, const char* dev) {
  static char page[4096] __attribute__((aligned(4096))) = {1};
  say("new_image_reg_mr", reg_mr(fd, 1, page, sizeof page));
  say("new_image_alloc_pd", alloc_pd(fd));
  say("new_image_hello", hello(fd, dev));
  return 0;
}

// The opener exits; its child keeps the connection and, once told, uses it.
int orphan(const char* dev) {
  Fd conn = connect_daemon(dev);
  uint32_t pd = 0;
  static char buffer[8192] __attribute__((aligned(4096)));
  if (!conn.valid() || hello(conn.get(), dev) != 0 || alloc_pd(conn.get(), &pd) != 0) {
    std::printf("setup failed\n");
    return 1;
  }
  say("opener_reg_mr", reg_mr(conn.get(), pd, buffer, sizeof buffer));
  std::printf("opener %d\n", getpid());
  std::fflush(stdout);
  const pid_t opener = getpid();
  if (fork() != 0) _exit(0);
  for (int i = 0; i < 1000 && getppid() == opener; ++i)
    usleep(10'000);
  std::printf("orphaned %s\n", getppid() != opener ? "yes" : "no");
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);  // "go", once the opener's pid is someone else's
  say("orphan_alloc_pd", alloc_pd(conn.get()));
  say("orphan_reg_mr", reg_mr(conn.get(), pd, buffer, sizeof buffer));
  say("orphan_hello", hello(conn.get(), dev));
  std::printf("done\n");
  return 0;
}

// A root process's context used by a child that dropped its privileges: whatever it asks, and
// wherever it points, the answer is the same, so it learns nothing of what is mapped.
int drop_privileges(const char* dev) {
  Fd conn = connect_daemon(dev);
  uint32_t pd = 0;
  if (!conn.valid() || hello(conn.get(), dev) != 0 || alloc_pd(conn.get(), &pd) != 0) {
    std::printf("setup failed\n");
    return 1;
  }
  static char mapped[4096] __attribute__((aligned(4096))) = {1};
  const auto* unmapped = reinterpret_cast<const void*>(uintptr_t{0x10000});
  // The opener itself, for comparison: the real check answers it.
  say("owner_mapped", reg_mr(conn.get(), pd, mapped, sizeof mapped));
  say("owner_unmapped", reg_mr(conn.get(), pd, unmapped, 4096));
  const pid_t child = fork();
  if (child == 0) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(1);
    say("nobody_mapped", reg_mr(conn.get(), pd, mapped, sizeof mapped));
    say("nobody_unmapped", reg_mr(conn.get(), pd, unmapped, 4096));
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("done\n");
  return 0;
}

// Messages that carry descriptors and are wrong in every way: too short, bad magic, bad
// version, unknown op, too many or too few descriptors, descriptors that are not what the op
// needs, an op that wants none. The daemon must close every descriptor it does not keep.
int fd_flood(const char* dev, int count) {
  Fd conn = connect_daemon(dev);
  std::map<std::string, int> answers;
  for (int i = 0; i < count && conn.valid(); ++i) {
    // Descriptors each kind carries: wrong counts, and counts right for an op that then fails.
    static constexpr int kFdsOfKind[8] = {2, 3, 1, 2, 4, 2, 1, 1};
    std::vector<int> fds;
    const int kind = i % 8;
    for (int k = 0; k < kFdsOfKind[kind]; ++k)
      fds.push_back(scrap_fd());
    int status = 0;
    control::Header header;
    if (kind == 0) {
      const char shorter[4] = {1, 2, 3, 4};  // the daemon drops such a client: reconnect
      (void)send_message(conn.get(), bytes_of_object(shorter), fds);
      conn = connect_daemon(dev);
      status = -1;
    } else if (kind == 1 || kind == 2) {
      header.op = Op::link_show;
      if (kind == 1) header.magic = 0xdeadbeef;
      if (kind == 2) header.version = 99;
      (void)send_message(conn.get(), bytes_of_object(header), fds);
      std::vector<std::byte> in(control::kMaxMessageBytes);
      ReceivedMessage reply;
      status = receive_message(conn.get(), in, reply) == 0 && reply.bytes >= sizeof header
                   ? reinterpret_cast<const control::Header*>(in.data())->status
                   : EIO;
    } else if (kind == 3) {
      status = call(conn.get(), Op::link_show, {}, fds);
    } else if (kind == 4) {
      status = call(conn.get(), static_cast<Op>(999), {}, fds);
    } else if (kind == 5) {
      control::HelloRequest request{};
      std::snprintf(request.ibdev, sizeof request.ibdev, "%s", dev);
      status = call(conn.get(), Op::hello, control::body_bytes(request), fds);
    } else if (kind == 6) {
      status = call(conn.get(), Op::create_comp_channel, {}, fds);
    } else {
      control::RegMrRequest request{};
      status = call(conn.get(), Op::reg_mr, control::body_bytes(request), fds);
    }
    for (const int fd : fds)
      close(fd);
    ++answers[status < 0 ? std::string("dropped") : std::string(strerrorname_np(status))];
  }
  std::printf("sent %d\n", count);
  for (const auto& [answer, times] : answers)
    std::printf("answer %s %d\n", answer.c_str(), times);
  // Still a working connection.
  say("link_show_after", conn.valid() ? call(conn.get(), Op::link_show, {}) : EIO);
  return 0;
}

}  // namespace

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

ibv_context* open_device(const char* name) {
  return e2e::open_device_named(name);
}

}  // namespace xroce::attack

int main(int argc, char** argv) {
  using namespace xroce::attack;
  if (argc < 3) {
    std::fprintf(stderr, "usage: attack_probe MODE ARGS... (see attack_probe.h)\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "inherit-after-exec" && argc >= 4) return inherit_after_exec(argv[2], argv + 3);
  if (mode == "use-inherited" && argc >= 4) return use_inherited(std::atoi(argv[2]), argv[3]);
  if (mode == "orphan") return orphan(argv[2]);
  if (mode == "drop-privileges") return drop_privileges(argv[2]);
  if (mode == "fd-flood" && argc >= 4) return fd_flood(argv[2], std::atoi(argv[3]));
  if (mode == "forge") return forge(argc - 2, argv + 2);
  if (mode == "target" && argc >= 5) {
    return target(argv[2], argv[3], std::atoi(argv[4]),
                  argc >= 6 && std::string_view(argv[5]) == "flush");
  }
  if (mode == "qps" && argc >= 4) {
    return qps(argv[2], std::atoi(argv[3]), argc >= 5 ? std::atoi(argv[4]) : 1);
  }
  if (mode == "flush" && argc >= 4) return flush(argv[2], argv[3]);
  std::fprintf(stderr, "attack_probe: unknown mode or arguments\n");
  return 2;
}
