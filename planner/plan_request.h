// What `vtpu plan` computes, as a library: a request with the command's options (model file,
// mesh, axes, hardware, HBM limit, batch, --any-strategy, --pad-arrays, --strategy), planned with
// plan_auto_sharding under the trainer's constraints for the models `vtpu train` runs
// (planner/trainer_plans.h), and the `vtpu plan --json` document of the result. The command line
// (cli/plan_command.cc) and the Python binding (vtpu.planner.plan) both call these, so they plan,
// refuse and report alike; printing, --emit and exit codes stay with the command line.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "vtpu/planner/auto_planner.h"
#include "vtpu/planner/cost_model.h"

namespace vtpu {

/// The options of `vtpu plan`, with its defaults. Plain data.
struct PlanRequest {
  std::string model_path;        // model file (JSON), or a shipped model's file name
  std::string mesh = "2x4";      // mesh shape, "2x4"
  std::string axes;              // comma-separated axis names; "": data,model for 2-D, else x,y,z,w
  std::string hardware = "v5e";  // a built-in profile's name or a profile .json
  uint64_t hbm_bytes = 0;        // HBM limit per core in bytes; 0: the profile's
  int64_t batch = 0;             // global batch; 0: the model file's
  bool any_strategy = false;     // let strategies vtpu train cannot run win
  bool pad_arrays = true;        // HBM estimates in padded (TPU tiled) bytes, else logical
  std::optional<std::string> strategy;  // pin this candidate in place of the winner
  /// The plan will be written for `vtpu train` (--emit): the mesh may have at most
  /// kMaxRunDevices cores, and a model named like a trainer's must have its architecture.
  bool for_training = false;
};

/// A planned request: the plan and what it was planned with.
struct PlannedModel {
  CostModel cost;               // the profile's cost model (before for_cores)
  PlanConstraints constraints;  // what the runner can execute (empty with --any-strategy)
  /// Why the model is not the architecture of the `vtpu train` command its name selects, "" when
  /// it is or when it names none (trainer_architecture_problem).
  std::string not_trainable;
  AutoShardingPlan plan;  // candidates, winner, pinned strategy
};

/// Runs `step`, which reads the request's options; returns false when they were wrong. The
/// command line passes check_usage (an InvalidArgumentError is a usage error, exit 2).
using PlanUsageCheck = std::function<bool(const std::function<void()>& step)>;

/// Plans `request` as `vtpu plan` does: loads the model (find_model_file), applies the batch,
/// parses and bounds the mesh and axes, plans and pins --strategy. The steps that read options
/// (mesh, axes, the planner's limits, the strategy's name) run through `usage_check`; with a
/// null one they throw InvalidArgumentError naming the value, and std::nullopt is returned only
/// when `usage_check` returned false. Throws what the model file, the profile and
/// plan_auto_sharding throw, and FailedPreconditionError / ResourceExhaustedError for a pinned
/// strategy that cannot run / does not fit (without any_strategy). Never throws for a model that
/// fits nowhere: see require_plan_fit. Thread-safe.
std::optional<PlannedModel> plan_request(const PlanRequest& request,
                                         const PlanUsageCheck& usage_check = {});

/// plan.require_fit(), and when no candidate is feasible but some are only because of vtpu
/// train's required layer shardings (`runner` is not empty), says which and that --any-strategy
/// plans them. Thread-safe.
void require_plan_fit(const AutoShardingPlan& plan, const std::string& runner);

/// The `vtpu plan --json` document: every candidate with its costs and per-layer rows, the HBM
/// limit, `warnings`, the winner, the chosen candidate, who chose it and the chosen plan file.
/// Pure.
nlohmann::json plan_report_json(const AutoShardingPlan& plan,
                                const std::vector<std::string>& warnings);

/// The product of the mesh sizes. Pure.
int64_t mesh_cores(const std::vector<int64_t>& shape);

}  // namespace vtpu
