// The classic libpcap file format, as bytes in memory (no file I/O here: callers read and write
// the files). Enough to write golden captures and to read what tcpdump, tshark and dumpcap
// write in pcap (not pcapng) format: both byte orders, micro- and nanosecond timestamps.
#pragma once

#include <cstdint>
#include <vector>

#include "wire/byteorder.h"
#include "wire/result.h"

namespace xroce::wire::pcap {

inline constexpr std::uint32_t kLinkTypeEthernet = 1;
inline constexpr std::size_t kFileHeaderBytes = 24;
inline constexpr std::size_t kRecordHeaderBytes = 16;

struct Record {
  std::uint64_t timestamp_ns = 0;
  std::uint32_t original_length = 0;  // on the wire; data may be shorter (snaplen)
  Bytes data;                         // points into the file bytes
};

struct File {
  std::uint32_t link_type = 0;
  std::uint32_t snaplen = 0;
  bool nanosecond = false;
  std::vector<Record> records;
};

enum class Error : std::uint8_t {
  kTruncatedHeader,  // shorter than the 24-byte file header
  kBadMagic,         // not a pcap file (pcapng is not supported)
  kTruncatedRecord,  // a record header or its data runs past the end of the file
};
const char* to_string(Error e);

// Parses a whole file; records refer into `file`, which must outlive the result.
Result<File, Error> parse(Bytes file);

// Builds a little-endian, microsecond pcap file in memory.
class Writer {
 public:
  explicit Writer(std::uint32_t link_type = kLinkTypeEthernet, std::uint32_t snaplen = 65535);
  void add(Bytes frame, std::uint64_t timestamp_ns);
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<std::uint8_t> bytes_;
};

}  // namespace xroce::wire::pcap
