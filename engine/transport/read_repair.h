// Selective repair of lost READ responses: the requester's record of which responses past its
// oldest unacknowledged PSN (comp_psn) arrived, and which ranges it asked for again.
//
// Why: a READ retry in the rxe manner (docs/protocol.md 3.9; rxe_req.c req_retry) asks for the
// READ again from its first missing response to its end and resends every later request, and the
// requester drops every response after the gap (rxe_comp.c check_psn), so one lost response
// costs every response in flight behind it, as a go-back-N of requests does. A READ response is
// the responder's memory at a known offset of the requester's buffer: one that arrives after a
// gap is as good as one in order. So the requester places it at once, remembers its PSN, and asks
// only for the responses missing: a duplicate READ request whose RETH names the missing range, a
// sub-range of the original, which a responder answers by reading that range again (IBA 9.4.4;
// docs/protocol.md 3.6: a duplicate READ may name a sub-range of the original with the same
// R_Key; rxe_resp.c duplicate_request checks it and read_reply replays exactly the sub-range,
// ending it with READ_RESPONSE_LAST, or ONLY when the range is one packet at the READ's first
// PSN). Completions
// still come in order: comp_psn moves over a received response only when everything before it
// arrived, so the WQE completes, as IBA requires, once all its data is placed.
//
// A responder sends its responses in PSN order, and a replay in PSN order too, interleaved with
// the original stream (ours answers a duplicate ahead of what it queued, the responder's
// Responder::queue_replay; rxe after the READ reply under way). So the record keeps the highest
// PSN the original stream reached: a response beyond it shows the PSNs between them lost; one
// before it belongs to a range asked for again, and shows lost what that range's replay skipped.
// What neither reveals (a lost last response, a lost request for a range, a whole replay lost)
// the adaptive timer finds (Completer::adaptive_retransmit asks for the ranges again).
//
// Only READ responses are placed ahead: an ATOMIC's result or a SEND/WRITE's ACK past a gap
// still means go-back-N. The record covers kSpan PSNs past comp_psn; a response further on is
// handled as before (a READ longer than the span, or a window larger than it).
#pragma once

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <vector>

#include "wire/psn.h"

namespace xroce::transport {

class ReadRepair {
 public:
  // PSNs past comp_psn the record covers: 2^24 is a multiple, so a PSN's bit stays put across
  // the PSN's wrap. Twice rxe's 128 unacknowledged PSNs, plus one 1 MiB READ at 4096 bytes.
  static constexpr std::uint32_t kSpan = 512;

  // A closed range of PSNs lost, to ask for again.
  struct Range {
    wire::Psn first;
    wire::Psn last;
    bool operator==(const Range&) const = default;
  };

  // Whether `psn` lies in the span after `comp` the record covers (comp itself excluded: a
  // response there is taken in order).
  static bool covers(wire::Psn comp, wire::Psn psn) {
    return psn.after(comp) && static_cast<std::uint32_t>(psn.distance_from(comp)) < kSpan;
  }
  // Whether the response for `psn` (covered) arrived and was placed.
  bool received(wire::Psn psn) const { return bits_[psn.value() % kSpan]; }

