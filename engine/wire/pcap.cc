#include "wire/pcap.h"

namespace xroce::wire::pcap {
namespace {

constexpr std::uint32_t kMagicMicro = 0xA1B2C3D4;
constexpr std::uint32_t kMagicNano = 0xA1B23C4D;
constexpr std::uint32_t kByteSwappedMagicMicro = 0xD4C3B2A1;
constexpr std::uint32_t kByteSwappedMagicNano = 0x4D3CB2A1;
constexpr std::uint16_t kVersionMajor = 2;
constexpr std::uint16_t kVersionMinor = 4;

std::uint32_t load_le32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}

void append_le(std::vector<std::uint8_t>& out, std::uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

}  // namespace

const char* to_string(Error e) {
  switch (e) {
    case Error::kTruncatedHeader:
      return "file shorter than a pcap header";
    case Error::kBadMagic:
      return "not a pcap file (bad magic; pcapng is not supported)";
    case Error::kTruncatedRecord:
      return "truncated pcap record";
  }
  return "unknown pcap error";
}

Result<File, Error> parse(Bytes file) {
  if (file.size() < kFileHeaderBytes) return Err{Error::kTruncatedHeader};
  File out;
  bool big_endian = false;
  switch (load_le32(file.data())) {
    case kMagicMicro:
      break;
    case kMagicNano:
      out.nanosecond = true;
      break;
    case kByteSwappedMagicMicro:
      big_endian = true;
      break;
    case kByteSwappedMagicNano:
      big_endian = true;
      out.nanosecond = true;
      break;
    default:
      return Err{Error::kBadMagic};
  }
  auto u32 = [big_endian](const std::uint8_t* p) {
    return big_endian ? load_be32(p) : load_le32(p);
  };
  out.snaplen = u32(file.data() + 16);
  out.link_type = u32(file.data() + 20);
  std::size_t off = kFileHeaderBytes;
  while (off < file.size()) {
    if (file.size() - off < kRecordHeaderBytes) return Err{Error::kTruncatedRecord};
    const std::uint8_t* h = file.data() + off;
    const std::uint64_t sec = u32(h);
    const std::uint64_t frac = u32(h + 4);
    const std::uint32_t incl = u32(h + 8);
    off += kRecordHeaderBytes;
    if (file.size() - off < incl) return Err{Error::kTruncatedRecord};
    Record r;
    r.timestamp_ns = sec * 1'000'000'000 + (out.nanosecond ? frac : frac * 1000);
    r.original_length = u32(h + 12);
    r.data = file.subspan(off, incl);
    out.records.push_back(r);
    off += incl;
  }
  return out;
}

Writer::Writer(std::uint32_t link_type, std::uint32_t snaplen) {
  append_le(bytes_, kMagicMicro, 4);
  append_le(bytes_, kVersionMajor, 2);
  append_le(bytes_, kVersionMinor, 2);
  append_le(bytes_, 0, 4);  // thiszone
  append_le(bytes_, 0, 4);  // sigfigs
  append_le(bytes_, snaplen, 4);
  append_le(bytes_, link_type, 4);
}

void Writer::add(Bytes frame, std::uint64_t timestamp_ns) {
  append_le(bytes_, static_cast<std::uint32_t>(timestamp_ns / 1'000'000'000), 4);
  append_le(bytes_, static_cast<std::uint32_t>(timestamp_ns % 1'000'000'000 / 1000), 4);
  append_le(bytes_, static_cast<std::uint32_t>(frame.size()), 4);
  append_le(bytes_, static_cast<std::uint32_t>(frame.size()), 4);
  bytes_.insert(bytes_.end(), frame.begin(), frame.end());
}

}  // namespace xroce::wire::pcap
