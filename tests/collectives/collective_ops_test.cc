// Every collective against a sequential reference, for 1..8 cores, sizes of one element, not
// divisible by N, and larger than all the link slots together (256 B x 2 slots); every all_reduce
// algorithm forced explicitly; every dtype; an all_to_all and a determinism example worked by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/collectives/test_util.h"
#include "tests/expect_error.h"
#include "vtpu/collectives/all_reduce_algorithms.h"
#include "vtpu/collectives/communicator.h"
#include "vtpu/collectives/reduce_kernels.h"
#include "vtpu/common/bfloat16.h"
#include "vtpu/common/error.h"
#include "vtpu/common/float16.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {

// Names in failure messages, not "1-byte object <06>" (gtest prints an enum class without PrintTo
// as its bytes). In vtpu, the enums' namespace, where gtest looks them up.
void PrintTo(Algorithm a, std::ostream* os) { *os << algorithm_name(a); }
void PrintTo(ReduceOp op, std::ostream* os) { *os << reduce_op_name(op); }

namespace {

using namespace std::chrono_literals;
using testing_util::fold_reference;
using testing_util::from_double;
using testing_util::iota_group;
using testing_util::num_elements;
using testing_util::ravel;
using testing_util::small_options;
using testing_util::to_double;
using testing_util::unravel;

constexpr std::array<Algorithm, 6> kAllReduceAlgorithms = {
    Algorithm::kRing,    Algorithm::kBidirectionalRing, Algorithm::kRecursiveDoubling,
    Algorithm::kTorus2d, Algorithm::kRingReduceScatter, Algorithm::kDirect};

// Inputs that make every op exact in any order for integers, and a fixed random fold for floats.
template <typename T>
std::vector<std::vector<T>> make_inputs(int n, uint64_t count, ReduceOp op, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::vector<T>> in(static_cast<size_t>(n), std::vector<T>(count));
  for (auto& v : in) {
    for (T& x : v) {
      if constexpr (std::is_floating_point_v<T>) {
        x = op == ReduceOp::kProd
                ? static_cast<T>(std::uniform_real_distribution<double>(0.9, 1.1)(gen))
                : static_cast<T>(std::uniform_real_distribution<double>(-1, 1)(gen));
      } else {
        x = static_cast<T>(std::uniform_int_distribution<int>(-50, 50)(gen));
        if (op == ReduceOp::kProd)
          x = static_cast<T>(std::uniform_int_distribution<int>(-2, 2)(gen));
      }
    }
  }
  return in;
}

// One 8-core runtime; groups {0..n-1} for n = 1..8.
class CollectivesTest : public ::testing::Test {
 protected:
  CollectivesTest() : rt_(small_options(8)) {}
  Runtime rt_;
};

template <typename T>
void check_all_reduce(Runtime& rt, Communicator& comm, int n, uint64_t count, ReduceOp op,
                      Algorithm alg, bool exact) {
  const auto in = make_inputs<T>(n, count, op, static_cast<uint32_t>(n * 1000 + count));
  const std::vector<T> expected = fold_reference(in, op);
  std::vector<std::vector<T>> out(static_cast<size_t>(n));
  rt.run_spmd(iota_group(n), [&](CoreContext& ctx) {
    const size_t c = static_cast<size_t>(ctx.core_id());
    std::vector<T> buf = in[c];
    if (c % 2 == 0) {  // in place on even cores, out of place on odd ones
      comm.all_reduce<T>(ctx, std::span<T>(buf), op, {alg});
      out[c] = buf;
    } else {
      std::vector<T> r(count);
      comm.all_reduce<T>(ctx, std::span<const T>(buf), std::span<T>(r), op, {alg});
      ASSERT_EQ(buf, in[c]) << "input changed";
      out[c] = r;
    }
  });
  for (int c = 0; c < n; ++c) {
    const std::string where = std::string(algorithm_name(alg)) + " " +
                              std::string(reduce_op_name(op)) + " cores " + std::to_string(n) +
                              " count " + std::to_string(count) + " core " + std::to_string(c);
    ASSERT_EQ(0, std::memcmp(out[static_cast<size_t>(c)].data(), out[0].data(), count * sizeof(T)))
        << "cores differ: " << where;
    for (uint64_t i = 0; i < count; ++i) {
      if (exact) {
        ASSERT_EQ(out[static_cast<size_t>(c)][i], expected[i]) << where << " element " << i;
      } else {
        ASSERT_NEAR(static_cast<double>(out[static_cast<size_t>(c)][i]),
                    static_cast<double>(expected[i]), 1e-4)
            << where << " element " << i;
      }
    }
  }
}

// The parameters of the all-reduce sweep: algorithm x cores x op, with the byte sizes inside.
using AllReduceParams = std::tuple<Algorithm, int, ReduceOp>;

class AllReduceAlgorithmTest : public CollectivesTest,
                               public ::testing::WithParamInterface<AllReduceParams> {};

// Every algorithm, forced, against the rank-order fold: deterministic ones bit for bit (floats
// included), the opt-in classic ring within rounding (exactly for integers, and for max and min,
// which are exact in any order). f32 at one element, at a count N does not divide, and at 1000
// elements (4000 B or more against 2 x 256 B of link slots); the other types at 1000.
TEST_P(AllReduceAlgorithmTest, MatchesRankOrderFold) {
  const auto [alg, n, op] = GetParam();
  const bool det = alg != Algorithm::kRingReduceScatter;
  Communicator comm(rt_, iota_group(n));
  for (uint64_t count : {uint64_t{1}, static_cast<uint64_t>(n + 1), uint64_t{1000}}) {
    check_all_reduce<float>(rt_, comm, n, count, op, alg,
                            det || op == ReduceOp::kMax || op == ReduceOp::kMin);
  }
  if (op == ReduceOp::kSum) {
    check_all_reduce<double>(rt_, comm, n, 1000, op, alg, det);
    check_all_reduce<int32_t>(rt_, comm, n, 1000, op, alg, true);
  }
  if (op == ReduceOp::kProd) check_all_reduce<int64_t>(rt_, comm, n, 1000, op, alg, true);
}

INSTANTIATE_TEST_SUITE_P(AlgorithmsCoresOps, AllReduceAlgorithmTest,
                         ::testing::Combine(::testing::ValuesIn(kAllReduceAlgorithms),
                                            ::testing::Range(1, 9),
                                            ::testing::Values(ReduceOp::kSum, ReduceOp::kMax,
                                                              ReduceOp::kMin, ReduceOp::kProd)),
                         [](const ::testing::TestParamInfo<AllReduceParams>& info) {
                           return std::string(algorithm_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "cores_" +
                                  std::string(reduce_op_name(std::get<2>(info.param)));
                         });

class AllReduceBf16Test : public CollectivesTest,
                          public ::testing::WithParamInterface<std::tuple<Algorithm, int>> {};

// bf16: elements are bit patterns; small integers are exact in bf16, so the sum is known.
TEST_P(AllReduceBf16Test, SumOfSmallIntegers) {
  const auto [alg, n] = GetParam();
  Communicator comm(rt_, iota_group(n));
  for (uint64_t count : {uint64_t{1}, uint64_t{1000}}) {
    rt_.run_spmd(iota_group(n), [&](CoreContext& ctx) {
      std::vector<BFloat16> v(count);
      for (uint64_t i = 0; i < count; ++i)
        v[i] = float_to_bf16(static_cast<float>((ctx.core_id() + 1) * static_cast<int>(i % 5)));
      comm.all_reduce<BFloat16>(ctx, std::span<BFloat16>(v), ReduceOp::kSum, {alg});
      const int total = n * (n + 1) / 2;
      for (uint64_t i = 0; i < count; ++i) {
        ASSERT_EQ(bf16_to_float(v[i]), static_cast<float>(total * static_cast<int>(i % 5)))
            << "element " << i;
      }
    });
  }
}

// The name of an (algorithm, cores) parameter: "ring_3cores".
std::string algorithm_and_cores_name(
    const ::testing::TestParamInfo<std::tuple<Algorithm, int>>& info) {
  return std::string(algorithm_name(std::get<0>(info.param))) + "_" +
         std::to_string(std::get<1>(info.param)) + "cores";
}

INSTANTIATE_TEST_SUITE_P(AlgorithmsCores, AllReduceBf16Test,
                         ::testing::Combine(::testing::ValuesIn(kAllReduceAlgorithms),
                                            ::testing::Values(1, 3, 8)),
                         algorithm_and_cores_name);

class AllReduceForcedAlgorithmTest
    : public CollectivesTest,
      public ::testing::WithParamInterface<std::tuple<Algorithm, int>> {};

// Every all_reduce algorithm forced per call and per communicator, on counts 1, 7 and 1000
// (beyond the 2 x 256 B slots), matches the rank-order fold exactly (integer inputs); torus_2d on
// a prime size runs as a 1 x N mesh.
TEST_P(AllReduceForcedAlgorithmTest, PerCallAndPerCommunicatorMatchTheFold) {
  const auto [alg, n] = GetParam();
  CommunicatorOptions co = CommunicatorOptions::from_runtime(rt_.options());
  co.algorithm = alg;
  Communicator per_call(rt_, iota_group(n)), per_comm(rt_, iota_group(n), co);
  for (uint64_t count : {1u, 7u, 1000u}) {
    rt_.run_spmd(iota_group(n), [&](CoreContext& ctx) {
      const int c = ctx.core_id();
      std::vector<int32_t> x(count), y(count);
      for (uint64_t i = 0; i < count; ++i) x[i] = static_cast<int32_t>((c + 1) * (i % 11));
      std::vector<int32_t> x2 = x;
      per_call.all_reduce<int32_t>(ctx, x, std::span<int32_t>(y), ReduceOp::kSum, {alg});
      per_comm.all_reduce<int32_t>(ctx, std::span<int32_t>(x2), ReduceOp::kMax);
      for (uint64_t i = 0; i < count; ++i) {
        ASSERT_EQ(y[i], static_cast<int32_t>(n * (n + 1) / 2 * (i % 11)))
            << "count=" << count << " i=" << i;
        ASSERT_EQ(x2[i], static_cast<int32_t>(n * (i % 11)));
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(AlgorithmsCores, AllReduceForcedAlgorithmTest,
                         ::testing::Combine(::testing::Values(Algorithm::kAuto, Algorithm::kRing,
                                                              Algorithm::kBidirectionalRing,
                                                              Algorithm::kRecursiveDoubling,
                                                              Algorithm::kTorus2d,
                                                              Algorithm::kRingReduceScatter),
                                            ::testing::Values(1, 2, 3, 5, 6, 7, 8)),
                         algorithm_and_cores_name);

// Determinism: v = [1e8, 1, -1e8, 1] on 4 cores; the left fold in rank order gives
// ((1e8 + 1) - 1e8) + 1 = 0 + 1 = 1 in f32 (1e8 + 1 rounds to 1e8). Every deterministic
// algorithm, every core, many runs.
TEST_F(CollectivesTest, DeterminismExampleGivesExactlyOneForEveryAlgorithm) {
  Communicator comm(rt_, {0, 1, 2, 3});
  const float v[4] = {1e8f, 1.0f, -1e8f, 1.0f};
  const float sequential = ((v[0] + v[1]) + v[2]) + v[3];
  ASSERT_EQ(sequential, 1.0f);
  for (Algorithm alg : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kBidirectionalRing,
                        Algorithm::kRecursiveDoubling, Algorithm::kTorus2d, Algorithm::kDirect}) {
    for (int run = 0; run < 10; ++run) {
      rt_.run_spmd(iota_group(4), [&](CoreContext& ctx) {
        std::vector<float> x(4, v[ctx.core_id()]);
        comm.all_reduce<float>(ctx, std::span<float>(x), ReduceOp::kSum, {alg});
        for (float e : x) ASSERT_EQ(e, 1.0f) << algorithm_name(alg) << " run " << run;
      });
    }
  }
}

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bf16_to_float(BFloat16{0x3f80}), 1.0f);
  // 1 + 2^-8 lies half way between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  // 1 + 3 * 2^-8 lies half way between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6 (0x3f82).
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12)).bits, 0x3f81);
  EXPECT_EQ(float_to_bf16(-2.0f).bits, 0xc000);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max()))));
}

