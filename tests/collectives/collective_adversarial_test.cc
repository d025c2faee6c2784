// Adversarial probes of the Communicator API: bad replica groups, degenerate sizes, mismatched
// calls, partial aliasing, bad axes and permutes, async misuse, faults, many cores, NaN/Inf and
// integer overflow semantics, and every all_reduce algorithm forced on odd group sizes. Each test
// names the bug (or the contract) it pins; references are computed here, independently.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <latch>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "vtpu/collectives/communicator.h"
#include "vtpu/common/bfloat16.h"
#include "vtpu/common/error.h"
#include "vtpu/runtime/runtime.h"
#include "tests/collectives/test_util.h"

namespace vtpu {
namespace {

using namespace std::chrono_literals;
using testing_util::iota_group;
using testing_util::small_options;

// Runs `fn` and returns the message of the InvalidArgumentError it throws ("" if none).
template <typename Fn>
std::string invalid_argument_message(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- replica groups ----------------------------------------------------------------------------

// A group that lists a core twice, names a core outside the runtime, or is empty is rejected when
// the Communicator is built, naming the offending core.
TEST(AdversarialGroupsTest, DuplicateOutOfRangeAndEmptyGroupsAreRejected) {
  Runtime rt(small_options(4));
  EXPECT_TRUE(contains(invalid_argument_message([&] {
                         Communicator c(rt, {0, 1, 1});
                       }),
                       "lists core 1 twice"));
  EXPECT_TRUE(contains(invalid_argument_message([&] {
                         Communicator c(rt, {0, 4});
                       }),
                       "names core 4 (expected 0..3)"));
  EXPECT_TRUE(
      contains(invalid_argument_message([&] { Communicator c(rt, {-1}); }), "names core -1"));
  EXPECT_TRUE(contains(invalid_argument_message([&] { Communicator c(rt, {}); }), "empty"));
}

// Regression: for_groups reported a core repeated inside ONE group as "core 1 is in replica group
// 0 and 0 (expected disjoint groups)"; it must say that the group lists the core twice.
TEST(AdversarialGroupsTest, ForGroupsNamesADuplicateInsideOneGroup) {
  Runtime rt(small_options(4));
  const std::string msg = invalid_argument_message([&] {
    Communicator::for_groups(rt, {{0, 1, 1}, {2, 3}});
  });
  EXPECT_TRUE(contains(msg, "lists core 1 twice")) << msg;
  EXPECT_FALSE(contains(msg, "group 0 and 0")) << msg;
  const std::string overlap = invalid_argument_message([&] {
    Communicator::for_groups(rt, {{0, 1}, {1, 2}});
  });
  EXPECT_TRUE(contains(overlap, "core 1 is in replica group 0 and 1")) << overlap;
  EXPECT_TRUE(contains(invalid_argument_message([&] {
                         Communicator::for_groups(rt, {{0}, {}});
                       }),
                       "empty"));
}

// Two communicators whose groups overlap ({0,1,2} and {1,2,3}) may both be used in one program as
// long as every shared core calls them in the same order; results are each group's own sum.
TEST(AdversarialGroupsTest, OverlappingCommunicatorsUsedInTheSameOrderAreCorrect) {
  Runtime rt(small_options(4));
  Communicator a(rt, {0, 1, 2}), b(rt, {1, 2, 3});
  std::vector<float> ra(4, -1), rb(4, -1);
  rt.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    for (int round = 0; round < 20; ++round) {
      std::vector<float> x(300, static_cast<float>(c + 1));
      if (c <= 2) {
        a.all_reduce<float>(ctx, std::span<float>(x));
        ASSERT_EQ(x[299], 1.0f + 2.0f + 3.0f);
      }
      std::vector<float> y(300, static_cast<float>(10 * (c + 1)));
      if (c >= 1) {
        b.all_reduce<float>(ctx, std::span<float>(y));
        ASSERT_EQ(y[0], 20.0f + 30.0f + 40.0f);
      }
    }
  });
}

// A group that does not cover every core works while the other cores do something else, and a
// core outside the group that calls a collective gets an error naming the group (not a hang).
TEST(AdversarialGroupsTest, PartialGroupAndANonMemberCaller) {
  Runtime rt(small_options(4));
  Communicator comm(rt, {3, 1});  // rank 0 is core 3, rank 1 is core 1
  rt.run_spmd({1, 3}, [&](CoreContext& ctx) {
    std::vector<int32_t> x = {ctx.core_id()}, out(2);
    const std::array<int64_t, 1> shape = {1};
    comm.all_gather<int32_t>(ctx, x, out, shape);
    EXPECT_EQ(out, (std::vector<int32_t>{3, 1}));  // block q is rank q's input, in group order
  });
  const std::string msg = invalid_argument_message([&] {
    rt.run_spmd({0}, [&](CoreContext& ctx) {
      std::vector<float> x(4);
      comm.all_reduce<float>(ctx, std::span<float>(x));
    });
  });
  EXPECT_TRUE(contains(msg, "core 0 is not in communicator group {3,1}")) << msg;
}

// ---- sizes -------------------------------------------------------------------------------------

// Zero elements: every op completes on 1..5 cores (fingerprints still meet), writes nothing, and
// the next collective is still in step.
TEST(AdversarialSizesTest, ZeroElementsForEveryOp) {
  Runtime rt(small_options(5));
  for (int n = 1; n <= 5; ++n) {
    Communicator comm(rt, iota_group(n));
    rt.run_spmd(iota_group(n), [&](CoreContext& ctx) {
      std::vector<float> e;
      const std::array<int64_t, 1> zero = {0};
      const std::array<int64_t, 2> zero2 = {0, 3};
      comm.all_reduce<float>(ctx, std::span<float>(e));
      comm.all_gather<float>(ctx, e, e, zero, 0, true);
      comm.all_gather<float>(ctx, e, e, zero2, 1, false);
      comm.reduce_scatter<float>(ctx, e, e, zero, ReduceOp::kSum, 0, true);
      comm.all_to_all<float>(ctx, e, e, zero2, 0, 1);
      std::vector<PermutePair> pairs = {{0, n - 1}};
      comm.collective_permute<float>(ctx, e, e, pairs);
      comm.broadcast<float>(ctx, std::span<float>(e), n - 1);
      comm.reduce<float>(ctx, e, e, 0);
      for (Algorithm a :
           {Algorithm::kRing, Algorithm::kBidirectionalRing, Algorithm::kRecursiveDoubling,
            Algorithm::kTorus2d, Algorithm::kRingReduceScatter}) {
        comm.all_reduce<float>(ctx, std::span<float>(e), ReduceOp::kMax, {a});
      }
      std::vector<float> one = {1.0f};
      comm.all_reduce<float>(ctx, std::span<float>(one));
      EXPECT_EQ(one[0], static_cast<float>(n));
    });
  }
}

// Regression: Shape::num_elements() wrapped modulo 2^64, so shape {2^32, 2^32} (2^64 elements)
// passed the size check with empty buffers and ran as a zero-element collective; it must be an
// InvalidArgumentError naming the shape.
TEST(AdversarialSizesTest, ShapeWhoseElementCountOverflowsIsAnError) {
  Runtime rt(small_options(2));
  Communicator comm(rt, {0, 1});
  std::vector<std::string> msgs(2);
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    const std::array<int64_t, 2> huge = {int64_t{1} << 32, int64_t{1} << 32};
    try {
      comm.all_reduce_bytes(ctx, ElementType::kF32, {}, {}, huge);
    } catch (const InvalidArgumentError& e) {
      msgs[static_cast<size_t>(ctx.core_id())] = e.what();
      throw;
    }
  }),
               InvalidArgumentError);
  EXPECT_TRUE(contains(msgs[0], "[4294967296,4294967296]")) << msgs[0];
}

