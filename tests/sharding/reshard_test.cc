// Reshard execution (sharding/reshard.h) on plans written by hand, one step kind at a time: each
// leaves every device with exactly its target block, at its logical shape. Planning is tested in
// tests/planner/reshard_planner_test.cc.
#include "vtpu/sharding/reshard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/sharding/expect_invalid.h"
#include "tests/sharding/naive_block.h"
#include "tests/sharding/partial_array.h"
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

/// Every device of `result` holds exactly its block of `expected`, at its logical shape.
void expect_blocks(const ShardedArray& result, const std::vector<float>& expected) {
  const Shape& shape = result.global_shape();
  for (int dev : result.sharding().mesh().devices()) {
    const std::vector<IndexRange> box = result.sharding().index_ranges(dev, shape);
    EXPECT_EQ(local(result, dev), naive_block(expected, shape, box)) << "device " << dev;
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

}  // namespace
}  // namespace vtpu
