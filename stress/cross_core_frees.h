// Cross-core frees with a bounded delay, the cross-core traffic of `vtpu stress` under load
// (stress/stress_harness.h). Core c hands the free of one of its buffers to core (c + 1) mod N
// through that core's inbox instead of doing it; the next core applies its inbox at each of its
// event boundaries and whenever it waits. So that a late free cannot inflate the owner's live
// bytes, the owner, before its event i, waits until every free it handed off at events
// < i - max_lag has been applied (max_lag 0: before its next event, so the owner's arena sees its
// stream's order exactly).
//
// To keep those waits from deadlocking, every wait of a core drains its own inbox: the owner's
// wait above, the gate before each collective round (all N cores arrive before any enters the
// all-reduce, so no core sits in a collective while another waits on it) and the final gate.
// Waits block on a condition variable; one that sees no core make progress for `timeout` throws
// DeadlineExceededError, and abort() (the Runtime's abort handler, when a core threw) wakes every
// waiter with AbortedError.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "vtpu/stress/stress_replay.h"

namespace vtpu {

/// One per run. Core c calls hand_off, before_event, flush and gate with its own c only, from its
/// own thread; abort() may be called from any thread. The replayers are not owned; each outlives
/// this object, and its mutex serialises the frees applied here with its owner's events.
class CrossCoreFrees {
 public:
  CrossCoreFrees(int cores, uint32_t max_lag, std::chrono::milliseconds timeout,
                 std::vector<std::unique_ptr<CoreReplayer>>& replayers);

  /// Core `owner` hands the free of `slot` to the next core in place of its event `event`.
  void hand_off(int owner, uint32_t slot, size_t event);

  /// Core c before its event `event`: applies its inbox, then waits for its own hand-offs that
  /// are now more than max_lag events old.
  void before_event(int c, size_t event);

  /// Core c waits until every free it handed off has been applied.
  void flush(int c);

  /// Core c arrives at the next gate and returns once all cores have arrived at it.
  void gate(int c);

  /// Wakes every waiter with AbortedError. Called from the Runtime's abort handler.
  void abort();

 private:
  struct alignas(64) Box {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::pair<int, uint32_t>> inbox;  // GUARDED_BY(mu): (owner core, slot)
    bool waiting = false;                         // GUARDED_BY(mu)
    std::atomic<bool> nonempty{false};
    std::atomic<uint64_t> applied{0};   // this core's hand-offs the next core has applied
    std::atomic<uint64_t> progress{0};  // events this core has started (for the timeout)
    // Only the core's own thread:
    uint64_t handed = 0;                              // hand-offs so far
    std::deque<std::pair<size_t, uint64_t>> pending;  // (event, `handed` after it), unapplied
    uint64_t gates = 0;                               // gates passed
  };

  void ring(int d);
  // Applies core c's inbox through the owners' replayers and tells the owners.
  void drain(int c);
  uint64_t total_progress() const;
  // Waits until done() holds, applying core c's inbox meanwhile (and once more after done()).
  template <typename Done>
  void wait_draining(int c, Done done, const char* what);

  const int n_;
  const uint32_t max_lag_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<CoreReplayer>>& replayers_;
  std::vector<std::unique_ptr<Box>> boxes_;
  std::atomic<uint64_t> arrivals_{0};  // gate arrivals of all cores
  std::atomic<bool> aborted_{false};
};

}  // namespace vtpu