// Regression: elements x element bytes wrapped too: f32[2^62] is 2^64 bytes == 0 mod 2^64, so
// empty buffers passed check_size and the algorithms then read 2^62 elements. Must be an error.
TEST(AdversarialSizesTest, ByteCountOverflowIsAnError) {
  Runtime rt(small_options(2));
  Communicator comm(rt, {0, 1});
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    const std::array<int64_t, 1> huge = {int64_t{1} << 62};
    comm.all_reduce_bytes(ctx, ElementType::kF32, {}, {}, huge);
  }),
               InvalidArgumentError);
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    const std::array<int64_t, 1> huge = {int64_t{1} << 62};
    comm.all_gather_bytes(ctx, ElementType::kF32, {}, {}, huge, 0, true);
  }),
               InvalidArgumentError);
}

// ---- mismatched calls across cores -------------------------------------------------------------

// Same byte size but a different dtype, op, root, axis or tiling on one core: a desync error
// naming both sides within the timeout's fraction, never garbage.
TEST(AdversarialMismatchTest, DtypeOpRootAxisAndTilingMismatchesAreDesyncErrors) {
  RuntimeOptions o = small_options(3);
  o.collective_timeout = 10s;
  Runtime rt(o);
  Communicator comm(rt, {0, 1, 2});
  auto expect_desync = [&](const char* what, const std::function<void(CoreContext&)>& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string msg = invalid_argument_message([&] { rt.run_spmd(fn); });
    EXPECT_TRUE(contains(msg, "collective mismatch")) << what << ": " << msg;
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
TEST(AdversarialMismatchTest, PermutePairsMismatchIsADesyncNotATimeout) {
  RuntimeOptions o = small_options(3);
  o.collective_timeout = 10s;
  Runtime rt(o);
  Communicator comm(rt, {0, 1, 2});
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = invalid_argument_message([&] {
    rt.run_spmd([&](CoreContext& ctx) {
      std::vector<float> v(4, 1.0f), out(4);
      const std::vector<PermutePair> p0 = {{0, 1}, {1, 2}, {2, 0}}, p1 = {{0, 2}, {2, 1}, {1, 0}};
      comm.collective_permute<float>(ctx, v, out, ctx.core_id() == 0 ? p0 : p1);
    });
  });
  EXPECT_TRUE(contains(msg, "collective mismatch")) << msg;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// ---- aliasing ----------------------------------------------------------------------------------

// Partially overlapping send/recv (same op, shifted by one element): an error for all_reduce,
// permute and broadcast (NCCL only allows send == recv), and correct results for reduce_scatter
// and all_to_all, which document "any overlap".
TEST(AdversarialAliasingTest, PartialOverlapIsAnErrorOrCorrect) {
  Runtime rt(small_options(2));
  Communicator comm(rt, {0, 1});
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> buf(9, 1.0f);
    comm.all_reduce<float>(ctx, std::span<const float>(buf.data(), 8),
                           std::span<float>(buf.data() + 1, 8));
  }),
               InvalidArgumentError);
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> buf(9, 1.0f);
    const std::vector<PermutePair> p = {{0, 1}, {1, 0}};
    comm.collective_permute<float>(ctx, std::span<const float>(buf.data(), 8),
                                   std::span<float>(buf.data() + 1, 8), p);
  }),
               InvalidArgumentError);
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> buf(9, 1.0f);
    comm.broadcast<float>(ctx, std::span<const float>(buf.data(), 8),
                          std::span<float>(buf.data() + 1, 8), 0);
  }),
               InvalidArgumentError);
  // all_gather: overlap that is not NCCL's in-place form.
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> buf(9, 1.0f);
    const std::array<int64_t, 1> shape = {4};
    comm.all_gather<float>(ctx, std::span<const float>(buf.data() + 1, 4),
                           std::span<float>(buf.data(), 8), shape, 0, true);
  }),
               InvalidArgumentError);
  // reduce_scatter: send = buf[0..8), recv = buf[3..7): core c's input x[i] = 10c + i.
  comm.reset();
  rt.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    std::vector<float> buf(8);
    for (int i = 0; i < 8; ++i) buf[static_cast<size_t>(i)] = static_cast<float>(10 * c + i);
    const std::array<int64_t, 1> shape = {8};
    comm.reduce_scatter<float>(ctx, std::span<const float>(buf.data(), 8),
                               std::span<float>(buf.data() + 3, 4), shape, ReduceOp::kSum, 0, true);
    for (int i = 0; i < 4; ++i) {
      const int j = 4 * c + i;  // rank c gets block c: sum over cores of 10c' + j = 10 + 2j
      EXPECT_EQ(buf[static_cast<size_t>(3 + i)], static_cast<float>(10 + 2 * j)) << c << " " << i;
    }
  });
  // all_to_all: recv starts 2 elements into send.
  rt.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    std::vector<float> buf(10);
    for (int i = 0; i < 8; ++i) buf[static_cast<size_t>(i)] = static_cast<float>(10 * c + i);
    const std::array<int64_t, 1> shape = {8};
    comm.all_to_all<float>(ctx, std::span<const float>(buf.data(), 8),
                           std::span<float>(buf.data() + 2, 8), shape, 0, 0);
    for (int q = 0; q < 2; ++q)
      for (int i = 0; i < 4; ++i)  // block q of the output is rank q's block c
        EXPECT_EQ(buf[static_cast<size_t>(2 + 4 * q + i)], static_cast<float>(10 * q + 4 * c + i));
  });
}

