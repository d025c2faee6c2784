// One core's DMA engine: asynchronous copies between HBM and the core's VMEM (and from another
// core's HBM into this core's VMEM, the remote copy Pallas TPU collectives are built on), each
// signalling a DMA semaphore that counts bytes, after Pallas TPU's pltpu.make_async_copy /
// make_async_remote_copy and pltpu.SemaphoreType.DMA.
//
//   start(src, dst, sem)  -> returns at once; the copy is queued on the engine
//   engine thread         -> copies the rows, then sem.signal(bytes)
//   copy.wait()           -> sem.wait(bytes): blocks until the semaphore holds the copy's bytes,
//                            then takes them back, so a semaphore returns to 0 once every copy
//                            that signals it has been waited for
//
// Design: one engine thread per core, started lazily on the core's first copy, that runs the
// core's copies in the order started (a FIFO queue, as one DMA queue of a TPU core). Idle engines
// sleep on a condition variable, so 64 or 256 virtual cores cost threads only for the cores that
// copy, and no CPU while idle. A oneTBB task arena was the alternative: its workers spin before
// they sleep (stealing CPU from the cores on a small machine) and would run one core's copies in
// no fixed order, which the simulated-time model (one FIFO DMA queue per core) could not match.
// Copies really run concurrently with the core's thread, which keeps computing.
//
// Throttling (DmaOptions::bytes_per_second, latency) is a condition-variable wait after the
// memcpy, never an uninterruptible sleep: cancel() and the destructor wake it at once, so a
// heavily throttled engine never holds up a kernel's teardown or the program's exit.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace vtpu {

/// Options of every core's DMA engine. Plain data.
struct DmaOptions {
  /// Slows the engine down (tests, what-if runs): each copy takes at least
  /// latency + bytes / bytes_per_second of wall time (the engine sleeps out the difference).
  /// 0 = unthrottled (as fast as memcpy).
  double bytes_per_second = 0.0;
  std::chrono::microseconds latency{0};  // added to every copy; default none
  /// How long DmaSemaphore::wait blocks before DeadlineExceededError; default 30 s.
  std::chrono::milliseconds wait_timeout{30000};
};

/// A DMA semaphore: a count of bytes that copies have delivered and waiters have not yet taken.
/// Thread-safe. Must outlive the copies that signal it.
class DmaSemaphore {
 public:
  /// Adds `bytes` and wakes waiters (called by the engine when a copy completes).
  void signal(uint64_t bytes);
  /// Blocks until the count is at least `bytes`, then subtracts it. Throws DeadlineExceededError
  /// (naming the bytes expected and held) after `timeout`.
  void wait(uint64_t bytes, std::chrono::milliseconds timeout);
  /// Bytes signalled and not yet waited for.
  uint64_t value() const;
  /// Bytes of copies started on this semaphore that have not completed (nor been cancelled).
  uint64_t pending_bytes() const;

 private:
  friend class DmaEngine;
  void add_pending(uint64_t bytes);
  void cancel_pending(uint64_t bytes);  // a cancelled copy: pending drops, value does not grow
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t value_ = 0;    // GUARDED_BY(mu_)
  uint64_t pending_ = 0;  // GUARDED_BY(mu_)
};

/// A 2-D strided region: `rows` rows of `row_bytes` bytes, `stride_bytes` apart (>= row_bytes).
/// A contiguous range is rows = 1.
struct DmaRegion {
  std::byte* data = nullptr;
  int64_t rows = 1;
  uint64_t row_bytes = 0;
  uint64_t stride_bytes = 0;  // 0 means row_bytes (dense)
  uint64_t bytes() const { return static_cast<uint64_t>(rows) * row_bytes; }
  uint64_t stride() const { return stride_bytes == 0 ? row_bytes : stride_bytes; }
};

class DmaEngine;

