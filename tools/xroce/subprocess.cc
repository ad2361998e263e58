#include "subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

namespace xroce::cli {

namespace {

using Clock = std::chrono::steady_clock;

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

Program::Program(const std::vector<std::string>& argv, const Environment& env) {
  int fds[2];
  if (argv.empty() || pipe2(fds, O_CLOEXEC) != 0) return;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (pid == 0) {
    setpgid(0, 0);  // its own group, so a kill reaches what it starts
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    apply_environment(env);
    std::vector<char*> args;
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  pid_ = pid;
  out_fd_ = fds[0];
}

Program::~Program() {
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
}

void Program::drain() {
  if (out_fd_ < 0) return;
  char buf[4096];
  for (;;) {
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return;
    const ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n <= 0) {
      close(out_fd_);
      out_fd_ = -1;
      return;
    }
    output_.append(buf, static_cast<std::size_t>(n));
  }
}

bool Program::exited() {
  if (pid_ <= 0) return true;
  drain();
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
  status_ = decode_status(status);
  pid_ = -1;
  return true;
}

ProgramResult Program::wait(std::chrono::milliseconds deadline) {
  ProgramResult result;
  const auto until = Clock::now() + deadline;
  char buf[4096];
  // Read until the output closes (the program and what it started are done) or the deadline.
  while (out_fd_ >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n <= 0) {
      close(out_fd_);
      out_fd_ = -1;
      break;
    }
    output_.append(buf, static_cast<std::size_t>(n));
  }
  if (pid_ > 0) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    while (r == 0 && Clock::now() < until) {
      pollfd none{-1, 0, 0};
      poll(&none, 0, 5);
      r = waitpid(pid_, &status, WNOHANG);
    }
    if (r == 0) {
      result.timed_out = true;
      kill(-pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
    status_ = decode_status(status);
    pid_ = -1;
  }
  result.status = status_;
  result.output = std::move(output_);
  output_.clear();
  return result;
}

ProgramResult run_program(const std::vector<std::string>& argv, const Environment& env,
                          std::chrono::milliseconds deadline) {
  Program p(argv, env);
  if (!p.started()) return ProgramResult{127, "cannot start " + argv.at(0), false};
  return p.wait(deadline);
}

}  // namespace xroce::cli
