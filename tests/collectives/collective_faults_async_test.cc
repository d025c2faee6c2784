// Faults (timeouts that name the missing cores, a throw on one core aborting the others fast,
// reset, the desync example) and the async start/wait forms, for every operation.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <latch>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "tests/collectives/test_util.h"
#include "tests/expect_error.h"
#include "vtpu/collectives/communicator.h"
#include "vtpu/common/error.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {
namespace {

using namespace std::chrono_literals;
using testing_util::iota_group;
using testing_util::small_options;

// One call of each operation with 40 floats per core on a group of `n`; `tag` in the error text.
struct OpCase {
  const char* name;
  std::function<void(Communicator&, CoreContext&, int n)> call;
};

std::vector<OpCase> every_op() {
  return {
      {"all_reduce",
       [](Communicator& c, CoreContext& ctx, int) {
         std::vector<float> v(40, 1.0f);
         c.all_reduce<float>(ctx, std::span<float>(v));
       }},
      {"all_gather",
       [](Communicator& c, CoreContext& ctx, int n) {
         std::vector<float> v(40, 1.0f), out(40 * static_cast<size_t>(n));
         const std::array<int64_t, 1> shape = {40};
         c.all_gather<float>(ctx, v, out, shape);
       }},
      {"reduce_scatter",
       [](Communicator& c, CoreContext& ctx, int n) {
         std::vector<float> v(40 * static_cast<size_t>(n), 1.0f), out(40);
         const std::array<int64_t, 1> shape = {40 * n};
         c.reduce_scatter<float>(ctx, v, out, shape, ReduceOp::kSum, 0, true);
       }},
      {"all_to_all",
       [](Communicator& c, CoreContext& ctx, int n) {
         std::vector<float> v(40 * static_cast<size_t>(n), 1.0f), out(v.size());
         const std::array<int64_t, 1> shape = {40 * n};
         c.all_to_all<float>(ctx, v, out, shape, 0, 0);
       }},
      {"collective_permute",
       [](Communicator& c, CoreContext& ctx, int n) {
         std::vector<PermutePair> pairs;
         for (int r = 0; r < n; ++r) pairs.push_back({r, (r + 1) % n});
         std::vector<float> v(40, 1.0f);
         c.collective_permute<float>(ctx, v, v, pairs);
       }},
      {"broadcast",
       [](Communicator& c, CoreContext& ctx, int) {
         std::vector<float> v(40, 1.0f);
         c.broadcast<float>(ctx, std::span<float>(v), 0);
       }},
      {"reduce",
       [](Communicator& c, CoreContext& ctx, int) {
         std::vector<float> v(40, 1.0f), out(40);
         c.reduce<float>(ctx, v, out, 0);
       }},
      {"barrier", [](Communicator& c, CoreContext& ctx, int) { c.barrier(ctx); }},
  };
}

// Injected timeout: core 0 never calls; the error names the op, sequence 0 and core 0. (Core 0
// is the root of the broadcast and reduce, so every op has a core that waits for it; a broadcast
// whose root is present can complete without the last core, which is not a hang.)
TEST(CollectiveFaultsTest, TimeoutNamesOpSequenceAndMissingCoreForEveryOp) {
  RuntimeOptions o = small_options(3);
  o.collective_timeout = 250ms;
  Runtime rt(o);
  for (const OpCase& op : every_op()) {
    Communicator comm(rt, {0, 1, 2});
    // Cores 1 and 2 start together, so that a slow thread start (TSan on a loaded machine) does
    // not make core 1 look missing too.
    std::latch both_running(2);
    try {
      rt.run_spmd([&](CoreContext& ctx) {
        if (ctx.core_id() == 0) return;  // never calls the collective
        both_running.arrive_and_wait();
        op.call(comm, ctx, 3);
      });
      FAIL() << op.name << ": expected an error";
    } catch (const DeadlineExceededError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(op.name), std::string::npos) << msg;
      EXPECT_NE(msg.find("at sequence 0"), std::string::npos) << msg;
      EXPECT_NE(msg.find("have not reached sequence 0: {0}"), std::string::npos) << msg;
    } catch (const std::exception& e) {
      FAIL() << op.name << ": first error should be the timeout, got " << e.what();
    }
  }
}

