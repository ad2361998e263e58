// What most cases share: one target QP connected to the peer's QP, one registered buffer, and
// the few ways a case builds requests and judges answers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "case.h"

namespace xroce::conform {

inline constexpr std::uint32_t kTargetRqPsn = QpSpec{}.rq_psn;  // what the target expects first
inline constexpr std::uint32_t kTargetSqPsn = QpSpec{}.sq_psn;  // what the target sends first
inline constexpr std::uint32_t kBufferBytes = 64 * 1024;

class Session {
 public:
  // Registers a buffer with `mr_access` and creates the target QP from `spec` (its peer_qpn set
  // to the case's peer QPN).
  Session(CaseContext& ctx, QpSpec spec = {}, std::uint32_t mr_access = access::kAllRemote);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  CaseContext& ctx;
  QpSpec spec;
  QpInfo qp;
  MrInfo mr;

  // Request headers from the peer to the target QP.
  wire::TransportHeaders req(wire::Opcode op, std::uint32_t psn, bool ack_req = true) const;
  wire::TransportHeaders write(wire::Opcode op, std::uint32_t psn, std::uint64_t va,
                               std::uint32_t rkey, std::uint32_t len) const;
  wire::TransportHeaders read(std::uint32_t psn, std::uint64_t va, std::uint32_t rkey,
                              std::uint32_t len) const;
  wire::TransportHeaders atomic(wire::Opcode op, std::uint32_t psn, std::uint64_t va,
                                std::uint32_t rkey, std::uint64_t swap_add,
                                std::uint64_t compare) const;
  std::uint64_t va(std::uint32_t offset = 0) const { return mr.addr + offset; }

  void send(const wire::TransportHeaders& h, const std::vector<std::uint8_t>& payload = {});

  // Answers from the target.
  Reply expect(const std::string& what);
  // An ACK (or the first packet of any answer) with this PSN; AETH must say ACK.
  Reply expect_ack(std::uint32_t psn, const std::string& what);
  Reply expect_nak(std::uint32_t psn, wire::NakCode code, const std::string& what);
  Reply expect_rnr_nak(std::uint32_t psn, const std::string& what);
  void expect_silence(const std::string& why);

  // Completions: exactly `n` within the reply time, none more.
  std::vector<Cqe> expect_cqes(std::size_t n, const std::string& what);
  void expect_no_cqe(const std::string& why);
  Cqe expect_cqe(std::uint32_t status, const std::string& what);

  void post_recv(std::uint64_t wr_id, std::uint32_t offset, std::uint32_t length);
  void fill(std::uint32_t offset, std::uint32_t length, std::uint8_t seed);
  std::vector<std::uint8_t> memory(std::uint32_t offset, std::uint32_t length);
  void expect_memory(std::uint32_t offset, const std::vector<std::uint8_t>& want,
                     const std::string& what);
};

// Bytes seed, seed+7, ... (never all equal, so a shifted copy shows).
std::vector<std::uint8_t> pattern(std::uint32_t length, std::uint8_t seed);

[[noreturn]] void fail(const std::string& expected, const std::string& seen);
void check(bool ok, const std::string& expected, const std::string& seen);
void require_atomics(const CaseContext& ctx);

std::string hex(const std::vector<std::uint8_t>& bytes, std::size_t max = 16);

}  // namespace xroce::conform
