#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "vtpu/collectives/communicator.h"
#include "vtpu/common/error.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {
namespace {

using namespace std::chrono_literals;

RuntimeOptions small_options(int cores, uint64_t slot_bytes = 256, int num_slots = 2) {
  RuntimeOptions o;
  o.num_cores = cores;
  o.hbm_bytes_per_core = 64ull << 20;
  o.link_slot_bytes = slot_bytes;
  o.link_num_slots = num_slots;
  o.collective_timeout = 20s;
  return o;
}

// Value core c contributes at element i: integer-valued, so any summation order is exact and a
// sequential reference can be compared with ==.
float int_value(int core, uint64_t i) { return static_cast<float>((core + 1) * 1000 + (i % 97)); }

// cores x element count. Slot is 256 B = 64 floats and there are 2 slots, so 128 floats fill a
// link: counts above that exercise back-pressure and several loops.
class AllReduceSweep : public ::testing::TestWithParam<std::tuple<int, uint64_t>> {};

TEST_P(AllReduceSweep, SumMatchesSequentialReferenceOnEveryCore) {
  const auto [cores, count] = GetParam();
  Runtime rt(small_options(cores));
  std::vector<int> group(static_cast<size_t>(cores));
  std::iota(group.begin(), group.end(), 0);
  Communicator comm(rt, group);
  std::vector<float> expected(count, 0.0f);
  for (int c = 0; c < cores; ++c)
    for (uint64_t i = 0; i < count; ++i) expected[i] += int_value(c, i);
  std::vector<std::vector<float>> results(static_cast<size_t>(cores));
  rt.run_spmd([&](CoreContext& ctx) {
    DeviceBuffer in = ctx.allocate(count * sizeof(float), "in");
    DeviceBuffer out = ctx.allocate(count * sizeof(float), "out");
    auto x = in.as<float>();
    for (uint64_t i = 0; i < count; ++i) x[i] = int_value(ctx.core_id(), i);
    comm.all_reduce<float>(ctx, x, out.as<float>());
    auto y = out.as<float>();
    results[static_cast<size_t>(ctx.core_id())].assign(y.begin(), y.end());
    // The input is untouched when not in place.
    for (uint64_t i = 0; i < count; ++i) ASSERT_EQ(x[i], int_value(ctx.core_id(), i));
  });
  for (int c = 0; c < cores; ++c) {
    ASSERT_EQ(results[static_cast<size_t>(c)], expected) << "core " << c;
  }
  for (int c = 0; c < cores; ++c) {
    const CollectiveStats s = comm.stats(c);
    EXPECT_EQ(s.num_collectives, 1u);
    EXPECT_EQ(s.bytes, count * sizeof(float));
  }
}

INSTANTIATE_TEST_SUITE_P(CoresAndSizes, AllReduceSweep,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values(uint64_t{1}, uint64_t{3},
                                                              uint64_t{64}, uint64_t{1001},
                                                              uint64_t{4099})),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "cores_" +
                                  std::to_string(std::get<1>(info.param)) + "elems";
                         });

// Random floats: the ring adds in a fixed order, so every core gets the same bits and repeated
// runs give the same bits; the value is within rounding of a double-precision reference.
TEST(AllReduceTest, RandomFloatsAreBitIdenticalAcrossCoresAndRuns) {
  constexpr int kCores = 5;
  constexpr uint64_t kCount = 3001;
  Runtime rt(small_options(kCores, 512, 3));
  Communicator comm(rt, {0, 1, 2, 3, 4});
  std::vector<std::vector<float>> inputs(kCores, std::vector<float>(kCount));
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : inputs)
    for (float& x : v) x = dist(gen);
  std::vector<double> reference(kCount, 0.0);
  for (const auto& v : inputs)
    for (uint64_t i = 0; i < kCount; ++i) reference[i] += v[i];
  std::vector<std::vector<float>> first;
  for (int run = 0; run < 3; ++run) {
    std::vector<std::vector<float>> out(kCores);
    rt.run_spmd([&](CoreContext& ctx) {
      std::vector<float> buf = inputs[static_cast<size_t>(ctx.core_id())];
      comm.all_reduce<float>(ctx, std::span<float>(buf));  // in place
      out[static_cast<size_t>(ctx.core_id())] = buf;
    });
    for (int c = 1; c < kCores; ++c)
      ASSERT_EQ(0, std::memcmp(out[c].data(), out[0].data(), kCount * 4));
    for (uint64_t i = 0; i < kCount; ++i) ASSERT_NEAR(out[0][i], reference[i], 1e-5);
    if (run == 0)
      first = out;
    else
      ASSERT_EQ(0, std::memcmp(first[0].data(), out[0].data(), kCount * 4)) << "run " << run;
  }
}

