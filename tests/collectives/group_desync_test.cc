// The group's fingerprint table: cores that call different collectives fail at once, naming both,
// also when no link joins them, so that a desync no message reveals is not a timeout.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/collectives/test_util.h"
#include "vtpu/collectives/communicator.h"
#include "vtpu/collectives/fingerprint_table.h"
#include "vtpu/common/error.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing_util::iota_group;
using testing_util::small_options;

// How one core's program ended: its error's code and text, and when it called and failed.
struct CoreOutcome {
  ErrorCode code = ErrorCode::kInternal;
  bool failed = false;
  std::string message;
  Clock::time_point called, ended;
};

// From the later of the cores' calls to the last of their failures: how long the mismatch took
// to be found once both sides had arrived.
Clock::duration time_to_fail(const std::vector<CoreOutcome>& out, const std::vector<int>& cores) {
  Clock::time_point both_called{}, last_end{};
  for (int c : cores) {
    both_called = std::max(both_called, out[static_cast<size_t>(c)].called);
    last_end = std::max(last_end, out[static_cast<size_t>(c)].ended);
  }
  return last_end - both_called;
}

// Runs `call` on every core of a 4-core runtime with a 10 s collective timeout; returns each
// core's outcome (the test's expectations are on them, run_spmd's first error aside).
std::vector<CoreOutcome> run_four(Runtime& rt, const std::function<void(CoreContext&)>& call) {
  std::vector<CoreOutcome> out(4);
  try {
    rt.run_spmd([&](CoreContext& ctx) {
      CoreOutcome& o = out[static_cast<size_t>(ctx.core_id())];
      o.called = Clock::now();
      try {
        call(ctx);
      } catch (const Error& e) {
        o = {e.code(), true, e.what(), o.called, Clock::now()};
        throw;
      }
    });
  } catch (const Error&) {
  }
  return out;
}

RuntimeOptions four_cores() {
  RuntimeOptions o = small_options(4);
  o.collective_timeout = 10s;
  return o;
}

// Cores 0 and 2 of a ring of 4 all-reduce f32[8] and f32[6] while their neighbours 1 and 3 come
// 500 ms later: no link joins 0 and 2, so before the table nothing compared them until the
// neighbours arrived (or, had they never come, until the timeout).
TEST(GroupDesyncTest, CoresNoLinkJoinsFailWithin100MsNamingBoth) {
  Runtime rt(four_cores());
  Communicator comm(rt, iota_group(4));
  const std::vector<CoreOutcome> out = run_four(rt, [&](CoreContext& ctx) {
    const int c = ctx.core_id();
    if (c % 2 == 1) std::this_thread::sleep_for(500ms);
    std::vector<float> v(c == 2 ? 6 : 8, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum, {Algorithm::kRing});
  });
  for (int c = 0; c < 4; ++c) {
    const CoreOutcome& o = out[static_cast<size_t>(c)];
    ASSERT_TRUE(o.failed) << "core " << c;
    EXPECT_EQ(o.code, ErrorCode::kInvalidArgument) << o.message;
    for (const char* v : {"core 0", "core 2", "f32[8]", "f32[6]", "at sequence 0"}) {
      EXPECT_NE(o.message.find(v), std::string::npos) << v << " not in: " << o.message;
    }
  }
  EXPECT_LT(time_to_fail(out, {0, 2}), 100ms);
}

