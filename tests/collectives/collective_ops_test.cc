// Every collective against a sequential reference, for 1..8 cores, sizes of one element, not
// divisible by N, and larger than all the link slots together (256 B x 2 slots); every all_reduce
// algorithm forced explicitly; every dtype; the issue's all_to_all and determinism examples.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "vtpu/collectives/all_reduce_algorithms.h"
#include "vtpu/collectives/communicator.h"
#include "vtpu/collectives/reduce_kernels.h"
#include "vtpu/common/bfloat16.h"
#include "vtpu/common/error.h"
#include "vtpu/runtime/runtime.h"
#include "tests/collectives/test_util.h"

namespace vtpu {

// The algorithm's name in the CTest name of AllReduceAlgorithmTest, not "1-byte object <06>"
// (gtest prints an enum class without PrintTo as its bytes). In vtpu,
// Algorithm's namespace, where gtest looks it up.
void PrintTo(Algorithm a, std::ostream* os) { *os << algorithm_name(a); }

namespace {

using namespace std::chrono_literals;
using testing_util::iota_group;
using testing_util::num_elements;
using testing_util::ravel;
using testing_util::small_options;
using testing_util::unravel;

constexpr std::array<Algorithm, 6> kAllReduceAlgorithms = {
    Algorithm::kRing,    Algorithm::kBidirectionalRing, Algorithm::kRecursiveDoubling,
    Algorithm::kTorus2d, Algorithm::kRingReduceScatter, Algorithm::kDirect};

// Naive left fold in rank order, written independently of collectives/reduce_kernels.h.
template <typename T>
T naive_combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMax:
      return a < b ? b : a;
    case ReduceOp::kMin:
      return b < a ? b : a;
  }
  return a;
}

template <typename T>
std::vector<T> fold_reference(const std::vector<std::vector<T>>& in, ReduceOp op) {
  std::vector<T> out = in[0];
  for (size_t r = 1; r < in.size(); ++r)
    for (size_t i = 0; i < out.size(); ++i) out[i] = naive_combine(out[i], in[r][i], op);
  return out;
}

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

class AllReduceAlgorithmTest : public CollectivesTest,
                               public ::testing::WithParamInterface<Algorithm> {};

// Every algorithm, forced, against the rank-order fold: deterministic ones bit for bit (floats
// included), the opt-in classic ring within rounding (and exactly for integers).
TEST_P(AllReduceAlgorithmTest, MatchesRankOrderFoldForEveryTypeAndOp) {
  const Algorithm alg = GetParam();
  const bool det = alg != Algorithm::kRingReduceScatter;
  for (int n = 1; n <= 8; ++n) {
    Communicator comm(rt_, iota_group(n));
    // f32 sum at every size; the other ops at a size N does not divide; the other types at the
    // size larger than all slots (1000 elements = 4000 B or more against 2 x 256 B).
    for (uint64_t count : {uint64_t{1}, static_cast<uint64_t>(n + 1), uint64_t{1000}}) {
      check_all_reduce<float>(rt_, comm, n, count, ReduceOp::kSum, alg, det);
    }
    for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
      // max and min are exact in any order; prod of floats only in rank order.
      check_all_reduce<float>(rt_, comm, n, static_cast<uint64_t>(n + 1), op, alg,
                              det || op != ReduceOp::kProd);
    }
    check_all_reduce<double>(rt_, comm, n, 1000, ReduceOp::kSum, alg, det);
    check_all_reduce<int32_t>(rt_, comm, n, 1000, ReduceOp::kSum, alg, true);
    check_all_reduce<int64_t>(rt_, comm, n, 1000, ReduceOp::kProd, alg, true);
  }
}

// bf16: elements are bit patterns; small integers are exact in bf16, so the sum is known.
TEST_P(AllReduceAlgorithmTest, Bf16SumOfSmallIntegers) {
  const Algorithm alg = GetParam();
  for (int n : {1, 3, 8}) {
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
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AllReduceAlgorithmTest,
                         ::testing::ValuesIn(kAllReduceAlgorithms),
                         [](const auto& info) { return std::string(algorithm_name(info.param)); });

// The issue's example: v = [1e8, 1, -1e8, 1] on 4 cores; the left fold in rank order gives
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

template <typename T>
T from_int(int v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return float_to_bf16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return bf16_to_float(v);
  } else {
    return static_cast<double>(v);
  }
}

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
      for (uint64_t i = 0; i < total; ++i) x[i] = from_int<T>(value(c, i));
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
      std::vector<T> pm(total, from_int<T>(-1));
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
  // The 1024-core case of the finding: 1023 x 2144 B = 2.1 MiB, not small; 1023 x 56 B = 55.9 KiB
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

}  // namespace
}  // namespace vtpu