// Injected throw: core 2 fails before the collective; the others fail with Aborted well under the
// 20 s timeout, later collectives fail at once, and after reset() the group works again.
TEST(CollectiveFaultsTest, ThrowOnOneCoreAbortsTheOthersFastForEveryOp) {
  Runtime rt(small_options(4));
  for (const OpCase& op : every_op()) {
    Communicator comm(rt, iota_group(4));
    std::vector<std::string> errors(4);
    const auto start = std::chrono::steady_clock::now();
    try {
      rt.run_spmd([&](CoreContext& ctx) {
        if (ctx.core_id() == 2) {
          std::this_thread::sleep_for(20ms);
          throw InvalidArgumentError("injected failure on core 2");
        }
        try {
          op.call(comm, ctx, 4);
        } catch (const AbortedError& e) {
          errors[static_cast<size_t>(ctx.core_id())] = e.what();
          throw;
        }
      });
      FAIL() << op.name << ": expected an error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("injected failure on core 2"), std::string::npos);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << op.name;
    // Cores that waited on core 2 were woken with Aborted naming the cause (a permute, broadcast
    // or barrier core may finish before it notices, so only non-empty errors are checked).
    int aborted = 0;
    for (int c : {0, 1, 3}) {
      const std::string& m = errors[static_cast<size_t>(c)];
      if (m.empty()) continue;
      ++aborted;
      EXPECT_NE(m.find("core 2 failed"), std::string::npos)
          << op.name << " core " << c << ": " << m;
    }
    EXPECT_GE(aborted, 1) << op.name;
    EXPECT_TRUE(comm.aborted());
    EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) { op.call(comm, ctx, 4); }), AbortedError);
    comm.reset();
    rt.run_spmd([&](CoreContext& ctx) {
      op.call(comm, ctx, 4);
      std::vector<float> v(300, 1.0f);
      comm.all_reduce<float>(ctx, std::span<float>(v));
      for (float x : v) ASSERT_EQ(x, 4.0f);
    });
  }
}

// A desync example: core 0 runs all_reduce f32[25] then all_gather s64[1], core 1 the
// other order. Both fail at sequence 0 and each error shows both fingerprints.
TEST(CollectiveFaultsTest, DesyncExampleNamesBothFingerprints) {
  Runtime rt(small_options(2));
  Communicator comm(rt, {0, 1});
  std::vector<std::string> errors(2);
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> f(25, 1.0f);
    std::vector<int64_t> s(1, 1), g(2);
    const std::array<int64_t, 1> shape = {1};
    try {
      if (ctx.core_id() == 0) {
        comm.all_reduce<float>(ctx, std::span<float>(f));
        comm.all_gather<int64_t>(ctx, s, g, shape);
      } else {
        comm.all_gather<int64_t>(ctx, s, g, shape);
        comm.all_reduce<float>(ctx, std::span<float>(f));
      }
    } catch (const Error& e) {
      errors[static_cast<size_t>(ctx.core_id())] = e.what();
      throw;
    }
  }),
               InvalidArgumentError);
  for (const std::string& msg : errors) {
    EXPECT_NE(msg.find("all_reduce(sum) f32[25] at sequence 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("all_gather(axis=0, stacked) s64[1] at sequence 0"), std::string::npos)
        << msg;
  }
}

// Same op and size, different shape or parameters: still a mismatch (the shape travels).
TEST(CollectiveFaultsTest, ShapeAndParameterMismatchesAreErrors) {
  Runtime rt(small_options(2));
  Communicator comm(rt, {0, 1});
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(8, 1.0f);
    const std::array<int64_t, 2> a = {2, 4}, b = {4, 2};
    comm.all_reduce_bytes(
        ctx, ElementType::kF32, std::as_bytes(std::span<float>(v)),
        std::as_writable_bytes(std::span<float>(v)),
        ctx.core_id() == 0 ? std::span<const int64_t>(a) : std::span<const int64_t>(b));
  }),
               InvalidArgumentError);
  comm.reset();
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(8, 1.0f);
    comm.broadcast<float>(ctx, std::span<float>(v), ctx.core_id());  // roots differ
  }),
               InvalidArgumentError);
  comm.reset();
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(8, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum,
                           {ctx.core_id() == 0 ? Algorithm::kRing : Algorithm::kTorus2d});
  }),
               InvalidArgumentError);
}