// ---- axes and permutes -------------------------------------------------------------------------

// Out-of-range axes of all_gather, reduce_scatter and all_to_all name the axis and the shape;
// a stacked all_gather whose output would exceed 8 dims is an error, and a scalar stacks to (N).
TEST(AdversarialAxesTest, BadAxesAreErrorsNamingTheAxis) {
  const std::array<int64_t, 2> s = {4, 2};
  auto msg = [&](auto fn) { return invalid_argument_message(fn); };
  EXPECT_TRUE(contains(msg([&] { Communicator::all_gather_shape(s, 2, -1, false); }),
                       "all_gather axis is -1 for input shape [4,2] (expected 0..2, stacked)"));
  EXPECT_TRUE(contains(msg([&] { Communicator::all_gather_shape(s, 2, 2, true); }),
                       "(expected 0..1, tiled)"));
  EXPECT_TRUE(contains(msg([&] { Communicator::reduce_scatter_shape(s, 2, 2, true); }),
                       "scatter_dimension is 2"));
  EXPECT_TRUE(contains(msg([&] { Communicator::reduce_scatter_shape(s, 2, -1, true); }),
                       "scatter_dimension is -1"));
  EXPECT_TRUE(
      contains(msg([&] { Communicator::all_to_all_shape(s, 2, 0, 5); }), "concat_axis is 5"));
  EXPECT_TRUE(
      contains(msg([&] { Communicator::all_to_all_shape(s, 2, -3, 0); }), "split_axis is -3"));
  const std::array<int64_t, 8> eight = {1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_TRUE(
      contains(msg([&] { Communicator::all_gather_shape(eight, 2, 0, false); }), "at most 8"));
  EXPECT_EQ(Communicator::all_gather_shape({}, 3, 0, false), (std::vector<int64_t>{3}));
  EXPECT_TRUE(contains(msg([&] { Communicator::all_gather_shape({}, 3, 0, true); }),
                       "all_gather axis is 0"));
}

// Permute pairs: a repeated source, a repeated destination, or a rank outside the group is an
// error naming it; a self pair (r, r) keeps the input; an unlisted core gets zeros.
TEST(AdversarialPermuteTest, BadPairsAreErrorsAndSelfPairsKeepTheInput) {
  Runtime rt(small_options(3));
  Communicator comm(rt, {0, 1, 2});
  auto run_pairs = [&](std::vector<PermutePair> pairs) {
    comm.reset();  // the previous case's throw aborted the group
    return invalid_argument_message([&] {
      rt.run_spmd([&](CoreContext& ctx) {
        std::vector<int64_t> v(5, ctx.core_id() + 1), out(5);
        comm.collective_permute<int64_t>(ctx, v, out, pairs);
      });
    });
  };
  EXPECT_TRUE(contains(run_pairs({{0, 1}, {0, 2}}), "lists source 0 twice"));
  EXPECT_TRUE(contains(run_pairs({{0, 2}, {1, 2}}), "lists destination 2 twice"));
  EXPECT_TRUE(contains(run_pairs({{0, 3}}), "names rank 3 (expected ranks 0..2"));
  EXPECT_TRUE(contains(run_pairs({{-1, 0}}), "names rank -1"));
  comm.reset();
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<int64_t> v(5, ctx.core_id() + 1), out(5, -7);
    const std::vector<PermutePair> pairs = {{1, 1}, {0, 2}};
    comm.collective_permute<int64_t>(ctx, v, out, pairs);
    const int64_t expect = ctx.core_id() == 1 ? 2 : ctx.core_id() == 2 ? 1 : 0;
    for (int64_t x : out) EXPECT_EQ(x, expect) << "core " << ctx.core_id();
  });
}