// ---- all_gather ------------------------------------------------------------------------------

std::vector<float> ref_all_gather(const std::vector<std::vector<float>>& in,
                                  const std::vector<int64_t>& shape, int axis, bool tiled,
                                  std::vector<int64_t>* out_shape) {
  const int n = static_cast<int>(in.size());
  std::vector<int64_t> os = shape;
  if (tiled) {
    os[static_cast<size_t>(axis)] *= n;
  } else {
    os.insert(os.begin() + axis, n);
  }
  *out_shape = os;
  std::vector<float> out(num_elements(os));
  for (uint64_t f = 0; f < out.size(); ++f) {
    std::vector<int64_t> idx = unravel(f, os);
    int q;
    if (tiled) {
      q = static_cast<int>(idx[static_cast<size_t>(axis)] / shape[static_cast<size_t>(axis)]);
      idx[static_cast<size_t>(axis)] %= shape[static_cast<size_t>(axis)];
    } else {
      q = static_cast<int>(idx[static_cast<size_t>(axis)]);
      idx.erase(idx.begin() + axis);
    }
    out[f] = in[static_cast<size_t>(q)][ravel(idx, shape)];
  }
  return out;
}

TEST_F(CollectivesTest, AllGatherStackedAndTiledOnEveryAxis) {
  const std::vector<std::vector<int64_t>> shapes = {{1}, {7}, {300}, {2, 3}, {3, 1, 2}, {0, 2}};
  for (int n = 1; n <= 8; ++n) {
    Communicator comm(rt_, iota_group(n));
    for (const auto& shape : shapes) {
      const int rank = static_cast<int>(shape.size());
      for (bool tiled : {false, true}) {
        for (int axis = 0; axis <= (tiled ? rank - 1 : rank); ++axis) {
          std::vector<std::vector<float>> in(static_cast<size_t>(n));
          for (int c = 0; c < n; ++c) {
            in[static_cast<size_t>(c)].resize(num_elements(shape));
            for (uint64_t i = 0; i < in[static_cast<size_t>(c)].size(); ++i)
              in[static_cast<size_t>(c)][i] = static_cast<float>(1000 * c + static_cast<int>(i));
          }
          std::vector<int64_t> os;
          const std::vector<float> expected = ref_all_gather(in, shape, axis, tiled, &os);
          EXPECT_EQ(Communicator::all_gather_shape(shape, n, axis, tiled), os);
          rt_.run_spmd(iota_group(n), [&](CoreContext& ctx) {
            std::vector<float> out(expected.size(), -1.0f);
            comm.all_gather<float>(ctx, in[static_cast<size_t>(ctx.core_id())], out, shape, axis,
                                   tiled);
            ASSERT_EQ(out, expected) << "cores " << n << " axis " << axis << " tiled " << tiled
                                     << " rank " << rank << " core " << ctx.core_id();
          });
        }
      }
    }
  }
}

