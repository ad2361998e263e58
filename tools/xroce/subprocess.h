// Running other programs from the CLI (perftest, ibv_devinfo, ip) with extra environment
// variables, their output captured, and deadlines: a program that overstays is killed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "app_env.h"

namespace xroce::cli {

struct ProgramResult {
  int status = -1;     // exit status, 128 + signal, or 127 when it could not be started
  std::string output;  // stdout and stderr, interleaved
  bool timed_out = false;
};

// A program running in the background; its output is collected until it exits. The
// destructor kills it (SIGKILL to its process group) if it still runs.
class Program {
 public:
  // argv[0] is looked up in PATH; `env` is set on top of this process's environment.
  Program(const std::vector<std::string>& argv, const Environment& env = {});
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Waits for it to exit (reading its output meanwhile) up to the deadline, then kills it.
  ProgramResult wait(std::chrono::milliseconds deadline);
  // Reads what output is there without waiting.
  void drain();
  // Whether it has exited (reaps it if so).
  bool exited();

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int status_ = -1;
  std::string output_;
};

// Runs a program to completion (or the deadline).
ProgramResult run_program(const std::vector<std::string>& argv, const Environment& env,
                          std::chrono::milliseconds deadline);

}  // namespace xroce::cli
