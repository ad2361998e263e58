// The control channel between `xroce validate` and `xroce validate --serve`: one TCP
// connection carrying one JSON object per line, each request answered by one line.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace xroce::cli::validate {

inline constexpr int kDefaultServePort = 18600;

class LineChannel {
 public:
  LineChannel() = default;
  explicit LineChannel(int connected_fd) : fd_(connected_fd) {}
  ~LineChannel();
  LineChannel(LineChannel&& other) noexcept;
  LineChannel& operator=(LineChannel&& other) noexcept;
  LineChannel(const LineChannel&) = delete;
  LineChannel& operator=(const LineChannel&) = delete;

  // Connects to host:port within the deadline. 0 or an errno, `error` set.
  int connect(const std::string& host, int port, std::chrono::milliseconds deadline,
              std::string& error);
  int fd() const { return fd_; }
  bool send(const nlohmann::json& message);
  // The next line as JSON; nullopt on EOF, a deadline or a malformed line.
  std::optional<nlohmann::json> receive(std::chrono::milliseconds deadline);
  // Reads what is available without blocking; false on EOF. Complete lines are then taken with
  // take_line().
  bool fill();
  std::optional<std::string> take_line();
  // A request and its answer.
  std::optional<nlohmann::json> call(const nlohmann::json& request,
                                     std::chrono::milliseconds deadline);

 private:
  int fd_ = -1;
  std::string pending_;
};

}  // namespace xroce::cli::validate
