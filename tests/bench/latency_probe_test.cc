#include "vtpu/bench/latency_probe.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/test_data.h"
#include "vtpu/bench/estimate_report.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/common/error.h"
#include "vtpu/planner/auto_planner.h"
#include "vtpu/planner/cost_model.h"
#include "vtpu/planner/model_graph.h"
#include "vtpu/planner/plan_file.h"

namespace vtpu {
namespace {

// A host profile (the fixed one of tests/data) whose collectives are replaced by hand-made fits.
HardwareProfile host_profile_with(std::map<std::string, std::vector<CollectiveFit>> fits) {
  HardwareProfile p = HardwareProfile::get(testing::fixed_profile_path());
  p.collectives = std::move(fits);
  p.validate();
  return p;
}

CollectiveFit curve_fit(int n, std::vector<std::pair<double, double>> points) {
  CollectiveFit f;
  f.group_size = n;
  f.alpha_seconds = points.front().second;
  f.beta_seconds_per_byte = 1e-10;
  f.measured = std::move(points);
  return f;
}

TEST(LatencyProbeTest, ProfileRowSecondsReadsTheCurveAtTheRowsBOrTheFormula) {
  const CollectiveFit f = curve_fit(2, {{1024, 1e-6}, {8192, 2e-6}});
  // all_gather: B = S = 4096, between 1024 and 8192: 1 us + 3072 / 7168 us.
  EXPECT_NEAR(profile_row_seconds("all_gather", f, 4096), 1e-6 + 3072.0 / 7168.0 * 1e-6, 1e-15);
  // all_to_all: B = n S = 8192, the last point.
  EXPECT_NEAR(profile_row_seconds("all_to_all", f, 4096), 2e-6, 1e-15);
  // No curve: the formula. all_reduce on 2 cores: 2 alpha + beta x, x = 2 (n-1)/n S = S.
  CollectiveFit line;
  line.group_size = 2;
  line.alpha_seconds = 1e-6;
  line.beta_seconds_per_byte = 1e-9;
  EXPECT_NEAR(profile_row_seconds("all_reduce", line, 1000), 2e-6 + 1e-6, 1e-15);
  // reduce_scatter on 4 cores: alpha + beta (n-1)/n S.
  line.group_size = 4;
  EXPECT_NEAR(profile_row_seconds("reduce_scatter", line, 4000), 1e-6 + 3e-6, 1e-15);
  EXPECT_THROW(profile_row_seconds("broadcast", line, 4000), InvalidArgumentError);
}

TEST(LatencyProbeTest, ShiftMovesEachProbedCurveAndAlphaByTheDifference) {
  const HardwareProfile p = host_profile_with(
      {{"all_gather", {curve_fit(2, {{1024, 1e-6}, {8192, 2e-6}}), curve_fit(8, {{1024, 40e-6}})}},
       {"all_reduce", {curve_fit(2, {{1024, 0.5e-6}, {8192, 1.5e-6}})}}});
  std::vector<CollectiveProbe> probes(2);
  probes[0] = {"all_gather", 2, 4096, 1.4e-6, 3.0e-6, {}};  // +1.6 us
  probes[1] = {"all_reduce", 2, 4096, 1.0e-6, 0.2e-6, {}};  // -0.8 us
  const HardwareProfile s = shift_collectives(p, probes);
  const CollectiveFit& ag2 = s.collectives.at("all_gather")[0];
  EXPECT_NEAR(ag2.measured[0].second, 2.6e-6, 1e-15);
  EXPECT_NEAR(ag2.measured[1].second, 3.6e-6, 1e-15);
  EXPECT_NEAR(ag2.alpha_seconds, 1e-6 + 1.6e-6, 1e-15);
  EXPECT_EQ(ag2.beta_seconds_per_byte, 1e-10);
  // The 8-core fit had no probe: unchanged.
  EXPECT_EQ(s.collectives.at("all_gather")[1].measured[0].second, 40e-6);
  // all_reduce: the first point would go below 0 and is clamped to 1 ns; alpha moves by half.
  const CollectiveFit& ar2 = s.collectives.at("all_reduce")[0];
  EXPECT_NEAR(ar2.measured[0].second, 1e-9, 1e-18);
  EXPECT_NEAR(ar2.measured[1].second, 0.7e-6, 1e-15);
  EXPECT_NEAR(ar2.alpha_seconds, 0.1e-6, 1e-15);  // 0.5 us - 0.8 / 2 us
  // Through the cost model: a 2-core all-gather of B inside the curve costs exactly 1.6 us more.
  const CostModel before(p), after(s);
  const double b = 3000;
  EXPECT_NEAR(after.collective(CollectiveKind::kAllGather, b, {0}, {2}).seconds -
                  before.collective(CollectiveKind::kAllGather, b, {0}, {2}).seconds,
              1.6e-6, 1e-15);
}

// A plan of the digits MLP on a mesh (default: 2 cores on axis x), as `vtpu plan --emit` writes
// it, read back.
TrainPlan mlp_plan(const HardwareProfile& hw, const std::string& strategy,
                   const std::vector<int64_t>& shape = {2},
                   const std::vector<std::string>& axes = {"x"}) {
  const ModelGraph model =
      ModelGraph::load_json_file(std::string(VTPU_SOURCE_DIR) + "/examples/models/mlp.json");
  // With the trainer's constraints, as `vtpu plan --emit` plans it (the plans vtpu train runs).
  AutoShardingPlan plan = plan_auto_sharding(model, shape, axes, CostModel(hw), 0,
                                             plan_constraints("mlp", shape, axes));
  plan.choose(strategy);
  nlohmann::json j = plan.to_json();
  j["estimate"]["hardware"] = hw.name;
  return parse_train_plan(j, "mlp2.json");
}

// The report of a run of `plan` on its cores that measured exactly the plan's estimate, with the
// collective probe run after it (2 timed calls per fit: the tests check which fits, not times).
EstimateReport probed_report(const TrainPlan& plan) {
  MeasuredRun m;
  m.num_cores = static_cast<int>(plan.num_cores());
  m.steps = 3;
  m.median_step_seconds = plan.estimate->step_seconds;
  m.peak_hbm_bytes_per_core = 1000;
  EstimateReport r = compare_estimate(*plan.estimate, m);
  EXPECT_TRUE(r.step_comparable);
  CollectiveProbeOptions quick;
  quick.iters = 2;
  quick.warmup = 0;
  add_collective_probe(r, plan, quick);
  return r;
}

TEST(LatencyProbeTest, ReestimateMovesThePlansEstimateByWhatTheShiftChanges) {
  const HardwareProfile p = HardwareProfile::get(testing::fixed_profile_path());
  ASSERT_FALSE(p.collectives.empty()) << "the fixed profile is calibrated";
  const TrainPlan dp = mlp_plan(p, "dp(x)");
  ASSERT_TRUE(dp.estimate);
  // The plan carries the profile it was priced with, as the probe and the report use it.
  ASSERT_TRUE(dp.estimate->profile);
  EXPECT_EQ(dp.estimate->profile->to_json(), p.to_json());
  // No shift: the plan's own estimate, exactly.
  const std::optional<double> same = reestimate_step_seconds(dp, p, p);
  ASSERT_TRUE(same);
  EXPECT_DOUBLE_EQ(*same, dp.estimate->step_seconds);
  // Data parallel on 2 cores communicates once per step: the gradient bucket's all-reduce. A
  // shift of +2 us on the 2-core all-reduce adds 2 us to the step, and a shift on the all-gather
  // (which data parallel does not call) adds nothing.
  CollectiveProbe ar{"all_reduce", 2, 4096, 1e-6, 3e-6, {}};
  const std::optional<double> slower = reestimate_step_seconds(dp, p, shift_collectives(p, {ar}));
  ASSERT_TRUE(slower);
  EXPECT_NEAR(*slower - dp.estimate->step_seconds, 2e-6, 1e-12);
  CollectiveProbe ag{"all_gather", 2, 4096, 1e-6, 3e-6, {}};
  EXPECT_NEAR(*reestimate_step_seconds(dp, p, shift_collectives(p, {ag})),
              dp.estimate->step_seconds, 1e-15);
  // A plan without a model graph (hand-written) is not re-estimated.
  TrainPlan bare = dp;
  bare.model_graph.reset();
  EXPECT_FALSE(reestimate_step_seconds(bare, p, p));
}

// Regression: a dp(x) plan on 8 cores, which runs only 8-core all-reduces, was
// probed on all four ops on 2, 4 and 8 cores. The fits a strategy prices, worked from what each
// strategy runs per step (docs/PLANNER.md): data parallel one gradient all-reduce over its data
// group; Megatron tensor parallel the all-reduce of the logits (the row-parallel W2's partial
// sums) over its tensor group; FSDP all-gathers the parameters, reduce-scatters the gradients and
// all-reduces the loss over the FSDP group; dp x tp both all-reduces, each over its own group.
TEST(LatencyProbeTest, OnlyTheFitsThePlansStrategyPricesAreProbed) {
  const HardwareProfile p = HardwareProfile::get(testing::fixed_profile_path());
  for (const char* op : {"all_gather", "reduce_scatter", "all_reduce", "all_to_all"}) {
    ASSERT_EQ(p.collectives.at(op).size(), 3u)
        << op << ": the fixed profile's fits on 2, 4 and 8 cores";
  }
  using Fits = std::set<CollectiveFitId>;
  EXPECT_EQ(fits_priced_by(mlp_plan(p, "dp(x)", {8}), p), Fits({{"all_reduce", 8}}));
  EXPECT_EQ(fits_priced_by(mlp_plan(p, "dp(x)", {2}), p), Fits({{"all_reduce", 2}}));
  EXPECT_EQ(fits_priced_by(mlp_plan(p, "tp(x)", {8}), p), Fits({{"all_reduce", 8}}));
  EXPECT_EQ(fits_priced_by(mlp_plan(p, "fsdp(x)", {8}), p),
            Fits({{"all_gather", 8}, {"reduce_scatter", 8}, {"all_reduce", 8}}));
  EXPECT_EQ(fits_priced_by(mlp_plan(p, "dp(data)+tp(model)", {2, 4}, {"data", "model"}), p),
            Fits({{"all_reduce", 2}, {"all_reduce", 4}}));
  // One core runs no collective; a plan the planner cannot price again may use any fit.
  EXPECT_EQ(fits_priced_by(mlp_plan(p, "single core", {1}), p), Fits());
  TrainPlan bare = mlp_plan(p, "dp(x)", {8});
  bare.model_graph.reset();
  EXPECT_FALSE(fits_priced_by(bare, p).has_value());
  // The probe measures only those fits.
  CollectiveProbeOptions o;
  o.iters = 5;
  o.warmup = 1;
  o.only = Fits({{"all_reduce", 4}});
  const std::vector<CollectiveProbe> one = probe_collectives(p, 8, o);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].op, "all_reduce");
  EXPECT_EQ(one[0].group_size, 4);
}

