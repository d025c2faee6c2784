// In-process Link: a bounded circular buffer of num_slots slots in host memory.
//
//   sender                                  receiver
//   acquire_send_slot ─ write ─ commit_send ──► acquire_recv_slot ─ read ─ release_recv
//          ▲                                                                   │
//          └──────────────────── slot returns to the sender ◄──────────────────┘
//
// head_ counts slots released by the receiver, tail_ slots committed by the sender; the buffer is
// full when tail_ - head_ == num_slots and empty when they are equal. Each side keeps a private
// copy of the other side's counter and rereads the shared one only when its copy says full (or
// empty), so a message usually costs one cache-line transfer each way (after the single-producer
// single-consumer queues of Lamport 1983 and folly's ProducerConsumerQueue).
//
// Waiting, in three bounded phases (never a spin without limit; virtual cores usually outnumber
// CPUs):
//   1. spin: poll with `pause` for up to kSpinTime, but only while fewer than spinner_cap()
//      threads of the process spin: max_spinners() (one CPU is always left for the thread being
//      waited for) when the virtual cores outnumber the CPUs, else every CPU;
//   2. yield: sched_yield up to kYieldIterations times, only when the virtual cores outnumber the
//      CPUs (a peer may then be waiting for this CPU). With no more cores than CPUs a yield would
//      only hand the CPU to another program, and under Linux's EEVDF scheduler a CPU-bound
//      program then keeps it for its slice: beside two `yes` loops, `vtpu train mlp --cores 2`
//      took 4.3 ms per step with the yields and 0.013 ms without;
//   3. sleep: a futex wait on a per-direction word, with the caller's deadline.
// The waker pays for a FUTEX_WAKE only when the waiter has announced that it sleeps: a Dekker
// handshake of two seq_cst stores (tail_ or head_ by the waker, the sleeping flag by the waiter)
// followed by loads of the other, so that one of the two always sees the other (Drepper,
// "Futexes Are Tricky", 2011, and Linux's futex(2)). Abort bumps both futex words, so a waiter
// sleeping or about to sleep wakes at once. A receiver still takes a message that is already
// there (Link::abort): only a wait that would have to wait fails.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "vtpu/collectives/link.h"
#include "vtpu/memory/backing_store.h"

namespace vtpu {

/// How one side's waits ended, for tests and tuning. Counted by the side's own thread.
struct LinkWaitStats {
  uint64_t immediate = 0;    // ready at the first look
  uint64_t spun = 0;         // ready during the spin phase
  uint64_t yielded = 0;      // ready during the yield phase
  uint64_t slept = 0;        // waits that reached the futex sleep
  uint64_t wakes = 0;        // FUTEX_WAKE calls this side made for the other side's sleeper
  uint64_t yield_calls = 0;  // sched_yield calls made in yield phases
};

/// Thread-safe for one sender and one receiver thread (see Link).
class RingBufferLink final : public Link {
 public:
  /// Longest spin of one wait before yielding; a futex sleep and wake-up costs a few
  /// microseconds, so a spin of a few times that catches most hand-offs between running threads.
  static constexpr std::chrono::nanoseconds kSpinTime{20000};
  /// Shortest spin. Each side adapts its spin to what spinning achieved (glibc's adaptive mutex
  /// does the same): a wait that spun successfully doubles the next spin (up to kSpinTime), a
  /// spin that failed quarters it, and below kMinSpinTime the side stops spinning, trying a
  /// kMinSpinTime spin again every kSpinProbeInterval waits. So two threads that the scheduler
  /// keeps on one CPU (the peer cannot run while we spin) go straight to yielding.
  static constexpr std::chrono::nanoseconds kMinSpinTime{1000};
  static constexpr int kSpinProbeInterval = 64;
  /// The spin budget's floor when the virtual cores do not outnumber the CPUs: every waiter has a
  /// CPU, so a short spin never delays its peer, and it takes the place of the yield phase's
  /// polls (see the header), which on an idle host caught hand-offs that a futex sleep and
  /// wake-up (tens of microseconds on this VM) would have paid for.
  static constexpr std::chrono::nanoseconds kUnsharedMinSpinTime{8000};
  static constexpr int kYieldIterations = 8;  // sched_yield-polls before sleeping

  /// Whether `process_cores` virtual cores outnumber the CPUs this process may use (true for 0,
  /// unknown): the waiting policy of the header. Thread-safe.
  static bool oversubscribed(int process_cores);