TEST_F(CollectivesTest, AllGatherOneCoreShapesAndNcclInPlace) {
  EXPECT_EQ(Communicator::all_gather_shape(std::vector<int64_t>{4, 2}, 1, 0, false),
            (std::vector<int64_t>{1, 4, 2}));
  EXPECT_EQ(Communicator::all_gather_shape(std::vector<int64_t>{4, 2}, 1, 1, true),
            (std::vector<int64_t>{4, 2}));
  EXPECT_THROW(Communicator::all_gather_shape(std::vector<int64_t>{4, 2}, 2, 2, true),
               InvalidArgumentError);
  Communicator comm(rt_, iota_group(4));
  rt_.run_spmd(iota_group(4), [&](CoreContext& ctx) {
    const int c = ctx.core_id();
    std::vector<int64_t> buf(4 * 3, -1);
    for (int i = 0; i < 3; ++i) buf[static_cast<size_t>(3 * c + i)] = 10 * c + i;
    std::span<int64_t> all(buf);
    const std::array<int64_t, 1> shape = {3};
    comm.all_gather<int64_t>(ctx, all.subspan(static_cast<size_t>(3 * c), 3), all, shape, 0, true);
    for (int q = 0; q < 4; ++q)
      for (int i = 0; i < 3; ++i) ASSERT_EQ(buf[static_cast<size_t>(3 * q + i)], 10 * q + i);
    // Any other overlap is an error.
    EXPECT_THROW(comm.all_gather<int64_t>(ctx, all.subspan(1, 3), all, shape, 0, true),
                 InvalidArgumentError);
  });
}

// ---- reduce_scatter --------------------------------------------------------------------------

TEST_F(CollectivesTest, ReduceScatterMatchesReference) {
  for (int n = 1; n <= 8; ++n) {
    Communicator comm(rt_, iota_group(n));
    const std::vector<std::vector<int64_t>> shapes = {{n},    {3 * n},   {2, n},
                                                      {n, 3}, {250 * n}, {2, 2 * n, 3}};
    for (const auto& shape : shapes) {
      for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
        if (shape[static_cast<size_t>(d)] % n != 0) continue;
        for (bool tiled : {true, false}) {
          if (!tiled && shape[static_cast<size_t>(d)] != n) continue;
          const auto in = make_inputs<float>(n, num_elements(shape), ReduceOp::kSum, 7u + n);
          const std::vector<int64_t> os = Communicator::reduce_scatter_shape(shape, n, d, tiled);
          rt_.run_spmd(iota_group(n), [&](CoreContext& ctx) {
            const int q = ctx.core_id();
            std::vector<float> out(num_elements(os), -1.0f);
            comm.reduce_scatter<float>(ctx, in[static_cast<size_t>(q)], out, shape, ReduceOp::kSum,
                                       d, tiled);
            for (uint64_t f = 0; f < out.size(); ++f) {
              std::vector<int64_t> idx = unravel(f, os);
              const int64_t part = shape[static_cast<size_t>(d)] / n;
              if (tiled) {
                idx[static_cast<size_t>(d)] += q * part;
              } else {
                idx.insert(idx.begin() + d, q);
              }
              const uint64_t src = ravel(idx, shape);
              float acc = in[0][src];
              for (int r = 1; r < n; ++r) acc = acc + in[static_cast<size_t>(r)][src];
              ASSERT_EQ(out[f], acc) << "cores " << n << " dim " << d << " tiled " << tiled
                                     << " core " << q << " element " << f;
            }
          });
        }
      }
    }
  }
}

TEST_F(CollectivesTest, ReduceScatterIndivisibleDimensionIsAnError) {
  Communicator comm(rt_, iota_group(4));
  rt_.run_spmd(iota_group(4), [&](CoreContext& ctx) {
    std::vector<float> in(6 * 2), out(3);
    const std::array<int64_t, 2> shape = {6, 2};
    try {
      comm.reduce_scatter<float>(ctx, in, out, shape, ReduceOp::kSum, 0, true);
      FAIL() << "expected an error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("scatter_dimension 0"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("size 6"), std::string::npos) << e.what();
    }
    // Wrong output size names the buffer.
    std::vector<float> in8(8 * 2), small(3);
    const std::array<int64_t, 2> shape8 = {8, 2};
    try {
      comm.reduce_scatter<float>(ctx, in8, small, shape8, ReduceOp::kSum, 0, true);
      FAIL() << "expected an error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("recv buffer"), std::string::npos) << e.what();
    }
  });
}

// ---- all_to_all ------------------------------------------------------------------------------

TEST_F(CollectivesTest, AllToAllIssueExample) {
  Communicator comm(rt_, iota_group(4));
  std::vector<std::vector<float>> out(4);
  rt_.run_spmd(iota_group(4), [&](CoreContext& ctx) {
    const int c = ctx.core_id();
    std::vector<float> x(8);
    for (int r = 0; r < 4; ++r)
      for (int k = 0; k < 2; ++k) x[static_cast<size_t>(2 * r + k)] = 100.0f * c + 10.0f * r + k;
    const std::array<int64_t, 2> shape = {4, 2};
    EXPECT_EQ(Communicator::all_to_all_shape(shape, 4, 0, 1), (std::vector<int64_t>{1, 8}));
    std::vector<float> y(8);
    comm.all_to_all<float>(ctx, x, y, shape, 0, 1);
    out[static_cast<size_t>(c)] = y;
  });
  EXPECT_EQ(out[1], (std::vector<float>{10, 11, 110, 111, 210, 211, 310, 311}));
  EXPECT_EQ(out[0], (std::vector<float>{0, 1, 100, 101, 200, 201, 300, 301}));
}

TEST_F(CollectivesTest, AllToAllMatchesReference) {
  for (int n = 1; n <= 8; ++n) {
    Communicator comm(rt_, iota_group(n));
    const std::vector<std::vector<int64_t>> shapes = {
        {n}, {2 * n, 3}, {3, n}, {n, 2, 2 * n}, {130 * n}};
    for (const auto& shape : shapes) {
      const int rank = static_cast<int>(shape.size());
      for (int a = 0; a < rank; ++a) {
        if (shape[static_cast<size_t>(a)] % n != 0) continue;
        for (int b = 0; b < rank; ++b) {
          const std::vector<int64_t> os = Communicator::all_to_all_shape(shape, n, a, b);
          std::vector<int64_t> bs = shape;
          bs[static_cast<size_t>(a)] /= n;
          rt_.run_spmd(iota_group(n), [&](CoreContext& ctx) {
            const int q = ctx.core_id();
            auto value = [](int core, uint64_t i) { return static_cast<float>(100000 * core + i); };
            std::vector<float> x(num_elements(shape));
            for (uint64_t i = 0; i < x.size(); ++i) x[i] = value(q, i);
            std::vector<float> y(x.size(), -1.0f);
            if (q % 2) {
              comm.all_to_all<float>(ctx, x, y, shape, a, b);
            } else {  // in place
              y = x;
              comm.all_to_all<float>(ctx, y, y, shape, a, b);
            }
            for (uint64_t f = 0; f < y.size(); ++f) {
              std::vector<int64_t> idx = unravel(f, os);
              const int src =
                  static_cast<int>(idx[static_cast<size_t>(b)] / bs[static_cast<size_t>(b)]);
              idx[static_cast<size_t>(b)] %= bs[static_cast<size_t>(b)];
              idx[static_cast<size_t>(a)] += q * bs[static_cast<size_t>(a)];
              ASSERT_EQ(y[f], value(src, ravel(idx, shape)))
                  << "cores " << n << " split " << a << " concat " << b << " core " << q;
            }
          });
        }
      }
    }
  }
}

