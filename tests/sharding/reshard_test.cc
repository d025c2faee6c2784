// Reshard execution (sharding/reshard.h) on plans written by hand, one step kind at a time: each
// leaves every device with exactly its target block, at its logical shape. Planning is tested in
// tests/planner/reshard_planner_test.cc.
#include "vtpu/sharding/reshard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tests/sharding/expect_invalid.h"
#include "tests/sharding/naive_block.h"
#include "tests/sharding/partial_array.h"
#include "vtpu/common/bfloat16.h"
#include "vtpu/common/float16.h"
#include "vtpu/common/units.h"
#include "vtpu/sharding/block_copy.h"

namespace vtpu {
namespace {

using Shape = std::vector<int64_t>;
using ::testing::ElementsAre;
using vtpu::testing::expect_invalid;
using vtpu::testing::naive_block;
using vtpu::testing::partial_array;

NamedSharding sharding(const Mesh& mesh, const std::string& spec) {
  return NamedSharding(mesh, PartitionSpec::parse(spec));
}

std::vector<float> iota_values(const Shape& shape) {
  std::vector<float> x(static_cast<size_t>(num_elements_of(shape)));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  return x;
}

std::vector<float> local(const ShardedArray& a, int dev) {
  const std::span<const float> d = a.local_data(dev);
  return {d.begin(), d.end()};
}

template <typename T>
std::vector<T> local_of(const ShardedArray& a, int dev) {
  const std::span<const T> d = a.local_data<T>(dev);
  return {d.begin(), d.end()};
}

/// Every device of `result` holds exactly its block of `expected`, at its logical shape.
template <typename T>
void expect_blocks(const ShardedArray& result, const std::vector<T>& expected) {
  const Shape& shape = result.global_shape();
  for (int dev : result.sharding().mesh().devices()) {
    const std::vector<IndexRange> box = result.sharding().index_ranges(dev, shape);
    EXPECT_EQ(local_of<T>(result, dev), naive_block(expected, shape, box)) << "device " << dev;
  }
}

/// A step over `axes` of `mesh` from spec `before` to `after`; collectives get the replica
/// groups of `axes`, local steps none.
ReshardStep make_step(ReshardOpKind op, const Mesh& mesh, std::vector<std::string> axes,
                      const std::string& before, const std::string& after, Shape buffer_shape,
                      int dim = -1, int split_dim = -1) {
  ReshardStep s;
  s.op = op;
  s.axes = std::move(axes);
  if (op != ReshardOpKind::kSlice && op != ReshardOpKind::kMakePartial) {
    s.replica_groups = mesh.replica_groups(s.axes);
  }
  s.dim = dim;
  s.split_dim = split_dim;
  s.spec_before = PartitionSpec::parse(before);
  s.spec_after = PartitionSpec::parse(after);
  s.buffer_shape = std::move(buffer_shape);
  return s;
}

ReshardPlan one_step_plan(const Shape& shape, const NamedSharding& from, const NamedSharding& to,
                          ReshardStep step) {
  ReshardPlan plan{shape, from, to, "", "", {}, 0};
  plan.steps.push_back(std::move(step));
  return plan;
}

class ExecuteReshardTest : public ::testing::Test {
 protected:
  static std::unique_ptr<Runtime> make_runtime() {
    RuntimeOptions o;
    o.num_cores = 4;
    o.hbm_bytes_per_core = 4 * kMiB;
    o.collective_timeout = std::chrono::milliseconds(20000);
    return std::make_unique<Runtime>(o);
  }
  std::unique_ptr<Runtime> rt_ = make_runtime();
  const Mesh x4_{{4}, {"x"}};
  const Mesh x2_{{2}, {"x"}};
};

TEST_F(ExecuteReshardTest, AllGatherLeavesTheWholeArrayOnEveryDevice) {
  const Shape shape = {8, 3};
  const std::vector<float> x = iota_values(shape);
  const NamedSharding from = sharding(x4_, "P('x')"), to = sharding(x4_, "P()");
  const ReshardPlan plan = one_step_plan(
      shape, from, to,
      make_step(ReshardOpKind::kAllGather, x4_, {"x"}, "P('x')", "P()", {2, 3}, /*dim=*/0));
  expect_blocks(execute_reshard(*rt_, ShardedArray::device_put(*rt_, x, shape, from), plan), x);
}

// Five rows over four devices are blocks of 2, 2, 1 and 0 rows: the collective runs on blocks
// padded to 2 and the result is trimmed back to the logical (5, 4).
TEST_F(ExecuteReshardTest, UnevenBlocksComeBackUnpadded) {
  const Shape shape = {5, 4};
  const std::vector<float> x = iota_values(shape);
  const NamedSharding from = sharding(x4_, "P('x')"), to = sharding(x4_, "P()");
  const ReshardPlan plan = one_step_plan(
      shape, from, to,
      make_step(ReshardOpKind::kAllGather, x4_, {"x"}, "P('x')", "P()", {2, 4}, /*dim=*/0));
  const ShardedArray b =
      execute_reshard(*rt_, ShardedArray::device_put(*rt_, x, shape, from), plan);
  for (int dev = 0; dev < 4; ++dev) EXPECT_EQ(local(b, dev), x) << "device " << dev;
}

TEST_F(ExecuteReshardTest, AllToAllMovesTheShardedDimension) {
  const Shape shape = {8, 8};
  const std::vector<float> x = iota_values(shape);
  const NamedSharding from = sharding(x4_, "P('x', None)"), to = sharding(x4_, "P(None, 'x')");
  const ReshardPlan plan =
      one_step_plan(shape, from, to,
                    make_step(ReshardOpKind::kAllToAll, x4_, {"x"}, "P('x', None)", "P(None, 'x')",
                              {2, 8}, /*dim=*/0, /*split_dim=*/1));
  expect_blocks(execute_reshard(*rt_, ShardedArray::device_put(*rt_, x, shape, from), plan), x);
}

TEST_F(ExecuteReshardTest, SliceIsLocal) {
  const Shape shape = {8, 2};
  const std::vector<float> x = iota_values(shape);
  const NamedSharding from = sharding(x4_, "P()"), to = sharding(x4_, "P('x')");
  const ReshardPlan plan = one_step_plan(
      shape, from, to,
      make_step(ReshardOpKind::kSlice, x4_, {"x"}, "P()", "P('x')", {2, 2}, /*dim=*/0));
  expect_blocks(execute_reshard(*rt_, ShardedArray::device_put(*rt_, x, shape, from), plan), x);
}

TEST_F(ExecuteReshardTest, AllReduceSumsTheAddends) {
  const Shape shape = {4};
  const NamedSharding from = sharding(x2_, "P(unreduced={'x'})"), to = sharding(x2_, "P()");
  const ShardedArray a = partial_array(*rt_, shape, from, {{1, 2, 3, 4}, {10, 20, 30, 40}});
  const ReshardPlan plan = one_step_plan(
      shape, from, to,
      make_step(ReshardOpKind::kAllReduce, x2_, {"x"}, "P(unreduced={'x'})", "P()", {4}));
  const ShardedArray b = execute_reshard(*rt_, a, plan);
  for (int dev : {0, 1}) EXPECT_THAT(local(b, dev), ElementsAre(11, 22, 33, 44));
}

TEST_F(ExecuteReshardTest, ReduceScatterLeavesEachDeviceItsSummedBlock) {
  const Shape shape = {4};
  const NamedSharding from = sharding(x2_, "P(unreduced={'x'})"), to = sharding(x2_, "P('x')");
  const ShardedArray a = partial_array(*rt_, shape, from, {{1, 2, 3, 4}, {10, 20, 30, 40}});
  const ReshardPlan plan = one_step_plan(shape, from, to,
                                         make_step(ReshardOpKind::kReduceScatter, x2_, {"x"},
                                                   "P(unreduced={'x'})", "P('x')", {4}, /*dim=*/0));
  const ShardedArray b = execute_reshard(*rt_, a, plan);
  EXPECT_THAT(local(b, 0), ElementsAre(11, 22));
  EXPECT_THAT(local(b, 1), ElementsAre(33, 44));
}

TEST_F(ExecuteReshardTest, MakePartialKeepsTheValueOnPartialIndexZero) {
  const Shape shape = {2};
  const NamedSharding from = sharding(x2_, "P()"), to = sharding(x2_, "P(unreduced={'x'})");
  const ReshardPlan plan = one_step_plan(
      shape, from, to,
      make_step(ReshardOpKind::kMakePartial, x2_, {"x"}, "P()", "P(unreduced={'x'})", {2}));
  const ShardedArray b = execute_reshard(
      *rt_, ShardedArray::device_put(*rt_, std::vector<float>{5, 6}, shape, from), plan);
  EXPECT_THAT(local(b, 0), ElementsAre(5, 6));
  EXPECT_THAT(local(b, 1), ElementsAre(0, 0));  // the identity of sum
  EXPECT_THAT(b.gather(), ElementsAre(5, 6));
}

TEST_F(ExecuteReshardTest, PermuteMovesBlocksToAMeshOfAnotherDeviceOrder) {
  const Shape shape = {4};
  const std::vector<float> x = iota_values(shape);
  const Mesh reversed({2}, {"x"}, {1, 0});
  const NamedSharding from = sharding(x2_, "P('x')"), to = sharding(reversed, "P('x')");
  ReshardStep step =
      make_step(ReshardOpKind::kCollectivePermute, x2_, {"x"}, "P('x')", "P('x')", {2});
  step.pairs = {{0, 1}, {1, 0}};
  const ShardedArray b = execute_reshard(*rt_, ShardedArray::device_put(*rt_, x, shape, from),
                                         one_step_plan(shape, from, to, step));
  EXPECT_THAT(local(b, 1), ElementsAre(0, 1));  // device 1 is first on the reversed mesh
  EXPECT_THAT(local(b, 0), ElementsAre(2, 3));
}

TEST_F(ExecuteReshardTest, APlanWithoutStepsCopiesTheBlocks) {
  const Shape shape = {8};
  const std::vector<float> x = iota_values(shape);
  const NamedSharding s = sharding(x4_, "P('x')");
  const ReshardPlan plan{shape, s, s, "", "", {}, 0};
  const ShardedArray a = ShardedArray::device_put(*rt_, x, shape, s);
  const ShardedArray b = execute_reshard(*rt_, a, plan);
  expect_blocks(b, x);
  EXPECT_NE(b.local_data(0).data(), a.local_data(0).data());
}

TEST_F(ExecuteReshardTest, APlanForAnotherArrayIsRefused) {
  const NamedSharding s = sharding(x4_, "P('x')");
  const ReshardPlan plan{{12}, s, s, "", "", {}, 0};
  const ShardedArray a = ShardedArray::device_put(*rt_, iota_values({8}), {8}, s);
  expect_invalid([&] { execute_reshard(*rt_, a, plan); }, {"f32(12,)"});
}

TEST_F(ExecuteReshardTest, CachedCommunicatorsGiveTheSameResultsAndTimings) {
  const Shape shape = {8, 3};
  const std::vector<float> x = iota_values(shape);
  const NamedSharding from = sharding(x4_, "P('x')"), to = sharding(x4_, "P()");
  ReshardPlan plan = one_step_plan(
      shape, from, to,
      make_step(ReshardOpKind::kAllGather, x4_, {"x"}, "P('x')", "P()", {2, 3}, /*dim=*/0));
  plan.steps.push_back(
      make_step(ReshardOpKind::kSlice, x4_, {"x"}, "P()", "P('x')", {2, 3}, /*dim=*/0));
  plan.target = from;
  const ShardedArray a = ShardedArray::device_put(*rt_, x, shape, from);
  ReshardCommunicatorCache cache(*rt_);
  for (int run = 0; run < 3; ++run) {
    std::vector<ReshardStepTiming> timings;
    expect_blocks(execute_reshard(*rt_, a, plan, &timings, &cache), x);
    ASSERT_EQ(timings.size(), 2u);
    EXPECT_GE(timings[0].wall_seconds, timings[0].collective_seconds);
    EXPECT_EQ(timings[1].collective_seconds, 0.0);  // the slice is local
  }
}

// Typed arrays: blocks move as bytes of their dtype, and padding and partial addends use the
// identity of the reduce op in that dtype. References are computed on the host.

std::vector<BFloat16> bf16_values(const Shape& shape) {
  std::vector<BFloat16> x(static_cast<size_t>(num_elements_of(shape)));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float_to_bf16(0.25f * static_cast<float>(i) - 3);
  return x;
}

std::vector<int32_t> s32_values(const Shape& shape) {
  std::vector<int32_t> x(static_cast<size_t>(num_elements_of(shape)));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>(i * 7919) - 100000;
  return x;
}

/// `y`, an (8, 8) array, put on `x4` as P('x', None) and moved to P(None, 'x') by one all-to-all.
template <typename T>
ShardedArray rows_to_columns(Runtime& rt, const Mesh& x4, const std::vector<T>& y) {
  const Shape sq = {8, 8};
  const NamedSharding rows = sharding(x4, "P('x', None)"), cols = sharding(x4, "P(None, 'x')");
  return execute_reshard(rt, ShardedArray::device_put(rt, y, sq, rows),
                         one_step_plan(sq, rows, cols,
                                       make_step(ReshardOpKind::kAllToAll, x4, {"x"},
                                                 "P('x', None)", "P(None, 'x')", {2, 8},
                                                 /*dim=*/0, /*split_dim=*/1)));
}

TEST_F(ExecuteReshardTest, Bf16UnevenAllGatherAndAllToAllMatchTheHost) {
  const Shape shape = {5, 8};
  const std::vector<BFloat16> x = bf16_values(shape);
  const NamedSharding from = sharding(x4_, "P('x')"), to = sharding(x4_, "P()");
  const ShardedArray a = ShardedArray::device_put(*rt_, x, shape, from);
  const ShardedArray g = execute_reshard(
      *rt_, a,
      one_step_plan(shape, from, to,
                    make_step(ReshardOpKind::kAllGather, x4_, {"x"}, "P('x')", "P()", {2, 8}, 0)));
  EXPECT_EQ(g.dtype(), ElementType::kBf16);
  for (int dev = 0; dev < 4; ++dev) EXPECT_EQ(local_of<BFloat16>(g, dev), x) << "device " << dev;

  const std::vector<BFloat16> y = bf16_values({8, 8});
  const ShardedArray t = rows_to_columns(*rt_, x4_, y);
  expect_blocks(t, y);
  EXPECT_EQ(t.gather<BFloat16>(), y);
}

// bf16 addends are folded in bf16, rounding after each step, as the collectives do: 256 + 1 is
// 257, which bf16 (8 significant bits) rounds to 256 (ties to even), and 256 + 3 = 259 -> 260.
TEST_F(ExecuteReshardTest, Bf16AllReduceRoundsInBf16) {
  const Shape shape = {2};
  const NamedSharding from = sharding(x2_, "P(unreduced={'x'})"), to = sharding(x2_, "P()");
  std::vector<DeviceBuffer> buffers;
  const float addends[2][2] = {{256, 256}, {1, 3}};
  for (int dev : {0, 1}) {
    buffers.push_back(rt_->allocate(dev, 4, "test/addend"));
    for (int e = 0; e < 2; ++e) buffers.back().as<BFloat16>()[e] = float_to_bf16(addends[dev][e]);
  }
  const ShardedArray a =
      ShardedArray::from_buffers(shape, from, std::move(buffers), ElementType::kBf16);
  const ShardedArray b = execute_reshard(
      *rt_, a,
      one_step_plan(
          shape, from, to,
          make_step(ReshardOpKind::kAllReduce, x2_, {"x"}, "P(unreduced={'x'})", "P()", {2})));
  for (int dev : {0, 1}) {
    const std::vector<BFloat16> got = local_of<BFloat16>(b, dev);
    EXPECT_EQ(bf16_to_float(got[0]), 256.0f);
    EXPECT_EQ(bf16_to_float(got[1]), 260.0f);
  }
}

TEST_F(ExecuteReshardTest, F16AllToAllMatchesTheHost) {
  std::vector<Float16> y(64);
  for (size_t i = 0; i < y.size(); ++i) y[i] = float_to_f16(0.125f * static_cast<float>(i) - 2);
  const ShardedArray t = rows_to_columns(*rt_, x4_, y);
  EXPECT_EQ(t.dtype(), ElementType::kF16);
  expect_blocks(t, y);
}

TEST_F(ExecuteReshardTest, S32SliceGatherAndPermuteMatchTheHost) {
  const Shape shape = {6, 3};
  const std::vector<int32_t> x = s32_values(shape);
  const NamedSharding rep = sharding(x4_, "P()"), split = sharding(x4_, "P('x')");
  // Slice: six rows over four devices are blocks of 2, 2, 2 and 0 rows.
  const ShardedArray s = execute_reshard(
      *rt_, ShardedArray::device_put(*rt_, x, shape, rep),
      one_step_plan(shape, rep, split,
                    make_step(ReshardOpKind::kSlice, x4_, {"x"}, "P()", "P('x')", {2, 3}, 0)));
  EXPECT_EQ(s.dtype(), ElementType::kS32);
  expect_blocks(s, x);
  const ShardedArray g = execute_reshard(
      *rt_, s,
      one_step_plan(shape, split, rep,
                    make_step(ReshardOpKind::kAllGather, x4_, {"x"}, "P('x')", "P()", {2, 3}, 0)));
  expect_blocks(g, x);

  const Mesh reversed({2}, {"x"}, {1, 0});
  const NamedSharding from = sharding(x2_, "P('x')"), to = sharding(reversed, "P('x')");
  ReshardStep step =
      make_step(ReshardOpKind::kCollectivePermute, x2_, {"x"}, "P('x')", "P('x')", {3, 3});
  step.pairs = {{0, 1}, {1, 0}};
  const ShardedArray p = execute_reshard(*rt_, ShardedArray::device_put(*rt_, x, shape, from),
                                         one_step_plan(shape, from, to, step));
  expect_blocks(p, x);
  EXPECT_EQ(p.gather<int32_t>(), x);
}

// A max reduce-scatter of uneven s32 blocks pads with the lowest s32, which never wins; sums
// wrap modulo 2^32.
TEST_F(ExecuteReshardTest, S32PartialReductionsUseTheS32Identity) {
  const Shape shape = {3};
  const NamedSharding max_from = sharding(x2_, "P(unreduced={'x'}, reduce_op='max')");
  const NamedSharding to = sharding(x2_, "P('x')");
  std::vector<std::vector<int32_t>> addends = {{-5, -9, -1}, {-7, -2, -3}};
  auto partial = [&](const NamedSharding& s) {
    std::vector<DeviceBuffer> buffers;
    for (int dev : {0, 1}) {
      const std::vector<int32_t>& v = addends[static_cast<size_t>(dev)];
      buffers.push_back(rt_->allocate(dev, v.size() * sizeof(int32_t), "test/addend"));
      std::copy(v.begin(), v.end(), buffers.back().as<int32_t>().begin());
    }
    return ShardedArray::from_buffers(shape, s, std::move(buffers), ElementType::kS32);
  };
  ReshardStep rs = make_step(ReshardOpKind::kReduceScatter, x2_, {"x"},
                             "P(unreduced={'x'}, reduce_op='max')", "P('x')", {4}, /*dim=*/0);
  rs.reduce_op = ReduceOp::kMax;
  const ShardedArray m =
      execute_reshard(*rt_, partial(max_from), one_step_plan(shape, max_from, to, rs));
  EXPECT_THAT(local_of<int32_t>(m, 0), ElementsAre(-5, -2));
  EXPECT_THAT(local_of<int32_t>(m, 1), ElementsAre(-1));

  addends = {{2147483647, 1, 2}, {1, 2, 3}};
  const NamedSharding sum_from = sharding(x2_, "P(unreduced={'x'})");
  const ShardedArray s = execute_reshard(
      *rt_, partial(sum_from),
      one_step_plan(
          shape, sum_from, sharding(x2_, "P()"),
          make_step(ReshardOpKind::kAllReduce, x2_, {"x"}, "P(unreduced={'x'})", "P()", {3})));
  EXPECT_THAT(local_of<int32_t>(s, 1), ElementsAre(std::numeric_limits<int32_t>::min(), 3, 5));
}

TEST_F(ExecuteReshardTest, S64MakePartialFillsTheS64Identity) {
  const Shape shape = {2};
  const NamedSharding from = sharding(x2_, "P()");
  const NamedSharding to = sharding(x2_, "P(unreduced={'x'}, reduce_op='min')");
  ReshardStep step = make_step(ReshardOpKind::kMakePartial, x2_, {"x"}, "P()",
                               "P(unreduced={'x'}, reduce_op='min')", {2});
  step.reduce_op = ReduceOp::kMin;
  const std::vector<int64_t> x = {int64_t{1} << 40, -3};
  const ShardedArray b = execute_reshard(*rt_, ShardedArray::device_put(*rt_, x, shape, from),
                                         one_step_plan(shape, from, to, step));
  EXPECT_EQ(local_of<int64_t>(b, 0), x);
  const int64_t top = std::numeric_limits<int64_t>::max();
  EXPECT_THAT(local_of<int64_t>(b, 1), ElementsAre(top, top));
  EXPECT_EQ(b.gather<int64_t>(), x);
}

}  // namespace
}  // namespace vtpu
