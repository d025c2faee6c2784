// Tests for runtime/dma_engine.h: strided copies land exactly, semaphores count bytes and return to
// 0, a copy runs while the caller goes on (the caller sees it pending), waits time out.
#include "vtpu/runtime/dma_engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <vector>

#include "vtpu/common/error.h"

namespace vtpu {
namespace {

using namespace std::chrono_literals;

TEST(DmaEngineTest, StridedCopyWithZeroFillAndByteCountingSemaphore) {
  DmaEngine engine(0, {});
  // Source: a 6 x 10 row-major float matrix; copy rows 2..4, cols 3..7 (3 x 5) into an 8 x 8 block.
  std::vector<float> src(60);
  std::iota(src.begin(), src.end(), 0.0f);
  std::vector<float> dst(64, -1.0f);
  DmaSemaphore sem;
  const DmaRegion from{reinterpret_cast<std::byte*>(&src[2 * 10 + 3]), 3, 5 * 4, 10 * 4};
  const DmaRegion to{reinterpret_cast<std::byte*>(dst.data()), 8, 8 * 4, 0};
  DmaCopy copy = engine.start(from, to, sem, /*zero_fill=*/true);
  EXPECT_EQ(copy.bytes(), 60u);
  copy.wait();
  EXPECT_EQ(sem.value(), 0u);
  EXPECT_EQ(sem.pending_bytes(), 0u);
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 8; ++c) {
      const float want = (r < 3 && c < 5) ? static_cast<float>((2 + r) * 10 + 3 + c) : 0.0f;
      EXPECT_EQ(dst[static_cast<size_t>(r * 8 + c)], want) << r << "," << c;
    }
  }
  engine.drain(1000ms);  // the counters are updated just after the semaphore is signalled
  EXPECT_EQ(engine.bytes_copied(), 60u);
  EXPECT_EQ(engine.copies_completed(), 1u);
}

TEST(DmaEngineTest, CopyRunsAsynchronouslyAndTheSemaphoreCountsBytes) {
  DmaOptions o;
  o.latency = 300ms;  // the copy cannot be done when start() returns
  DmaEngine engine(3, o);
  std::vector<std::byte> a(4096, std::byte{7}), b(4096);
  DmaSemaphore sem;
  DmaCopy c1 = engine.start({a.data(), 1, 1024, 0}, {b.data(), 1, 1024, 0}, sem);
  DmaCopy c2 = engine.start({a.data() + 1024, 1, 3072, 0}, {b.data() + 1024, 1, 3072, 0}, sem);
  EXPECT_EQ(sem.pending_bytes(), 4096u);
  EXPECT_EQ(sem.value(), 0u);
  EXPECT_EQ(engine.in_flight(), 2);
  c1.wait();
  c2.wait();
  EXPECT_EQ(sem.value(), 0u);
  // A copy stops counting as in flight just after it signals its semaphore: drain() waits for it.
  // (Regression: this test once read in_flight() right after wait() and raced with the engine.)
  engine.drain(1000ms);
  EXPECT_EQ(engine.in_flight(), 0);
  EXPECT_EQ(b, a);
}

TEST(DmaEngineTest, WaitTimesOutWithAClearError) {
  DmaSemaphore sem;
  try {
    sem.wait(4096, 20ms);
    FAIL() << "expected DeadlineExceededError";
  } catch (const DeadlineExceededError& e) {
    EXPECT_NE(std::string(e.what()).find("4096 bytes"), std::string::npos) << e.what();
  }
}

TEST(DmaEngineTest, RejectsADestinationSmallerThanTheSource) {
  DmaEngine engine(0, {});
  std::vector<std::byte> a(256), b(256);
  DmaSemaphore sem;
  EXPECT_THROW(engine.start({a.data(), 2, 128, 0}, {b.data(), 1, 128, 0}, sem),
               InvalidArgumentError);
  EXPECT_EQ(sem.pending_bytes(), 0u);
}

TEST(DmaEngineTest, ManyEnginesOnlyStartThreadsWhenUsed) {
  // 256 idle engines (256 virtual cores) are cheap: no thread until the first copy.
  std::vector<std::unique_ptr<DmaEngine>> engines;
  for (int i = 0; i < 256; ++i) engines.push_back(std::make_unique<DmaEngine>(i, DmaOptions{}));
  std::vector<std::byte> a(64, std::byte{1}), b(64);
  DmaSemaphore sem;
  engines[200]->start({a.data(), 1, 64, 0}, {b.data(), 1, 64, 0}, sem).wait();
  EXPECT_EQ(b, a);
}

