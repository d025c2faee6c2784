#include "collectives/ring_buffer_link.h"

#include <string>
#include <thread>

#include "common/error.h"

namespace vtpu {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
uint64_t checked_buffer_bytes(const LinkOptions& o) {
  if (o.slot_bytes == 0 || o.slot_bytes % 64 != 0) {
    throw InvalidArgumentError("link slot_bytes is " + std::to_string(o.slot_bytes) +
                               " (expected a positive multiple of 64)");
  }
  if (o.num_slots < 1) {
    throw InvalidArgumentError("link num_slots is " + std::to_string(o.num_slots) +
                               " (expected >= 1)");
  }
  constexpr uint64_t kMaxBufferBytes = uint64_t{1} << 40;
  if (o.slot_bytes > kMaxBufferBytes / static_cast<uint64_t>(o.num_slots)) {
    throw InvalidArgumentError("link buffer of " + std::to_string(o.num_slots) + " slots x " +
                               std::to_string(o.slot_bytes) + " bytes exceeds 1 TiB");
  }
  return o.slot_bytes * static_cast<uint64_t>(o.num_slots);
}

}  // namespace

RingBufferLink::RingBufferLink(int src_core, int dst_core, const LinkOptions& options)
    : src_(src_core),
      dst_(dst_core),
      slot_bytes_(options.slot_bytes),
      num_slots_(options.num_slots),
      storage_(checked_buffer_bytes(options)) {
  meta_.resize(static_cast<size_t>(num_slots_));
}

void RingBufferLink::throw_aborted() {
  std::string reason;
  {
    std::lock_guard lock(mu_);
    reason = abort_reason_;
  }
  throw AbortedError("link " + std::to_string(src_) + "->" + std::to_string(dst_) +
                     " aborted: " + reason);
}

template <typename Ready>
void RingBufferLink::wait(Ready ready, Deadline deadline, const char* what) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (aborted_.load(std::memory_order_acquire)) throw_aborted();
    if (ready()) return;
    cpu_relax();
  }
  // Virtual cores usually outnumber CPUs: hand the CPU to the peer we are waiting for before
  // paying for a futex sleep and wake-up.
  for (int i = 0; i < kYieldIterations; ++i) {
    if (aborted_.load(std::memory_order_acquire)) throw_aborted();
    if (ready()) return;
    std::this_thread::yield();
  }
  std::unique_lock lock(mu_);
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  struct Leave {
    std::atomic<int>& w;
    ~Leave() { w.fetch_sub(1, std::memory_order_seq_cst); }
  } leave{waiters_};
  while (!ready()) {
    if (aborted_.load(std::memory_order_acquire)) {
      lock.unlock();
      throw_aborted();
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !ready() &&
        !aborted_.load(std::memory_order_acquire)) {
      throw DeadlineExceededError(std::string(what) + " on link " + std::to_string(src_) + "->" +
                                  std::to_string(dst_) + " timed out");
    }
  }
}

void RingBufferLink::wake() {
  if (waiters_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  }
}

std::byte* RingBufferLink::acquire_send_slot(Deadline deadline) {
  const uint64_t tail = tail_.load(std::memory_order_relaxed);
  wait(
      [&] {
        return tail - head_.load(std::memory_order_seq_cst) < static_cast<uint64_t>(num_slots_);
      },
      deadline, "waiting for a free slot (receiver has not consumed)");
  return storage_.data() + (tail % static_cast<uint64_t>(num_slots_)) * slot_bytes_;
}

void RingBufferLink::commit_send(const Fingerprint& fingerprint, uint64_t payload_bytes) {
  const uint64_t tail = tail_.load(std::memory_order_relaxed);
  SlotMeta& m = meta_[tail % static_cast<uint64_t>(num_slots_)];
  m.fingerprint = fingerprint;
  m.payload_bytes = payload_bytes;
  tail_.store(tail + 1, std::memory_order_seq_cst);  // publishes the payload and meta
  wake();
}

ReceivedSlot RingBufferLink::acquire_recv_slot(Deadline deadline) {
  const uint64_t head = head_.load(std::memory_order_relaxed);
  wait([&] { return tail_.load(std::memory_order_seq_cst) != head; }, deadline,
       "waiting for data (sender has not sent)");
  const uint64_t slot = head % static_cast<uint64_t>(num_slots_);
  const SlotMeta& m = meta_[slot];
  return ReceivedSlot{storage_.data() + slot * slot_bytes_, m.payload_bytes, m.fingerprint};
}

void RingBufferLink::release_recv() {
  head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
  wake();
}

void RingBufferLink::abort(const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    if (!aborted_.load(std::memory_order_relaxed)) abort_reason_ = reason;
    aborted_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void RingBufferLink::reset() {
  std::lock_guard lock(mu_);
  head_.store(0);
  tail_.store(0);
  aborted_.store(false);
  abort_reason_.clear();
}

}  // namespace vtpu