/// A started copy: wait() blocks until it completed. Copyable (it only names the semaphore and the
/// byte count). Thread-compatible.
class DmaCopy {
 public:
  DmaCopy() = default;
  DmaCopy(DmaSemaphore* sem, uint64_t bytes, std::chrono::milliseconds timeout, int core_id = -1)
      : sem_(sem), bytes_(bytes), timeout_(timeout), core_id_(core_id) {}
  /// Waits for this copy's bytes on its semaphore (semaphore.wait(bytes)). Throws
  /// DeadlineExceededError after DmaOptions::wait_timeout, naming the copy's bytes, its core
  /// and the time waited.
  void wait() const;
  uint64_t bytes() const { return bytes_; }
  DmaSemaphore* semaphore() const { return sem_; }

 private:
  DmaSemaphore* sem_ = nullptr;
  uint64_t bytes_ = 0;
  std::chrono::milliseconds timeout_{0};
  int core_id_ = -1;
};

/// Thread-safe: start() from any thread (normally the owning core's). The destructor finishes
/// the queued copies at memcpy speed (it cuts every throttle delay short), then joins the engine
/// thread.
class DmaEngine {
 public:
  DmaEngine(int core_id, DmaOptions options);
  ~DmaEngine();
  DmaEngine(const DmaEngine&) = delete;
  DmaEngine& operator=(const DmaEngine&) = delete;

  /// Queues a copy of `src` into `dst` and returns at once. `dst` must have at least src's rows
  /// and row bytes; when `zero_fill` is set, dst bytes beyond src's rows and row bytes are zeroed
  /// (edge blocks). `sem` is signalled with src.bytes() when done. `keep_alive` is held until the
  /// copy completes (e.g. a BufferPin of a source in another core's HBM). Throws
  /// InvalidArgumentError for null data or a dst smaller than src. The caller keeps both regions
  /// valid until the copy is waited for.
  DmaCopy start(const DmaRegion& src, const DmaRegion& dst, DmaSemaphore& sem,
                bool zero_fill = false, std::shared_ptr<void> keep_alive = {});

  /// Copies started and not completed. A copy stops counting just AFTER it signals its
  /// semaphore (so that drain() returning means the engine touches no semaphore), so right after
  /// a DmaCopy::wait() this may still count that copy; call drain() to wait for 0.
  int64_t in_flight() const;
  /// Blocks until every started copy completed. Throws DeadlineExceededError after `timeout`.
  void drain(std::chrono::milliseconds timeout);
  /// Error path (a kernel that failed): drops every queued copy that has not started (its
  /// semaphore's pending bytes drop, its value does not grow, so a wait on it times out) and
  /// wakes the running copy out of its throttle delay (its memcpy is already done; it signals as
  /// usual). Returns at once with the number of copies dropped; drain() afterwards takes at most
  /// one memcpy. Later copies run normally. The caller must own every queued copy (a kernel on
  /// the owning core).
  int64_t cancel();

  int core_id() const { return core_id_; }
  const DmaOptions& options() const { return options_; }
  /// Cumulative counters.
  uint64_t bytes_copied() const;
  uint64_t copies_completed() const;
  uint64_t copies_cancelled() const;

 private:
  struct Task {
    DmaRegion src, dst;
    DmaSemaphore* sem;
    bool zero_fill;
    std::shared_ptr<void> keep_alive;
  };
  void run();
  void execute(const Task& t, uint64_t epoch);

  const int core_id_;
  const DmaOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;           // wakes the engine thread
  std::condition_variable idle_cv_;      // wakes drain()
  std::condition_variable throttle_cv_;  // cuts a throttle delay short (cancel, shutdown)
  std::deque<Task> queue_;               // GUARDED_BY(mu_)
  int64_t in_flight_ = 0;                // GUARDED_BY(mu_)
  uint64_t bytes_copied_ = 0;            // GUARDED_BY(mu_)
  uint64_t copies_completed_ = 0;        // GUARDED_BY(mu_)
  uint64_t copies_cancelled_ = 0;        // GUARDED_BY(mu_)
  uint64_t cancel_epoch_ = 0;            // GUARDED_BY(mu_); cancel() increments it
  bool done_ = false;                    // GUARDED_BY(mu_)
  std::thread thread_;                   // GUARDED_BY(mu_) until started; started on the first copy
};

}  // namespace vtpu
