// The fingerprint exchange across processes: two cores of different processes that no link joins
// call different collectives, and every process fails at once naming both. The processes share
// this host, so steady_clock (CLOCK_MONOTONIC) times compare across them.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/distributed/test_util.h"
#include "vtpu/common/error.h"

namespace vtpu::distributed_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int64_t now_ns() { return Clock::now().time_since_epoch().count(); }

// Core 0 (process 0) all-reduces f32[8] by the ring and core 4 (process 1 of 2, or 2 of 4)
// f32[6], while every other core comes 500 ms later: in the ring 0..7 no link joins cores 0 and 4,
// so before the exchange nothing compared them until their neighbours arrived (or, had they never
// come, until the timeout). Both processes' mismatching cores fail within 100 ms of the later
// call, and every core of every process fails with InvalidArgument naming both.
// `late`: every process but 0 makes its communicator 200 ms after process 0's core 0 has
// called, so core 0's fingerprint reaches them before they have the communicator.
void expect_cores_0_and_4_fail_within_100ms(bool late) {
  auto rt = distributed::make_runtime(options(10s));
  if (late && rt->process_index() != 0) std::this_thread::sleep_for(200ms);
  Communicator comm(*rt, testing_util::iota_group(kCores));
  std::vector<std::string> errors(static_cast<size_t>(kCores));
  std::vector<ErrorCode> codes(static_cast<size_t>(kCores), ErrorCode::kInternal);
  int64_t called = 0, ended = 0;  // of this process's core 0 or 4
  try {
    rt->run_spmd([&](CoreContext& ctx) {
      const int c = ctx.core_id();
      const bool odd_one = c == 0 || c == 4;
      if (!odd_one) std::this_thread::sleep_for(500ms);
      std::vector<float> v(c == 4 ? 6 : 8, 1.0f);
      if (odd_one) called = now_ns();
      try {
        comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum, {Algorithm::kRing});
      } catch (const Error& e) {
        if (odd_one) ended = now_ns();
        errors[static_cast<size_t>(c)] = e.what();
        codes[static_cast<size_t>(c)] = e.code();
        throw;
      }
    });
  } catch (const Error&) {
  }
  for (int c : rt->local_core_ids()) {
    const std::string& m = errors[static_cast<size_t>(c)];
    EXPECT_EQ(codes[static_cast<size_t>(c)], ErrorCode::kInvalidArgument) << "core " << c << m;
    for (const char* v : {"core 0", "core 4", "f32[8]", "f32[6]"}) {
      EXPECT_NE(m.find(v), std::string::npos) << v << " not in core " << c << "'s " << m;
    }
  }
  const std::vector<int64_t> calls = gather(*rt, called);
  const std::vector<int64_t> ends = gather(*rt, ended);
  const int64_t both_called = *std::max_element(calls.begin(), calls.end());
  const int64_t last_end = *std::max_element(ends.begin(), ends.end());
  const double ms = static_cast<double>(last_end - both_called) * 1e-6;
  EXPECT_LT(ms, 100.0);
  if (rt->process_index() == 0) std::printf("cores 0 and 4 failed %.1f ms after both called\n", ms);
  rt->process_group().barrier();
}

TEST(DistributedGroupDesync, CoresOfTwoProcessesNoLinkJoinsFailWithin100Ms) {
  expect_cores_0_and_4_fail_within_100ms(false);
}

TEST(DistributedGroupDesync, FingerprintsThatComeBeforeTheCommunicatorAreKept) {
  expect_cores_0_and_4_fail_within_100ms(true);
}

// The first cores of processes 0 and 1 all-reduce f32[8] and f32[6], and each catches its error
// and goes on, so no failure notice is sent. Process 1's core calls 300 ms later, when process 0's
// fingerprint has reached its table: it finds the mismatch before it sends anything, and process
// 0's core, waiting for its data, learns of it only from process 1's fingerprint. Both fail with
// InvalidArgument naming both shapes, far within the 20 s timeout.
TEST(DistributedGroupDesync, CoreThatFindsTheMismatchFirstTellsTheOtherProcess) {
  auto rt = distributed::make_runtime(options());
  const int per_process = kCores / rt->process_count();
  const std::vector<int> group{0, per_process};
  Communicator comm(*rt, group);
  rt->process_group().barrier();
  if (rt->process_index() < 2) {
    const int core = group[static_cast<size_t>(rt->process_index())];
    rt->run_spmd({core}, [&](CoreContext& ctx) {
      if (core != 0) std::this_thread::sleep_for(300ms);
      std::vector<float> v(core == 0 ? 8 : 6, 1.0f);
      const auto called = Clock::now();
      try {
        comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum, {Algorithm::kRing});
        ADD_FAILURE() << "core " << core << " did not fail";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
        for (const char* shape : {"f32[8]", "f32[6]"}) {
          EXPECT_NE(e.message().find(shape), std::string::npos) << shape << ": " << e.what();
        }
        EXPECT_LT(Clock::now() - called, 5s) << e.what();
      }
    });
  }
  rt->process_group().barrier();
}

// Matching collectives across processes, many in a row: the exchanged fingerprints of collectives
// that went on never fail a later one (the table holds each sequence apart, and stale ones pass).
TEST(DistributedGroupDesync, ManyMatchingCollectivesStayQuiet) {
  auto rt = distributed::make_runtime(options());
  Communicator comm(*rt, testing_util::iota_group(kCores));
  rt->run_spmd([&](CoreContext& ctx) {
    for (int i = 0; i < 300; ++i) {
      std::vector<float> v(static_cast<size_t>(1 + i % 5), 1.0f);
      comm.all_reduce<float>(ctx, std::span<float>(v));
      ASSERT_EQ(v[0], static_cast<float>(kCores));
    }
  });
  rt->process_group().barrier();
}

}  // namespace
}  // namespace vtpu::distributed_test