  /// Threads of the process that may spin at once: one less than the CPUs (at least 1), so that
  /// spinners never take every CPU from the threads they wait for.
  static int max_spinners();

  /// Throws InvalidArgumentError if slot_bytes is not a positive multiple of 64, num_slots < 1,
  /// or the buffer (slot_bytes * num_slots) exceeds 1 TiB; ResourceExhaustedError if its address
  /// space cannot be reserved. The slots are an mmap reservation committed page by page on use.
  RingBufferLink(int src_core, int dst_core, const LinkOptions& options);

  int src_core() const override { return src_; }
  int dst_core() const override { return dst_; }
  uint64_t slot_bytes() const override { return slot_bytes_; }
  int num_slots() const override { return num_slots_; }
  /// Both ends are threads of this process: peers may access each other's buffers in place.
  bool supports_direct_access() const override { return true; }
  std::byte* acquire_send_slot(Deadline deadline) override;
  void commit_send(const Fingerprint& fingerprint, uint64_t payload_bytes) override;
  ReceivedSlot acquire_recv_slot(Deadline deadline) override;
  void release_recv() override;
  void abort(const std::string& reason) override;
  void reset() override;

  /// Wait statistics of the sending and the receiving side. Read only while neither side is
  /// inside a call (e.g. after joining the threads); reset() clears them.
  LinkWaitStats sender_stats() const { return send_.stats; }
  LinkWaitStats receiver_stats() const { return recv_.stats; }
  /// Whether the sending (receiving) side is in, or about to enter, its futex sleep, after its
  /// spin and yields: a snapshot, for tests and diagnostics (the side may wake at once after).
  /// Thread-safe.
  bool sender_sleeping() const { return send_wait_.sleeping.load(std::memory_order_seq_cst) != 0; }
  bool receiver_sleeping() const {
    return recv_wait_.sleeping.load(std::memory_order_seq_cst) != 0;
  }

 private:
  struct alignas(64) SlotMeta {  // one cache line each: no false sharing between slots
    Fingerprint fingerprint;
    uint64_t payload_bytes = 0;
  };
  // What one side sleeps on; the other side bumps `futex` to wake it.
  struct WaitWord {
    std::atomic<uint32_t> futex{0};
    std::atomic<uint32_t> sleeping{0};  // 1 while the waiter is in (or entering) its sleep
  };
  // One side's private state: its copy of the other side's counter and its statistics.
  struct alignas(64) SideState {
    uint64_t cached_other = 0;            // the sender's copy of head_, the receiver's of tail_
    int64_t spin_ns = kSpinTime.count();  // this side's current spin budget (0: not spinning)
    uint32_t waits_without_spin = 0;      // since spin_ns dropped to 0, for the probe
    LinkWaitStats stats;
  };

  // data_first: the receiver's waits take a message already there before they report an abort.
  template <typename Ready>
  void wait(Ready ready, WaitWord& word, SideState& side, Deadline deadline, const char* what,
            bool data_first);
  template <typename Ready>
  bool spin(Ready ready, SideState& side);
  void wake(WaitWord& word, LinkWaitStats& stats);
  [[noreturn]] void throw_aborted();

  const int src_, dst_;
  const uint64_t slot_bytes_;
  const int num_slots_;
  // oversubscribed(LinkOptions::process_cores): yield before sleeping, and no spin floor.
  const bool oversubscribed_;
  const int spinner_cap_;       // threads of the process that may spin at once
  BackingStore storage_;        // num_slots * slot_bytes, committed lazily as slots are used
  std::vector<SlotMeta> meta_;  // one per slot

  // Written by the sender (tail_) and read by the receiver, with the receiver's wait word: a
  // commit touches this one line unless the receiver sleeps.
  alignas(64) std::atomic<uint64_t> tail_{0};
  WaitWord recv_wait_;
  // Written by the receiver (head_), with the sender's wait word.
  alignas(64) std::atomic<uint64_t> head_{0};
  WaitWord send_wait_;

  SideState send_;  // only the sending thread touches it
  SideState recv_;  // only the receiving thread touches it

  alignas(64) std::atomic<bool> aborted_{false};
  std::mutex mu_;
  std::string abort_reason_;  // GUARDED_BY(mu_)
};

}  // namespace vtpu