// Regression (a recalibrated profile): the probe priced the plan again with an
// unconstrained search, which may give a tensor-parallel strategy replicated layers and no
// collective at all when its all-reduce is dear; then no fit moved it, nothing was probed and the
// report had no probed row, though the run does all-reduce the logits. Made dear here by hand
// (every 8-core collective 1 ms slower everywhere): the unconstrained tp(x) replicates fc1 and fc2
// and communicates nothing, the plan the trainer runs (column, sharded, row) all-reduces the
// logits, and it is that plan whose fit is probed and whose estimate a probe moves.
TEST(LatencyProbeTest, ThePlanIsPricedWithTheShardingsItRunsNotAFreeSearch) {
  const HardwareProfile fixed = HardwareProfile::get(testing::fixed_profile_path());
  std::vector<CollectiveProbe> dear;
  for (const char* op : {"all_gather", "reduce_scatter", "all_reduce", "all_to_all"}) {
    dear.push_back({op, 8, 4096, 0.0, 1e-3, {}});
  }
  const HardwareProfile p = shift_collectives(fixed, dear);
  const ModelGraph model =
      ModelGraph::load_json_file(std::string(VTPU_SOURCE_DIR) + "/examples/models/mlp.json");
  AutoShardingPlan free = plan_auto_sharding(model, {8}, {"x"}, CostModel(p), 0, {});
  free.choose("tp(x)");
  const PlanCandidate& unconstrained = free.candidates[static_cast<size_t>(free.chosen())];
  EXPECT_EQ(unconstrained.layers.front().choice, "replicated");
  EXPECT_EQ(unconstrained.layers.back().choice, "replicated");
  EXPECT_EQ(unconstrained.comm_seconds, 0.0);
  const TrainPlan plan = mlp_plan(p, "tp(x)", {8});
  ASSERT_EQ(plan.layers.size(), 3u);
  EXPECT_EQ(plan.layers[0].second, "column");
  EXPECT_EQ(plan.layers[2].second, "row");
  EXPECT_EQ(fits_priced_by(plan, p), std::set<CollectiveFitId>({{"all_reduce", 8}}));
  // A probe 2 us slower than the profile moves the estimate by the one all-reduce's 2 us.
  const CollectiveProbe slower{"all_reduce", 8, 4096, 1e-5, 1.2e-5, {}};
  const std::optional<double> moved =
      reestimate_step_seconds(plan, p, shift_collectives(p, {slower}));
  ASSERT_TRUE(moved);
  EXPECT_NEAR(*moved - plan.estimate->step_seconds, 2e-6, 1e-12);
}