TEST_F(CollectivesTest, AllToAllIndivisibleSplitIsAnError) {
  EXPECT_THROW(Communicator::all_to_all_shape(std::vector<int64_t>{6, 2}, 4, 0, 1),
               InvalidArgumentError);
  Communicator comm(rt_, iota_group(4));
  rt_.run_spmd(iota_group(4), [&](CoreContext& ctx) {
    std::vector<float> x(12), y(12);
    const std::array<int64_t, 2> shape = {6, 2};
    try {
      comm.all_to_all<float>(ctx, x, y, shape, 0, 1);
      FAIL() << "expected an error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("split_axis 0"), std::string::npos) << e.what();
    }
  });
}

// ---- collective_permute ----------------------------------------------------------------------

TEST_F(CollectivesTest, PermuteRingShiftInPlaceForEverySize) {
  for (int n = 1; n <= 8; ++n) {
    Communicator comm(rt_, iota_group(n));
    std::vector<PermutePair> pairs;
    for (int r = 0; r < n; ++r) pairs.push_back({r, (r + 1) % n});
    for (uint64_t count : {uint64_t{1}, static_cast<uint64_t>(n + 1), uint64_t{1000}}) {
      rt_.run_spmd(iota_group(n), [&](CoreContext& ctx) {
        const int c = ctx.core_id();
        std::vector<int32_t> v(count);
        for (uint64_t i = 0; i < count; ++i) v[i] = 1000 * c + static_cast<int32_t>(i);
        comm.collective_permute<int32_t>(ctx, v, v, pairs);
        const int src = (c - 1 + n) % n;
        for (uint64_t i = 0; i < count; ++i) ASSERT_EQ(v[i], 1000 * src + static_cast<int32_t>(i));
      });
    }
  }
}

TEST_F(CollectivesTest, PermuteNotOneToOneGivesZerosToCoresThatReceiveNothing) {
  Communicator comm(rt_, iota_group(4));
  const std::vector<PermutePair> pairs = {{0, 1}, {1, 2}};
  std::vector<std::vector<double>> out(4);
  rt_.run_spmd(iota_group(4), [&](CoreContext& ctx) {
    const int c = ctx.core_id();
    std::vector<double> x(300, c + 1.0), y(300, -7.0);
    comm.collective_permute<double>(ctx, x, y, pairs);
    out[static_cast<size_t>(c)] = y;
  });
  EXPECT_EQ(out[0], std::vector<double>(300, 0.0));
  EXPECT_EQ(out[1], std::vector<double>(300, 1.0));
  EXPECT_EQ(out[2], std::vector<double>(300, 2.0));
  EXPECT_EQ(out[3], std::vector<double>(300, 0.0));
}

TEST_F(CollectivesTest, InvalidPermutesAreErrors) {
  Communicator comm(rt_, iota_group(4));
  rt_.run_spmd(iota_group(4), [&](CoreContext& ctx) {
    std::vector<float> x(4), y(4);
    for (const auto& [pairs, what] : std::vector<std::pair<std::vector<PermutePair>, std::string>>{
             {{{0, 1}, {0, 2}}, "source 0 twice"},
             {{{0, 1}, {2, 1}}, "destination 1 twice"},
             {{{0, 4}}, "rank 4"},
             {{{-1, 0}}, "rank -1"}}) {
      try {
        comm.collective_permute<float>(ctx, x, y, pairs);
        FAIL() << "expected an error for " << what;
      } catch (const InvalidArgumentError& e) {
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      }
    }
  });
}

// ---- broadcast, reduce, barrier --------------------------------------------------------------

TEST_F(CollectivesTest, BroadcastAndReduceFromEveryRoot) {
  for (int n = 1; n <= 8; ++n) {
    Communicator comm(rt_, iota_group(n));
    for (uint64_t count : {uint64_t{1}, static_cast<uint64_t>(n + 1), uint64_t{1000}}) {
      const auto in = make_inputs<float>(n, count, ReduceOp::kSum, 99u + n);
      const std::vector<float> folded = fold_reference(in, ReduceOp::kSum);
      for (int root : std::vector<int>{0, n / 2, n - 1}) {
        if (root == n / 2 && (n / 2 == 0 || n / 2 == n - 1)) continue;  // already covered
        rt_.run_spmd(iota_group(n), [&](CoreContext& ctx) {
          const int c = ctx.core_id();
          std::vector<float> b(count, -1.0f);
          comm.broadcast<float>(ctx, in[static_cast<size_t>(c)], b, root);
          ASSERT_EQ(b, in[static_cast<size_t>(root)]) << "broadcast root " << root;
          std::vector<float> r(count, -1.0f);
          comm.reduce<float>(ctx, in[static_cast<size_t>(c)], r, root);
          if (c == root) {
            ASSERT_EQ(r, folded) << "reduce cores " << n << " root " << root << " count " << count;
          } else {
            ASSERT_EQ(r, std::vector<float>(count, -1.0f)) << "non-root recv written";
          }
          std::vector<float> inplace = in[static_cast<size_t>(c)];
          comm.broadcast<float>(ctx, std::span<float>(inplace), root);
          ASSERT_EQ(inplace, in[static_cast<size_t>(root)]);
        });
      }
    }
  }
}

TEST_F(CollectivesTest, BarrierWaitsForEveryCore) {
  for (int n : {1, 2, 3, 5, 8}) {
    Communicator comm(rt_, iota_group(n));
    std::atomic<int> arrived{0};
    rt_.run_spmd(iota_group(n), [&](CoreContext& ctx) {
      if (ctx.core_id() == n - 1) std::this_thread::sleep_for(30ms);
      arrived.fetch_add(1);
      comm.barrier(ctx);
      ASSERT_EQ(arrived.load(), n);
    });
  }
}

// ---- every op for every element type ---------------------------------------------------------