TEST(AllReduceTest, OtherTypesAndOps) {
  constexpr int kCores = 4;
  Runtime rt(small_options(kCores));
  Communicator comm(rt, {0, 1, 2, 3});
  rt.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    std::vector<int64_t> s64 = {c, 10 * c, -c, int64_t{1} << 40};
    comm.all_reduce<int64_t>(ctx, std::span<int64_t>(s64));
    EXPECT_EQ(s64, (std::vector<int64_t>{6, 60, -6, int64_t{4} << 40}));
    std::vector<int32_t> mx = {c, -c, 3 - c};
    comm.all_reduce<int32_t>(ctx, std::span<int32_t>(mx), ReduceOp::kMax);
    EXPECT_EQ(mx, (std::vector<int32_t>{3, 0, 3}));
    std::vector<double> mn = {double(c), -double(c)};
    comm.all_reduce<double>(ctx, std::span<double>(mn), ReduceOp::kMin);
    EXPECT_EQ(mn, (std::vector<double>{0.0, -3.0}));
    std::vector<float> pr = {float(c + 1), 2.0f};
    comm.all_reduce<float>(ctx, std::span<float>(pr), ReduceOp::kProd);
    EXPECT_EQ(pr, (std::vector<float>{24.0f, 16.0f}));
  });
}

// Replica groups: two disjoint groups of 4 on 8 cores run at the same time.
TEST(AllReduceTest, DisjointReplicaGroupsRunConcurrently) {
  Runtime rt(small_options(8));
  Communicator low(rt, {0, 1, 2, 3});
  Communicator high(rt, {7, 6, 5, 4});  // any order
  rt.run_spmd([&](CoreContext& ctx) {
    const int c = ctx.core_id();
    std::vector<float> v(300, static_cast<float>(c));
    Communicator& comm = c < 4 ? low : high;
    comm.all_reduce<float>(ctx, std::span<float>(v));
    const float expected = c < 4 ? 0 + 1 + 2 + 3 : 4 + 5 + 6 + 7;
    for (float x : v) ASSERT_EQ(x, expected);
  });
}

TEST(AllReduceTest, ManyCoresOnTwoCpus) {
  constexpr int kCores = 64;
  Runtime rt(small_options(kCores, 4096, 4));
  std::vector<int> group(kCores);
  std::iota(group.begin(), group.end(), 0);
  Communicator comm(rt, group);
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(1000, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(v));
    for (float x : v) ASSERT_EQ(x, 64.0f);
  });
}

TEST(AllReduceTest, SizeMismatchIsAnErrorNotAPartialSum) {
  Runtime rt(small_options(2));
  Communicator comm(rt, {0, 1});
  try {
    rt.run_spmd([&](CoreContext& ctx) {
      std::vector<float> v(ctx.core_id() == 0 ? 8 : 6, 1.0f);
      comm.all_reduce<float>(ctx, std::span<float>(v));
    });
    FAIL() << "expected an error";
  } catch (const InvalidArgumentError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("f32[8]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[6]"), std::string::npos) << msg;
  }
}