// Every core waits to receive first: cores 0 and 1 take core 2 for the broadcast root, cores 2 and
// 3 take core 0, so no core sends and no message carries a fingerprint. Without the table the
// group waited for the whole timeout.
TEST(GroupDesyncTest, BroadcastWhereNoCoreIsTheRootFailsAtOnce) {
  Runtime rt(four_cores());
  Communicator comm(rt, iota_group(4));
  const std::vector<CoreOutcome> out = run_four(rt, [&](CoreContext& ctx) {
    std::vector<float> v(16, 1.0f);
    comm.broadcast<float>(ctx, std::span<float>(v), ctx.core_id() < 2 ? 2 : 0);
  });
  for (const CoreOutcome& o : out) {
    ASSERT_TRUE(o.failed);
    EXPECT_EQ(o.code, ErrorCode::kInvalidArgument) << o.message;
    EXPECT_NE(o.message.find("broadcast(root=2)"), std::string::npos) << o.message;
    EXPECT_NE(o.message.find("broadcast(root=0)"), std::string::npos) << o.message;
  }
  EXPECT_LT(time_to_fail(out, {0, 1, 2, 3}), 100ms);
}

// desync_check = false keeps the table out: a reduce-op mismatch (the messages' sizes agree, so
// the size checks, which stay on, pass) goes unnoticed, where the default check names it.
TEST(GroupDesyncTest, DesyncCheckOffLeavesTheTableOut) {
  for (const bool check : {true, false}) {
    Runtime rt(four_cores());
    CommunicatorOptions o = CommunicatorOptions::from_runtime(rt.options());
    o.desync_check = check;
    Communicator comm(rt, iota_group(4), o);
    const std::vector<CoreOutcome> out = run_four(rt, [&](CoreContext& ctx) {
      std::vector<float> v(16, 1.0f);
      comm.all_reduce<float>(ctx, std::span<float>(v),
                             ctx.core_id() < 2 ? ReduceOp::kSum : ReduceOp::kMax);
    });
    for (const CoreOutcome& r : out) {
      EXPECT_EQ(r.failed, check) << "desync_check " << check << ": " << r.message;
      if (check) {
        EXPECT_EQ(r.code, ErrorCode::kInvalidArgument) << r.message;
      }
    }
  }
}

// reset() restarts sequences at 0: the table forgets the mismatched sequence 0, so the next
// (matching) collective at sequence 0 succeeds, with the right sum.
TEST(GroupDesyncTest, ResetForgetsTheMismatchedSequence) {
  Runtime rt(four_cores());
  Communicator comm(rt, iota_group(4));
  run_four(rt, [&](CoreContext& ctx) {
    std::vector<float> v(ctx.core_id() == 3 ? 4 : 5, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(v));
  });
  comm.reset();
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(4, static_cast<float>(ctx.core_id()));
    comm.all_reduce<float>(ctx, std::span<float>(v));
    for (float x : v) EXPECT_EQ(x, 0.0f + 1.0f + 2.0f + 3.0f);
  });
}

// The table on its own: the first fingerprint of a sequence is the reference, an equal one
// matches, a different one names the reference's core, and a sequence kEntries later takes the
// entry so that the late one is not compared.
TEST(FingerprintTableTest, ComparesWithTheFirstOfEachSequence) {
  FingerprintTable t;
  Fingerprint a;
  a.num_elements = 8;
  a.sequence = 3;
  Fingerprint b = a;
  b.num_elements = 6;
  EXPECT_EQ(t.publish(5, a).outcome, FingerprintTable::Outcome::kFirst);
  EXPECT_EQ(t.publish(6, a).outcome, FingerprintTable::Outcome::kSame);
  const FingerprintTable::Result r = t.publish(7, b);
  EXPECT_EQ(r.outcome, FingerprintTable::Outcome::kDifferent);
  EXPECT_EQ(r.reference_core, 5);
  EXPECT_EQ(r.reference, a);
  Fingerprint later = a;
  later.sequence = a.sequence + FingerprintTable::kEntries;
  EXPECT_EQ(t.publish(6, later).outcome, FingerprintTable::Outcome::kFirst);
  EXPECT_EQ(t.publish(7, b).outcome, FingerprintTable::Outcome::kPassed);
  t.clear();
  EXPECT_EQ(t.publish(7, b).outcome, FingerprintTable::Outcome::kFirst);
}

}  // namespace
}  // namespace vtpu
