#include "vtpu/collectives/ring_buffer_link.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <ctime>
#include <string>
#include <thread>

#include "vtpu/common/error.h"
#include "vtpu/common/host.h"

namespace vtpu {

namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the futex syscall needs a plain 32-bit word");

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

uint32_t* futex_address(std::atomic<uint32_t>& word) { return reinterpret_cast<uint32_t*>(&word); }

// Sleeps while `word` holds `expected`, at most `timeout`. Returns on a wake-up, a changed value
// (EAGAIN), a signal or the timeout; the caller rechecks its condition in every case.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout) {
  const auto ns = std::max<int64_t>(timeout.count(), 0);
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  syscall(SYS_futex, futex_address(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>& word, int waiters) {
  syscall(SYS_futex, futex_address(word), FUTEX_WAKE_PRIVATE, waiters, nullptr, nullptr, 0);
}

// Threads of the process in the spin phase of a wait.
std::atomic<int> g_spinners{0};

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

int RingBufferLink::max_spinners() {
  static const int n = std::max(1, usable_cpus() - 1);
  return n;
}

bool RingBufferLink::oversubscribed(int process_cores) {
  return process_cores <= 0 || process_cores > usable_cpus();
}

RingBufferLink::RingBufferLink(int src_core, int dst_core, const LinkOptions& options)
    : src_(src_core),
      dst_(dst_core),
      slot_bytes_(options.slot_bytes),
      num_slots_(options.num_slots),
      oversubscribed_(oversubscribed(options.process_cores)),
      spinner_cap_(oversubscribed_ ? max_spinners() : usable_cpus()),
      storage_(checked_buffer_bytes(options)) {
  meta_.resize(static_cast<size_t>(num_slots_));
  // 2 MiB pages spare the TLB when whole slots are copied through, but the first touch of a
  // huge page commits all 2 MiB of it. Links are many (pairwise all_to_all makes N-1 per rank:
  // 65,280 on 256 cores) and small messages touch only the start of a slot, so huge pages are
  // asked for only when one slot spans at least a huge page, where any message that fills a slot
  // uses the page anyway. (Before, a 4 x 1 MiB link got them too, and a 64-byte all_to_all on
  // 16 cores committed 2 MiB per link.) A hint: ignored where transparent huge pages are off.
  constexpr uint64_t kHugePage = uint64_t{2} << 20;
  const uint64_t bytes = slot_bytes_ * static_cast<uint64_t>(num_slots_);
  if (slot_bytes_ >= kHugePage) ::madvise(storage_.data(), bytes, MADV_HUGEPAGE);
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
bool RingBufferLink::spin(Ready ready, SideState& side) {
  int64_t budget =
      oversubscribed_ ? side.spin_ns : std::max(side.spin_ns, kUnsharedMinSpinTime.count());
  if (budget == 0) {
    if (++side.waits_without_spin < kSpinProbeInterval) return false;
    side.waits_without_spin = 0;
    budget = kMinSpinTime.count();
  }
  // Only while a CPU is left for the thread we wait for.
  if (g_spinners.fetch_add(1, std::memory_order_relaxed) >= spinner_cap_) {
    g_spinners.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  struct Leave {
    ~Leave() { g_spinners.fetch_sub(1, std::memory_order_relaxed); }
  } leave;
  const auto spin_end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(budget);
  do {
    for (int i = 0; i < 64; ++i) {
      if (ready()) {
        side.spin_ns = std::min(kSpinTime.count(), std::max(budget, kMinSpinTime.count()) * 2);
        return true;
      }
      cpu_relax();
    }
    if (aborted_.load(std::memory_order_acquire)) throw_aborted();
  } while (std::chrono::steady_clock::now() < spin_end);
  side.spin_ns = budget / 4 >= kMinSpinTime.count() ? budget / 4 : 0;
  return false;
}

template <typename Ready>
void RingBufferLink::wait(Ready ready, WaitWord& word, SideState& side, Deadline deadline,
                          const char* what, bool data_first) {
  LinkWaitStats& stats = side.stats;
  if (!data_first && aborted_.load(std::memory_order_acquire)) throw_aborted();
  if (ready()) {
    ++stats.immediate;
    return;
  }
  if (aborted_.load(std::memory_order_acquire)) throw_aborted();
  // 1. Spin, bounded in time and adapted to what spinning achieved so far.
  if (spin(ready, side)) {
    ++stats.spun;
    return;
  }
  // 2. Hand the CPU to a runnable peer before paying for a futex sleep and wake-up.
  for (int i = 0; oversubscribed_ && i < kYieldIterations; ++i) {
    std::this_thread::yield();
    ++stats.yield_calls;
    if (ready()) {
      ++stats.yielded;
      return;
    }
    if (aborted_.load(std::memory_order_acquire)) throw_aborted();
  }
  // 3. Sleep. Read the word, announce the sleep, recheck, then sleep only if the word is
  // unchanged: a commit, release or abort after the recheck has bumped it (see the header).
  ++stats.slept;
  for (;;) {
    const uint32_t seen = word.futex.load(std::memory_order_seq_cst);
    word.sleeping.store(1, std::memory_order_seq_cst);
    if (ready()) {
      word.sleeping.store(0, std::memory_order_relaxed);
      return;
    }
    if (aborted_.load(std::memory_order_seq_cst)) {
      word.sleeping.store(0, std::memory_order_relaxed);
      throw_aborted();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      word.sleeping.store(0, std::memory_order_relaxed);
      throw DeadlineExceededError(std::string(what) + " on link " + std::to_string(src_) + "->" +
                                  std::to_string(dst_) + " timed out");
    }
    futex_wait(word.futex, seen, deadline - now);
    word.sleeping.store(0, std::memory_order_relaxed);
  }
}

void RingBufferLink::wake(WaitWord& word, LinkWaitStats& stats) {
  // The caller's seq_cst store of tail_ or head_ precedes this load (the Dekker handshake).
  if (word.sleeping.load(std::memory_order_seq_cst) != 0) {
    word.futex.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(word.futex, 1);
    ++stats.wakes;
  }
}

std::byte* RingBufferLink::acquire_send_slot(Deadline deadline) {
  const uint64_t tail = tail_.load(std::memory_order_relaxed);
  const uint64_t slots = static_cast<uint64_t>(num_slots_);
  wait(
      [&] {
        if (tail - send_.cached_other < slots) return true;
        send_.cached_other = head_.load(std::memory_order_seq_cst);
        return tail - send_.cached_other < slots;
      },
      send_wait_, send_, deadline, "waiting for a free slot (receiver has not consumed)",
      /*data_first=*/false);
  return storage_.data() + (tail % slots) * slot_bytes_;
}

void RingBufferLink::commit_send(const Fingerprint& fingerprint, uint64_t payload_bytes) {
  const uint64_t tail = tail_.load(std::memory_order_relaxed);
  SlotMeta& m = meta_[tail % static_cast<uint64_t>(num_slots_)];
  m.fingerprint = fingerprint;
  m.payload_bytes = payload_bytes;
  tail_.store(tail + 1, std::memory_order_seq_cst);  // publishes the payload and meta
  wake(recv_wait_, send_.stats);
}

ReceivedSlot RingBufferLink::acquire_recv_slot(Deadline deadline) {
  const uint64_t head = head_.load(std::memory_order_relaxed);
  wait(
      [&] {
        if (recv_.cached_other != head) return true;
        recv_.cached_other = tail_.load(std::memory_order_seq_cst);
        return recv_.cached_other != head;
      },
      recv_wait_, recv_, deadline, "waiting for data (sender has not sent)", /*data_first=*/true);
  const uint64_t slot = head % static_cast<uint64_t>(num_slots_);
  const SlotMeta& m = meta_[slot];
  return ReceivedSlot{storage_.data() + slot * slot_bytes_, m.payload_bytes, m.fingerprint};
}

void RingBufferLink::release_recv() {
  head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
  wake(send_wait_, recv_.stats);
}

void RingBufferLink::abort(const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    if (!aborted_.load(std::memory_order_relaxed)) abort_reason_ = reason;
    aborted_.store(true, std::memory_order_seq_cst);
  }
  for (WaitWord* w : {&recv_wait_, &send_wait_}) {
    w->futex.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(w->futex, INT_MAX);
  }
}

void RingBufferLink::reset() {
  std::lock_guard lock(mu_);
  head_.store(0);
  tail_.store(0);
  send_ = SideState{};
  recv_ = SideState{};
  aborted_.store(false);
  abort_reason_.clear();
}

}  // namespace vtpu
