// libFuzzer target for decode_frame (clang, -fsanitize=fuzzer,address,undefined). Besides
// "no crash, no sanitizer report" it checks properties of every frame that decodes:
//   - the payload lies inside the input;
//   - the engine's ICRC equals the bit-at-a-time reference, and icrc_ok says whether it
//     matches the wire;
//   - re-encoding the decoded fields gives a frame that decodes to the same fields.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fuzz_support.h"
#include "wire/frame.h"
#include "wire/icrc.h"
#include "wire/icrc_reference.h"

namespace {

using xroce::fuzz::require;

using namespace xroce::wire;

Bytes ip_datagram(const std::uint8_t* data, const DecodedFrame& f) {
  const std::size_t ip = f.addr.src_ip.is_v4() ? kIpv4HeaderBytes : kIpv6HeaderBytes;
  return Bytes(data + f.ip_offset, ip + f.udp_length - kIcrcBytes);
}

void check_reencode(const DecodedFrame& f) {
  std::vector<std::uint8_t> buf(frame_bytes(f.addr, f.hdr, f.payload.size()));
  auto n = encode_frame(f.addr, f.hdr, f.payload, buf);
  require(n.ok() && *n == buf.size(), "a decoded frame re-encodes");
  DecodedFrame again;
  require(!decode_frame_into(buf, again).has_value(), "a re-encoded frame decodes");
  require(again.icrc_ok, "a re-encoded frame has a good ICRC");
  require(again.addr == f.addr, "addresses survive a re-encode");
  TransportHeaders want = f.hdr;
  want.bth.pad_count = again.hdr.bth.pad_count;  // the encoder derives the pad from the payload
  require(again.hdr == want, "transport headers survive a re-encode");
  require(again.payload.size() == f.payload.size() &&
              std::equal(f.payload.begin(), f.payload.end(), again.payload.begin()),
          "payload survives a re-encode");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Bytes in(data, size);
  DecodedFrame f;
  if (decode_frame_into(in, f).has_value()) return 0;
  require(f.payload.empty() ||
              (f.payload.data() >= data && f.payload.data() + f.payload.size() <= data + size),
          "payload inside the input");
  const Bytes dgram = ip_datagram(data, f);
  require(dgram.data() + dgram.size() + kIcrcBytes <= data + size, "ICRC inside the input");
  const std::uint32_t fast = icrc_compute(dgram);
  require(fast == reference::icrc(dgram), "fast ICRC equals the reference");
  require(f.icrc_ok == (fast == f.icrc_wire), "icrc_ok reports the comparison");
  check_reencode(f);
  return 0;
}