// Small integers (exact in bf16 up to 256) so that every type has one exact reference. 3 and 5
// cores, 150 x N elements (>= 300 bytes per core even for bf16, above one 256 B slot, and over
// both slots for the 4- and 8-byte types).
template <typename T>
void check_every_op_for_type(Runtime& rt) {
  for (int n : {3, 5}) {
    Communicator comm(rt, iota_group(n));
    const int64_t per = 150;
    const std::array<int64_t, 1> shape = {per * n};
    const uint64_t total = static_cast<uint64_t>(per * n);
    auto value = [](int core, uint64_t i) { return (core + 1) * static_cast<int>(i % 7); };
    std::vector<PermutePair> pairs = {{0, 2}, {2, 1}};  // 1 -> nobody, 0 and the rest get zeros
    rt.run_spmd(iota_group(n), [&](CoreContext& ctx) {
      const int c = ctx.core_id();
      std::vector<T> x(total);
      for (uint64_t i = 0; i < total; ++i) x[i] = from_double<T>(value(c, i));
      // all_reduce (sum)
      std::vector<T> ar(total);
      comm.all_reduce<T>(ctx, x, ar);
      for (uint64_t i = 0; i < total; ++i)
        ASSERT_EQ(to_double(ar[i]), n * (n + 1) / 2 * static_cast<int>(i % 7)) << "all_reduce";
      // all_gather (tiled)
      std::vector<T> ag(total * static_cast<uint64_t>(n));
      comm.all_gather<T>(ctx, x, ag, shape, 0, true);
      for (int q = 0; q < n; ++q)
        for (uint64_t i = 0; i < total; ++i)
          ASSERT_EQ(to_double(ag[static_cast<uint64_t>(q) * total + i]), value(q, i))
              << "all_gather";
      // reduce_scatter (tiled), in place as NCCL: recv is this rank's block of send
      std::vector<T> rs = x;
      std::span<T> rs_all(rs);
      comm.reduce_scatter<T>(ctx, rs_all, rs_all.subspan(static_cast<size_t>(c * per), per), shape,
                             ReduceOp::kSum, 0, true);
      for (int64_t i = 0; i < per; ++i) {
        const uint64_t g = static_cast<uint64_t>(c * per + i);
        ASSERT_EQ(to_double(rs[g]), n * (n + 1) / 2 * static_cast<int>(g % 7)) << "reduce_scatter";
      }
      // all_to_all (split 0, concat 0)
      std::vector<T> a2a(total);
      comm.all_to_all<T>(ctx, x, a2a, shape, 0, 0);
      for (int q = 0; q < n; ++q)
        for (int64_t i = 0; i < per; ++i)
          ASSERT_EQ(to_double(a2a[static_cast<uint64_t>(q * per + i)]),
                    value(q, static_cast<uint64_t>(c * per + i)))
              << "all_to_all";
      // collective_permute
      std::vector<T> pm(total, from_double<T>(-1));
      comm.collective_permute<T>(ctx, x, pm, pairs);
      const int src = c == 2 ? 0 : c == 1 ? 2 : -1;
      for (uint64_t i = 0; i < total; ++i)
        ASSERT_EQ(to_double(pm[i]), src < 0 ? 0 : value(src, i)) << "permute";
      // broadcast from the last rank, reduce (max) to rank 1
      std::vector<T> bc(total);
      comm.broadcast<T>(ctx, x, bc, n - 1);
      for (uint64_t i = 0; i < total; ++i) ASSERT_EQ(to_double(bc[i]), value(n - 1, i));
      std::vector<T> rd(c == 1 ? total : 0);
      comm.reduce<T>(ctx, x, rd, 1, ReduceOp::kMax);
      for (uint64_t i = 0; i < rd.size(); ++i) ASSERT_EQ(to_double(rd[i]), value(n - 1, i));
    });
  }
}

TEST_F(CollectivesTest, EveryOpForEveryElementType) {
  check_every_op_for_type<float>(rt_);
  check_every_op_for_type<double>(rt_);
  check_every_op_for_type<BFloat16>(rt_);
  check_every_op_for_type<Float16>(rt_);
  check_every_op_for_type<int32_t>(rt_);
  check_every_op_for_type<int64_t>(rt_);
}

// ---- replica groups --------------------------------------------------------------------------

TEST_F(CollectivesTest, DisjointReplicaGroupsRunEveryOpConcurrently) {
  auto comms = Communicator::for_groups(rt_, {{0, 1, 2, 3}, {4, 5, 6, 7}});
  EXPECT_THROW(Communicator::for_groups(rt_, {{0, 1}, {1, 2}}), InvalidArgumentError);
  for (int round = 0; round < 5; ++round) {
    rt_.run_spmd([&](CoreContext& ctx) {
      const int c = ctx.core_id();
      Communicator& comm = *comms[static_cast<size_t>(c / 4)];
      const int base = c / 4 * 4;
      std::vector<float> v(1000, static_cast<float>(c));
      comm.all_reduce<float>(ctx, std::span<float>(v));
      const float expected = static_cast<float>(4 * base + 6);
      for (float x : v) ASSERT_EQ(x, expected);
      std::vector<int32_t> mine(3, c), all(12);
      const std::array<int64_t, 1> shape = {3};
      comm.all_gather<int32_t>(ctx, mine, all, shape, 0, true);
      for (int q = 0; q < 4; ++q)
        for (int i = 0; i < 3; ++i) ASSERT_EQ(all[static_cast<size_t>(3 * q + i)], base + q);
    });
  }
}

// ---- selection and options -------------------------------------------------------------------

TEST_F(CollectivesTest, SelectionAndOptions) {
  Communicator one(rt_, {3});
  EXPECT_EQ(one.select_algorithm(1 << 20), Algorithm::kLocal);
  Communicator comm(rt_, iota_group(8));
  EXPECT_EQ(comm.select_algorithm(8), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(comm.select_algorithm(Communicator::kSmallMessageBytes), Algorithm::kRecursiveDoubling);
  EXPECT_EQ(comm.select_algorithm(Communicator::kSmallMessageBytes + 1), Algorithm::kDirect);
  // The bytes each rank receives, (N - 1) x bytes, bound recursive doubling too.
  // 64 cores: 63 x 512 B = 31.5 KiB <= 56 KiB, recursive doubling; 63 x 1 KiB = 63 KiB, direct.
  EXPECT_TRUE(Communicator::recursive_doubling_is_small(64, 512));
  EXPECT_FALSE(Communicator::recursive_doubling_is_small(64, 1024));
  // 1024 cores: 1023 x 2144 B = 2.1 MiB, not small; 1023 x 56 B = 55.9 KiB
  // <= 56 KiB, small; 1023 x 64 B = 63.9 KiB, not.
  EXPECT_FALSE(Communicator::recursive_doubling_is_small(1024, 2144));
  EXPECT_TRUE(Communicator::recursive_doubling_is_small(1024, 56));
  EXPECT_FALSE(Communicator::recursive_doubling_is_small(1024, 64));
  // Up to 8 cores only the 8 KiB bound decides (7 x 8 KiB is the group bound), as measured.
  EXPECT_TRUE(Communicator::recursive_doubling_is_small(8, Communicator::kSmallMessageBytes));
  EXPECT_FALSE(Communicator::recursive_doubling_is_small(9, Communicator::kSmallMessageBytes));
  EXPECT_FALSE(Communicator::recursive_doubling_is_small(1, 8));  // one core copies (kLocal)
  CommunicatorOptions o = CommunicatorOptions::from_runtime(rt_.options());
  o.deterministic = false;
  Communicator fast(rt_, iota_group(8), o);
  EXPECT_EQ(fast.select_algorithm(1 << 20), Algorithm::kDirect);  // deterministic and faster
  o.transport = std::make_shared<testing_util::SlotOnlyTransport>();
  Communicator fast_slots(rt_, iota_group(8), o);
  EXPECT_EQ(fast_slots.select_algorithm(1 << 20), Algorithm::kRingReduceScatter);
  o.transport = nullptr;
  o.torus_rows = 3;
  EXPECT_THROW(Communicator(rt_, iota_group(8), o), InvalidArgumentError);

  RuntimeOptions ro = small_options(8);
  ro.collective_algorithm = "torus_2d";
  EXPECT_EQ(CommunicatorOptions::from_runtime(ro).algorithm, Algorithm::kTorus2d);
  EXPECT_EQ(RuntimeOptions::from_json(ro.to_json()).collective_algorithm, "torus_2d");
  ro.collective_algorithm = "fastest";
  EXPECT_THROW(ro.validate(), InvalidArgumentError);
  EXPECT_EQ(parse_algorithm("bidirectional_ring"), Algorithm::kBidirectionalRing);
  EXPECT_THROW(parse_algorithm("nope"), InvalidArgumentError);

  // A per-call algorithm shows in the fingerprint; a non-all_reduce algorithm is rejected.
  rt_.run_spmd(iota_group(8), [&](CoreContext& ctx) {
    std::vector<float> v(4, 1.0f);
    EXPECT_THROW(
        comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum, {Algorithm::kPairwise}),
        InvalidArgumentError);
  });
}

