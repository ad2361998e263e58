#include "xroce/control_message.h"

namespace xroce::control {

std::string encode_message(Op op, uint32_t seq, int32_t status, std::string_view body) {
  Header header;
  header.op = op;
  header.seq = seq;
  header.status = status;
  std::string out = body_bytes(header);
  out.append(body);
  return out;
}

std::optional<Header> decode_header(std::span<const std::byte> datagram) {
  Header header;
  if (datagram.size() < sizeof(header)) return std::nullopt;
  std::memcpy(&header, datagram.data(), sizeof(header));
  if (header.magic != kMagic || header.version != kVersion) return std::nullopt;
  return header;
}

}  // namespace xroce::control
