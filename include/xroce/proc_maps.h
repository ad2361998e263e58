// /proc/<pid>/maps, parsed: the one reader of that format in xroce (the daemon checks what a
// client registers, the provider what it may re-back with a memfd, tests what is mapped).
//
// Header-only and free of allocation beyond the caller's string, so that programs which must
// not link xroce code (the tests' verbs probe) can use it too.
//
// A line reads "start-end perms offset dev inode [path]", addresses and offset in hex.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace xroce::proc {

struct Mapping {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::string_view perms;  // "rwxp" / "r--s" ...: four characters
  std::uint64_t offset = 0;
  std::uint64_t inode = 0;
  std::string_view path;  // may be empty (anonymous), "[heap]", "/memfd:NAME (deleted)"...

  bool readable() const { return perms[0] == 'r'; }
  bool writable() const { return perms[1] == 'w'; }
  bool shared() const { return perms[3] == 's'; }
};

namespace detail {

// Parses digits of `base` (10 or 16) at the front of `text`; false if there are none.
inline bool take_number(std::string_view& text, int base, std::uint64_t& out) {
  std::size_t i = 0;
  out = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      break;
    }
    out = out * static_cast<std::uint64_t>(base) + static_cast<std::uint64_t>(digit);
  }
  text.remove_prefix(i);
  return i != 0;
}

inline void skip_spaces(std::string_view& text) {
  while (!text.empty() && text.front() == ' ')
    text.remove_prefix(1);
}

// Removes the next space-separated field from the front of `text`.
inline std::string_view take_field(std::string_view& text) {
  skip_spaces(text);
  const std::size_t end = text.find(' ');
  const std::string_view field = text.substr(0, end);
  text.remove_prefix(end == std::string_view::npos ? text.size() : end);
  return field;
}

}  // namespace detail

// One line; nullopt if it is not a maps line.
inline std::optional<Mapping> parse_line(std::string_view line) {
  Mapping m;
  if (!detail::take_number(line, 16, m.start) || line.empty() || line.front() != '-') {
    return std::nullopt;
  }
  line.remove_prefix(1);
  if (!detail::take_number(line, 16, m.end) || m.end < m.start) return std::nullopt;
  m.perms = detail::take_field(line);
  if (m.perms.size() != 4) return std::nullopt;
  detail::skip_spaces(line);
  if (!detail::take_number(line, 16, m.offset)) return std::nullopt;
  if (detail::take_field(line).empty()) return std::nullopt;  // dev
  detail::skip_spaces(line);
  if (!detail::take_number(line, 10, m.inode)) return std::nullopt;
  detail::skip_spaces(line);
  m.path = line;
  return m;
}

// Calls visit(mapping) for each well-formed line, in order (ascending addresses), until it
// returns false.
template <typename Visit>
void for_each(std::string_view text, Visit&& visit) {
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (const auto m = parse_line(line)) {
      if (!visit(*m)) return;
    }
  }
}

// True if [addr, addr + length) is covered without a gap by mappings that all satisfy
// ok(mapping). An empty range, or one that wraps around the address space, is not covered.
template <typename Ok>
bool covers(std::string_view text, std::uint64_t addr, std::uint64_t length, Ok&& ok) {
  if (length == 0 || addr + length < addr) return false;
  const std::uint64_t end = addr + length;
  std::uint64_t covered = addr;
  bool good = true;
  for_each(text, [&](const Mapping& m) {
    if (m.end <= covered) return true;
    if (m.start > covered || !ok(m)) {
      good = false;
      return false;
    }
    covered = m.end;
    return covered < end;
  });
  return good && covered >= end;
}

// Reads a whole maps file from an open descriptor, from its start (a /proc/PID/maps descriptor
// may be re-read: each read shows the address space as it is then; an empty text means the
// address space the descriptor was opened on is gone: the process exited or exec'd). 0 or errno.
inline int read_all(int fd, std::string& out) {
  out.clear();
  char buf[16384];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return 0;
    out.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
}

// Reads a whole maps file by path (e.g. "/proc/self/maps"). 0 or errno.
inline int read_all(const char* path, std::string& out) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int err = read_all(fd, out);
  ::close(fd);
  return err;
}

}  // namespace xroce::proc
