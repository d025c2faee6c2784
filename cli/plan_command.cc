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
#include "vtpu/planner/plan_request.h"
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

/// The request `c` makes of the planner library.
PlanRequest request_of(const PlanCommand& c) {
  PlanRequest r;
  r.model_path = c.model_path;
  r.mesh = c.mesh;
  r.axes = c.axes;
  r.hardware = c.hardware;
  r.hbm_bytes = c.hbm_bytes.empty() ? 0 : parse_bytes(c.hbm_bytes);
  r.batch = c.batch;
  r.any_strategy = c.any_strategy;
  r.pad_arrays = c.pad_arrays;
  r.strategy = c.strategy;
  r.for_training = !c.emit_path.empty();
  return r;
}

/// The candidates, the winner, the chosen one and its plan as JSON on stdout, which stays pure
/// JSON: the warnings go to stderr too.
void print_json(const AutoShardingPlan& plan, const std::vector<std::string>& warnings) {
  std::cout << plan_report_json(plan, warnings).dump(2) << std::endl;
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
  if (!check_usage([&] { check_output_path("--emit", c.emit_path); })) return 2;
  std::optional<PlannedModel> planned = plan_request(request_of(c), check_usage);
  if (!planned) return 2;
  const AutoShardingPlan& plan = planned->plan;
  // Printed after the table (stdout), or with --json in "warnings" and on stderr.
  const std::vector<std::string> warnings = plan_cost_model_warnings(planned->cost, plan);
  if (c.json) {
    print_json(plan, warnings);
  } else {
    print_text(c, plan, plan.model, planned->cost, plan.mesh_shape, planned->constraints,
               planned->not_trainable, warnings);
  }
  std::fflush(stdout);
  require_plan_fit(plan, planned->constraints.runner);
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
      ->required()
      ->check(nonempty_path_validator());
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
