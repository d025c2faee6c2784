#include "vtpu/runtime/dma_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "vtpu/common/error.h"

namespace vtpu {

void DmaSemaphore::signal(uint64_t bytes) {
  // Notify under the lock: a waiter may destroy the semaphore as soon as it can see the bytes.
  std::lock_guard lock(mu_);
  value_ += bytes;
  pending_ -= std::min(pending_, bytes);
  cv_.notify_all();
}

void DmaSemaphore::add_pending(uint64_t bytes) {
  std::lock_guard lock(mu_);
  pending_ += bytes;
}

void DmaSemaphore::cancel_pending(uint64_t bytes) {
  std::lock_guard lock(mu_);
  pending_ -= std::min(pending_, bytes);
  cv_.notify_all();
}

void DmaSemaphore::wait(uint64_t bytes, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return value_ >= bytes; })) {
    throw DeadlineExceededError(
        "DMA semaphore wait for " + std::to_string(bytes) + " bytes timed out after " +
        std::to_string(timeout.count()) + " ms (the semaphore holds " + std::to_string(value_) +
        " bytes, " + std::to_string(pending_) + " bytes of copies on it are still in flight)");
  }
  value_ -= bytes;
}

uint64_t DmaSemaphore::value() const {
  std::lock_guard lock(mu_);
  return value_;
}

uint64_t DmaSemaphore::pending_bytes() const {
  std::lock_guard lock(mu_);
  return pending_;
}

void DmaCopy::wait() const {
  if (sem_ == nullptr) throw FailedPreconditionError("wait() on an empty DmaCopy");
  const auto t0 = std::chrono::steady_clock::now();
  try {
    sem_->wait(bytes_, timeout_);
  } catch (const DeadlineExceededError& e) {
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - t0);
    throw DeadlineExceededError("DMA copy of " + std::to_string(bytes_) + " bytes" +
                                (core_id_ >= 0 ? " on core " + std::to_string(core_id_) : "") +
                                " did not complete: waited " + std::to_string(waited.count()) +
                                " ms (dma timeout " + std::to_string(timeout_.count()) + " ms); " +
                                e.message());
  }
}

DmaEngine::DmaEngine(int core_id, DmaOptions options) : core_id_(core_id), options_(options) {
  const double rate = options_.bytes_per_second;
  if (!(rate == 0.0 || (rate >= 1.0 && std::isfinite(rate)))) {
    char rate_text[32];
    std::snprintf(rate_text, sizeof(rate_text), "%g", rate);
    throw InvalidArgumentError("DMA bytes_per_second is " + std::string(rate_text) +
                               " (expected 0 = unthrottled, or a finite rate >= 1 B/s)");
  }
  // Upper bounds keep steady_clock::now() + duration from overflowing.
  constexpr auto kMaxDuration = std::chrono::hours(24 * 7);
  if (options_.latency.count() < 0 || options_.latency > kMaxDuration ||
      options_.wait_timeout.count() <= 0 || options_.wait_timeout > kMaxDuration) {
    throw InvalidArgumentError(
        "DMA latency is " + std::to_string(options_.latency.count()) + " us and wait_timeout " +
        std::to_string(options_.wait_timeout.count()) +
        " ms (expected latency in [0, 7 days] and wait_timeout in (0, 7 days])");
  }
}

DmaEngine::~DmaEngine() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
    cv_.notify_all();
    throttle_cv_.notify_all();  // a throttled copy stops waiting; the rest run at memcpy speed
  }
  if (thread_.joinable()) thread_.join();
}