TEST(AllReduceTest, DesyncNamesBothFingerprints) {
  Runtime rt(small_options(2));
  Communicator comm(rt, {0, 1});
  std::vector<std::string> errors(2);
  try {
    rt.run_spmd([&](CoreContext& ctx) {
      std::vector<float> f(25, 1.0f);
      std::vector<int64_t> s(1, 1);
      try {
        if (ctx.core_id() == 0) {
          comm.all_reduce<float>(ctx, std::span<float>(f));
          comm.all_reduce<int64_t>(ctx, std::span<int64_t>(s));
        } else {
          comm.all_reduce<int64_t>(ctx, std::span<int64_t>(s));
          comm.all_reduce<float>(ctx, std::span<float>(f));
        }
      } catch (const Error& e) {
        errors[static_cast<size_t>(ctx.core_id())] = e.what();
        throw;
      }
    });
    FAIL() << "expected an error";
  } catch (const Error&) {
  }
  for (const std::string& msg : errors) {
    EXPECT_NE(msg.find("f32[25] at sequence 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("s64[1] at sequence 0"), std::string::npos) << msg;
  }
}

TEST(AllReduceTest, TimeoutNamesTheCoreThatDidNotArrive) {
  RuntimeOptions o = small_options(3);
  o.collective_timeout = 100ms;
  Runtime rt(o);
  Communicator comm(rt, {0, 1, 2});
  std::atomic<bool> release{false};
  try {
    rt.run_spmd([&](CoreContext& ctx) {
      if (ctx.core_id() == 2) return;  // never calls the collective
      std::vector<float> v(10, 1.0f);
      comm.all_reduce<float>(ctx, std::span<float>(v));
    });
    FAIL() << "expected an error";
  } catch (const DeadlineExceededError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("all_reduce(sum) f32[10] at sequence 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("have not reached sequence 0: {2}"), std::string::npos) << msg;
    // Regression: the hint once named --config to commands that take none.
    EXPECT_NE(msg.find("(the timeout is VTPU_COLLECTIVE_TIMEOUT_MS in every command, or "
                       "collective_timeout_ms of --config in vtpu train, reshard and bench "
                       "collectives, which wins; else 30 s x max(1, cores / CPUs);"),
              std::string::npos)
        << msg;
  } catch (const AbortedError& e) {
    FAIL() << "first error should be the timeout, got " << e.what();
  }
}

TEST(AllReduceTest, ThrowOnOneCoreAbortsTheOthersFastAndResetRecovers) {
  Runtime rt(small_options(4));  // collective timeout 20 s
  Communicator comm(rt, {0, 1, 2, 3});
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> kinds(4);
  try {
    rt.run_spmd([&](CoreContext& ctx) {
      if (ctx.core_id() == 2) {
        std::this_thread::sleep_for(20ms);
        throw InvalidArgumentError("injected failure on core 2");
      }
      std::vector<float> v(100, 1.0f);
      try {
        comm.all_reduce<float>(ctx, std::span<float>(v));
      } catch (const AbortedError& e) {
        kinds[static_cast<size_t>(ctx.core_id())] = e.what();
        throw;
      }
    });
    FAIL() << "expected an error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("injected failure on core 2"), std::string::npos);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  for (int c : {0, 1, 3}) {
    EXPECT_NE(kinds[static_cast<size_t>(c)].find("core 2 failed"), std::string::npos)
        << "core " << c << ": " << kinds[static_cast<size_t>(c)];
  }
  // Later collectives fail at once until reset.
  EXPECT_TRUE(comm.aborted());
  EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(4, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(v));
  }),
               AbortedError);
  comm.reset();
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<float> v(4, 1.0f);
    comm.all_reduce<float>(ctx, std::span<float>(v));
    for (float x : v) ASSERT_EQ(x, 4.0f);
  });
}

TEST(AllReduceTest, BadArguments) {
  Runtime rt(small_options(2));
  EXPECT_THROW(Communicator(rt, {}), InvalidArgumentError);
  EXPECT_THROW(Communicator(rt, {0, 0}), InvalidArgumentError);
  EXPECT_THROW(Communicator(rt, {0, 2}), InvalidArgumentError);
  Communicator comm(rt, {1});
  EXPECT_THROW(rt.run_spmd({0},
                           [&](CoreContext& ctx) {
                             std::vector<float> v(4);
                             comm.all_reduce<float>(ctx, std::span<float>(v));
                           }),
               InvalidArgumentError);
  rt.run_spmd({1}, [&](CoreContext& ctx) {
    std::vector<float> a(4), b(5);
    EXPECT_THROW(comm.all_reduce<float>(ctx, std::span<const float>(a), std::span<float>(b)),
                 InvalidArgumentError);
    std::vector<float> c(8, 1.0f);
    EXPECT_THROW(comm.all_reduce<float>(ctx, std::span<const float>(c.data(), 4),
                                        std::span<float>(c.data() + 2, 4)),
                 InvalidArgumentError);
  });
}

}  // namespace
}  // namespace vtpu