// The check can be turned off; matching collectives still work, and sizes are still checked: a
// size mismatch is InvalidArgument on both cores naming both shapes (collective_size_check_test.cc
// covers every operation and algorithm).
TEST(CollectiveFaultsTest, DesyncCheckCanBeTurnedOffButNotTheSizeCheck) {
  Runtime rt(small_options(2));
  CommunicatorOptions o = CommunicatorOptions::from_runtime(rt.options());
  o.desync_check = false;
  Communicator comm(rt, {0, 1}, o);
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(1000, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(v));
    for (float x : v) ASSERT_EQ(x, 2.0f);
  });
  std::vector<std::string> errors(2);
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(ctx.core_id() == 0 ? 8 : 6, 1.0f);
    try {
      comm.all_reduce<float>(ctx, std::span<float>(v));
    } catch (const InvalidArgumentError& e) {
      errors[static_cast<size_t>(ctx.core_id())] = e.what();
      throw;
    }
  }),
               InvalidArgumentError);
  for (const std::string& msg : errors) {
    EXPECT_NE(msg.find("f32[8]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[6]"), std::string::npos) << msg;
  }
}

// ---- async -----------------------------------------------------------------------------------

// start, compute, wait: the result is right and the compute ran while the collective was pending.
TEST(CollectiveAsyncTest, StartComputeWaitOverlaps) {
  Runtime rt(small_options(4));
  Communicator comm(rt, iota_group(4));
  std::atomic<bool> ready_before_peer{true};
  rt.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    if (c == 3) std::this_thread::sleep_for(100ms);  // the last core arrives late
    std::vector<float> grads(1000, static_cast<float>(c));
    CollectiveHandle h = comm.all_reduce_start<float>(ctx, std::span<float>(grads));
    // Compute while the all-reduce is in flight: core 0 sees it not finished, since core 3 has
    // not even started.
    if (c == 0 && h.ready()) ready_before_peer = false;
    double acc = 0;
    for (int i = 0; i < 100000; ++i) acc += i * 0.5;
    EXPECT_GT(acc, 0.0);
    h.wait();
    for (float x : grads) ASSERT_EQ(x, 6.0f);
  });
  EXPECT_TRUE(ready_before_peer.load());
}

// wait() really waits: after it returns the data is there, even when the peer is 150 ms late.
TEST(CollectiveAsyncTest, WaitBlocksUntilDone) {
  Runtime rt(small_options(2));
  Communicator comm(rt, {0, 1});
  rt.run_spmd([&](CoreContext& ctx) {
    // Both cores start the clock together: a core thread that starts late under load would
    // otherwise see less of core 1's delay.
    comm.barrier(ctx);
    const auto t0 = std::chrono::steady_clock::now();
    if (ctx.core_id() == 1) std::this_thread::sleep_for(150ms);
    std::vector<int32_t> v(3, ctx.core_id() + 1), all(6);
    const std::array<int64_t, 1> shape = {3};
    CollectiveHandle h = comm.all_gather_start<int32_t>(ctx, v, all, shape, 0, true);
    h.wait();
    EXPECT_TRUE(h.ready());
    EXPECT_EQ(all, (std::vector<int32_t>{1, 1, 1, 2, 2, 2}));
    if (ctx.core_id() == 0) {
      EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms);
    }
  });
}