  // A READ response for `psn` (comp_psn `comp`, or covered) arrived and is placed: appends to
  // `lost` the ranges it shows missing, which the caller asks for again.
  void on_response(wire::Psn comp, wire::Psn psn, std::vector<Range>& lost) {
    if (psn.after(comp) && !received(psn)) {
      bits_.set(psn.value() % kSpan);
      ++placed_;
    }
    const wire::Psn highest = tracking_ ? highest_ : comp - 1;
    if (psn.after(highest)) {
      // Ahead of the original stream: what lies between went missing.
      missing(later(highest + 1, comp), psn, lost);
      tracking_ = true;
      highest_ = psn;
      return;
    }
    for (std::size_t i = 0; i < asked_.size(); ++i) {
      Range& a = asked_[i];
      if (!wire::psn_in_range(psn, a.first, a.last)) continue;
      // A range's replay comes in order: what it skipped before this response was lost again.
      if (psn.after(a.first)) missing(a.first, psn, lost);
      if (psn == a.last) {
        asked_.erase(asked_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        a.first = psn + 1;
      }
      return;
    }
  }

  // The caller asks for `r` again (from on_response's or expired()'s ranges): it takes the place
  // of the ranges asked for before that lie within it.
  void asked(const Range& r) {
    std::erase_if(asked_, [&](const Range& a) {
      return wire::psn_in_range(a.first, r.first, r.last) &&
             wire::psn_in_range(a.last, r.first, r.last);
    });
    asked_.push_back(r);
  }
  // The first PSN in [from, last] not received (`from` comp_psn or covered), or last + 1.
  wire::Psn first_missing(wire::Psn from, wire::Psn last) const {
    wire::Psn p = from;
    while (p.at_or_before(last) && received(p))
      ++p;
    return p;
  }
  // Whether a range asked for again ends at `psn`: its replay ends there with LAST or ONLY.
  bool asked_range_ends_at(wire::Psn psn) const {
    return std::any_of(asked_.begin(), asked_.end(), [&](const Range& a) { return a.last == psn; });
  }
  bool repairing() const { return !asked_.empty(); }

  // comp_psn moved from `from` to `to`: what lies behind it is forgotten, and ranges asked for
  // lose what it passed.
  void on_advance(wire::Psn from, wire::Psn to) {
    const std::uint32_t n = std::min<std::uint32_t>(
        kSpan, static_cast<std::uint32_t>(std::max(0, to.distance_from(from))));
    wire::Psn p = from;
    for (std::uint32_t i = 0; placed_ != 0 && i < n; ++i, ++p) {
      if (received(p)) {
        bits_.reset(p.value() % kSpan);
        --placed_;
      }
    }
    std::erase_if(asked_, [&](Range& a) {
      if (a.last.before(to)) return true;
      if (a.first.before(to)) a.first = to;
      return false;
    });
    if (tracking_ && highest_.before(to)) tracking_ = false;
  }

  // The adaptive timer expired with ranges asked for: each is asked for again from the first PSN
  // still missing (appended to `again`, and kept as asked).
  void expired(wire::Psn comp, std::vector<Range>& again) {
    std::vector<Range> asked;
    asked.swap(asked_);
    for (const Range& a : asked)
      missing(later(a.first, comp), a.last + 1, again);
    for (const Range& r : again)
      asked_.push_back(r);
  }

  // A go-back-N from comp_psn: the responder replays everything from there, in order, so the
  // record starts over from comp_psn, keeping what was placed.
  void restart() {
    asked_.clear();
    tracking_ = false;
  }
  // The QP was reset or went to ERR.
  void clear() {
    bits_.reset();
    placed_ = 0;
    restart();
  }

 private:
  // Appends the maximal runs of PSNs in [from, to) not received.
  void missing(wire::Psn from, wire::Psn to, std::vector<Range>& out) const {
    bool open = false;
    Range run;
    for (wire::Psn p = from; p.before(to); ++p) {
      if (!received(p)) {
        if (!open) run.first = p;
        run.last = p;
        open = true;
      } else if (open) {
        out.push_back(run);
        open = false;
      }
    }
    if (open) out.push_back(run);
  }

  static wire::Psn later(wire::Psn a, wire::Psn b) { return a.after(b) ? a : b; }

  std::bitset<kSpan> bits_;
  std::uint32_t placed_ = 0;  // bits set
  // The highest PSN the original stream of responses reached since comp_psn last passed it.
  bool tracking_ = false;
  wire::Psn highest_;
  // Ranges asked for again whose replay has not reached their last PSN: `first` is the next PSN
  // that replay should bring.
  std::vector<Range> asked_;
};

}  // namespace xroce::transport