// A copy throttled to 1000 B/s slept uninterruptibly for its
// whole duration (65 s here), so waits, drain and the engine's destructor hung far past the DMA
// timeout. Now the wait times out naming the copy's bytes, core and time waited, cancel() cuts
// the throttle delay short, and nothing below takes more than a few hundred milliseconds.
TEST(DmaEngineTest, ThrottledCopyHonoursTheTimeoutAndCancelWakesIt) {
  const auto t0 = std::chrono::steady_clock::now();
  DmaOptions o;
  o.bytes_per_second = 1000.0;  // 65536 bytes -> 65.5 s
  o.wait_timeout = 200ms;
  std::vector<std::byte> a(3 * 65536, std::byte{5}), b(3 * 65536);
  DmaSemaphore sem;
  {
    DmaEngine engine(2, o);
    DmaCopy first = engine.start({a.data(), 1, 65536, 0}, {b.data(), 1, 65536, 0}, sem);
    engine.start({a.data() + 65536, 1, 65536, 0}, {b.data() + 65536, 1, 65536, 0}, sem);
    engine.start({a.data() + 131072, 1, 65536, 0}, {b.data() + 131072, 1, 65536, 0}, sem);
    try {
      first.wait();
      FAIL() << "expected DeadlineExceededError";
    } catch (const DeadlineExceededError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("DMA copy of 65536 bytes on core 2"), std::string::npos) << what;
      EXPECT_NE(what.find("waited 2"), std::string::npos) << what;  // 200..299 ms
      EXPECT_NE(what.find("dma timeout 200 ms"), std::string::npos) << what;
    }
    EXPECT_THROW(engine.drain(50ms), DeadlineExceededError);  // drain honours its timeout too
    // The first copy's memcpy is done and it sleeps out its throttle; the other two are queued.
    EXPECT_EQ(engine.cancel(), 2);
    engine.drain(2000ms);  // the running copy wakes at once and completes
    EXPECT_EQ(engine.in_flight(), 0);
    EXPECT_EQ(engine.copies_cancelled(), 2u);
    EXPECT_EQ(engine.copies_completed(), 1u);
    EXPECT_EQ(sem.value(), 65536u);      // the completed copy signalled
    EXPECT_EQ(sem.pending_bytes(), 0u);  // the cancelled ones never will
    EXPECT_TRUE(std::equal(a.begin(), a.begin() + 65536, b.begin()));
    // A copy started after cancel() runs (and is throttled) as usual: cut short by shutdown.
    engine.start({a.data(), 1, 65536, 0}, {b.data(), 1, 65536, 0}, sem);
  }  // the destructor wakes the throttled copy instead of sleeping 65 s
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 20.0);  // a hang guard (65 s per copy before the fix), not a benchmark
}

// A stride smaller than the row made rows overlap, and
// durations near milliseconds::max() or a latency of 9e18 us overflowed now() + duration (a wait
// that timed out at once; a latency that wrapped into the past and ran unthrottled).
TEST(DmaEngineTest, RejectsOverlappingStridesAndUnboundedDurations) {
  DmaEngine engine(0, {});
  std::vector<std::byte> a(256), b(256);
  DmaSemaphore sem;
  EXPECT_THROW(engine.start({a.data(), 2, 32, 0}, {b.data(), 4, 64, 16}, sem, true),
               InvalidArgumentError);
  EXPECT_THROW(engine.start({a.data(), 2, 32, 16}, {b.data(), 4, 64, 0}, sem),
               InvalidArgumentError);
  EXPECT_EQ(sem.pending_bytes(), 0u);
  DmaOptions forever;
  forever.wait_timeout = std::chrono::milliseconds::max();
  EXPECT_THROW(DmaEngine(0, forever), InvalidArgumentError);
  DmaOptions slow;
  slow.latency = std::chrono::microseconds(9'000'000'000'000'000'000);
  EXPECT_THROW(DmaEngine(0, slow), InvalidArgumentError);
}

}  // namespace
}  // namespace vtpu