// Several started collectives and a synchronous one run in call order on every core.
TEST(CollectiveAsyncTest, StartedAndSyncCollectivesRunInCallOrder) {
  Runtime rt(small_options(3));
  Communicator comm(rt, iota_group(3));
  rt.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    std::vector<float> a(500, 1.0f), b(3, static_cast<float>(c)), bc(7, static_cast<float>(c));
    std::vector<float> rs_in(6, static_cast<float>(c)), rs_out(2), a2a(6, static_cast<float>(c)),
        a2a_out(6), red(4, 1.0f), red_out(4), perm(2, static_cast<float>(c));
    const std::array<int64_t, 1> six = {6};
    std::vector<PermutePair> pairs = {{0, 2}, {2, 0}};
    std::vector<CollectiveHandle> hs;
    hs.push_back(comm.all_reduce_start<float>(ctx, std::span<float>(a)));
    hs.push_back(comm.broadcast_start<float>(ctx, bc, bc, 2));
    hs.push_back(
        comm.reduce_scatter_start<float>(ctx, rs_in, rs_out, six, ReduceOp::kSum, 0, true));
    hs.push_back(comm.all_to_all_start<float>(ctx, a2a, a2a_out, six, 0, 0));
    hs.push_back(comm.reduce_start<float>(ctx, red, red_out, 1));
    hs.push_back(comm.collective_permute_start<float>(ctx, perm, perm, pairs));
    hs.push_back(comm.barrier_start(ctx));
    comm.all_reduce<float>(ctx, std::span<float>(b), ReduceOp::kMax);  // waits for the started
    for (auto& h : hs) h.wait();
    for (float x : a) ASSERT_EQ(x, 3.0f);
    EXPECT_EQ(b, std::vector<float>(3, 2.0f));
    EXPECT_EQ(bc, std::vector<float>(7, 2.0f));
    EXPECT_EQ(rs_out, std::vector<float>(2, 3.0f));
    EXPECT_EQ(a2a_out, (std::vector<float>{0, 0, 1, 1, 2, 2}));
    if (c == 1) {
      EXPECT_EQ(red_out, std::vector<float>(4, 3.0f));
    }
    EXPECT_EQ(perm, std::vector<float>(2, c == 0 ? 2.0f : c == 2 ? 0.0f : 0.0f));
  });
}

// An async collective that fails keeps its error in the handle; destroying an unwaited handle
// waits, so buffers are never written after it is gone.
TEST(CollectiveAsyncTest, ErrorsReachWaitAndUnwaitedHandlesWait) {
  RuntimeOptions o = small_options(2);
  o.collective_timeout = 100ms;
  Runtime rt(o);
  Communicator comm(rt, {0, 1});
  EXPECT_THROW(rt.run_spmd({0},
                           [&](CoreContext& ctx) {
                             std::vector<float> v(4, 1.0f);
                             CollectiveHandle h =
                                 comm.all_reduce_start<float>(ctx, std::span<float>(v));
                             h.wait();  // core 1 never comes
                           }),
               DeadlineExceededError);
  comm.reset();
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(4, 1.0f);
    { CollectiveHandle h = comm.all_reduce_start<float>(ctx, std::span<float>(v)); }
    for (float x : v) ASSERT_EQ(x, 2.0f);
  });
}

// A program that throws with a started collective still pending (core 3 never joins, so it would
// pend until the 20 s timeout) aborts the group while its handle unwinds: everyone fails fast.
TEST(CollectiveAsyncTest, ThrowWithAPendingStartedCollectiveAbortsFast) {
  Runtime rt(small_options(4));
  Communicator comm(rt, iota_group(4));
  const auto start = std::chrono::steady_clock::now();
  try {
    rt.run_spmd([&](CoreContext& ctx) {
      if (ctx.core_id() == 3) return;
      std::vector<float> v(100, 1.0f);
      CollectiveHandle h = comm.all_reduce_start<float>(ctx, std::span<float>(v));
      if (ctx.core_id() == 1) throw InvalidArgumentError("injected failure on core 1");
      h.wait();
    });
    FAIL() << "expected an error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("injected failure on core 1"), std::string::npos);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  comm.reset();
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(100, 1.0f);
    comm.all_reduce_start<float>(ctx, std::span<float>(v)).wait();
    for (float x : v) ASSERT_EQ(x, 4.0f);
  });
}

