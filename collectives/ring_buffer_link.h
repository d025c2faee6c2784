// In-process Link: a bounded circular buffer of num_slots slots in host memory.
//
//   sender                                  receiver
//   acquire_send_slot ─ write ─ commit_send ──► acquire_recv_slot ─ read ─ release_recv
//          ▲                                                                   │
//          └──────────────────── slot returns to the sender ◄──────────────────┘
//
// head_ counts slots released by the receiver, tail_ slots committed by the sender; the buffer is
// full when tail_ - head_ == num_slots and empty when they are equal. A waiter first polls briefly
// (kSpinIterations, so that a ping-pong between two running threads avoids a futex round trip),
// then yields the CPU a bounded number of times (kYieldIterations: with more virtual cores than
// CPUs the peer it waits for may need this CPU), then sleeps on a condition variable with the
// caller's deadline. Every phase is bounded; nothing spins without limit.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "collectives/link.h"
#include "memory/backing_store.h"

namespace vtpu {

/// Thread-safe for one sender and one receiver thread (see Link).
class RingBufferLink final : public Link {
 public:
  static constexpr int kSpinIterations = 64;   // pause-polls before yielding
  static constexpr int kYieldIterations = 16;  // sched_yield-polls before sleeping

  /// Throws InvalidArgumentError if slot_bytes is not a positive multiple of 64, num_slots < 1,
  /// or the buffer (slot_bytes * num_slots) exceeds 1 TiB; ResourceExhaustedError if its address
  /// space cannot be reserved. The slots are an mmap reservation committed page by page on use.
  RingBufferLink(int src_core, int dst_core, const LinkOptions& options);

  int src_core() const override { return src_; }
  int dst_core() const override { return dst_; }
  uint64_t slot_bytes() const override { return slot_bytes_; }
  int num_slots() const override { return num_slots_; }
  std::byte* acquire_send_slot(Deadline deadline) override;
  void commit_send(const Fingerprint& fingerprint, uint64_t payload_bytes) override;
  ReceivedSlot acquire_recv_slot(Deadline deadline) override;
  void release_recv() override;
  void abort(const std::string& reason) override;
  void reset() override;

 private:
  struct SlotMeta {
    Fingerprint fingerprint;
    uint64_t payload_bytes = 0;
  };
  template <typename Ready>
  void wait(Ready ready, Deadline deadline, const char* what);
  void wake();
  [[noreturn]] void throw_aborted();

  const int src_, dst_;
  const uint64_t slot_bytes_;
  const int num_slots_;
  BackingStore storage_;        // num_slots * slot_bytes, committed lazily as slots are used
  std::vector<SlotMeta> meta_;  // one per slot
  alignas(64) std::atomic<uint64_t> head_{0};  // written by the receiver
  alignas(64) std::atomic<uint64_t> tail_{0};  // written by the sender
  std::atomic<bool> aborted_{false};
  std::atomic<int> waiters_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::string abort_reason_;  // GUARDED_BY(mu_)
};

}  // namespace vtpu
