// The estimate report judges a plan file's estimate as the plan-file reader leaves it: a plan
// that names no strategy for its estimate is read with a reason, and neither row is judged.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/planner/plan_test_support.h"
#include "vtpu/bench/estimate_report.h"
#include "vtpu/planner/auto_planner.h"
#include "vtpu/planner/plan_file.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/runtime/hardware_profile.h"

namespace vtpu {
namespace {

using namespace plan_test;

TEST(PlanEstimateTest, AnEstimateForUnknownRolesIsNotJudged) {
  const ModelGraph m = model_file("mlp.json");
  AutoShardingPlan plan =
      plan_auto_sharding(m, {2}, {"x"}, CostModel(HardwareProfile::get("this_machine")), 0,
                         plan_constraints("mlp", {2}, {"x"}));
  plan.choose("dp(x)");
  const nlohmann::json emitted = plan.to_json();
  // The roles edited to FSDP, the name and estimate.strategy removed: nothing says what the
  // estimate is for.
  nlohmann::json old = emitted;
  old["strategy"]["data"] = nullptr;
  old["strategy"]["fsdp"] = {"x"};
  old["strategy"].erase("name");
  old["estimate"].erase("strategy");
  const TrainPlan older = parse_train_plan(old, "old.json");
  const std::string reason = older.estimate->not_judged_reason;
  ASSERT_FALSE(reason.empty());
  MeasuredRun run;
  run.num_cores = 2;
  run.steps = 3;
  run.median_step_seconds = older.estimate->step_seconds;
  run.peak_hbm_bytes_per_core = older.estimate->hbm_bytes_per_core;
  const EstimateReport r = compare_estimate(*older.estimate, run);
  EXPECT_FALSE(r.step_comparable);
  EXPECT_FALSE(r.hbm_comparable);
  EXPECT_EQ(r.step_not_judged_reason, reason);
  EXPECT_EQ(r.hbm_not_judged_reason, reason);
  EXPECT_TRUE(r.to_json()["hbm_within_25_percent"].is_null());
  // With the name (an older file as vtpu plan wrote it) it is judged.
  nlohmann::json old_named = emitted;
  old_named["estimate"].erase("strategy");
  const TrainPlan judged = parse_train_plan(old_named, "old.json");
  EXPECT_TRUE(compare_estimate(*judged.estimate, run).step_comparable);
}

}  // namespace
}  // namespace vtpu
