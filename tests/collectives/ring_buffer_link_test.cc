#include "collectives/ring_buffer_link.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "common/error.h"

namespace vtpu {
namespace {

using namespace std::chrono_literals;
Deadline in(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

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

}  // namespace
}  // namespace vtpu