// ---- direct access -------------------------------------------------------------------------

// The two-shot direct all_reduce at sizes that cut into several fold tiles per chunk, chunks
// shorter than a cache line, empty chunks (1 element on 8 cores), and outputs large enough for
// streaming stores (N S >= kStreamingStoreBytes) with a tail that is not a whole store; bit for bit
// against the rank-order fold, in place on even cores.
TEST(DirectAccessTest, AllReduceMatchesTheFoldAcrossTilesChunksAndStreamingStores) {
  Runtime rt(small_options(8));
  for (int n = 1; n <= 8; ++n) {
    Communicator comm(rt, iota_group(n));
    const uint64_t tiles = 3 * kFoldTileBytes / sizeof(float) * static_cast<uint64_t>(n) + 5;
    for (uint64_t count : {uint64_t{1}, static_cast<uint64_t>(n + 1), uint64_t{1000}, tiles}) {
      check_all_reduce<float>(rt, comm, n, count, ReduceOp::kSum, Algorithm::kDirect, true);
    }
  }
  for (int n : {2, 8}) {
    Communicator comm(rt, iota_group(n));
    const uint64_t count = kStreamingStoreBytes / sizeof(float) / static_cast<uint64_t>(n) + 3;
    check_all_reduce<float>(rt, comm, n, count, ReduceOp::kSum, Algorithm::kDirect, true);
    check_all_reduce<double>(rt, comm, n, count / 2, ReduceOp::kMax, Algorithm::kDirect, true);
  }
}

// reduce runs direct in process: every root, in place and out of place, sizes as above.
TEST(DirectAccessTest, ReduceInPlaceAndOutOfPlaceAtEveryRoot) {
  Runtime rt(small_options(8));
  for (int n = 1; n <= 8; ++n) {
    Communicator comm(rt, iota_group(n));
    const uint64_t tiles = 3 * kFoldTileBytes / sizeof(float) * static_cast<uint64_t>(n) + 5;
    for (uint64_t count : {uint64_t{1}, static_cast<uint64_t>(n + 1), tiles}) {
      const auto in = make_inputs<float>(n, count, ReduceOp::kSum, 7u + static_cast<uint32_t>(n));
      const std::vector<float> folded = fold_reference(in, ReduceOp::kSum);
      for (int root = 0; root < n; ++root) {
        rt.run_spmd(iota_group(n), [&](CoreContext& ctx) {
          const size_t c = static_cast<size_t>(ctx.core_id());
          std::vector<float> x = in[c];
          if (ctx.core_id() == root) {
            comm.reduce<float>(ctx, x, x, root);  // in place on the root
            ASSERT_EQ(x, folded) << "cores " << n << " root " << root << " count " << count;
          } else {
            std::vector<float> r;
            comm.reduce<float>(ctx, x, r, root);
            ASSERT_EQ(x, in[c]) << "input changed";
          }
        });
      }
    }
  }
}

// Links without direct access (a transport across processes): auto falls back to the slot-copy
// algorithms with the same bits, reduce runs the chain, and asking for direct is Unimplemented on
// every core at once (not a hang).
TEST(DirectAccessTest, SlotOnlyLinksFallBackToSlotCopies) {
  Runtime rt(small_options(8));
  for (int n : {2, 3, 8}) {
    CommunicatorOptions o = CommunicatorOptions::from_runtime(rt.options());
    o.transport = std::make_shared<testing_util::SlotOnlyTransport>();
    Communicator comm(rt, iota_group(n), o);
    EXPECT_EQ(comm.select_algorithm(1 << 20), Algorithm::kRing);
    check_all_reduce<float>(rt, comm, n, 5000, ReduceOp::kSum, Algorithm::kAuto, true);
    const auto in = make_inputs<float>(n, 1000, ReduceOp::kSum, 5u);
    const std::vector<float> folded = fold_reference(in, ReduceOp::kSum);
    std::atomic<int> unimplemented{0};
    rt.run_spmd(iota_group(n), [&](CoreContext& ctx) {
      const size_t c = static_cast<size_t>(ctx.core_id());
      std::vector<float> x = in[c];
      comm.reduce<float>(ctx, x, x, n - 1);
      if (ctx.core_id() == n - 1) {
        ASSERT_EQ(x, folded);
      }
      try {
        comm.all_reduce<float>(ctx, std::span<float>(x), ReduceOp::kSum, {Algorithm::kDirect});
      } catch (const UnimplementedError& e) {
        EXPECT_NE(std::string(e.what()).find("slot_only"), std::string::npos) << e.what();
        unimplemented.fetch_add(1);
      }
    });
    EXPECT_EQ(unimplemented.load(), n);
  }
}

// reduce_scatter and all_gather run direct in process (each rank pulls its blocks from the peers'
// buffers) and over slot-only links (pairwise / ring slot copies): the same bits as the rank-order
// fold, on a middle scatter / gather axis (blocks in 3 pieces), out of place and with a recv that
// overlaps send without being NCCL's in-place form (folded into a staging buffer first).
TEST(DirectAccessTest, ReduceScatterAndAllGatherDirectAndOverSlotsGiveTheFoldsBits) {
  Runtime rt(small_options(8));
  for (bool slot_only : {false, true}) {
    for (int n : {1, 2, 3, 8}) {
      SCOPED_TRACE(std::string(slot_only ? "slot-only links" : "direct") + ", cores " +
                   std::to_string(n));
      CommunicatorOptions o = CommunicatorOptions::from_runtime(rt.options());
      if (slot_only) o.transport = std::make_shared<testing_util::SlotOnlyTransport>();
      Communicator comm(rt, iota_group(n), o);
      const std::vector<int64_t> shape = {3, 5 * n, 2};  // scatter / gather axis 1
      const uint64_t count = static_cast<uint64_t>(3 * 5 * n * 2), per = count / n, seg = 10;
      const auto in = make_inputs<float>(n, count, ReduceOp::kSum, 11u + static_cast<uint32_t>(n));
      const std::vector<float> folded = fold_reference(in, ReduceOp::kSum);
      rt.run_spmd(iota_group(n), [&](CoreContext& ctx) {
        const int c = ctx.core_id();
        // Rank c's block of the fold: piece o is elements [(o * n + c) * seg, +seg).
        std::vector<float> want(per);
        for (uint64_t o = 0; o < 3; ++o)
          for (uint64_t j = 0; j < seg; ++j)
            want[o * seg + j] = folded[(o * static_cast<uint64_t>(n) + c) * seg + j];
        std::vector<float> x = in[static_cast<size_t>(c)], out(per);
        comm.reduce_scatter<float>(ctx, x, out, shape, ReduceOp::kSum, 1, true);
        ASSERT_EQ(out, want) << "out of place";
        ASSERT_EQ(x, in[static_cast<size_t>(c)]) << "input changed";
        // recv = the first `per` elements of send: NCCL's in-place form only on rank 0.
        std::span<float> xs(x);
        comm.reduce_scatter<float>(ctx, xs, xs.first(per), shape, ReduceOp::kSum, 1, true);
        ASSERT_TRUE(std::equal(want.begin(), want.end(), x.begin())) << "overlapping recv";
        // all_gather of the blocks along axis 1 rebuilds the fold.
        const std::vector<int64_t> block_shape = {3, 5, 2};
        std::vector<float> gathered(count);
        comm.all_gather<float>(ctx, out, gathered, block_shape, 1, true);
        ASSERT_EQ(gathered, folded) << "all_gather";
      });
    }
  }
}