// ---- async -------------------------------------------------------------------------------------

// wait() twice returns at once the second time; dropping an unwaited handle still completes the
// collective (buffers written before the handle is gone); many started collectives waited in
// reverse order all give the right values; a started collective with a bad argument reports its
// InvalidArgumentError at wait() (on every core, so nobody hangs).
TEST(AdversarialAsyncTest, WaitTwiceDropUnwaitedOutOfOrderAndErrorsAtWait) {
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

// ---- faults ------------------------------------------------------------------------------------

// A core throwing mid-collective (between two pieces of a large all_reduce on the other cores)
// aborts its peers within milliseconds; later collectives on the group fail at once with
// AbortedError; after reset() the same communicator and runtime work again.
TEST(AdversarialFaultsTest, ThrowMidCollectiveFailsFastThenLaterCallsFailAtOnceThenReset) {
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
    EXPECT_TRUE(contains(later[static_cast<size_t>(c)], "call reset()")) << later[c];
  }
  comm.reset();
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(1000, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(v));
    EXPECT_EQ(v[999], 4.0f);
  });
}

// ---- many cores --------------------------------------------------------------------------------

// Options for 64 or 256 cores on 2 CPUs: 1 MiB of HBM and 4 KiB link slots per core, 60 s waits.
RuntimeOptions many_core_options(int n) {
  RuntimeOptions o = small_options(n);
  o.hbm_bytes_per_core = 1 << 20;
  o.link_slot_bytes = 4096;
  o.collective_timeout = 60s;
  return o;
}

// 64 and 256 virtual cores on 2 CPUs: small all_reduce (both auto choices), all_gather and a
// barrier complete with the right values (the time is printed, not asserted).
TEST(AdversarialManyCoresTest, SixtyFourAndTwoHundredFiftySixCoresComplete) {
  for (int n : {64, 256}) {
    Runtime rt(many_core_options(n));
    Communicator comm(rt, iota_group(n));
    const auto t0 = std::chrono::steady_clock::now();
    rt.run_spmd([&](CoreContext& ctx) {
      const int c = ctx.core_id();
      std::vector<int64_t> x(4, c), big(3000, 1);
      comm.all_reduce<int64_t>(ctx, std::span<int64_t>(x));  // recursive doubling
      EXPECT_EQ(x[0], int64_t{n} * (n - 1) / 2);
      comm.all_reduce<int64_t>(ctx, std::span<int64_t>(big));  // 24 KB: ring
      EXPECT_EQ(big[2999], n);
      std::vector<int32_t> one = {c}, all(static_cast<size_t>(n));
      const std::array<int64_t, 1> shape = {1};
      comm.all_gather<int32_t>(ctx, one, all, shape);
      for (int q = 0; q < n; ++q) ASSERT_EQ(all[static_cast<size_t>(q)], q);
      comm.barrier(ctx);
    });
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ info ] %d cores: all_reduce 32 B + 24 KB, all_gather, barrier: %.1f ms\n", n,
                ms);
  }
}

// ---- floating-point and integer semantics ------------------------------------------------------

// Regression: max/min used std::max/std::min, which keep the accumulator when the other operand
// is NaN, so pmax returned NaN only when the NaN sat on rank 0 and dropped it on any other rank.
// XLA's max/min (and so jax.lax.pmax/pmin) propagate NaN; so must every algorithm, for f32, f64
// and bf16, wherever the NaN is.
TEST(AdversarialFloatTest, MaxAndMinPropagateNanFromAnyRank) {
  Runtime rt(small_options(4));
  Communicator comm(rt, iota_group(4));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Algorithm alg :
       {Algorithm::kRing, Algorithm::kBidirectionalRing, Algorithm::kRecursiveDoubling,
        Algorithm::kTorus2d, Algorithm::kRingReduceScatter}) {
    for (int nan_rank = 0; nan_rank < 4; ++nan_rank) {
      for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
        rt.run_spmd([&](CoreContext& ctx) {
          const bool mine = ctx.core_id() == nan_rank;
          std::vector<float> f(8, mine ? nan : static_cast<float>(ctx.core_id()));
          std::vector<double> d(8, mine ? double(nan) : double(ctx.core_id()));
          std::vector<BFloat16> b(
              8, mine ? float_to_bf16(nan) : float_to_bf16(static_cast<float>(ctx.core_id())));
          comm.all_reduce<float>(ctx, std::span<float>(f), op, {alg});
          comm.all_reduce<double>(ctx, std::span<double>(d), op, {alg});
          comm.all_reduce<BFloat16>(ctx, std::span<BFloat16>(b), op, {alg});
          for (int i = 0; i < 8; ++i) {
            EXPECT_TRUE(std::isnan(f[static_cast<size_t>(i)]))
                << algorithm_name(alg) << " " << reduce_op_name(op) << " nan on " << nan_rank;
            EXPECT_TRUE(std::isnan(d[static_cast<size_t>(i)]));
            EXPECT_TRUE(std::isnan(bf16_to_float(b[static_cast<size_t>(i)])));
          }
        });
      }
    }
  }
  // reduce and reduce_scatter use the same fold.
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> x(4, ctx.core_id() == 2 ? nan : 1.0f), out(4), rs(1);
    comm.reduce<float>(ctx, x, out, 0, ReduceOp::kMax);
    if (ctx.core_id() == 0) {
      EXPECT_TRUE(std::isnan(out[0]));
    }
    const std::array<int64_t, 1> shape = {4};
    comm.reduce_scatter<float>(ctx, x, rs, shape, ReduceOp::kMin, 0, true);
    EXPECT_TRUE(std::isnan(rs[0]));
  });
}