// Same byte size but a different dtype, op, root, axis or tiling on one core: a desync error
// naming both sides within the timeout's fraction, never garbage.
TEST(CollectiveFaultsTest, DtypeOpRootAxisAndTilingMismatchesAreDesyncErrors) {
  RuntimeOptions o = small_options(3);
  o.collective_timeout = 10s;
  Runtime rt(o);
  Communicator comm(rt, {0, 1, 2});
  auto expect_desync = [&](const char* what, const std::function<void(CoreContext&)>& fn) {
    SCOPED_TRACE(what);
    const auto t0 = std::chrono::steady_clock::now();
    testing::expect_error(ErrorCode::kInvalidArgument, [&] { rt.run_spmd(fn); }, {});
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << what;
    comm.reset();
  };
  expect_desync("dtype", [&](CoreContext& ctx) {
    if (ctx.core_id() == 1) {
      std::vector<int32_t> v(16, 1);
      comm.all_reduce<int32_t>(ctx, std::span<int32_t>(v));
    } else {
      std::vector<float> v(16, 1.0f);
      comm.all_reduce<float>(ctx, std::span<float>(v));
    }
  });
  expect_desync("op", [&](CoreContext& ctx) {
    std::vector<float> v(16, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(v),
                           ctx.core_id() == 2 ? ReduceOp::kMax : ReduceOp::kSum);
  });
  expect_desync("reduce root", [&](CoreContext& ctx) {
    std::vector<float> v(16, 1.0f), out(16);
    comm.reduce<float>(ctx, v, out, ctx.core_id() == 0 ? 0 : 1);
  });
  expect_desync("all_gather axis", [&](CoreContext& ctx) {
    std::vector<float> v(4, 1.0f), out(12);
    const std::array<int64_t, 2> shape = {2, 2};
    comm.all_gather<float>(ctx, v, out, shape, ctx.core_id() == 1 ? 1 : 0, true);
  });
  expect_desync("all_gather tiled", [&](CoreContext& ctx) {
    std::vector<float> v(4, 1.0f), out(12);
    const std::array<int64_t, 1> shape = {4};
    comm.all_gather<float>(ctx, v, out, shape, 0, ctx.core_id() == 1);
  });
}

// Regression: a permute whose pairs differ between cores (core 0: 0->1->2->0, cores 1 and 2:
// 0->2->1->0) never checked a mismatching fingerprint, because the cores that disagree share no
// data link: core 1 completed and cores 0 and 2 ran into the timeout. It must fail at once with a
// desync error naming both fingerprints.
TEST(CollectiveFaultsTest, PermutePairsMismatchIsADesyncNotATimeout) {
  RuntimeOptions o = small_options(3);
  o.collective_timeout = 10s;
  Runtime rt(o);
  Communicator comm(rt, {0, 1, 2});
  const auto t0 = std::chrono::steady_clock::now();
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] {
                          rt.run_spmd([&](CoreContext& ctx) {
                            std::vector<float> v(4, 1.0f), out(4);
                            const std::vector<PermutePair> p0 = {{0, 1}, {1, 2}, {2, 0}},
                                                           p1 = {{0, 2}, {2, 1}, {1, 0}};
                            comm.collective_permute<float>(ctx, v, out,
                                                           ctx.core_id() == 0 ? p0 : p1);
                          });
                        },
                        {});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// wait() twice returns at once the second time; dropping an unwaited handle still completes the
