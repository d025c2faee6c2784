// Every named collective of ShardMapContext, for every element type, against a sequential
// reference over the replica groups of a (4,2) mesh ('x','y'): axis names 'x' (4 cores), 'y'
// (2 cores), ('x','y') and ('y','x') (8 cores, flattened in two orders). Reductions fold in rank
// order, so the results are compared bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "tests/collectives/test_util.h"
#include "vtpu/common/float16.h"
#include "vtpu/sharding/shard_map.h"

namespace vtpu {
namespace {

using Inputs = std::span<const LocalArray>;
using Outputs = std::vector<LocalArray>;

using testing_util::from_double;

// T widened to f32, the type the references fold in (exact for every T the tests use).
template <typename T>
float widen(T v) {
  return static_cast<float>(testing_util::to_double(v));
}

// The element value the tests give T for the small integer v (in -5..5): exact for every type,
// with a fraction for the floating types so that sums round.
template <typename T>
T make(int v) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(v);
  } else {
    return from_double<T>(static_cast<float>(v) * 0.37f);
  }
}

// One step of the sequential fold, as JAX computes it for T (16-bit floats in f32, rounded back).
template <typename T>
T fold(T a, T b, ReduceOp op) {
  if constexpr (sizeof(T) == 2) {
    return from_double<T>(fold(widen(a), widen(b), op));
  } else {
    switch (op) {
      case ReduceOp::kMax:
        return std::max(a, b);
      case ReduceOp::kMin:
        return std::min(a, b);
      default:
        return static_cast<T>(a + b);
    }
  }
}

