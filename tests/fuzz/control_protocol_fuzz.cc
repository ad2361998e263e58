// libFuzzer target for the control protocol's message layer (include/xroce/control_client.h,
// control_message.h, fd_passing.h): both ends of a real Unix SEQPACKET connection, with real
// descriptors passed.
//
// The input plays a daemon that answers a ControlClient call (call, call_fds or call_text, as
// the provider and the CLI make them) with arbitrary datagrams — wrong sequence numbers, bad
// magic or version, short bodies, text pages that lie about their length, any number of
// descriptors — and a client that sends the daemon one arbitrary datagram with up to six
// descriptors, which the daemon's receive path (receive_message, decode_header, body reads of
// every request type) must take apart.
//
// Properties besides "no crash, no sanitizer report":
//   - no descriptor leaks: after each input the process holds exactly the descriptors it held
//     before, whatever the datagrams carried and whatever the call returned;
//   - call_fds that succeeds hands over exactly the descriptors asked for, all open;
//   - a status the client returns is 0 or a positive errno.
#include <dirent.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "xroce/control.h"
#include "xroce/control_client.h"
#include "xroce/control_message.h"
#include "xroce/fd.h"
#include "xroce/fd_passing.h"

namespace {

using xroce::fuzz::Input;
using xroce::fuzz::require;

using namespace xroce;

// Descriptors of the kinds an input makes or receives: sockets and eventfds. (libFuzzer and the
// sanitizers open pipes and /dev/null of their own along the way, e.g. for the symbolizer.)
int open_descriptors() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* entry = d != nullptr ? readdir(d) : nullptr) {
    char target[64] = {};
    const std::string link = std::string("/proc/self/fd/") + entry->d_name;
    if (readlink(link.c_str(), target, sizeof target - 1) <= 0) continue;
    const std::string kind(target);
    n += kind.rfind("socket:", 0) == 0 || kind.rfind("anon_inode:", 0) == 0 ? 1 : 0;
  }
  if (d != nullptr) closedir(d);
  return n;
}

// Sends `bytes` with `count` fresh eventfds, by hand when more than send_message takes (the
// kernel then delivers what fits the receiver's buffer and closes the rest).
void send_with_scrap_fds(int socket, const std::string& bytes, int count) {
  std::vector<int> fds;
  for (int i = 0; i < count; ++i)
    fds.push_back(eventfd(0, EFD_CLOEXEC));
  if (fds.size() <= kMaxPassedFds) {
    (void)send_message(socket, std::as_bytes(std::span(bytes)), fds, MSG_DONTWAIT);
  } else {
    iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    (void)sendmsg(socket, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  for (const int fd : fds)
    close(fd);
}

// One reply datagram as the input describes it: a header (its sequence number and magic made
// right or left as they come), then arbitrary body bytes.
std::string reply_datagram(Input& in, uint32_t expected_seq, uint8_t flags) {
  control::Header header;
  const std::string raw = in.bytes(sizeof header);
  std::memcpy(&header, raw.data(), raw.size());
  if ((flags & 1) != 0) header.seq = expected_seq;
  if ((flags & 2) != 0) {
    header.magic = control::kMagic;
    header.version = control::kVersion;
  }
  if ((flags & 0x40) != 0) header.status = 0;
  std::string out = control::body_bytes(header);
  out += in.bytes(in.byte() * 16u);
  return out;
}

// The daemon's receive path on one arbitrary datagram.
void daemon_receives(int socket) {
  std::vector<std::byte> buffer(control::kMaxMessageBytes);
  ReceivedMessage message;
  if (receive_message(socket, buffer, message, MSG_DONTWAIT) != 0) return;
  require(message.fds.size() <= kMaxPassedFds || message.fds_truncated,
          "more descriptors than a message may carry are reported");
  const auto datagram = std::span<const std::byte>(buffer.data(), message.bytes);
  if (!control::decode_header(datagram)) return;
  const std::string_view body = control::body_of(datagram);
  control::HelloRequest hello;
  control::RegMrRequest reg_mr;
  control::CreateQpRequest create_qp;
  control::ModifyQpRequest modify_qp;
  control::CcSetRequest cc_set;
  if (control::read_body(body, hello)) (void)control::bounded_name(hello.ibdev, sizeof hello.ibdev);
  (void)control::read_body(body, reg_mr);
  (void)control::read_body(body, create_qp);
  (void)control::read_body(body, modify_qp);
  if (control::read_body(body, cc_set)) (void)body.substr(sizeof cc_set, cc_set.length);
  // Whatever the daemon takes is its own; the rest closes with the message.
  Fd kept = message.take(0);
}

std::string listener_path() {
  return "/tmp/xroce-fuzz-control-" + std::to_string(getpid()) + ".sock";
}

int listener() {
  static int fd = [] {
    const std::string path = listener_path();
    unlink(path.c_str());
    const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path.c_str());
    require(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && listen(s, 4) == 0,
            "the test's listener");
    std::atexit([] { unlink(listener_path().c_str()); });
    return s;
  }();
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const int baseline = [] {
    (void)listener();
    return open_descriptors();
  }();
  Input in{data, size};
  {
    control::ControlClient client;
    require(client.connect(listener_path(), 20) == 0, "connect");
    Fd daemon(accept4(listener(), nullptr, nullptr, SOCK_CLOEXEC));
    require(daemon.valid(), "accept");

    // The client's arbitrary datagram first: the daemon's side takes it apart.
    const uint8_t client_fds = in.byte() % 7;
    send_with_scrap_fds(client.fd(), in.bytes(in.byte() * 8u), client_fds);
    daemon_receives(daemon.get());

    // Then the daemon's answers to one call, queued before the call reads them.
    const uint8_t kind = in.byte() % 3;
    const uint8_t replies = 1 + in.byte() % 4;
    for (uint8_t j = 0; j < replies; ++j) {
      const uint8_t flags = in.byte();
      send_with_scrap_fds(daemon.get(), reply_datagram(in, 1u + j, flags), (flags >> 2) % 7);
    }
    shutdown(daemon.get(), SHUT_WR);  // no more: the client sees the end, not a timeout

    int status = 0;
    char reply[256];
    if (kind == 0) {
      status = client.call(control::Op::query_device, nullptr, 0, reply, in.byte() % sizeof reply);
    } else if (kind == 1) {
      Fd fds[3];
      const std::size_t want = 1 + in.byte() % 3;
      status = client.call_fds(control::Op::create_qp, nullptr, 0, reply, 16, std::span(fds, want));
      for (std::size_t i = 0; status == 0 && i < want; ++i)
        require(fds[i].valid() && fcntl(fds[i].get(), F_GETFD) >= 0, "call_fds hands over fds");
    } else {
      std::string text;
      status = client.call_text(control::Op::link_show, nullptr, 0, text);
    }
    require(status >= 0, "a status is 0 or a positive errno");
  }
  require(open_descriptors() == baseline, "no descriptor outlives an input");
  return 0;
}
