// Reshard planning (planner/reshard_planner.h) without running anything: the default cost model,
// the search's bounds, the errors and the printed plan. tests/planner/reshard_test.cc runs plans.
#include "vtpu/planner/reshard_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/sharding/expect_invalid.h"
#include "vtpu/common/error.h"
#include "vtpu/sharding/block_copy.h"

namespace vtpu {
namespace {

// The uniform model (alpha 50 us, beta 5 ns/B, all-to-all factor 3).
const ReshardCostModel kTable{};

using Shape = std::vector<int64_t>;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using vtpu::testing::expect_invalid;

NamedSharding sharding(const Mesh& mesh, const std::string& spec) {
  return NamedSharding(mesh, PartitionSpec::parse(spec));
}

std::vector<ReshardOpKind> ops_of(const ReshardPlan& plan) {
  std::vector<ReshardOpKind> ops;
  for (const ReshardStep& s : plan.steps) ops.push_back(s.op);
  return ops;
}

/// Axis names a0, a1, ... for `sizes`.
Mesh numbered_mesh(const std::vector<int64_t>& sizes) {
  std::vector<std::string> names;
  for (size_t i = 0; i < sizes.size(); ++i) names.push_back("a" + std::to_string(i));
  return Mesh(sizes, names);
}

// Regression: plan_reshard's default model was CostModel::this_machine() unscaled, while `vtpu
// reshard` prices for_cores(mesh size); on a mesh of more cores than the shipped profile's 2 host
// CPUs the library priced the same reshard below the CLI. The default is now the CLI's model.
TEST(ReshardCost, TheDefaultModelPricesTheMeshsCoresAsTheCliDoes) {
  const Mesh mesh({2, 4}, {"x", "y"});
  const Shape shape = {64, 64};
  const NamedSharding from = sharding(mesh, "P('x')"), to = sharding(mesh, "P()");
  const ReshardPlan by_default = plan_reshard(shape, from, to);
  const ReshardPlan unscaled = plan_reshard(shape, from, to, CostModel::this_machine());
  const ReshardPlan as_cli = plan_reshard(shape, from, to, CostModel::this_machine().for_cores(8));
  EXPECT_EQ(by_default.cost_model, as_cli.cost_model);
  EXPECT_NE(by_default.cost_model, unscaled.cost_model);
  ASSERT_EQ(CostModel::this_machine().profile().host_cpus, 2);
  ASSERT_THAT(ops_of(by_default), ElementsAre(ReshardOpKind::kAllGather));
  ASSERT_THAT(ops_of(unscaled), ElementsAre(ReshardOpKind::kAllGather));
  EXPECT_EQ(by_default.total_estimated_seconds(), as_cli.total_estimated_seconds());
  // One all-gather over x: 4 groups of 2 cores, priced by the 2-core fit. Unscaled it is the fit
  // as measured (s(2) / s(2) = 1); with the 8 cores of the mesh busy, s(8) / s(2) = (8 / 2) / 1.
  const double measured = unscaled.total_estimated_seconds();
  EXPECT_GT(measured, 0);
  EXPECT_NEAR(by_default.total_estimated_seconds(), 4 * measured, 1e-9 * measured);
  EXPECT_NE(by_default.to_string().find("8 virtual cores on 2 host CPUs: work x 4"),
            std::string::npos)
      << by_default.to_string();
}

// ---- meshes of many axes -------------------------------------------

// The subsets' bound: past kMaxAllReduceSubsetAxes unreduced axes (of size > 1) the search no
// longer tries every subset. A sum over 12 axes of size 2 (4096 devices; planned, not run) to P()
// is one all-reduce over all 12 under the uniform model (2 alpha plus bytes; any chain costs >= 4
// alpha).
TEST(ReshardManyAxes, AllReduceSubsetsAreBoundedPastTenAxes) {
  const Mesh mesh = numbered_mesh(std::vector<int64_t>(12, 2));
  ASSERT_GT(12u, kMaxAllReduceSubsetAxes);
  const NamedSharding from(mesh, PartitionSpec({}, mesh.axis_names()));
  const ReshardPlan plan = plan_reshard({4}, from, sharding(mesh, "P()"), kTable);
  ASSERT_THAT(ops_of(plan), ElementsAre(ReshardOpKind::kAllReduce)) << plan.to_string();
  EXPECT_EQ(plan.steps[0].axes.size(), 12u);
  EXPECT_EQ(plan.steps[0].replica_groups.size(), 1u);
  // Before: 2^12 - 1 = 4095 all-reduce moves from the start state, each a new state.
  EXPECT_LT(plan.search_states, 4095u);
}

// ---- bad input ------------------------------------------------------------------------------

TEST(ReshardErrors, BadSpecsAndMeshes) {
  const Mesh mesh({2, 2, 2}, {"x", "y", "z"});
  expect_invalid([&] { sharding(mesh, "P('x', 'x')"); }, {"'x'", "twice", "entries 0 and 1"});
  expect_invalid([&] { sharding(mesh, "P('x', unreduced={'x'})"); },
                 {"'x'", "twice", "entry 0 and unreduced"});
  expect_invalid([&] { sharding(mesh, "P('w')"); }, {"'w'", "mesh axes: 'x', 'y', 'z'"});
  expect_invalid([&] { sharding(mesh, "P(unreduced={'w'})"); }, {"'w'", "unreduced"});
  expect_invalid(
      [&] { plan_reshard({8}, sharding(mesh, "P('x')"), sharding(mesh, "P('x', 'y')")); },
      {"2 entries", "rank 1"});
  expect_invalid(
      [&] { plan_reshard({8}, sharding(mesh, "P('x')"), sharding(Mesh({8}, {"x"}), "P('x')")); },
      {"reshard target is on Mesh(x=8)", "Mesh(x=2, y=2, z=2)", "same mesh"});
  expect_invalid(
      [&] {
        plan_reshard(
            {8}, sharding(mesh, "P('x')"),
            sharding(Mesh({2, 2, 2}, {"x", "y", "z"}, {0, 1, 2, 3, 4, 5, 6, 9}), "P('x')"));
      },
      {"same mesh"});
  // Regression: the error named the padded buffer's shape alone and
  // said "expected fewer". 2^60 = 1152921504606846976 = 1 (mod 7), since 2^3 = 1 (mod 7), so the
  // reduce-scatter buffer over 7 shards is padded by 6 to 1152921504606846982.
  const Mesh seven({7}, {"x"});
  const int64_t two60 = int64_t{1} << 60;
  expect_invalid(
      [&] {
        plan_reshard({two60}, sharding(seven, "P(unreduced={'x'})"), sharding(seven, "P('x')"));
      },
      {"array shape (1152921504606846976,) needs a collective buffer of shape "
       "(1152921504606846982,) on its mesh, which has more than 2^60 elements (expected at most "
       "2^60 elements, padding to a multiple of the shard count included)"});
  // The same array over 4096 = 2^12 shards needs no padding and plans.
  const Mesh big({4096}, {"x"});
  EXPECT_EQ(plan_reshard({two60}, sharding(big, "P(unreduced={'x'})"), sharding(big, "P('x')"))
                .steps.front()
                .buffer_shape,
            (std::vector<int64_t>{two60}));
  expect_invalid([] { PartitionSpec::parse("P('x', reduce_op='mean')"); },
                 {"reduce op", "position"});
  expect_invalid([] { PartitionSpec::parse("'x', unreduced={'y'}"); }, {"only inside P(...)"});
  // A reduce op with nothing unreduced: an error at the keyword, not dropped.
  expect_invalid([] { PartitionSpec::parse("P('x', reduce_op='max')"); },
                 {"unreduced={...}", "position 7", "this spec has none"});
  expect_invalid([] { PartitionSpec::parse("P('x', unreduced={}, reduce_op='min')"); },
                 {"unreduced={...}", "position 21"});
}

TEST(ReshardSpecText, UnreducedRoundTrips) {
  const PartitionSpec p = PartitionSpec::parse("P('x', unreduced={'z', 'y'}, reduce_op='max')");
  EXPECT_EQ(p.unreduced(), (std::vector<std::string>{"y", "z"}));
  EXPECT_EQ(p.reduce_op(), ReduceOp::kMax);
  EXPECT_EQ(p.to_string(), "P('x', unreduced={'y', 'z'}, reduce_op='max')");
  EXPECT_EQ(PartitionSpec::parse(p.to_string()), p);
  EXPECT_EQ(PartitionSpec::parse("P(unreduced={'x'})").to_string(), "P(unreduced={'x'})");
  EXPECT_FALSE(PartitionSpec::parse("P('x')") == PartitionSpec::parse("P('x', unreduced={'y'})"));
}

TEST(ReshardPlanText, PrintsStepsWithoutRunning) {
  const Mesh mesh({2, 2, 2}, {"x", "y", "z"});
  const ReshardPlan plan =
      plan_reshard({8, 8}, sharding(mesh, "P('z', ('x', 'y'))"),
                   sharding(mesh, "P(None, ('x', 'y'))"), ReshardCostModel{1e-5, 1e-9, 1.0});
  const std::string text = plan.to_string();
  EXPECT_THAT(text, ::testing::HasSubstr("all_gather"));
  EXPECT_THAT(text, ::testing::HasSubstr("(4, 2)"));
  // B = 8 * 2 * 4 bytes = 64 gathered; (n-1)/n * B = 32 bytes sent; 1e-5 + 1e-9 * 32 s.
  EXPECT_EQ(plan.steps[0].sent_bytes_per_core, 32u);
  EXPECT_DOUBLE_EQ(plan.steps[0].estimated_seconds, 1e-5 + 1e-9 * 32);
}

}  // namespace
}  // namespace vtpu