// IEEE sums: Inf + (-Inf) is NaN, Inf + finite is Inf, bf16 overflow rounds to Inf (documented
// IEEE behaviour; XLA does the same).
TEST(AdversarialFloatTest, InfinitiesFollowIeee) {
  Runtime rt(small_options(3));
  Communicator comm(rt, iota_group(3));
  const float inf = std::numeric_limits<float>::infinity();
  rt.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    std::vector<float> a = {c == 0 ? inf : 1.0f, c == 1 ? inf : c == 2 ? -inf : 0.0f};
    comm.all_reduce<float>(ctx, std::span<float>(a));
    EXPECT_EQ(a[0], inf);
    EXPECT_TRUE(std::isnan(a[1]));
    // bf16 max finite is 0x7f7f (3.3895e38); doubling it overflows to +Inf.
    std::vector<BFloat16> b = {BFloat16{0x7f7f}};
    comm.all_reduce<BFloat16>(ctx, std::span<BFloat16>(b));
    EXPECT_EQ(b[0].bits, 0x7f80) << std::hex << b[0].bits;
  });
}

// s32/s64 sums and products wrap modulo 2^bits (two's complement), as XLA's integer add does;
// no undefined behaviour (UBSan runs this).
TEST(AdversarialIntegerTest, OverflowWraps) {
  Runtime rt(small_options(2));
  Communicator comm(rt, {0, 1});
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<int32_t> a = {std::numeric_limits<int32_t>::max(), 1 << 16};
    comm.all_reduce<int32_t>(ctx, std::span<int32_t>(a));
    EXPECT_EQ(a[0], -2);  // 2 * (2^31 - 1) mod 2^32 = 2^32 - 2
    EXPECT_EQ(a[1], 1 << 17);
    std::vector<int32_t> p = {1 << 16};
    comm.all_reduce<int32_t>(ctx, std::span<int32_t>(p), ReduceOp::kProd);
    EXPECT_EQ(p[0], 0);  // 2^32 mod 2^32
    std::vector<int64_t> q = {std::numeric_limits<int64_t>::min()};
    comm.all_reduce<int64_t>(ctx, std::span<int64_t>(q));
    EXPECT_EQ(q[0], 0);
  });
}

// ---- every algorithm on odd group sizes --------------------------------------------------------

// Every all_reduce algorithm forced (per call, and per communicator) on groups of 1, 2, 3, 5, 6,
// 7 and 8 cores and counts 1, 7 and 1000 (beyond the 2 x 256 B slots) matches the rank-order fold
// exactly (integer inputs); torus_2d on a prime size runs as a 1 x N mesh.
TEST(AdversarialAlgorithmsTest, EveryAlgorithmOnOddGroupSizes) {
  Runtime rt(small_options(8));
  for (int n : {1, 2, 3, 5, 6, 7, 8}) {
    for (Algorithm alg :
         {Algorithm::kAuto, Algorithm::kRing, Algorithm::kBidirectionalRing,
          Algorithm::kRecursiveDoubling, Algorithm::kTorus2d, Algorithm::kRingReduceScatter}) {
      CommunicatorOptions co = CommunicatorOptions::from_runtime(rt.options());
      co.algorithm = alg;
      Communicator per_call(rt, iota_group(n)), per_comm(rt, iota_group(n), co);
      for (uint64_t count : {1u, 7u, 1000u}) {
        rt.run_spmd(iota_group(n), [&](CoreContext& ctx) {
          const int c = ctx.core_id();
          std::vector<int32_t> x(count), y(count);
          for (uint64_t i = 0; i < count; ++i) x[i] = static_cast<int32_t>((c + 1) * (i % 11));
          std::vector<int32_t> x2 = x;
          per_call.all_reduce<int32_t>(ctx, x, std::span<int32_t>(y), ReduceOp::kSum, {alg});
          per_comm.all_reduce<int32_t>(ctx, std::span<int32_t>(x2), ReduceOp::kMax);
          for (uint64_t i = 0; i < count; ++i) {
            ASSERT_EQ(y[i], static_cast<int32_t>(n * (n + 1) / 2 * (i % 11)))
                << algorithm_name(alg) << " n=" << n << " count=" << count << " i=" << i;
            ASSERT_EQ(x2[i], static_cast<int32_t>(n * (i % 11)));
          }
        });
      }
    }
  }
}

