#include "vtpu/cli/plan_command.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "vtpu/bench/calibration.h"
#include "vtpu/cli/cli_validators.h"
#include "vtpu/common/data_dir.h"
#include "vtpu/common/error.h"
#include "vtpu/common/output_path.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/planner/auto_planner.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/sharding/mesh_arg.h"

namespace vtpu {

struct PlanCommand {
  CLI::App* app = nullptr;
  std::string model_path;
  std::string mesh = "2x4";
  std::string axes;
  std::string hardware = "v5e";
  std::string hbm_bytes;
  int64_t batch = 0;
  std::string emit_path;
  bool json = false;
  bool verbose = false;  // --verbose: the cost model's every term (CostModel::describe)
  bool any_strategy = false;
  bool pad_arrays = true;  // --pad-arrays: HBM estimates in padded (TPU tiled) or logical bytes
  // --strategy: the candidate to emit in place of the winner ("" is a name no candidate has).
  std::optional<std::string> strategy;
};

namespace {

/// --strategy NAME: pins that candidate (AutoShardingPlan::choose). A name that is not a
/// candidate is a usage error (CLI::ValidationError, exit 2) listing the names; a candidate that
/// cannot run or does not fit is an error saying why, and, when --any-strategy would lift that,
/// says so. With --any-strategy a candidate over the HBM limit is pinned (a what-if).
void pin_strategy(const std::string& name, bool any_strategy, AutoShardingPlan& plan) {
  const std::vector<std::string> names = plan.candidate_names();
  // The roles in any order ('tp(model)+dp(data)'); choose() matches the same way.
  const std::string canonical = canonical_strategy_name(name);
  if (std::find(names.begin(), names.end(), canonical) == names.end()) {
    throw CLI::ValidationError("--strategy", "'" + abbreviate(name) +
                                                 "' is not a candidate on this mesh (expected one "
                                                 "of: " +
                                                 join(names) + ")");
  }
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

/// plan.require_fit(), and when no candidate is feasible but some are only because of vtpu train's
/// required layer shardings (`runner` is not empty), says which and that --any-strategy plans
/// them, where the first row's reason alone (the batch, say) would hide them.
void require_fit(const AutoShardingPlan& plan, const std::string& runner) {
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

/// The group sizes of the table's feasible strategies (the product of a role's mesh axes: data,
/// tensor or fsdp, > 1 core), for extrapolated_fit_warnings (bench/calibration.h).
std::set<int64_t> strategy_group_sizes(const AutoShardingPlan& plan,
                                       const std::vector<int64_t>& shape,
                                       const std::vector<std::string>& axes) {
  std::set<int64_t> groups;
  for (const PlanCandidate& k : plan.candidates) {
    if (!k.feasible) continue;
    for (const auto* role : {&k.data_axes, &k.tensor_axes, &k.fsdp_axes}) {
      int64_t n = 1;
      for (const std::string& a : *role) {
        n *= shape[static_cast<size_t>(std::find(axes.begin(), axes.end(), a) - axes.begin())];
      }
      if (n > 1) groups.insert(n);
    }
  }
  return groups;
}

/// The flags that need more than a per-option check: --emit not "-" (a file named '-' would be
/// written) and not over an input, --hbm-bytes not 0 (as `vtpu train mlp` refuses it). False
/// after a usage error.
bool check_flags_usage(const PlanCommand& c) {
  return check_usage([&] {
    if (c.emit_path == "-") {
      throw InvalidArgumentError(
          "--emit - would write a file named '-' (expected a file path; to print the plan, "
          "use --json, whose \"plan\" is the file's content, or --emit /dev/stdout)");
    }
    if (!c.hbm_bytes.empty() && parse_bytes(c.hbm_bytes) == 0) {
      throw InvalidArgumentError(
          "--hbm-bytes 0 is not an HBM limit (expected at least 1 byte; leave --hbm-bytes out "
          "for the profile's HBM per core)");
    }
    // A shipped profile's name (v5e) is no file.
    check_outputs_not_inputs(
        {{"--emit", c.emit_path}},
        {{"the model file", c.model_path},
         {"--hardware", c.hardware.ends_with(".json") ? c.hardware : std::string()}});
  });
}

/// --mesh and --axes parsed and checked against the planner's limits. False after a usage error
/// (a malformed --mesh or --axes, too many devices, axes or layer evaluations).
bool parse_mesh_usage(const PlanCommand& c, const ModelGraph& model, std::vector<int64_t>& shape,
                      std::vector<std::string>& axes) {
  return check_usage([&] {
    shape = parse_mesh_shape(c.mesh);
    axes = mesh_axis_names(c.axes, c.mesh, shape,
                           shape.size() == 2 ? std::vector<std::string>{"data", "model"}
                                             : default_axis_names(shape.size()));
    // The product of the --mesh sizes is bounded too: --mesh 4096x4096 would plan 16,777,216
    // cores, and --emit would write a plan vtpu train cannot run.
    if (c.emit_path.empty()) {
      check_mesh_devices(c.mesh, shape, kMaxPlanDevices, " to plan");
    } else {
      check_mesh_devices(c.mesh, shape, kMaxRunDevices,
                         " for a plan --emit writes, which vtpu train runs on virtual cores; "
                         "without --emit vtpu plan plans up to " +
                             std::to_string(kMaxPlanDevices));
    }
    // The planner tries 3^k strategies for k axes of size > 1 (plan_auto_sharding refuses more
    // than kMaxPlannedAxes).
    const auto active = std::ranges::count_if(shape, [](int64_t s) { return s > 1; });
    if (active > kMaxPlannedAxes) {
      throw InvalidArgumentError(
          "--mesh " + abbreviate(c.mesh) + " has " + std::to_string(active) +
          " axes of size > 1 (expected at most " + std::to_string(kMaxPlannedAxes) +
          ": the planner tries 3^k strategies for k such axes; merge axes that play one "
          "role into one)");
    }
    // Strategies x layers is bounded (kMaxPlanLayerEvaluations): 6561 strategies x 65536 layers
    // would run for over 10 minutes in 5 GB.
    check_planner_limits(Mesh(shape, axes), model.layers.size());
  });
}

/// Why `model` is not the architecture of the `vtpu train` command its name selects, or "" when
/// it is (planner/trainer_plans.h). A model named "mlp" or "transformer" with other layers would be
/// planned under that trainer's constraints, and --emit would write a plan `vtpu train` refuses
/// only at train time: --emit refuses it here (fail early, as jax.jit or torch.compile refuse at
/// trace time, not at the first step); the table alone plans it as a foreign model.
std::string trainer_architecture_problem(const PlanCommand& c, const ModelGraph& model) {
  try {
    require_trainer_architecture(model, "model file '" + c.model_path + "'");
  } catch (const InvalidArgumentError& e) {
    if (!c.emit_path.empty()) {
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

int64_t mesh_cores(const std::vector<int64_t>& shape) {
  int64_t cores = 1;
  for (int64_t n : shape) cores *= n;
  return cores;
}

/// What the cost model cannot price as well as its figures suggest: a host profile of `vtpu
/// bench hardware --out` has no calibrated collectives, so every hand-off is priced as a memcpy
/// with no latency; and a profile calibrated on fewer cores prices the table's groups from its
/// smaller fits.
std::vector<std::string> cost_model_warnings(const CostModel& cost, const AutoShardingPlan& plan,
                                             const std::vector<int64_t>& shape,
                                             const std::vector<std::string>& axes) {
  std::vector<std::string> warnings;
  if (std::string w = no_calibrated_collectives_warning(
          cost.profile(),
          cost.profile().source_path.empty() ? cost.profile().name : cost.profile().source_path);
      !w.empty()) {
    warnings.push_back(std::move(w));
  }
  for (std::string& w : extrapolated_fit_warnings(cost, strategy_group_sizes(plan, shape, axes),
                                                  mesh_cores(shape))) {
    warnings.push_back(std::move(w));
  }
  return warnings;
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

/// The candidates, the winner, the chosen one and its plan as JSON on stdout, which stays pure
/// JSON: the warnings go to stderr too.
void print_json(const AutoShardingPlan& plan, const std::vector<std::string>& warnings) {
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
  std::cout << j.dump(2) << std::endl;
  for (const std::string& w : warnings) std::cerr << "warning: " << w << "\n";
}

/// The table, the cost model it was priced with, the warnings, and how to run the plan (or why
/// no vtpu train command runs it).
void print_text(const PlanCommand& c, const AutoShardingPlan& plan, const ModelGraph& model,
                const CostModel& cost, const std::vector<int64_t>& shape,
                const PlanConstraints& constraints, const std::string& not_trainable,
                const std::vector<std::string>& warnings) {
  std::printf("%s", plan.to_string().c_str());
  // The footer describes the model the table was priced with: the mesh's cores, so its
  // oversubscription (plan_auto_sharding prices with for_cores(mesh size) too). By default its
  // summary: the full description of this_machine is about 1,450 characters on one line.
  const CostModel priced = cost.for_cores(static_cast<int>(mesh_cores(shape)));
  std::printf("%s\n", (c.verbose ? priced.describe() : priced.summary()).c_str());
  for (const std::string& w : warnings) std::printf("warning: %s\n", w.c_str());
  if (!constraints.runner.empty()) {
    // No "run the plan with" when there is no plan to run (the error after the table says why).
    if (plan.chosen() >= 0) {
      // The file just written, and the command that runs the chosen strategy (train fsdp for an
      // FSDP plan of the mlp).
      std::printf(
          "run the plan with: %s --plan %s (strategies vtpu train cannot run are marked "
          "\"cannot run\"; --any-strategy plans without that limit)\n",
          plan_run_command(model.name, plan.candidates[static_cast<size_t>(plan.chosen())]).c_str(),
          c.emit_path.empty() ? "PLAN.json after --emit PLAN.json" : c.emit_path.c_str());
    }
  } else if (!not_trainable.empty()) {
    std::printf("%s: the plan is not restricted to what vtpu can run (--emit refuses it)\n",
                not_trainable.c_str());
  } else if (!c.any_strategy) {
    std::printf(
        "no vtpu train command runs model '%s' (mlp and transformer do): the plan is "
        "not restricted to what vtpu can run\n",
        model.name.c_str());
  }
}

int run(const PlanCommand& c) {
  if (!check_flags_usage(c)) return 2;
  check_output_path("--emit", c.emit_path);
  ModelGraph model = ModelGraph::load_json_file(find_model_file(c.model_path));
  if (c.batch > 0) model.batch = c.batch;
  std::vector<int64_t> shape;
  std::vector<std::string> axes;
  if (!parse_mesh_usage(c, model, shape, axes)) return 2;
  const std::string not_trainable = trainer_architecture_problem(c, model);
  const CostModel cost(HardwareProfile::get(c.hardware));
  const uint64_t limit = c.hbm_bytes.empty() ? 0 : parse_bytes(c.hbm_bytes);
  // Only strategies `vtpu train` can run may win (planner/trainer_plans.h); --any-strategy lifts
  // that for what-if questions.
  PlanConstraints constraints = c.any_strategy || !not_trainable.empty()
                                    ? PlanConstraints{}
                                    : plan_constraints(model.name, shape, axes);
  constraints.pad_arrays = c.pad_arrays;
  AutoShardingPlan plan = plan_auto_sharding(model, shape, axes, cost, limit, constraints);
  if (c.strategy) pin_strategy(*c.strategy, c.any_strategy, plan);
  // Printed after the table (stdout), or with --json in "warnings" and on stderr.
  const std::vector<std::string> warnings = cost_model_warnings(cost, plan, shape, axes);
  if (c.json) {
    print_json(plan, warnings);
  } else {
    print_text(c, plan, model, cost, shape, constraints, not_trainable, warnings);
  }
  std::fflush(stdout);
  require_fit(plan, constraints.runner);
  if (!c.emit_path.empty()) {
    write_output_file("--emit", c.emit_path, plan.to_json().dump(2) + "\n");
    if (!c.json) std::printf("wrote %s\n", c.emit_path.c_str());
  }
  return 0;
}

}  // namespace

std::shared_ptr<PlanCommand> add_plan_command(CLI::App& app) {
  auto c = std::make_shared<PlanCommand>();
  c->app = app.add_subcommand(
      "plan",
      "Auto-sharding planner: choose data parallel, tensor parallel (Megatron), FSDP or a "
      "combination per mesh axis, and each layer's sharding, to minimise the estimated step time "
      "under the HBM limit; print every candidate and why it lost");
  c->app->add_option("model", c->model_path, "Model file (JSON; examples/models/*.json)")
      ->required();
  c->app
      ->add_option("--mesh", c->mesh,
                   "Mesh shape, e.g. 2x4 or 1x8; at most " + std::to_string(kMaxPlannedAxes) +
                       " axes of size > 1, and the 3^k strategies for k such axes x the model's "
                       "layers at most " +
                       std::to_string(kMaxPlanLayerEvaluations) + " (the planner's budget: " +
                       std::to_string(kMaxPlanLayerEvaluations / 6561) +
                       " layers on 8 axes of size > 1, 3^8 = 6561 strategies)")
      ->capture_default_str();
  c->app->add_option("--axes", c->axes,
                     "Comma-separated mesh axis names (default data,model for 2-D, else x,y,z)");
  c->app
      ->add_option(
          "--hardware", c->hardware,
          "Hardware profile: " + join(HardwareProfile::builtin_names()) + ", or a profile .json")
      ->capture_default_str()
      ->check(hardware_validator());
  c->app
      ->add_option("--hbm-bytes", c->hbm_bytes,
                   "HBM limit per core, e.g. 16G (default: the profile's HBM per core)")
      ->check(size_validator());
  c->app->add_option("--batch", c->batch, "Global batch (default: the model file's)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  c->app->add_option("--emit", c->emit_path, "Write the winner as a plan JSON file")
      ->check(nonempty_path_validator());
  c->app->add_flag("--json", c->json, "Print the candidates and the plan as JSON");
  c->app->add_flag("--verbose", c->verbose,
                   "Print the cost model's every term (each calibrated fit and its measured "
                   "curve, the kernel rates) in place of its one-line summary");
  c->app->add_option(
      "--strategy", c->strategy,
      "Report and emit this candidate (its name as the table prints it, e.g. 'fsdp(x)', "
      "'dp(data,model)') instead of the winner: a what-if or manual override. It must run and fit "
      "the HBM limit (with --any-strategy: any feasible candidate, even over the limit)");
  c->app->add_flag("--any-strategy", c->any_strategy,
                   "Let any strategy win, also one that vtpu train cannot run (by default the mlp "
                   "and transformer models are planned within what vtpu train runs)");
  c->app
      ->add_option("--pad-arrays", c->pad_arrays,
                   "true (default): HBM estimates charge every array its padded bytes under XLA's "
                   "TPU tiled layout, as vtpu train does; false: its logical bytes")
      ->check(CLI::IsMember({"true", "false"}, CLI::ignore_case));
  return c;
}

bool run_plan_if_selected(const PlanCommand& command, int* exit_code) {
  if (!command.app->parsed()) return false;
  *exit_code = run(command);
  return true;
}

}  // namespace vtpu