// A 2 x 4 torus given explicitly, with large messages, against the rank-order fold.
TEST(TorusTest, ExplicitRowsMatchTheFold) {
  Runtime rt(small_options(8));
  for (int rows : {1, 2, 4, 8}) {
    CommunicatorOptions o = CommunicatorOptions::from_runtime(rt.options());
    o.torus_rows = rows;
    o.algorithm = Algorithm::kTorus2d;
    Communicator comm(rt, iota_group(8), o);
    check_all_reduce<float>(rt, comm, 8, 1001, ReduceOp::kSum, Algorithm::kAuto, true);
  }
}

TEST(ElementTypesTest, UnsupportedTypeIsAnError) {
  Runtime rt(small_options(2));
  Communicator comm(rt, {0, 1});
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<std::byte> b(8);
    const std::array<int64_t, 1> shape = {8};
    EXPECT_THROW(comm.all_reduce_bytes(ctx, ElementType::kU8, b, b, shape), InvalidArgumentError);
  });
}

// Other link shapes: 64-byte slots (16 floats, so 1000 floats are 63 pieces) with 2, 3 and 5
// slots, and 16 cores, for every algorithm and the chain-based broadcast and reduce. The
// pipelined schedules were checked deadlock-free by simulation; this runs the real code.
TEST(LinkShapesTest, EveryAlgorithmWithTinySlotsAndManyCores) {
  for (int slots : {2, 3, 5}) {
    Runtime rt(small_options(16, 64, slots));
    for (int n : {2, 3, 8, 16}) {
      Communicator comm(rt, iota_group(n));
      for (Algorithm alg : kAllReduceAlgorithms) {
        check_all_reduce<float>(rt, comm, n, 1000, ReduceOp::kSum, alg,
                                alg != Algorithm::kRingReduceScatter);
      }
      rt.run_spmd(iota_group(n), [&](CoreContext& ctx) {
        const int c = ctx.core_id();
        std::vector<int32_t> x(1000, c + 1), y(1000, -1);
        comm.reduce<int32_t>(ctx, x, y, n / 2);
        if (c == n / 2) {
          for (int32_t v : y) ASSERT_EQ(v, n * (n + 1) / 2);
        }
        comm.broadcast<int32_t>(ctx, x, y, n - 1);
        for (int32_t v : y) ASSERT_EQ(v, n);
      });
    }
  }
}

}  // namespace
}  // namespace vtpu

namespace vtpu {
namespace {

// Not a check: the quick local timing behind Communicator::select_algorithm's thresholds. Run
// with --gtest_also_run_disabled_tests --gtest_filter='*AlgorithmTimings*'. Default link slots
// (1 MiB x 4), f32 sum, median of 15 all-reduces, microseconds.
TEST(AllReduceTimingTest, DISABLED_AlgorithmTimings) {
  for (int n : {2, 4, 8}) {
    RuntimeOptions o;
    o.num_cores = n;
    o.hbm_bytes_per_core = 256ull << 20;
    Runtime rt(o);
    Communicator comm(rt, testing_util::iota_group(n));
    for (uint64_t bytes :
         {uint64_t{8}, uint64_t{1} << 10, uint64_t{4} << 10, uint64_t{16} << 10, uint64_t{64} << 10,
          uint64_t{256} << 10, uint64_t{1} << 20, uint64_t{8} << 20}) {
      std::printf("N=%d bytes=%-8llu", n, static_cast<unsigned long long>(bytes));
      for (Algorithm alg : kAllReduceAlgorithms) {
        std::vector<double> us;
        rt.run_spmd([&](CoreContext& ctx) {
          std::vector<float> v(bytes / 4, 1.0f);
          for (int i = 0; i < 16; ++i) {
            comm.barrier(ctx);
            const auto t0 = std::chrono::steady_clock::now();
            comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum, {alg});
            const double t =
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                    .count();
            if (ctx.core_id() == 0 && i > 0) us.push_back(t);
          }
        });
        std::sort(us.begin(), us.end());
        std::printf("  %s %.1f", std::string(algorithm_name(alg)).c_str(), us[us.size() / 2]);
      }
      std::printf("\n");
    }
  }
}

// A group that lists a core twice, names a core outside the runtime, or is empty is rejected when
// the Communicator is built, naming the offending core.
TEST(ReplicaGroupsTest, DuplicateOutOfRangeAndEmptyGroupsAreRejected) {
  Runtime rt(small_options(4));
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] {
                          Communicator c(rt, {0, 1, 1});
                        },
                        {"core 1"});
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] {
                          Communicator c(rt, {0, 4});
                        },
                        {"core 4", "0..3"});
  testing::expect_error(ErrorCode::kInvalidArgument, [&] { Communicator c(rt, {-1}); },
                        {"core -1"});
  testing::expect_error(ErrorCode::kInvalidArgument, [&] { Communicator c(rt, {}); }, {});
}

// Regression: for_groups reported a core repeated inside ONE group as "core 1 is in replica group
// 0 and 0 (expected disjoint groups)"; it must say that the group lists the core twice.
TEST(ReplicaGroupsTest, ForGroupsNamesADuplicateInsideOneGroup) {
  Runtime rt(small_options(4));
  const std::string msg = testing::expect_error(ErrorCode::kInvalidArgument,
                                                [&] {
                                                  Communicator::for_groups(rt, {{0, 1, 1}, {2, 3}});
                                                },
                                                {"core 1"});
  EXPECT_EQ(msg.find("group 0 and 0"), std::string::npos) << msg;
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] {
                          Communicator::for_groups(rt, {{0, 1}, {1, 2}});
                        },
                        {"core 1", "0 and 1"});
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] {
                          Communicator::for_groups(rt, {{0}, {}});
                        },
                        {});
}

// Two communicators whose groups overlap ({0,1,2} and {1,2,3}) may both be used in one program as
// long as every shared core calls them in the same order; results are each group's own sum.
TEST(ReplicaGroupsTest, OverlappingCommunicatorsUsedInTheSameOrderAreCorrect) {
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
TEST(ReplicaGroupsTest, PartialGroupAndANonMemberCaller) {
  Runtime rt(small_options(4));
  Communicator comm(rt, {3, 1});  // rank 0 is core 3, rank 1 is core 1
  rt.run_spmd({1, 3}, [&](CoreContext& ctx) {
    std::vector<int32_t> x = {ctx.core_id()}, out(2);
    const std::array<int64_t, 1> shape = {1};
    comm.all_gather<int32_t>(ctx, x, out, shape);
    EXPECT_EQ(out, (std::vector<int32_t>{3, 1}));  // block q is rank q's input, in group order
  });
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] {
                          rt.run_spmd({0}, [&](CoreContext& ctx) {
                            std::vector<float> x(4);
                            comm.all_reduce<float>(ctx, std::span<float>(x));
                          });
                        },
                        {"core 0", "{3,1}"});
}

