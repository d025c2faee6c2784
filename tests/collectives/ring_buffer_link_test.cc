#include "vtpu/collectives/ring_buffer_link.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/host.h"

namespace vtpu {
namespace {

using namespace std::chrono_literals;
Deadline in(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

// Blocks until `sleeping()` holds (the other thread has passed its spin and yields and reached
// the futex sleep), polling every millisecond for at most 10 s. A fixed sleep instead (100 ms,
// as before) let a loaded host (a sanitizer run beside a build) deschedule the waiter for longer,
// so the peer acted first and the wait never slept.
template <typename Sleeping>
void until_asleep(Sleeping sleeping) {
  const auto give_up = std::chrono::steady_clock::now() + 10s;
  while (!sleeping() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(sleeping()) << "the waiter did not reach its futex sleep within 10 s";
}

TEST(RingBufferLinkTest, RejectsBadOptions) {
  EXPECT_THROW(RingBufferLink(0, 1, LinkOptions{100, 2}), InvalidArgumentError);
  EXPECT_THROW(RingBufferLink(0, 1, LinkOptions{0, 2}), InvalidArgumentError);
  EXPECT_THROW(RingBufferLink(0, 1, LinkOptions{64, 0}), InvalidArgumentError);
}

TEST(RingBufferLinkTest, MessagesArriveInOrderWithFingerprintAndSize) {
  RingBufferLink link(0, 1, LinkOptions{64, 2});
  for (uint64_t i = 0; i < 2; ++i) {
    std::byte* slot = link.acquire_send_slot(in(1s));
    std::memset(slot, static_cast<int>(i + 1), 8);
    link.commit_send(Fingerprint{.num_elements = 10 + i, .sequence = i}, 8 - i);
  }
  for (uint64_t i = 0; i < 2; ++i) {
    ReceivedSlot r = link.acquire_recv_slot(in(1s));
    EXPECT_EQ(r.payload_bytes, 8 - i);
    EXPECT_EQ(r.fingerprint.num_elements, 10 + i);
    EXPECT_EQ(r.fingerprint.sequence, i);
    EXPECT_EQ(static_cast<int>(r.data[0]), static_cast<int>(i + 1));
    link.release_recv();
  }
}

TEST(RingBufferLinkTest, FullLinkBlocksSenderUntilDeadline) {
  RingBufferLink link(2, 3, LinkOptions{64, 1});
  link.acquire_send_slot(in(1s));
  link.commit_send(Fingerprint{}, 0);
  const auto start = std::chrono::steady_clock::now();
  try {
    link.acquire_send_slot(in(50ms));
    FAIL() << "expected DeadlineExceededError";
  } catch (const DeadlineExceededError& e) {
    EXPECT_NE(std::string(e.what()).find("2->3"), std::string::npos) << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
}

TEST(RingBufferLinkTest, EmptyLinkBlocksReceiverUntilDeadline) {
  RingBufferLink link(0, 1, LinkOptions{64, 4});
  EXPECT_THROW(link.acquire_recv_slot(in(30ms)), DeadlineExceededError);
}

TEST(RingBufferLinkTest, AbortWakesABlockedReceiverPromptly) {
  RingBufferLink link(0, 1, LinkOptions{64, 4});
  std::thread aborter([&] {
    std::this_thread::sleep_for(20ms);
    link.abort("core 0 failed");
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    link.acquire_recv_slot(in(10s));
    FAIL() << "expected AbortedError";
  } catch (const AbortedError& e) {
    EXPECT_NE(std::string(e.what()).find("core 0 failed"), std::string::npos);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  aborter.join();
  EXPECT_THROW(link.acquire_send_slot(in(1s)), AbortedError);  // stays aborted
  link.reset();
  link.acquire_send_slot(in(1s));  // usable again
}

// Back-pressure: a producer pushing many more messages than slots, with a slow consumer, never
// overwrites an unread slot.
TEST(RingBufferLinkTest, BackPressureKeepsEveryMessage) {
  RingBufferLink link(0, 1, LinkOptions{64, 2});
  constexpr uint64_t kMessages = 5000;
  std::thread producer([&] {
    for (uint64_t i = 0; i < kMessages; ++i) {
      std::byte* slot = link.acquire_send_slot(in(10s));
      std::memcpy(slot, &i, sizeof i);
      link.commit_send(Fingerprint{.sequence = i}, sizeof i);
    }
  });
  for (uint64_t i = 0; i < kMessages; ++i) {
    ReceivedSlot r = link.acquire_recv_slot(in(10s));
    uint64_t v;
    std::memcpy(&v, r.data, sizeof v);
    ASSERT_EQ(v, i);
    ASSERT_EQ(r.fingerprint.sequence, i);
    if (i % 1000 == 0) std::this_thread::sleep_for(1ms);
    link.release_recv();
  }
  producer.join();
}

TEST(RingBufferLinkTest, ReadyLinkIsTakenWithoutWaiting) {
  RingBufferLink link(0, 1, LinkOptions{64, 2});
  link.acquire_send_slot(in(1s));
  link.commit_send(Fingerprint{}, 0);
  link.acquire_recv_slot(in(1s));
  link.release_recv();
  EXPECT_EQ(link.sender_stats().immediate, 1u);
  EXPECT_EQ(link.receiver_stats().immediate, 1u);
  EXPECT_EQ(link.sender_stats().wakes + link.receiver_stats().wakes, 0u);  // nobody slept
}

// A receiver that outlasts its spin and yield phases sleeps on the futex; the commit must wake it
// at once, not at its deadline.
TEST(RingBufferLinkTest, SleepingReceiverIsWokenByCommit) {
  RingBufferLink link(0, 1, LinkOptions{64, 2});
  std::thread sender([&] {
    until_asleep([&] { return link.receiver_sleeping(); });
    std::byte* slot = link.acquire_send_slot(in(1s));
    std::memset(slot, 7, 8);
    link.commit_send(Fingerprint{.sequence = 3}, 8);
  });
  const auto start = std::chrono::steady_clock::now();
  ReceivedSlot r = link.acquire_recv_slot(in(20s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(r.fingerprint.sequence, 3u);
  EXPECT_EQ(static_cast<int>(r.data[0]), 7);
  link.release_recv();
  sender.join();
  EXPECT_EQ(link.receiver_stats().slept, 1u);
  EXPECT_EQ(link.sender_stats().wakes, 1u);
}

// The yield phase runs only when the virtual cores outnumber the CPUs (oversubscribed; 0 cores
// means unknown and keeps it); without it a waiter that outlasts its spin goes straight to the
// futex, and a commit still wakes it.
TEST(RingBufferLinkTest, YieldPhaseOnlyWhenCoresOutnumberTheCpus) {
  const int cpus = usable_cpus();
  EXPECT_FALSE(RingBufferLink::oversubscribed(cpus));
  EXPECT_FALSE(RingBufferLink::oversubscribed(1));
  EXPECT_TRUE(RingBufferLink::oversubscribed(cpus + 1));
  EXPECT_TRUE(RingBufferLink::oversubscribed(0));
  for (const int cores : {0, cpus + 1, 1}) {
    SCOPED_TRACE(cores);
    LinkOptions o{64, 2};
    o.process_cores = cores;
    RingBufferLink link(0, 1, o);
    std::thread sender([&] {
      until_asleep([&] { return link.receiver_sleeping(); });
      link.acquire_send_slot(in(1s));
      link.commit_send(Fingerprint{.sequence = 5}, 0);
    });
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(link.acquire_recv_slot(in(20s)).fingerprint.sequence, 5u);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
    link.release_recv();
    sender.join();
    // The sender commits only once the receiver is asleep, so it sleeps once, after
    // kYieldIterations sched_yield calls only when oversubscribed.
    EXPECT_EQ(link.receiver_stats().slept, 1u);
    EXPECT_EQ(link.receiver_stats().yielded, 0u);
    EXPECT_EQ(link.receiver_stats().yield_calls,
              cores == 1 ? 0u : static_cast<uint64_t>(RingBufferLink::kYieldIterations));
  }
}

// Likewise for a sender blocked on a full link: release_recv wakes it.
TEST(RingBufferLinkTest, SleepingSenderIsWokenByRelease) {
  RingBufferLink link(0, 1, LinkOptions{64, 1});
  link.acquire_send_slot(in(1s));
  link.commit_send(Fingerprint{}, 0);
  std::thread receiver([&] {
    until_asleep([&] { return link.sender_sleeping(); });
    link.acquire_recv_slot(in(1s));
    link.release_recv();
  });
  const auto start = std::chrono::steady_clock::now();
  link.acquire_send_slot(in(20s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  receiver.join();
  EXPECT_EQ(link.sender_stats().slept, 1u);
  EXPECT_EQ(link.receiver_stats().wakes, 1u);
}

// A message committed before an abort still reaches the receiver (data first); only a wait
// that would have to wait fails. Before, the abort took messages already delivered.
TEST(RingBufferLinkTest, AbortStillDeliversCommittedMessages) {
  RingBufferLink link(2, 3, LinkOptions{64, 4});
  for (uint8_t v : {7, 9}) {
    *link.acquire_send_slot(in(1s)) = std::byte{v};
    link.commit_send(Fingerprint{}, 1);
  }
  link.abort("core 2 failed");
  EXPECT_THROW(link.acquire_send_slot(in(1s)), AbortedError);  // a sender fails at once
  for (uint8_t v : {7, 9}) {
    const ReceivedSlot r = link.acquire_recv_slot(in(1s));
    ASSERT_EQ(r.payload_bytes, 1u);
    EXPECT_EQ(*r.data, std::byte{v});
    link.release_recv();
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(link.acquire_recv_slot(in(10s)), AbortedError);  // nothing left: fails at once
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(RingBufferLinkTest, AbortWakesASleepingSender) {
  RingBufferLink link(4, 5, LinkOptions{64, 1});
  link.acquire_send_slot(in(1s));
  link.commit_send(Fingerprint{}, 0);
  std::thread aborter([&] {
    until_asleep([&] { return link.sender_sleeping(); });
    link.abort("core 5 failed");
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    link.acquire_send_slot(in(20s));
    FAIL() << "expected AbortedError";
  } catch (const AbortedError& e) {
    EXPECT_NE(std::string(e.what()).find("4->5 aborted: core 5 failed"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  aborter.join();
  EXPECT_EQ(link.sender_stats().slept, 1u);
}

// A ring of links with more threads than CPUs, each thread forwarding what it receives: every
// wait phase (spin, yield, sleep) is exercised, and no message is lost, reordered or stuck.
TEST(RingBufferLinkTest, OversubscribedRingDeliversEveryMessageInOrder) {
  constexpr int kThreads = 8;
  constexpr uint64_t kRounds = 300;
  std::vector<std::unique_ptr<RingBufferLink>> links;
  for (int i = 0; i < kThreads; ++i)
    links.push_back(std::make_unique<RingBufferLink>(i, (i + 1) % kThreads, LinkOptions{64, 2}));
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Link& next = *links[static_cast<size_t>(t)];
      Link& prev = *links[static_cast<size_t>((t + kThreads - 1) % kThreads)];
      for (uint64_t round = 0; round < kRounds; ++round) {
        uint64_t value = round * kThreads;  // thread 0 starts each round
        if (t != 0) {
          ReceivedSlot r = prev.acquire_recv_slot(in(30s));
          std::memcpy(&value, r.data, sizeof value);
          if (value != round * kThreads + static_cast<uint64_t>(t) - 1) ++failures;
          prev.release_recv();
          ++value;
        }
        std::memcpy(next.acquire_send_slot(in(30s)), &value, sizeof value);
        next.commit_send(Fingerprint{.sequence = round}, sizeof value);
        if (t == 0) {
          ReceivedSlot r = prev.acquire_recv_slot(in(30s));
          std::memcpy(&value, r.data, sizeof value);
          if (value != round * kThreads + kThreads - 1 || r.fingerprint.sequence != round)
            ++failures;
          prev.release_recv();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  uint64_t messages = 0;
  for (const auto& l : links) {
    const LinkWaitStats s = l->receiver_stats();
    messages += s.immediate + s.spun + s.yielded + s.slept;
  }
  EXPECT_EQ(messages, kThreads * kRounds);  // every receive ended in exactly one phase
}

TEST(RingBufferLinkTest, AtLeastOneSpinnerLeavesACpuFree) {
  EXPECT_GE(RingBufferLink::max_spinners(), 1);
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (cpus > 1) {
    EXPECT_EQ(RingBufferLink::max_spinners(), cpus - 1);
  }
}

}  // namespace
}  // namespace vtpu