namespace vtpu {
namespace {

// Regression: a core calling with 0 elements while its peers passed 10 returned at once and left
// the others waiting for the full timeout; now the fingerprints meet and both sides fail fast.
TEST(AllReduceRegressionTest, ZeroElementsOnOneCoreIsADesyncNotATimeout) {
  RuntimeOptions o = small_options(4);
  o.collective_timeout = std::chrono::seconds(20);
  Runtime rt(o);
  Communicator comm(rt, {0, 1, 2, 3});
  const auto start = std::chrono::steady_clock::now();
  try {
    rt.run_spmd([&](CoreContext& ctx) {
      std::vector<float> v(ctx.core_id() == 2 ? 0 : 10, 1.0f);
      comm.all_reduce<float>(ctx, std::span<float>(v));
    });
    FAIL() << "expected an error";
  } catch (const InvalidArgumentError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("f32[0]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[10]"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  comm.reset();
  rt.run_spmd([&](CoreContext& ctx) {  // 0 elements everywhere is fine
    std::vector<float> v;
    comm.all_reduce<float>(ctx, std::span<float>(v));
  });
}

// Regression: with one slot per link every ring step held its received slot while waiting for a
// send slot that its successor held the same way, so every all-reduce deadlocked. One slot is now
// rejected up front.
TEST(AllReduceRegressionTest, OneSlotLinksAreRejected) {
  RuntimeOptions o = small_options(2);
  o.link_num_slots = 1;
  EXPECT_THROW(o.validate(), InvalidArgumentError);
  o.link_num_slots = 2;
  Runtime rt(o);
  CommunicatorOptions c = CommunicatorOptions::from_runtime(o);
  c.link.num_slots = 1;
  EXPECT_THROW(Communicator(rt, {0, 1}, c), InvalidArgumentError);
  c.timeout = std::chrono::milliseconds(std::numeric_limits<int64_t>::max());
  c.link.num_slots = 2;
  EXPECT_THROW(Communicator(rt, {0, 1}, c), InvalidArgumentError);  // deadline would overflow
}

// Regression: the error run_spmd rethrew for one desync was Aborted or InvalidArgument at random,
// whichever core finished first. The root cause now wins.
TEST(AllReduceRegressionTest, RootCauseWinsOverTheAbortsItCaused) {
  Runtime rt(small_options(8));
  std::vector<int> group(8);
  std::iota(group.begin(), group.end(), 0);
  Communicator comm(rt, group);
  for (int run = 0; run < 20; ++run) {
    comm.reset();
    EXPECT_THROW(rt.run_spmd([&](CoreContext& ctx) {
      std::vector<float> v(ctx.core_id() == 5 ? 11 : 10, 1.0f);
      comm.all_reduce<float>(ctx, std::span<float>(v));
    }),
                 InvalidArgumentError)
        << "run " << run;
  }
}

// Regression: the runtime called abort handlers after releasing its lock, so a Communicator
// destroyed meanwhile was called through a dangling pointer (ASan: heap-use-after-free).
TEST(AllReduceRegressionTest, CommunicatorsComeAndGoWhileOtherCoresFail) {
  Runtime rt(small_options(4));
  std::atomic<bool> stop{false};
  std::thread failing([&] {
    while (!stop.load()) {
      try {
        rt.run_spmd({0}, [](CoreContext&) { throw InvalidArgumentError("x"); });
      } catch (const InvalidArgumentError&) {
      }
    }
  });
  for (int i = 0; i < 300; ++i) {
    auto comm = std::make_unique<Communicator>(rt, std::vector<int>{2, 3});
    rt.run_spmd({2, 3}, [&](CoreContext& ctx) {
      std::vector<float> v(4, 1.0f);
      comm->all_reduce<float>(ctx, std::span<float>(v));
      for (float x : v) ASSERT_EQ(x, 2.0f);
    });
  }
  stop = true;
  failing.join();
}

}  // namespace
}  // namespace vtpu
