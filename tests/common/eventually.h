// Waiting in tests: re-check a condition until it holds or a deadline passes, never a fixed
// sleep. One implementation for every test that waits (in-process and across processes).
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace xroce::test {

// Polls `probe` until it returns true (then true) or `deadline` passes (then false), pausing
// `pause` between checks: short for in-process state, longer where each check starts a process.
inline bool eventually(const std::function<bool()>& probe,
                       std::chrono::milliseconds deadline = std::chrono::seconds(10),
                       std::chrono::milliseconds pause = std::chrono::milliseconds(1)) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    if (probe()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(pause);
  }
}

}  // namespace xroce::test