// torus_2d with every explicit row count that divides the group (including R = 1 and R = N,
// one-axis meshes) matches the fold; a row count that does not divide it is rejected up front.
TEST(AdversarialAlgorithmsTest, TorusEveryDivisorAsRows) {
  Runtime rt(small_options(8));
  for (int n : {6, 8}) {
    for (int rows = 1; rows <= n; ++rows) {
      CommunicatorOptions co = CommunicatorOptions::from_runtime(rt.options());
      co.torus_rows = rows;
      co.algorithm = Algorithm::kTorus2d;
      if (n % rows != 0) {
        EXPECT_TRUE(
            contains(invalid_argument_message([&] { Communicator c(rt, iota_group(n), co); }),
                     "torus_rows is " + std::to_string(rows)));
        continue;
      }
      Communicator comm(rt, iota_group(n), co);
      rt.run_spmd(iota_group(n), [&](CoreContext& ctx) {
        std::vector<int64_t> x(301);
        for (size_t i = 0; i < x.size(); ++i) x[i] = (ctx.core_id() + 1) * static_cast<int64_t>(i);
        comm.all_reduce<int64_t>(ctx, std::span<int64_t>(x));
        for (size_t i = 0; i < x.size(); ++i)
          ASSERT_EQ(x[i], int64_t{n} * (n + 1) / 2 * static_cast<int64_t>(i)) << n << "x" << rows;
      });
    }
  }
}

// Regression: algorithms that are not all_reduce algorithms (pairwise, chain, dissemination;
// local on more than one core) were rejected on groups of >= 2 but silently accepted on a
// one-core group; they must be an error naming the valid ones on every group size.
TEST(AdversarialAlgorithmsTest, NonAllReduceAlgorithmsAreRejectedOnEveryGroupSize) {
  Runtime rt(small_options(2));
  for (int n : {1, 2}) {
    Communicator comm(rt, iota_group(n));
    std::vector<Algorithm> bad = {Algorithm::kPairwise, Algorithm::kChain,
                                  Algorithm::kDissemination};
    if (n > 1) bad.push_back(Algorithm::kLocal);
    for (Algorithm a : bad) {
      const std::string msg = invalid_argument_message([&] {
        rt.run_spmd(iota_group(n), [&](CoreContext& ctx) {
          std::vector<float> v(4);
          comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum, {a});
        });
      });
      EXPECT_TRUE(contains(msg, "is not an all_reduce algorithm"))
          << n << " " << algorithm_name(a) << msg;
    }
  }
}

// ---- direct all_gather / reduce_scatter (issue 6 F11 made them direct; adversarial pass adv7) --

// Sequential reference of a tiled reduce_scatter along `dim` of `shape`, op folded in rank order:
// rank q's block is slice q of that dimension (dims[dim] / n wide), row-major.
template <typename T>
std::vector<T> reference_reduce_scatter(const std::vector<std::vector<T>>& in,
                                        const std::vector<int64_t>& shape, int dim, ReduceOp op,
                                        int q) {
  const int n = static_cast<int>(in.size());
  const int64_t width = shape[static_cast<size_t>(dim)] / n;
  std::vector<T> out;
  const uint64_t total = testing_util::num_elements(shape);
  for (uint64_t flat = 0; flat < total; ++flat) {
    const std::vector<int64_t> idx = testing_util::unravel(flat, shape);
    if (idx[static_cast<size_t>(dim)] / width != q) continue;
    T acc = in[0][flat];
    for (int r = 1; r < n; ++r) {
      const T v = in[static_cast<size_t>(r)][flat];
      switch (op) {
        case ReduceOp::kSum:
          acc = acc + v;
          break;
        case ReduceOp::kProd:
          acc = acc * v;
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, v);
          break;
        case ReduceOp::kMin:
          acc = std::min(acc, v);
          break;
      }
    }
    out.push_back(acc);  // row-major over the block: the same order as the flat walk
  }
  return out;
}

// Sequential reference of a tiled all_gather along `axis`: output index i takes rank
// i[axis] / shape[axis]'s element at i with i[axis] mod shape[axis].
template <typename T>
std::vector<T> reference_all_gather(const std::vector<std::vector<T>>& in,
                                    const std::vector<int64_t>& shape, int axis) {
  const int n = static_cast<int>(in.size());
  std::vector<int64_t> out_shape = shape;
  out_shape[static_cast<size_t>(axis)] *= n;
  const uint64_t total = testing_util::num_elements(out_shape);
  std::vector<T> out(total);
  for (uint64_t flat = 0; flat < total; ++flat) {
    std::vector<int64_t> idx = testing_util::unravel(flat, out_shape);
    const int64_t w = shape[static_cast<size_t>(axis)];
    const int q = static_cast<int>(idx[static_cast<size_t>(axis)] / w);
    idx[static_cast<size_t>(axis)] %= w;
    out[flat] = in[static_cast<size_t>(q)][testing_util::ravel(idx, shape)];
  }
  return out;
}

