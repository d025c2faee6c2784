// Tests for common/parallel_for.h: every index runs once, the workers' writes are visible after
// the call, the first exception reaches the caller.
#include "vtpu/common/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace vtpu {
namespace {

TEST(ParallelForTest, EveryIndexOnceAndWritesVisibleAfter) {
  for (size_t n : {0u, 1u, 3u, 1000u}) {
    std::vector<int> calls(n, 0);  // plain ints: only the join orders them for the reads below
    parallel_for_index(
        n, [&](size_t i) { ++calls[i]; }, 4);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(calls[i], 1) << "n " << n << " index " << i;
  }
}

TEST(ParallelForTest, UsesUpToMaxThreadsIncludingTheCaller) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  parallel_for_index(
      64,
      [&](size_t) {
        std::lock_guard lock(mu);
        ids.insert(std::this_thread::get_id());
      },
      1);
  EXPECT_EQ(ids, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(ParallelForTest, FirstExceptionIsRethrownAndLaterIndicesSkipped) {
  std::atomic<size_t> ran{0};
  EXPECT_THROW(parallel_for_index(
                   100000,
                   [&](size_t i) {
                     ran.fetch_add(1);
                     if (i == 3) throw std::runtime_error("index 3");
                   },
                   2),
               std::runtime_error);
  EXPECT_LT(ran.load(), 100000u);
}

}  // namespace
}  // namespace vtpu
