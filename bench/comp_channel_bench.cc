// Measures the candidate mechanisms for completion channels with a c 1:3 command fd
// (docs/ARCHITECTURE.md decision 3; the figures and the choice are in engine/daemon/README.md).
//
// ibv_create_comp_channel() does write(cmd_fd, {hdr, response_ptr}) and expects the kernel to
// have stored a new fd in *response_ptr when write returns. A forked "app" and its parent, the
// "daemon", compare:
//   preload  the app asks the daemon over a Unix seqpacket socket, passing one end of a new
//            socketpair (SCM_RIGHTS): what an interposed ibv_create_comp_channel would do;
//   seccomp  the app's write() on the command fd is trapped by a seccomp user-notification
//            filter; the daemon reads the request, installs an fd in the app
//            (SECCOMP_IOCTL_NOTIF_ADDFD), writes the response into its memory, and lets the
//            write return: a synchronous command path with no change to the app;
// plus what the seccomp filter costs every other system call of the app, and the latency of
// delivering one completion event over the channel fd (the same for both).
//
// Usage: <build>/bin/bench/bench_comp_channel [iterations]
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "xroce/fd_passing.h"

namespace {

using Clock = std::chrono::steady_clock;

double ns_per(Clock::time_point start, int n) {
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() / n;
}

void send_fd(int sock, int fd) {
  const char byte = 0;
  if (int err = xroce::send_message(sock, xroce::bytes_of_object(byte), std::span(&fd, 1))) {
    std::fprintf(stderr, "sendmsg: %s\n", std::strerror(err));
  }
}

// The descriptor (the caller owns it), or -1.
int recv_fd(int sock) {
  std::byte byte{};
  xroce::ReceivedMessage message;
  if (xroce::receive_message(sock, std::span(&byte, 1), message) != 0 || message.closed) return -1;
  return message.take(0).release();
}

// The command libibverbs writes for CREATE_COMP_CHANNEL: ib_uverbs_cmd_hdr + response pointer.
struct CreateChannelCmd {
  uint32_t command;
  uint16_t in_words;
  uint16_t out_words;
  uint64_t response;
};
struct CreateChannelResp {
  uint32_t fd;
};

double getppid_ns(int n) {
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i)
    syscall(SYS_getppid);
  return ns_per(start, n);
}

int install_filter(int cmd_fd) {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_write, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(cmd_fd), 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  return static_cast<int>(
      syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog));
}

// The app side: every measurement that runs in the application process.
void app(int ctl, int n) {
  const double plain = getppid_ns(n);
  // preload: a control call passing one end of a new socketpair.
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    int pair[2];
    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair);
    send_fd(ctl, pair[1]);
    char ack;
    if (read(ctl, &ack, 1) != 1) std::exit(1);
    close(pair[1]);
    close(pair[0]);
  }
  const double preload = ns_per(start, n);

  // event delivery: the daemon writes 8 bytes (ib_uverbs_comp_event_desc), we read them.
  const int ev = recv_fd(ctl);
  start = Clock::now();
  for (int i = 0; i < n; ++i) {
    uint64_t desc = 0;
    if (read(ev, &desc, sizeof(desc)) != sizeof(desc) || write(ev, &desc, sizeof(desc)) < 0) {
      std::exit(1);
    }
  }
  const double event_rtt = ns_per(start, n);

  const int cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  const int listener = install_filter(cmd_fd);
  if (listener < 0) {
    std::perror("seccomp");
    std::exit(1);
  }
  send_fd(ctl, listener);
  close(listener);
  const double filtered = getppid_ns(n);
  start = Clock::now();
  for (int i = 0; i < n; ++i) {
    CreateChannelResp resp{~0u};
    CreateChannelCmd cmd{36, 4, 1, reinterpret_cast<uint64_t>(&resp)};
    if (write(cmd_fd, &cmd, sizeof(cmd)) != sizeof(cmd) || resp.fd == ~0u) std::exit(1);
    close(static_cast<int>(resp.fd));
  }
  const double seccomp = ns_per(start, n);
  std::printf("iterations                         %d\n", n);
  std::printf("getppid without filter             %8.0f ns\n", plain);
  std::printf("getppid with seccomp filter        %8.0f ns  (+%.0f ns on every syscall)\n",
              filtered, filtered - plain);
  std::printf("create channel, preload + socket   %8.0f ns\n", preload);
  std::printf("create channel, seccomp user-notif %8.0f ns\n", seccomp);
  std::printf("completion event, one way          %8.0f ns  (half a ping-pong)\n", event_rtt / 2);
}

// The daemon side.
void daemon_side(int ctl, pid_t app_pid, int n) {
  for (int i = 0; i < n; ++i) {
    const int fd = recv_fd(ctl);
    close(fd);
    if (write(ctl, "k", 1) != 1) return;
  }
  int pair[2];
  socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair);
  send_fd(ctl, pair[1]);
  close(pair[1]);
  for (int i = 0; i < n; ++i) {
    uint64_t desc = 0x1234;
    if (write(pair[0], &desc, sizeof(desc)) < 0 || read(pair[0], &desc, sizeof(desc)) < 0) return;
  }

  const int listener = recv_fd(ctl);
  for (int i = 0; i < n; ++i) {
    seccomp_notif req{};
    if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) return;
    CreateChannelCmd cmd{};
    iovec local{&cmd, sizeof(cmd)};
    iovec remote{reinterpret_cast<void*>(req.data.args[1]), sizeof(cmd)};
    process_vm_readv(app_pid, &local, 1, &remote, 1, 0);
    int channel[2];
    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel);
    seccomp_notif_addfd addfd{};
    addfd.id = req.id;
    addfd.srcfd = static_cast<uint32_t>(channel[1]);
    addfd.newfd_flags = O_CLOEXEC;
    const int installed = ioctl(listener, SECCOMP_IOCTL_NOTIF_ADDFD, &addfd);
    close(channel[1]);
    close(channel[0]);
    CreateChannelResp resp{static_cast<uint32_t>(installed)};
    iovec out{&resp, sizeof(resp)};
    iovec to{reinterpret_cast<void*>(cmd.response), sizeof(resp)};
    process_vm_writev(app_pid, &out, 1, &to, 1, 0);
    seccomp_notif_resp answer{};
    answer.id = req.id;
    answer.val = sizeof(CreateChannelCmd);
    ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &answer);
  }
  close(listener);
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 20000;
  int ctl[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) != 0) return 1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(ctl[0]);
    app(ctl[1], n);
    std::fflush(stdout);
    _exit(0);
  }
  close(ctl[1]);
  daemon_side(ctl[0], pid, n);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