std::vector<std::vector<int64_t>> small_int_inputs(int n, uint64_t count, int salt) {
  std::vector<std::vector<int64_t>> in(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    for (uint64_t i = 0; i < count; ++i)
      in[static_cast<size_t>(r)].push_back(
          static_cast<int64_t>((r * 7 + static_cast<int>(i) * 3 + salt) % 11) - 5);
  return in;
}

// Every op, 1 element per rank, odd rank counts, middle and trailing scatter axes, out of place
// and in NCCL's in-place forms, against the sequential references.
TEST(AdversarialDirectGatherScatterTest, SizesAxesOpsAndInPlaceFormsMatchTheReference) {
  Runtime rt(small_options(8));
  for (int n : {1, 2, 3, 5, 8}) {
    Communicator comm(rt, iota_group(n));
    for (const auto& [shape, dim] : std::vector<std::pair<std::vector<int64_t>, int>>{
             {{n}, 0}, {{7 * n}, 0}, {{3, n, 2}, 1}, {{2, 3, 2 * n}, 2}, {{1, 1, n}, 2}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
        SCOPED_TRACE("n " + std::to_string(n) + " dim " + std::to_string(dim) + " op " +
                     std::to_string(static_cast<int>(op)) + " shape[dim] " +
                     std::to_string(shape[static_cast<size_t>(dim)]));
        const uint64_t count = testing_util::num_elements(shape), per = count / n;
        const auto in = small_int_inputs(n, count, static_cast<int>(op) + dim);
        rt.run_spmd(iota_group(n), [&](CoreContext& ctx) {
          const int c = ctx.core_id();
          const std::vector<int64_t> want = reference_reduce_scatter(in, shape, dim, op, c);
          std::vector<int64_t> x = in[static_cast<size_t>(c)], out(per, 99);
          comm.reduce_scatter<int64_t>(ctx, x, out, shape, op, dim, true);
          ASSERT_EQ(out, want) << "out of place";
          // NCCL in place (leading dims 1 only): recv == send + rank * recvcount.
          bool leading_ones = true;
          for (int k = 0; k < dim; ++k) leading_ones = leading_ones && shape[size_t(k)] == 1;
          if (leading_ones) {
            std::span<int64_t> xs(x);
            comm.reduce_scatter<int64_t>(ctx, xs, xs.subspan(c * per, per), shape, op, dim, true);
            ASSERT_TRUE(std::equal(want.begin(), want.end(), x.begin() + c * per)) << "in place";
          }
          // all_gather of the blocks rebuilds the reference's full reduction, tiled on `dim`.
          std::vector<int64_t> block_shape = shape;
          block_shape[static_cast<size_t>(dim)] /= n;
          std::vector<std::vector<int64_t>> blocks(static_cast<size_t>(n));
          for (int q = 0; q < n; ++q)
            blocks[size_t(q)] = reference_reduce_scatter(in, shape, dim, op, q);
          const std::vector<int64_t> gathered_want = reference_all_gather(blocks, block_shape, dim);
          std::vector<int64_t> g(count, -77);
          comm.all_gather<int64_t>(ctx, want, g, block_shape, dim, true);
          ASSERT_EQ(g, gathered_want) << "all_gather";
          if (leading_ones) {  // in place: send == recv + rank * sendcount
            std::vector<int64_t> g2(count, -77);
            std::copy(want.begin(), want.end(), g2.begin() + c * per);
            std::span<int64_t> gs(g2);
            comm.all_gather<int64_t>(ctx, gs.subspan(c * per, per), gs, block_shape, dim, true);
            ASSERT_EQ(g2, gathered_want) << "all_gather in place";
          }
        });
      }
    }
  }
}

// A scatter dimension N does not divide is an error naming it, on every core, and the group is
// usable afterwards (after reset); all_gather of any size (5 elements on 3 cores) is fine.
TEST(AdversarialDirectGatherScatterTest, UndividedScatterDimensionIsAnError) {
  Runtime rt(small_options(3));
  Communicator comm(rt, iota_group(3));
  std::vector<std::string> msgs(3);
  try {
    rt.run_spmd([&](CoreContext& ctx) {
      std::vector<float> x(5, 1.0f), out(2);
      const std::array<int64_t, 1> shape = {5};
      try {
        comm.reduce_scatter<float>(ctx, x, out, shape, ReduceOp::kSum, 0, true);
      } catch (const InvalidArgumentError& e) {
        msgs[size_t(ctx.core_id())] = e.what();
        throw;
      }
    });
  } catch (const InvalidArgumentError&) {
  }
  for (const std::string& m : msgs) EXPECT_TRUE(contains(m, "5")) << m;
  std::printf("[ info ] undivided reduce_scatter: %s\n", msgs[0].c_str());
  comm.reset();
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> x(5, static_cast<float>(ctx.core_id())), g(15);
    const std::array<int64_t, 1> shape = {5};
    comm.all_gather<float>(ctx, x, g, shape, 0, true);
    for (int i = 0; i < 15; ++i) ASSERT_EQ(g[size_t(i)], static_cast<float>(i / 5));
  });
}

// reduce_scatter with every partial overlap of recv into send (before, inside, straddling the
// end, misaligned with the blocks) gives the out-of-place answer; all_gather rejects every
// overlap that is not the in-place form.
TEST(AdversarialDirectGatherScatterTest, PartialOverlapsAreCorrectOrRejected) {
  Runtime rt(small_options(4));
  Communicator comm(rt, iota_group(4));
  const int n = 4;
  const uint64_t count = 24, per = 6;
  const std::vector<int64_t> shape = {24};
  const auto in = small_int_inputs(n, count, 3);
  for (int64_t shift : {-5, -1, 1, 2, 5, 7, 13, 18, 20, 23}) {
    SCOPED_TRACE("recv = send + " + std::to_string(shift));
    rt.run_spmd([&](CoreContext& ctx) {
      const int c = ctx.core_id();
      const std::vector<int64_t> want = reference_reduce_scatter(in, shape, 0, ReduceOp::kSum, c);
      std::vector<int64_t> buf(64, 0);
      const size_t base = 20;
      std::copy(in[size_t(c)].begin(), in[size_t(c)].end(), buf.begin() + base);
      std::span<int64_t> b(buf);
      comm.reduce_scatter<int64_t>(ctx, b.subspan(base, count),
                                   b.subspan(static_cast<size_t>(int64_t(base) + shift), per),
                                   shape, ReduceOp::kSum, 0, true);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), buf.begin() + int64_t(base) + shift));
    });
  }
  for (int64_t shift : {-3, 1, 5, 6, 11}) {
    SCOPED_TRACE("all_gather send = recv + " + std::to_string(shift));
    std::atomic<int> rejected{0};
    try {
      rt.run_spmd([&](CoreContext& ctx) {
        std::vector<int64_t> buf(64, 1);
        std::span<int64_t> b(buf);
        const std::array<int64_t, 1> s = {6};
        try {
          comm.all_gather<int64_t>(ctx, b.subspan(size_t(20 + shift), 6), b.subspan(20, 24), s, 0,
                                   true);
        } catch (const InvalidArgumentError&) {
          rejected.fetch_add(1);
          throw;
        }
      });
    } catch (const Error&) {
    }
    // Rank r with shift == 6 r is the in-place form for that rank only; the others must reject.
    EXPECT_GE(rejected.load(), 3);
    comm.reset();
  }
}

