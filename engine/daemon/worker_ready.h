// Which of a worker's hosted QPs have new work in their rings, found without reading every
// ring: the ready bits of the contexts' pages (include/xroce/queues.h, "Ready bits"). A turn's
// pull then costs one load per 64 QPs plus one pull per QP that was posted to, and a sleep or
// wake one store per context page instead of one per ring.
//
// A QP's bit is taken (cleared) before its rings are read, so a post that lands after the read
// sets it again and is pulled next turn. A pull that leaves work in a ring (the transport's
// queue was full, or the QP's state made it wait) must put the bit back (mark_ready): work is
// never left behind a cleared bit.
//
// Threading: the owning worker's thread; the pages are shared with the provider and with other
// workers hosting QPs of the same context (each takes only its own QPs' bits).
#pragma once

#include <cstdint>
#include <vector>

#include "xroce/queues.h"

namespace xroce::daemon {

struct Hosted;

// A bit of a context page: where a binding's rings say they have work.
struct ReadyBit {
  queues::ContextPage* page = nullptr;
  std::uint32_t bit = queues::kNoReadyBit;
};

class ReadyRings {
 public:
  ReadyRings() = default;
  ReadyRings(const ReadyRings&) = delete;
  ReadyRings& operator=(const ReadyRings&) = delete;

  // `hosted` is pulled whenever `bit` is set; it starts set, for work posted before now.
  void add(ReadyBit bit, Hosted* hosted);
  void remove(ReadyBit bit);
  // Sets `bit` again: its QP has work its pull left.
  static void mark_ready(ReadyBit bit);

  // Takes this worker's set bits and calls pull(Hosted&) for each of their QPs.
  template <class Pull>
  void take(Pull&& pull) {
    for (Page& p : pages_) {
      for (std::size_t w = 0; w < p.mine.size(); ++w) {
        if (p.mine[w] == 0) continue;
        std::atomic<std::uint64_t>& word = p.page->ready[w];
        const std::uint64_t seen = word.load(std::memory_order_relaxed) & p.mine[w];
        if (seen == 0) continue;
        std::uint64_t taken = word.fetch_and(~seen, std::memory_order_seq_cst) & seen;
        while (taken != 0) {
          const int b = __builtin_ctzll(taken);
          taken &= taken - 1;
          pull(*p.by_bit[w * 64 + static_cast<std::size_t>(b)]);
        }
      }
    }
  }
  // Whether a bit of ours is set (the last look before sleeping).
  bool any_ready() const;
  // Publishes in every page whether this worker sleeps (seq_cst, before its last look): each
  // page counts the workers serving it that sleep.
  void set_asleep(bool asleep);
  std::size_t qps() const;

 private:
  struct Page {
    queues::ContextPage* page = nullptr;
    std::vector<std::uint64_t> mine;  // per word of `ready`, the bits of this worker's QPs
    std::vector<Hosted*> by_bit;      // indexed by bit; null where the bit is not ours
    std::size_t qps = 0;
  };
  Page* find(const queues::ContextPage* page);

  std::vector<Page> pages_;
  bool asleep_ = false;
};

}  // namespace xroce::daemon
