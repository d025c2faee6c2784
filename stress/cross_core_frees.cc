#include "vtpu/stress/cross_core_frees.h"

#include <string>

#include "vtpu/common/error.h"
#include "vtpu/stress/stress_harness.h"

namespace vtpu {

CrossCoreFrees::CrossCoreFrees(int cores, uint32_t max_lag, std::chrono::milliseconds timeout,
                               std::vector<std::unique_ptr<CoreReplayer>>& replayers)
    : n_(cores), max_lag_(max_lag), timeout_(timeout), replayers_(replayers) {
  for (int c = 0; c < cores; ++c) boxes_.push_back(std::make_unique<Box>());
}

void CrossCoreFrees::ring(int d) {
  Box& b = *boxes_[d];
  std::lock_guard lock(b.mu);
  if (b.waiting) b.cv.notify_one();
}

void CrossCoreFrees::drain(int c) {
  Box& me = *boxes_[c];
  if (!me.nonempty.load(std::memory_order_acquire)) return;
  std::vector<std::pair<int, uint32_t>> items;
  {
    std::lock_guard lock(me.mu);
    items.swap(me.inbox);
    me.nonempty.store(false, std::memory_order_release);
  }
  for (const auto& [owner, slot] : items) {
    replayers_[owner]->free_slot(slot);
    boxes_[owner]->applied.fetch_add(1, std::memory_order_release);
  }
  // Wake the owners (in practice one: only core c - 1 hands frees to core c).
  for (size_t k = 0; k < items.size(); ++k) {
    if (k == 0 || items[k].first != items[k - 1].first) ring(items[k].first);
  }
}

uint64_t CrossCoreFrees::total_progress() const {
  uint64_t sum = arrivals_.load();
  for (const auto& b : boxes_) {
    sum += b->progress.load(std::memory_order_relaxed) + b->applied.load();
  }
  return sum;
}

template <typename Done>
void CrossCoreFrees::wait_draining(int c, Done done, const char* what) {
  Box& me = *boxes_[c];
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  uint64_t seen = total_progress();
  for (;;) {
    const bool finished = done();
    drain(c);
    if (finished) return;
    if (aborted_.load())
      throw AbortedError("core " + std::to_string(c) + " was waiting for " + what +
                         " when another core failed");
    std::unique_lock lock(me.mu);
    me.waiting = true;
    while (!done() && !aborted_.load() && me.inbox.empty()) {
      if (me.cv.wait_until(lock, deadline) == std::cv_status::timeout) {
        const uint64_t now_seen = total_progress();
        if (now_seen == seen) {
          me.waiting = false;
          throw DeadlineExceededError("stress: core " + std::to_string(c) + " waited " +
                                      std::to_string(timeout_.count()) + " ms for " + what +
                                      " while no core made progress (collective_timeout)");
        }
        seen = now_seen;
        deadline = std::chrono::steady_clock::now() + timeout_;
      }
    }
    me.waiting = false;
  }
}

void CrossCoreFrees::hand_off(int owner, uint32_t slot, size_t event) {
  Box& own = *boxes_[owner];
  Box& next = *boxes_[(owner + 1) % n_];
  {
    std::lock_guard lock(next.mu);
    next.inbox.emplace_back(owner, slot);
    next.nonempty.store(true, std::memory_order_release);
    if (next.waiting) next.cv.notify_one();
  }
  own.pending.emplace_back(event, ++own.handed);
}

void CrossCoreFrees::before_event(int c, size_t event) {
  Box& me = *boxes_[c];
  me.progress.store(event + 1, std::memory_order_relaxed);
  drain(c);
  uint64_t required = 0;
  while (!me.pending.empty() && me.pending.front().first + max_lag_ < event) {
    required = me.pending.front().second;
    me.pending.pop_front();
  }
  if (required > 0 && me.applied.load(std::memory_order_acquire) < required) {
    wait_draining(
        c, [&] { return me.applied.load(std::memory_order_acquire) >= required; },
        "the next core to apply its cross-core frees");
  }
}

void CrossCoreFrees::flush(int c) {
  Box& me = *boxes_[c];
  const uint64_t required = me.handed;
  me.pending.clear();
  wait_draining(
      c, [&] { return me.applied.load(std::memory_order_acquire) >= required; },
      "the next core to apply its last cross-core frees");
}

void CrossCoreFrees::gate(int c) {
  Box& me = *boxes_[c];
  const uint64_t target = ++me.gates * static_cast<uint64_t>(n_);
  if (arrivals_.fetch_add(1) + 1 == target) {
    for (int d = 0; d < n_; ++d) ring(d);
  }
  wait_draining(
      c, [&] { return arrivals_.load() >= target; }, "every core to reach the collective round");
}

void CrossCoreFrees::abort() {
  aborted_.store(true);
  for (int d = 0; d < n_; ++d) ring(d);
}

bool is_cross_core_free(int core, uint32_t slot, uint32_t per_mille) {
  uint64_t z = (static_cast<uint64_t>(core) << 32 | slot) * 0x9E3779B97F4A7C15ULL;
  z ^= z >> 29;
  return z % 1000 < per_mille;
}

}  // namespace vtpu