// Regression: `vtpu plan` warned that 4-core groups were priced from
// 2-core fits, but the trainer's report on the run of that plan judged it without a word. The
// report now carries the same warning for the plan it ran (only for the collectives the plan's
// strategy prices: dp(x) on 4 cores all-reduces, so the 2-core all-gather's fit is not named).
TEST(LatencyProbeTest, TheReportSaysWhichGroupsArePricedFromAnotherCoreCount) {
  HardwareProfile p = HardwareProfile::get(testing::fixed_profile_path());
  for (auto& [op, fits] : p.collectives) {
    std::erase_if(fits, [](const CollectiveFit& f) { return f.group_size != 2; });
  }
  p.validate();
  const EstimateReport r = probed_report(mlp_plan(p, "dp(x)", {4}));
  ASSERT_EQ(r.warnings.size(), 1u) << r.to_string();
  // The warning names the groups, the fit used, its op, the scaling (4 / 2 = 2) and the fix.
  for (const char* value : {"4-core", "2-core", "all_reduce", "s(4) / s(2) = 2", "--cores 2,4"}) {
    EXPECT_NE(r.warnings[0].find(value), std::string::npos) << value << " in " << r.warnings[0];
  }
  EXPECT_EQ(r.warnings[0].find("all_gather"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.to_string().find(r.warnings[0]), std::string::npos);
  EXPECT_EQ(r.to_json()["warnings"][0], r.warnings[0]);
  // With fits on 2, 4 and 8 cores there is nothing to say.
  const HardwareProfile fixed = HardwareProfile::get(testing::fixed_profile_path());
  const EstimateReport s = probed_report(mlp_plan(fixed, "dp(x)", {4}));
  EXPECT_TRUE(s.warnings.empty()) << s.to_string();
}

// Regression: an 8-core run whose plan's profile had only a 1024-core
// all-reduce fit started a 1024-core probe after the run (47.6 s, 922 MB, load average 504), and
// with a 2^20-core fit the probe failed with "num_cores is 1048576 (expected 1..1024)", naming no
// fit. Here a 4-core dp(x) run (one 4-core all-reduce per step) on profiles whose only all-reduce
// fit is for 8 cores (cheap enough to run if the rule broke) and for 2^20 cores: the fit prices
// the run's group but is not probed; the report names it and says why, in text and JSON.
TEST(LatencyProbeTest, AFitForMoreCoresThanTheRunIsNotProbedAndTheReportSaysWhy) {
  for (const int n : {8, 1 << 20}) {
    CollectiveFit fit;
    fit.group_size = n;
    fit.alpha_seconds = 1e-6;
    fit.beta_seconds_per_byte = 1e-10;
    const HardwareProfile p = host_profile_with({{"all_reduce", {fit}}});
    const TrainPlan plan = mlp_plan(p, "dp(x)", {4});
    ASSERT_EQ(fits_priced_by(plan, p), std::set<CollectiveFitId>({{"all_reduce", n}}));
    const EstimateReport r = probed_report(plan);
    EXPECT_TRUE(r.probes.empty()) << r.to_string();
    EXPECT_EQ(r.probed_step_seconds, 0.0);
    EXPECT_TRUE(r.probe_error.empty()) << r.probe_error;
    // The reason names the fit, the cores a probe would start and the run's 4.
    ASSERT_EQ(r.not_probed.size(), 1u);
    const std::string reason = r.not_probed[0].reason;
    EXPECT_TRUE(testing::names_all(reason, {"all_reduce", std::to_string(n) + "-core",
                                            std::to_string(n) + " virtual cores", "4"}));
    const std::string text = r.to_string();
    EXPECT_NE(text.find(reason), std::string::npos) << text;
    EXPECT_EQ(text.find("with collectives probed now"), std::string::npos) << text;
    EXPECT_EQ(text.find("not run"), std::string::npos) << text;
    const nlohmann::json j = r.to_json()["probe"];
    EXPECT_EQ(j["rows"], nlohmann::json::array()) << j;
    ASSERT_EQ(j["not_probed"].size(), 1u) << j;
    EXPECT_EQ(j["not_probed"][0]["op"], "all_reduce");
    EXPECT_EQ(j["not_probed"][0]["group_size"], n);
    EXPECT_EQ(j["not_probed"][0]["reason"], reason);
    EXPECT_FALSE(j.contains("step_seconds")) << j;
  }
}

TEST(LatencyProbeTest, ProbesEveryFitUpToTheRunsCoresAtTheRowSize) {
  const HardwareProfile p = host_profile_with(
      {{"all_gather", {curve_fit(2, {{1024, 1e-6}, {8192, 2e-6}}), curve_fit(4, {{1024, 9e-6}})}},
       {"all_reduce", {curve_fit(2, {{1024, 1e-6}, {8192, 2e-6}})}}});
  CollectiveProbeOptions o;
  o.iters = 5;
  o.warmup = 1;
  const std::vector<CollectiveProbe> two = probe_collectives(p, 2, o);
  ASSERT_EQ(two.size(), 2u);  // the 4-core fit is beyond a 2-core run
  for (const CollectiveProbe& q : two) {
    EXPECT_EQ(q.group_size, 2);
    EXPECT_EQ(q.row_bytes, 4096u);
    EXPECT_GT(q.measured_seconds, 0.0);
    EXPECT_NEAR(q.profile_seconds, 1e-6 + 3072.0 / 7168.0 * 1e-6, 1e-15);
  }
  EXPECT_EQ(probe_collectives(p, 4, o).size(), 3u);
  // A 3-core run's groups are priced with the 4-core all-gather fit (nearest in log n), but
  // probing it would start 4 virtual cores, more than the run's 3: it is listed as not probed, with
  // the reason; the all-reduce has no fit above 2.
  std::vector<SkippedCollectiveProbe> skipped;
  const std::vector<CollectiveProbe> three = probe_collectives(p, 3, o, &skipped);
  ASSERT_EQ(three.size(), 2u);
  EXPECT_EQ(three[0].op, "all_gather");
  EXPECT_EQ(three[0].group_size, 2);
  EXPECT_EQ(three[1].op, "all_reduce");
  EXPECT_EQ(three[1].group_size, 2);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].op, "all_gather");
  EXPECT_EQ(skipped[0].group_size, 4);
  EXPECT_TRUE(
      testing::names_all(skipped[0].reason, {"all_gather", "4-core", "4 virtual cores", "3"}));
  // Worst measured / profile ratio: hand-worked.
  EXPECT_DOUBLE_EQ(worst_probe_ratio({{"all_gather", 2, 4096, 2e-6, 5e-6, {}},
                                      {"all_reduce", 2, 4096, 1e-6, 4e-6, {}},
                                      {"all_to_all", 2, 4096, 0.0, 9e-6, {}}}),
                   4.0);
  EXPECT_EQ(worst_probe_ratio({}), 0.0);
  EXPECT_TRUE(probe_collectives(p, 1, o).empty());
  EXPECT_TRUE(probe_collectives(HardwareProfile::get("v5e"), 8, o).empty());
}

}  // namespace
}  // namespace vtpu