struct Result {
  ElementType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

constexpr const char* kOps[] = {
    "psum",          "pmax",         "pmin",           "pmean",           "gather_stack0",
    "gather_tile0",  "gather_tile1", "gather_stack_1", "scatter_untiled", "scatter_tiled",
    "a2a_untiled00", "a2a_tiled00",  "a2a_untiled01",  "a2a_tiled01",     "permute_shift",
    "permute_one",   "psum_donated"};
constexpr int kNumOps = sizeof(kOps) / sizeof(kOps[0]);

template <typename T>
class NamedCollectivesTest : public ::testing::Test {};
using ElementTypes = ::testing::Types<float, BFloat16, Float16, int32_t, int64_t>;
TYPED_TEST_SUITE(NamedCollectivesTest, ElementTypes);

// Rank r of every group holds X_r, shape (N, 2): X_r[i][j] = value(device, 2 i + j).
int value(int device, int k) { return (device * 7 + k * 3) % 11 - 5; }

TYPED_TEST(NamedCollectivesTest, MatchSequentialReference) {
  using T = TypeParam;
  RuntimeOptions o;
  o.num_cores = 8;
  o.hbm_bytes_per_core = uint64_t{64} << 20;
  Runtime rt(o);
  DeviceMesh mesh = make_mesh(rt, {4, 2}, {"x", "y"});
  for (const AxisNames& axes :
       {AxisNames("x"), AxisNames("y"), AxisNames({"x", "y"}), AxisNames({"y", "x"})}) {
    SCOPED_TRACE(axes.to_string());
    std::vector<std::vector<Result>> got(kNumOps, std::vector<Result>(8));
    std::vector<int> unchanged(8, 0);
    shard_map(mesh, {}, {}, [&](ShardMapContext& ctx, Inputs) {
      const int n = static_cast<int>(ctx.axis_size(axes));
      std::vector<T> host(2 * n);
      for (int k = 0; k < 2 * n; ++k) host[k] = make<T>(value(ctx.device(), k));
      const LocalArray x = LocalArray::from_host<T>(ctx.core(), host, {n, 2});
      const std::vector<PermutePair> shift = [&] {
        std::vector<PermutePair> p;
        for (int j = 0; j < n; ++j) p.push_back({j, (j + 1) % n});
        return p;
      }();
      const std::vector<PermutePair> one = {{0, n - 1}};
      LocalArray outs[kNumOps] = {
          ctx.psum(x, axes),
          ctx.pmax(x, axes),
          ctx.pmin(x, axes),
          ctx.pmean(x, axes),
          ctx.all_gather(x, axes, 0, false),
          ctx.all_gather(x, axes, 0, true),
          ctx.all_gather(x, axes, 1, true),
          ctx.all_gather(x, axes, -1, false),
          ctx.psum_scatter(x, axes, 0, false),
          ctx.psum_scatter(x, axes, 0, true),
          ctx.all_to_all(x, axes, 0, 0, false),
          ctx.all_to_all(x, axes, 0, 0, true),
          ctx.all_to_all(x, axes, 0, 1, false),
          ctx.all_to_all(x, axes, 0, 1, true),
          ctx.ppermute(x, axes, shift),
          ctx.ppermute(x, axes, one),
          ctx.psum(LocalArray::from_host<T>(ctx.core(), host, {n, 2}), axes),
      };
      unchanged[ctx.device()] = x.to_host<T>() == host;
      for (int op = 0; op < kNumOps; ++op) {
        std::span<const std::byte> b = outs[op].bytes();
        got[op][ctx.device()] = {outs[op].dtype(), outs[op].shape(), {b.begin(), b.end()}};
      }
      return Outputs{};
    })();
    EXPECT_EQ(unchanged, std::vector<int>(8, 1));

    for (const std::vector<int>& group : mesh.replica_groups(axes.names())) {
      const int n = static_cast<int>(group.size());
      auto X = [&](int r, int i, int j) { return make<T>(value(group[r], 2 * i + j)); };
      for (int me = 0; me < n; ++me) {
        const int d = group[me];
        std::vector<T> sum(2 * n), mx(2 * n), mn(2 * n);
        for (int k = 0; k < 2 * n; ++k) {
          sum[k] = mx[k] = mn[k] = X(0, k / 2, k % 2);
          for (int r = 1; r < n; ++r) {
            sum[k] = fold(sum[k], X(r, k / 2, k % 2), ReduceOp::kSum);
            mx[k] = fold(mx[k], X(r, k / 2, k % 2), ReduceOp::kMax);
            mn[k] = fold(mn[k], X(r, k / 2, k % 2), ReduceOp::kMin);
          }
        }
        std::vector<std::byte> mean;
        if constexpr (std::is_integral_v<T>) {  // JAX: true division gives f32
          std::vector<float> m;
          for (T s : sum) m.push_back(static_cast<float>(s) / static_cast<float>(n));
          mean = bytes_of(m);
        } else {
          std::vector<T> m;
          for (T s : sum) m.push_back(from_double<T>(widen(s) / static_cast<float>(n)));
          mean = bytes_of(m);
        }
        std::vector<T> stack, tile1(2 * n * n), stack_last(2 * n * n), a2a0(2 * n), a2a1(2 * n),
            shifted(2 * n), one(2 * n, T{}), row(2);
        for (int r = 0; r < n; ++r) {
          for (int i = 0; i < n; ++i) {
            for (int j = 0; j < 2; ++j) {
              stack.push_back(X(r, i, j));
              tile1[i * 2 * n + r * 2 + j] = X(r, i, j);
              stack_last[(i * 2 + j) * n + r] = X(r, i, j);
            }
          }
          for (int j = 0; j < 2; ++j) {
            a2a0[r * 2 + j] = X(r, me, j);
            a2a1[j * n + r] = X(r, me, j);
          }
        }
        for (int k = 0; k < 2 * n; ++k) {
          shifted[k] = X((me + n - 1) % n, k / 2, k % 2);
          if (me == n - 1) one[k] = X(0, k / 2, k % 2);
        }
        row = {sum[2 * me], sum[2 * me + 1]};
        const ElementType t = data_type_of<T>();
        const ElementType mean_t = std::is_integral_v<T> ? ElementType::kF32 : t;
        const std::vector<Result> want = {
            {t, {n, 2}, bytes_of(sum)},       {t, {n, 2}, bytes_of(mx)},
            {t, {n, 2}, bytes_of(mn)},        {mean_t, {n, 2}, mean},
            {t, {n, n, 2}, bytes_of(stack)},  {t, {n * n, 2}, bytes_of(stack)},
            {t, {n, 2 * n}, bytes_of(tile1)}, {t, {n, 2, n}, bytes_of(stack_last)},
            {t, {2}, bytes_of(row)},          {t, {1, 2}, bytes_of(row)},
            {t, {n, 2}, bytes_of(a2a0)},      {t, {n, 2}, bytes_of(a2a0)},
            {t, {2, n}, bytes_of(a2a1)},      {t, {1, 2 * n}, bytes_of(a2a0)},
            {t, {n, 2}, bytes_of(shifted)},   {t, {n, 2}, bytes_of(one)},
            {t, {n, 2}, bytes_of(sum)},
        };
        for (int op = 0; op < kNumOps; ++op) {
          const Result& g = got[op][d];
          EXPECT_EQ(g.dtype, want[op].dtype) << kOps[op] << " on device " << d;
          EXPECT_EQ(g.shape, want[op].shape) << kOps[op] << " on device " << d;
          EXPECT_TRUE(g.bytes == want[op].bytes) << kOps[op] << " on device " << d;
        }
      }
    }
  }
}

}  // namespace
}  // namespace vtpu
