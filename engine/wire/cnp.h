// The RoCEv2 congestion notification packet (docs/protocol.md §5.3; Annex A17): sent by a
// notification point to the QP whose traffic arrived CE-marked.
#pragma once

#include "wire/headers.h"

namespace xroce::wire {

// BTH of a CNP: opcode 0x81, BECN set, PSN 0, DestQP = the QPN of the sender's QP that
// originated the marked traffic. The 16 reserved bytes follow from the opcode table.
constexpr TransportHeaders make_cnp(Qpn originating_qp, std::uint16_t pkey = kDefaultPkey) {
  TransportHeaders h;
  h.bth.opcode = Opcode::kCnp;
  h.bth.pkey = pkey;
  h.bth.becn = true;
  h.bth.dest_qp = originating_qp;
  h.bth.psn = Psn(0);
  return h;
}

}  // namespace xroce::wire
