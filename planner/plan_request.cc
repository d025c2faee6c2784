#include "vtpu/planner/plan_request.h"

#include <algorithm>
#include <utility>

#include "vtpu/common/data_dir.h"
#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/sharding/mesh_arg.h"

namespace vtpu {
namespace {

/// --strategy NAME: a name that is no candidate is InvalidArgumentError listing the names. Run
/// through the usage check, since the candidates' names depend on the mesh.
void check_strategy_name(const std::string& name, const AutoShardingPlan& plan) {
  const std::vector<std::string> names = plan.candidate_names();
  // The roles in any order ('tp(model)+dp(data)'); choose() matches the same way.
  if (std::find(names.begin(), names.end(), canonical_strategy_name(name)) == names.end()) {
    throw InvalidArgumentError(
        "--strategy '" + abbreviate(name) +
        "' is not a candidate on this mesh (expected one of: " + join(names) + ")");
  }
}

/// Pins the candidate `name` (AutoShardingPlan::choose; check_strategy_name has checked it). A
/// candidate that cannot run or does not fit is an error saying why, and, when --any-strategy
/// would lift that, says so. With --any-strategy a candidate over the HBM limit is pinned (a
/// what-if).
void pin_strategy(const std::string& name, bool any_strategy, AutoShardingPlan& plan) {
  const std::vector<std::string> names = plan.candidate_names();
  const std::string canonical = canonical_strategy_name(name);
  const auto hint = [&](const std::string& message) {
    return message +
           (any_strategy ? std::string() : " (--any-strategy lets --strategy pin it as a what-if)");
  };
  try {
    plan.choose(name, /*allow_over_hbm=*/any_strategy);
  } catch (const FailedPreconditionError& e) {
    // Infeasible because the batch does not split is not lifted by --any-strategy; what vtpu
    // train does not run is (the constraints are then off), and so is a layer whose required
    // sharding does not divide over the tensor axes (it may then stay replicated).
    const PlanCandidate& k = plan.candidates[static_cast<size_t>(
        std::find(names.begin(), names.end(), canonical) - names.begin())];
    if (k.feasible || k.infeasible_by_constraints) {
      throw FailedPreconditionError(hint(std::string(e.message())));
    }
    throw;
  } catch (const ResourceExhaustedError& e) {
    throw ResourceExhaustedError(hint(std::string(e.message())));
  }
}

/// One row of the per-layer table as JSON: the layer (or, after the layers, "(final all-reduce)",
/// "(loss all-reduce)", "(gradient bucket)"), its sharding, its activation layout before and after
/// over the tensor axes, the collective before it, and its costs per core and step. A field the
/// table prints as "-" (the rows after the layers have no layer, sharding or layout) is null.
nlohmann::json layer_row_json(const LayerPlan& l) {
  const auto state = [](char s) {
    return s == '-' ? nlohmann::json(nullptr) : nlohmann::json(std::string(1, s));
  };
  return {{"name", l.layer},
          {"sharding", l.choice == "-" ? nlohmann::json(nullptr) : nlohmann::json(l.choice)},
          {"in", state(l.in_state)},
          {"out", state(l.out_state)},
          {"reshard_before",
           l.reshard_in.empty() ? nlohmann::json(nullptr) : nlohmann::json(l.reshard_in)},
          {"compute_seconds", l.compute_seconds},
          {"comm_seconds", l.comm_seconds},
          {"comm_bytes_per_core", l.comm_bytes_per_core}};
}

/// One candidate of the table as JSON.
nlohmann::json candidate_json(const PlanCandidate& k) {
  // A row that cannot run (the batch or a layer does not split) is not costed: its costs are
  // null, so a script sorting the runnable rows by step time cannot pick it.
  const auto cost = [&k](auto value) {
    return k.feasible ? nlohmann::json(value) : nlohmann::json(nullptr);
  };
  // The table's per-layer rows, for every candidate (the table prints the chosen one's): the
  // layers' and the after_layers' comm add up to comm_bytes_per_core and comm_seconds.
  const auto layer_rows = [&k](const std::vector<LayerPlan>& ls) {
    if (!k.feasible) return nlohmann::json(nullptr);
    nlohmann::json out = nlohmann::json::array();
    for (const LayerPlan& l : ls) out.push_back(layer_row_json(l));
    return out;
  };
  return {{"strategy", k.name},
          {"runnable", k.feasible && k.unsupported_reason.empty()},
          {"feasible", k.feasible},
          {"fits", k.fits},
          // Without the input batch, as the plan file's estimate (the limit sees their sum).
          {"hbm_bytes_per_core", cost(k.arena_bytes_per_core() - k.input_bytes_per_core)},
          {"input_bytes_per_core", cost(k.input_bytes_per_core)},
          {"comm_bytes_per_core", cost(k.comm_bytes_per_core)},
          {"compute_seconds", cost(k.compute_seconds)},
          {"comm_seconds", cost(k.comm_seconds)},
          {"step_seconds", cost(k.step_seconds)},
          {"why_lost", k.why_lost},
          {"layers", layer_rows(k.layers)},
          {"after_layers", layer_rows(k.after_layers)}};
}

/// --mesh and --axes parsed and checked against the planner's limits: a malformed --mesh or
/// --axes, too many devices, axes or layer evaluations are InvalidArgumentError.
void parse_mesh(const PlanRequest& r, const ModelGraph& model, std::vector<int64_t>& shape,
                std::vector<std::string>& axes) {
  shape = parse_mesh_shape(r.mesh);
  axes = mesh_axis_names(r.axes, r.mesh, shape,
                         shape.size() == 2 ? std::vector<std::string>{"data", "model"}
                                           : default_axis_names(shape.size()));
  // The product of the --mesh sizes is bounded too: --mesh 4096x4096 would plan 16,777,216
  // cores, and --emit would write a plan vtpu train cannot run.
  if (!r.for_training) {
    check_mesh_devices(r.mesh, shape, kMaxPlanDevices, " to plan");
  } else {
    check_mesh_devices(r.mesh, shape, kMaxRunDevices,
                       " for a plan --emit writes, which vtpu train runs on virtual cores; "
                       "without --emit vtpu plan plans up to " +
                           std::to_string(kMaxPlanDevices));
  }
  // The planner tries 3^k strategies for k axes of size > 1 (plan_auto_sharding refuses more
  // than kMaxPlannedAxes).
  const auto active = std::ranges::count_if(shape, [](int64_t s) { return s > 1; });
  if (active > kMaxPlannedAxes) {
    throw InvalidArgumentError(
        "--mesh " + abbreviate(r.mesh) + " has " + std::to_string(active) +
        " axes of size > 1 (expected at most " + std::to_string(kMaxPlannedAxes) +
        ": the planner tries 3^k strategies for k such axes; merge axes that play one "
        "role into one)");
  }
  // Strategies x layers is bounded (kMaxPlanLayerEvaluations): 6561 strategies x 65536 layers
  // would run for over 10 minutes in 5 GB.
  check_planner_limits(Mesh(shape, axes), model.layers.size());
}

/// Why `model` is not the architecture of the `vtpu train` command its name selects, or "" when
/// it is (planner/trainer_plans.h). A model named "mlp" or "transformer" with other layers would be
/// planned under that trainer's constraints, and --emit would write a plan `vtpu train` refuses
/// only at train time: a plan for training refuses it here (fail early, as jax.jit or
/// torch.compile refuse at trace time, not at the first step); otherwise it is planned as a
/// foreign model.
std::string trainer_architecture_problem(const PlanRequest& r, const ModelGraph& model) {
  try {
    require_trainer_architecture(model, "model file '" + r.model_path + "'");
  } catch (const InvalidArgumentError& e) {
    if (r.for_training) {
      throw InvalidArgumentError(std::string(e.message()) +
                                 "; --emit writes plans for vtpu train, which reads a model "
                                 "named '" +
                                 model.name + "' as its own (give the model another \"name\" " +
                                 "to emit a plan no vtpu train command runs)");
    }
    return e.message();
  }
  return "";
}

}  // namespace

int64_t mesh_cores(const std::vector<int64_t>& shape) {
  int64_t cores = 1;
  for (int64_t n : shape) cores *= n;
  return cores;
}

std::optional<PlannedModel> plan_request(const PlanRequest& r, const PlanUsageCheck& usage_check) {
  const PlanUsageCheck check = usage_check ? usage_check : [](const std::function<void()>& step) {
    step();
    return true;
  };
  ModelGraph model = ModelGraph::load_json_file(find_model_file(r.model_path));
  if (r.batch > 0) model.batch = r.batch;
  std::vector<int64_t> shape;
  std::vector<std::string> axes;
  if (!check([&] { parse_mesh(r, model, shape, axes); })) return std::nullopt;
  std::string not_trainable = trainer_architecture_problem(r, model);
  CostModel cost(HardwareProfile::get(r.hardware));
  // Only strategies `vtpu train` can run may win (planner/trainer_plans.h); --any-strategy lifts
  // that for what-if questions.
  PlanConstraints constraints = r.any_strategy || !not_trainable.empty()
                                    ? PlanConstraints{}
                                    : plan_constraints(model.name, shape, axes);
  constraints.pad_arrays = r.pad_arrays;
  AutoShardingPlan plan = plan_auto_sharding(model, shape, axes, cost, r.hbm_bytes, constraints);
  if (r.strategy) {
    if (!check([&] { check_strategy_name(*r.strategy, plan); })) return std::nullopt;
    pin_strategy(*r.strategy, r.any_strategy, plan);
  }
  return PlannedModel{std::move(cost), std::move(constraints), std::move(not_trainable),
                      std::move(plan)};
}

void require_plan_fit(const AutoShardingPlan& plan, const std::string& runner) {
  try {
    plan.require_fit();
  } catch (const InvalidArgumentError& e) {
    // At most kMaxListed names, then the count of the rest: 8 axes of 2 would list 1,697 names,
    // a 51,000-character error.
    constexpr size_t kMaxListed = 4;
    std::vector<std::string> lifted;
    size_t num_lifted = 0;
    for (const PlanCandidate& k : plan.candidates) {
      if (!k.infeasible_by_constraints) continue;
      if (++num_lifted <= kMaxListed) lifted.push_back(k.name);
    }
    if (runner.empty() || lifted.empty()) throw;
    if (num_lifted > kMaxListed) {
      lifted.push_back("and " + std::to_string(num_lifted - kMaxListed) + " more");
    }
    throw InvalidArgumentError(std::string(e.message()) + "; " + join(lifted) +
                               (num_lifted == 1 ? " is" : " are") +
                               " feasible with --any-strategy, which lets a layer stay "
                               "replicated where " +
                               runner + " splits it (a what-if: " + runner + " cannot run it)");
  }
}

nlohmann::json plan_report_json(const AutoShardingPlan& plan,
                                const std::vector<std::string>& warnings) {
  nlohmann::json rows = nlohmann::json::array();
  for (const PlanCandidate& k : plan.candidates) rows.push_back(candidate_json(k));
  nlohmann::json j = {
      {"candidates", rows}, {"hbm_limit_bytes", plan.hbm_limit_bytes}, {"warnings", warnings}};
  const auto name_of = [&](int i) {
    return i >= 0 ? nlohmann::json(plan.candidates[static_cast<size_t>(i)].name)
                  : nlohmann::json(nullptr);
  };
  j["winner"] = name_of(plan.winner);
  j["chosen"] = name_of(plan.chosen());
  j["chosen_by"] = plan.pinned >= 0 ? "--strategy" : "planner";
  if (plan.chosen() >= 0) j["plan"] = plan.to_json();
  return j;
}

}  // namespace vtpu