// Disjoint replica groups at once: {0..3} and {4..7} reduce-scatter while {0,2,4,6} and
// {1,3,5,7} all-gather, interleaved 20 times on 8 cores, every result against the reference.
TEST(AdversarialDirectGatherScatterTest, DisjointGroupsRunAtOnce) {
  Runtime rt(small_options(8));
  Communicator lo(rt, {0, 1, 2, 3}), hi(rt, {4, 5, 6, 7});
  Communicator even(rt, {0, 2, 4, 6}), odd(rt, {1, 3, 5, 7});
  rt.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    Communicator& rs = c < 4 ? lo : hi;
    Communicator& ag = c % 2 == 0 ? even : odd;
    for (int it = 0; it < 20; ++it) {
      const uint64_t count = 4 * static_cast<uint64_t>(1 + it % 5);
      std::vector<int64_t> x(count), out(count / 4);
      for (uint64_t i = 0; i < count; ++i) x[i] = c * 1000 + it * 10 + static_cast<int64_t>(i);
      const std::array<int64_t, 1> s = {static_cast<int64_t>(count)};
      rs.reduce_scatter<int64_t>(ctx, x, out, s, ReduceOp::kSum, 0, true);
      const int rank = rs.rank_of(c), first = c < 4 ? 0 : 4;
      for (uint64_t j = 0; j < count / 4; ++j) {
        const int64_t i = rank * static_cast<int64_t>(count / 4) + static_cast<int64_t>(j);
        int64_t want = 0;
        for (int q = first; q < first + 4; ++q) want += q * 1000 + it * 10 + i;
        ASSERT_EQ(out[j], want) << "core " << c << " it " << it;
      }
      std::vector<int64_t> one = {c * 100 + it}, all(4);
      const std::array<int64_t, 1> s1 = {1};
      ag.all_gather<int64_t>(ctx, one, all, s1, 0, true);
      for (int q = 0; q < 4; ++q) ASSERT_EQ(all[size_t(q)], (2 * q + c % 2) * 100 + it);
    }
  });
}

// Async: several reduce_scatter and all_gather starts in flight, waited out of order, with
// compute between start and wait; the buffers hold the reference values after each wait.
TEST(AdversarialDirectGatherScatterTest, AsyncStartsWaitedOutOfOrder) {
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
TEST(AdversarialDirectGatherScatterTest, TimeoutAndThrowOnOneCore) {
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
    for (int c : {0, 1, 3}) naming += contains(msgs[size_t(c)], "2") ? 1 : 0;
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

// 64 and 256 cores: 1 element per rank reduce-scattered and all-gathered over the whole group,
// and 64 cores as 8 disjoint groups of 8 at once.
TEST(AdversarialDirectGatherScatterTest, SixtyFourAndTwoHundredFiftySixCores) {
  for (int n : {64, 256}) {
    Runtime rt(many_core_options(n));
    Communicator comm(rt, iota_group(n));
    std::vector<std::unique_ptr<Communicator>> groups;
    for (int g = 0; g < n / 8; ++g)
      groups.push_back(std::make_unique<Communicator>(rt, iota_group(8, 8 * g)));
    const auto t0 = std::chrono::steady_clock::now();
    rt.run_spmd([&](CoreContext& ctx) {
      const int c = ctx.core_id();
      std::vector<int64_t> x(static_cast<size_t>(n)), one(1), all(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) x[size_t(i)] = c + i;
      const std::array<int64_t, 1> s = {n}, s1 = {1};
      comm.reduce_scatter<int64_t>(ctx, x, one, s, ReduceOp::kSum, 0, true);
      ASSERT_EQ(one[0], int64_t{n} * (n - 1) / 2 + int64_t{n} * c);
      comm.all_gather<int64_t>(ctx, one, all, s1, 0, true);
      for (int q = 0; q < n; ++q)
        ASSERT_EQ(all[size_t(q)], int64_t{n} * (n - 1) / 2 + int64_t{n} * q);
      Communicator& g = *groups[size_t(c / 8)];
      std::vector<int64_t> y(8, c), z(1);
      const std::array<int64_t, 1> s8 = {8};
      g.reduce_scatter<int64_t>(ctx, y, z, s8, ReduceOp::kMax, 0, true);
      ASSERT_EQ(z[0], (c / 8) * 8 + 7);
    });
    std::printf(
        "[ info ] %d cores: direct reduce_scatter + all_gather + 8-groups: %.1f ms\n", n,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
}

}  // namespace
}  // namespace vtpu