// Zero elements: every op completes on 1..5 cores (fingerprints still meet), writes nothing, and
// the next collective is still in step.
TEST(SizesTest, ZeroElementsForEveryOp) {
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
TEST(SizesTest, ShapeWhoseElementCountOverflowsIsAnError) {
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
  EXPECT_NE(msgs[0].find("[4294967296,4294967296]"), std::string::npos) << msgs[0];
}

// Regression: elements x element bytes wrapped too: f32[2^62] is 2^64 bytes == 0 mod 2^64, so
// empty buffers passed check_size and the algorithms then read 2^62 elements. Must be an error.
TEST(SizesTest, ByteCountOverflowIsAnError) {
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

// Partially overlapping send/recv (same op, shifted by one element): an error for all_reduce,
// permute and broadcast (NCCL only allows send == recv), and correct results for reduce_scatter
// and all_to_all, which document "any overlap".
TEST(AliasingTest, PartialOverlapIsAnErrorOrCorrect) {
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

// Out-of-range axes of all_gather, reduce_scatter and all_to_all name the axis and the shape;
// a stacked all_gather whose output would exceed 8 dims is an error, and a scalar stacks to (N).
TEST(ShapeFunctionsTest, BadAxesAreErrorsNamingTheAxis) {
  const std::array<int64_t, 2> s = {4, 2};
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] { Communicator::all_gather_shape(s, 2, -1, false); },
                        {"axis", "-1", "[4,2]", "0..2"});
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] { Communicator::all_gather_shape(s, 2, 2, true); },
                        {"axis", "2", "0..1"});
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] { Communicator::reduce_scatter_shape(s, 2, 2, true); },
                        {"scatter_dimension", "2"});
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] { Communicator::reduce_scatter_shape(s, 2, -1, true); },
                        {"scatter_dimension", "-1"});
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] { Communicator::all_to_all_shape(s, 2, 0, 5); }, {"concat_axis", "5"});
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] { Communicator::all_to_all_shape(s, 2, -3, 0); }, {"split_axis", "-3"});
  const std::array<int64_t, 8> eight = {1, 1, 1, 1, 1, 1, 1, 1};
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] { Communicator::all_gather_shape(eight, 2, 0, false); }, {"8"});
  EXPECT_EQ(Communicator::all_gather_shape({}, 3, 0, false), (std::vector<int64_t>{3}));
  testing::expect_error(ErrorCode::kInvalidArgument,
                        [&] { Communicator::all_gather_shape({}, 3, 0, true); }, {"axis", "0"});
}

// Permute pairs: a repeated source, a repeated destination, or a rank outside the group is an
// error naming it; a self pair (r, r) keeps the input; an unlisted core gets zeros.
TEST(PermuteTest, BadPairsAreErrorsAndSelfPairsKeepTheInput) {
  Runtime rt(small_options(3));
  Communicator comm(rt, {0, 1, 2});
  auto expect_rejected = [&](std::vector<PermutePair> pairs,
                             std::initializer_list<std::string_view> values) {
    comm.reset();  // the previous case's throw aborted the group
    testing::expect_error(
        ErrorCode::kInvalidArgument,
        [&] {
          rt.run_spmd([&](CoreContext& ctx) {
            std::vector<int64_t> v(5, ctx.core_id() + 1), out(5);
            comm.collective_permute<int64_t>(ctx, v, out, pairs);
          });
        },
        values);
  };
  expect_rejected({{0, 1}, {0, 2}}, {"source 0"});
  expect_rejected({{0, 2}, {1, 2}}, {"destination 2"});
  expect_rejected({{0, 3}}, {"rank 3", "0..2"});
  expect_rejected({{-1, 0}}, {"rank -1"});
  comm.reset();
  rt.run_spmd([&](CoreContext& ctx) {
    std::vector<int64_t> v(5, ctx.core_id() + 1), out(5, -7);
    const std::vector<PermutePair> pairs = {{1, 1}, {0, 2}};
    comm.collective_permute<int64_t>(ctx, v, out, pairs);
    const int64_t expect = ctx.core_id() == 1 ? 2 : ctx.core_id() == 2 ? 1 : 0;
    for (int64_t x : out) EXPECT_EQ(x, expect) << "core " << ctx.core_id();
  });
}

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
TEST(ManyCoresTest, SixtyFourAndTwoHundredFiftySixCoresComplete) {
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

// torus_2d with every explicit row count that divides the group (including R = 1 and R = N,
// one-axis meshes) matches the fold; a row count that does not divide it is rejected up front.
TEST(TorusTest, EveryDivisorAsRows) {
  Runtime rt(small_options(8));
  for (int n : {6, 8}) {
    for (int rows = 1; rows <= n; ++rows) {
      CommunicatorOptions co = CommunicatorOptions::from_runtime(rt.options());
      co.torus_rows = rows;
      co.algorithm = Algorithm::kTorus2d;
      if (n % rows != 0) {
        testing::expect_error(ErrorCode::kInvalidArgument,
                              [&] { Communicator c(rt, iota_group(n), co); },
                              {"torus_rows", std::to_string(rows)});
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
TEST(SelectionTest, NonAllReduceAlgorithmsAreRejectedOnEveryGroupSize) {
  Runtime rt(small_options(2));
  for (int n : {1, 2}) {
    Communicator comm(rt, iota_group(n));
    std::vector<Algorithm> bad = {Algorithm::kPairwise, Algorithm::kChain,
                                  Algorithm::kDissemination};
    if (n > 1) bad.push_back(Algorithm::kLocal);
    for (Algorithm a : bad) {
      SCOPED_TRACE(std::to_string(n) + " cores");
      testing::expect_error(ErrorCode::kInvalidArgument,
                            [&] {
                              rt.run_spmd(iota_group(n), [&](CoreContext& ctx) {
                                std::vector<float> v(4);
                                comm.all_reduce<float>(ctx, std::span<float>(v), ReduceOp::kSum,
                                                       {a});
                              });
                            },
                            {algorithm_name(a)});
    }
  }
}

// ---- direct all_gather and reduce_scatter -----------------------------------------------------

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
TEST(DirectGatherScatterTest, SizesAxesOpsAndInPlaceFormsMatchTheReference) {
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
TEST(DirectGatherScatterTest, UndividedScatterDimensionIsAnError) {
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
  for (const std::string& m : msgs) EXPECT_NE(m.find("5"), std::string::npos) << m;
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
TEST(DirectGatherScatterTest, PartialOverlapsAreCorrectOrRejected) {
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
TEST(DirectGatherScatterTest, DisjointGroupsRunAtOnce) {
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

// 64 and 256 cores: 1 element per rank reduce-scattered and all-gathered over the whole group,
// and 64 cores as 8 disjoint groups of 8 at once.
TEST(DirectGatherScatterTest, SixtyFourAndTwoHundredFiftySixCores) {
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