DmaCopy DmaEngine::start(const DmaRegion& src, const DmaRegion& dst, DmaSemaphore& sem,
                         bool zero_fill, std::shared_ptr<void> keep_alive) {
  if ((src.data == nullptr && src.bytes() > 0) || (dst.data == nullptr && dst.bytes() > 0)) {
    throw InvalidArgumentError("DMA copy on core " + std::to_string(core_id_) +
                               " with a null source or destination (metadata-only arena?)");
  }
  for (const DmaRegion* r : {&src, &dst}) {
    if (r->stride_bytes != 0 && r->stride_bytes < r->row_bytes) {  // rows would overlap
      throw InvalidArgumentError("DMA copy on core " + std::to_string(core_id_) +
                                 ": a region's stride of " + std::to_string(r->stride_bytes) +
                                 " bytes is smaller than its rows of " +
                                 std::to_string(r->row_bytes) + " bytes (expected 0 or >= row)");
    }
  }
  if (src.rows < 0 || dst.rows < src.rows || dst.row_bytes < src.row_bytes) {
    throw InvalidArgumentError("DMA copy on core " + std::to_string(core_id_) +
                               ": destination of " + std::to_string(dst.rows) + " rows x " +
                               std::to_string(dst.row_bytes) +
                               " bytes is smaller than the source of " + std::to_string(src.rows) +
                               " rows x " + std::to_string(src.row_bytes) + " bytes");
  }
  sem.add_pending(src.bytes());
  {
    std::lock_guard lock(mu_);
    if (done_) throw FailedPreconditionError("DMA engine is shutting down");
    queue_.push_back(Task{src, dst, &sem, zero_fill, std::move(keep_alive)});
    ++in_flight_;
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  cv_.notify_one();
  return DmaCopy(&sem, src.bytes(), options_.wait_timeout, core_id_);
}

void DmaEngine::execute(const Task& t, uint64_t epoch) {
  const auto start = std::chrono::steady_clock::now();
  const uint64_t ss = t.src.stride(), ds = t.dst.stride();
  for (int64_t r = 0; r < t.src.rows; ++r) {
    std::byte* d = t.dst.data + static_cast<uint64_t>(r) * ds;
    std::memcpy(d, t.src.data + static_cast<uint64_t>(r) * ss, t.src.row_bytes);
    if (t.zero_fill && t.dst.row_bytes > t.src.row_bytes) {
      std::memset(d + t.src.row_bytes, 0, t.dst.row_bytes - t.src.row_bytes);
    }
  }
  if (t.zero_fill) {
    for (int64_t r = t.src.rows; r < t.dst.rows; ++r) {
      std::memset(t.dst.data + static_cast<uint64_t>(r) * ds, 0, t.dst.row_bytes);
    }
  }
  if (options_.bytes_per_second > 0 || options_.latency.count() > 0) {
    double seconds = 0.0;
    if (options_.bytes_per_second > 0) {
      seconds = static_cast<double>(t.src.bytes()) / options_.bytes_per_second;
    }
    // At most ~292 years of delay (the clock's range); cancel() and shutdown cut it short.
    seconds = std::min(seconds, 9.0e9);
    const auto deadline = start + options_.latency +
                          std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::duration<double>(seconds));
    std::unique_lock lock(mu_);
    throttle_cv_.wait_until(lock, deadline, [&] { return done_ || cancel_epoch_ != epoch; });
  }
}

void DmaEngine::run() {
  for (;;) {
    Task task;
    uint64_t epoch = 0;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return done_ || !queue_.empty(); });
      if (queue_.empty()) return;  // done_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      epoch = cancel_epoch_;
    }
    execute(task, epoch);
    task.keep_alive.reset();
    // Signal first, then count the copy completed: once drain() returns, the engine touches no
    // semaphore, so a kernel may drain and then destroy its semaphores.
    task.sem->signal(task.src.bytes());
    {
      std::lock_guard lock(mu_);
      --in_flight_;
      bytes_copied_ += task.src.bytes();
      ++copies_completed_;
      idle_cv_.notify_all();
    }
  }
}

int64_t DmaEngine::in_flight() const {
  std::lock_guard lock(mu_);
  return in_flight_;
}

void DmaEngine::drain(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!idle_cv_.wait_for(lock, timeout, [&] { return in_flight_ == 0; })) {
    throw DeadlineExceededError("DMA engine of core " + std::to_string(core_id_) + " still has " +
                                std::to_string(in_flight_) + " copies in flight after " +
                                std::to_string(timeout.count()) + " ms");
  }
}

int64_t DmaEngine::cancel() {
  std::deque<Task> dropped;
  {
    std::lock_guard lock(mu_);
    ++cancel_epoch_;
    dropped.swap(queue_);
    throttle_cv_.notify_all();
  }
  // Outside the engine lock (a semaphore has its own); the engine thread no longer sees these.
  for (Task& t : dropped) {
    t.sem->cancel_pending(t.src.bytes());
    t.keep_alive.reset();
  }
  const auto n = static_cast<int64_t>(dropped.size());
  {
    std::lock_guard lock(mu_);
    in_flight_ -= n;
    copies_cancelled_ += static_cast<uint64_t>(n);
    idle_cv_.notify_all();
  }
  return n;
}

uint64_t DmaEngine::copies_cancelled() const {
  std::lock_guard lock(mu_);
  return copies_cancelled_;
}

uint64_t DmaEngine::bytes_copied() const {
  std::lock_guard lock(mu_);
  return bytes_copied_;
}

uint64_t DmaEngine::copies_completed() const {
  std::lock_guard lock(mu_);
  return copies_completed_;
}

}  // namespace vtpu