// collective (buffers written before the handle is gone); many started collectives waited in
// reverse order all give the right values; a started collective with a bad argument reports its
// InvalidArgumentError at wait() (on every core, so nobody hangs).
TEST(CollectiveAsyncTest, WaitTwiceDropUnwaitedOutOfOrderAndErrorsAtWait) {
  Runtime rt(small_options(4));
  Communicator comm(rt, iota_group(4));
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> a(100, 1.0f);
    CollectiveHandle h = comm.all_reduce_start<float>(ctx, std::span<float>(a));
    h.wait();
    EXPECT_FALSE(h.valid());
    EXPECT_NO_THROW(h.wait());
    EXPECT_TRUE(h.ready());
    EXPECT_EQ(a[99], 4.0f);
    std::vector<float> b(100, 2.0f);
    { CollectiveHandle dropped = comm.all_reduce_start<float>(ctx, std::span<float>(b)); }
    EXPECT_EQ(b[0], 8.0f);
    constexpr int kMany = 16;
    std::vector<std::vector<int32_t>> bufs(kMany);
    std::vector<CollectiveHandle> hs;
    for (int k = 0; k < kMany; ++k) {
      bufs[static_cast<size_t>(k)].assign(33, k + ctx.core_id());
      hs.push_back(comm.all_reduce_start<int32_t>(ctx, std::span<int32_t>(bufs[k])));
    }
    for (int k = kMany - 1; k >= 0; --k) {
      hs[static_cast<size_t>(k)].wait();
      EXPECT_EQ(bufs[static_cast<size_t>(k)][32], 4 * k + 0 + 1 + 2 + 3);
    }
    std::vector<float> small(3), out(5);
    CollectiveHandle bad = comm.all_reduce_start<float>(ctx, small, std::span<float>(out));
    EXPECT_THROW(bad.wait(), InvalidArgumentError);
    std::vector<float> after(4, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(after));  // still in step
    EXPECT_EQ(after[0], 4.0f);
  });
}

// A core throwing mid-collective (between two pieces of a large all_reduce on the other cores)
// aborts its peers within milliseconds; later collectives on the group fail at once with
// AbortedError; after reset() the same communicator and runtime work again.
TEST(CollectiveFaultsTest, ThrowMidCollectiveFailsFastThenLaterCallsFailAtOnceThenReset) {
  RuntimeOptions o = small_options(4);
  o.collective_timeout = 20s;
  Runtime rt(o);
  Communicator comm(rt, iota_group(4));
  std::vector<std::chrono::steady_clock::duration> waited(4);
  std::vector<std::string> later(4);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    const size_t c = static_cast<size_t>(ctx.core_id());
    if (c == 3) {
      std::this_thread::sleep_for(30ms);
      throw InternalError("core 3 broke");
    }
    std::vector<float> big(100000, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.all_reduce<float>(ctx, std::span<float>(big));
    } catch (const AbortedError&) {
    }
    waited[c] = std::chrono::steady_clock::now() - start;
    const auto l0 = std::chrono::steady_clock::now();
    try {
      comm.barrier(ctx);
    } catch (const AbortedError& e) {
      later[c] = e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - l0, 100ms);
  }),
               InternalError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  for (int c = 0; c < 3; ++c) {
    EXPECT_LT(waited[static_cast<size_t>(c)], 2s) << c;
    EXPECT_NE(later[static_cast<size_t>(c)].find("3"), std::string::npos)
        << later[c];  // names core 3
  }
  comm.reset();
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(1000, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(v));
    EXPECT_EQ(v[999], 4.0f);
  });
}

