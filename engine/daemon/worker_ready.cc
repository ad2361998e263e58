#include "daemon/worker_ready.h"

#include <algorithm>
#include <cassert>

namespace xroce::daemon {

ReadyRings::Page* ReadyRings::find(const queues::ContextPage* page) {
  const auto it =
      std::find_if(pages_.begin(), pages_.end(), [&](const Page& p) { return p.page == page; });
  return it == pages_.end() ? nullptr : &*it;
}

void ReadyRings::add(ReadyBit bit, Hosted* hosted) {
  assert(bit.page != nullptr && bit.bit < queues::kReadyBits);
  Page* p = find(bit.page);
  if (p == nullptr) {
    p = &pages_.emplace_back();
    p->page = bit.page;
    if (asleep_) p->page->asleep_workers.fetch_add(1, std::memory_order_seq_cst);
  }
  const std::size_t w = bit.bit / 64;
  if (p->mine.size() <= w) p->mine.resize(w + 1, 0);
  if (p->by_bit.size() <= bit.bit) p->by_bit.resize(bit.bit + 1, nullptr);
  assert(p->by_bit[bit.bit] == nullptr);
  p->mine[w] |= std::uint64_t{1} << (bit.bit % 64);
  p->by_bit[bit.bit] = hosted;
  ++p->qps;
  mark_ready(bit);
}

void ReadyRings::remove(ReadyBit bit) {
  Page* p = find(bit.page);
  if (p == nullptr || bit.bit >= p->by_bit.size() || p->by_bit[bit.bit] == nullptr) return;
  p->mine[bit.bit / 64] &= ~(std::uint64_t{1} << (bit.bit % 64));
  p->by_bit[bit.bit] = nullptr;
  if (--p->qps != 0) return;
  // The page may be unmapped once its last QP is gone: take our count back.
  if (asleep_) p->page->asleep_workers.fetch_sub(1, std::memory_order_seq_cst);
  pages_.erase(pages_.begin() + (p - pages_.data()));
}

void ReadyRings::mark_ready(ReadyBit bit) {
  bit.page->ready[bit.bit / 64].fetch_or(std::uint64_t{1} << (bit.bit % 64),
                                         std::memory_order_seq_cst);
}

bool ReadyRings::any_ready() const {
  for (const Page& p : pages_) {
    for (std::size_t w = 0; w < p.mine.size(); ++w) {
      if ((p.page->ready[w].load(std::memory_order_seq_cst) & p.mine[w]) != 0) return true;
    }
  }
  return false;
}

void ReadyRings::set_asleep(bool asleep) {
  if (asleep == asleep_) return;
  asleep_ = asleep;
  for (Page& p : pages_) {
    if (asleep) {
      p.page->asleep_workers.fetch_add(1, std::memory_order_seq_cst);
    } else {
      p.page->asleep_workers.fetch_sub(1, std::memory_order_seq_cst);
    }
  }
}

std::size_t ReadyRings::qps() const {
  std::size_t n = 0;
  for (const Page& p : pages_)
    n += p.qps;
  return n;
}

}  // namespace xroce::daemon