// Async: several reduce_scatter and all_gather starts in flight, waited out of order, with
// compute between start and wait; the buffers hold the reference values after each wait.
TEST(CollectiveAsyncTest, ReduceScatterAndAllGatherStartsWaitedOutOfOrder) {
  Runtime rt(small_options(4));
  Communicator comm(rt, iota_group(4));
  rt.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    constexpr int kMany = 6;
    std::vector<std::vector<float>> xs(kMany), outs(kMany), gs(kMany);
    std::vector<CollectiveHandle> hs;
    const std::array<int64_t, 1> s = {400}, b = {100};
    for (int k = 0; k < kMany; ++k) {
      xs[size_t(k)].assign(400, static_cast<float>(c + k));
      outs[size_t(k)].assign(100, -1.0f);
      gs[size_t(k)].assign(400, -1.0f);
      if (k % 2 == 0) {
        hs.push_back(comm.reduce_scatter_start<float>(ctx, xs[size_t(k)], outs[size_t(k)], s,
                                                      ReduceOp::kSum, 0, true));
      } else {
        hs.push_back(comm.all_gather_start<float>(ctx,
                                                  std::span<const float>(xs[size_t(k)]).first(100),
                                                  std::span<float>(gs[size_t(k)]), b, 0, true));
      }
    }
    double busy = 0;
    for (int i = 0; i < 100000; ++i) busy += std::sqrt(static_cast<double>(i));
    EXPECT_GT(busy, 0);
    for (int k = kMany - 1; k >= 0; --k) hs[size_t(k)].wait();
    for (int k = 0; k < kMany; k += 2)
      for (float v : outs[size_t(k)]) ASSERT_EQ(v, static_cast<float>(0 + 1 + 2 + 3 + 4 * k));
    for (int k = 1; k < kMany; k += 2)
      for (int i = 0; i < 400; ++i)
        ASSERT_EQ(gs[size_t(k)][size_t(i)], static_cast<float>(i / 100 + k)) << k << " " << i;
  });
}

// A core that never calls: the others fail with DeadlineExceeded naming it within the timeout;
// a core that throws before calling: the others fail fast with Aborted. The group works after
// reset(), in both the direct reduce_scatter and all_gather.
TEST(CollectiveFaultsTest, ReduceScatterAndAllGatherTimeoutAndThrowOnOneCore) {
  RuntimeOptions o = small_options(4);
  o.collective_timeout = 300ms;
  Runtime rt(o);
  Communicator comm(rt, iota_group(4));
  for (bool gather : {false, true}) {
    SCOPED_TRACE(gather ? "all_gather" : "reduce_scatter");
    std::vector<std::string> msgs(4);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      rt.run_spmd([&](CoreContext& ctx) {
        const int c = ctx.core_id();
        if (c == 2) return;  // never calls
        std::vector<float> x(400, 1.0f), out(gather ? 1600 : 100);
        const std::array<int64_t, 1> s = {400};
        try {
          if (gather) {
            comm.all_gather<float>(ctx, x, out, s, 0, true);
          } else {
            comm.reduce_scatter<float>(ctx, x, out, s, ReduceOp::kSum, 0, true);
          }
        } catch (const Error& e) {
          msgs[size_t(c)] = e.what();
          throw;
        }
      });
    } catch (const Error&) {
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0);
    int naming = 0;
    for (int c : {0, 1, 3}) naming += msgs[size_t(c)].find("2") != std::string::npos ? 1 : 0;
    EXPECT_GE(naming, 1) << msgs[0] << " | " << msgs[1] << " | " << msgs[3];
    std::printf("[ info ] missing core: %.2f s; core 0: %s\n", s, msgs[0].c_str());
    comm.reset();
    const auto t1 = std::chrono::steady_clock::now();
    EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
      const int c = ctx.core_id();
      if (c == 1) {
        std::this_thread::sleep_for(20ms);
        throw InternalError("core 1 broke");
      }
      std::vector<float> x(1 << 16, 1.0f), out(gather ? 4 << 16 : 1 << 14);
      const std::array<int64_t, 1> s = {1 << 16};
      if (gather) {
        comm.all_gather<float>(ctx, x, out, s, 0, true);
      } else {
        comm.reduce_scatter<float>(ctx, x, out, s, ReduceOp::kSum, 0, true);
      }
    }),
                 InternalError);
    EXPECT_LT(std::chrono::steady_clock::now() - t1, 2s);
    comm.reset();
    rt.run_spmd([&](CoreContext& ctx) {
      std::vector<float> x(8, 1.0f), out(2);
      const std::array<int64_t, 1> s = {8};
      comm.reduce_scatter<float>(ctx, x, out, s, ReduceOp::kSum, 0, true);
      EXPECT_EQ(out[1], 4.0f);
    });
  }
}

}  // namespace
}  // namespace vtpu
