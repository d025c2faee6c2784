// `vtpu plan`: the auto-sharding planner (planner/auto_planner.h) on the command line.
//
//   vtpu plan MODEL.json --mesh 2x4 [--axes data,model] [--hardware v5e|v4|v5p|this_machine|F.json]
//             [--hbm-bytes 16G] [--batch B] [--emit PLAN.json] [--json] [--any-strategy]
//             [--strategy NAME]
//
// Prints one row per candidate strategy (HBM per core, bytes sent per core per step, estimated
// compute, communication and step time, and why it lost), then the winner's per-layer shardings.
// --emit writes the winner in the plan format of docs/PLANNER.md ("Plan files"). A model that
// fits on no strategy prints the table and fails (exit 1) with the smallest HBM per core that
// would fit. Default axis names: "data,model" for a 2-D mesh, else x, y, z, w.
//
// The models `vtpu train` runs (mlp, transformer: the model file's name) are planned within what
// their trainer implements (planner/trainer_plans.h, plan_constraints): a strategy it cannot run is
// listed as "cannot run" and never wins, so the emitted plan runs with `vtpu train mlp --plan` or
// `vtpu train transformer --plan`. --any-strategy plans without that limit.
//
// --strategy NAME pins the candidate of that name (as the table prints it) in place of the
// winner: the table marks it "CHOSEN (--strategy)" (the winner keeps "WINNER"), the layer table
// and --emit are its, and the plan file records the winner under "pinned". Unknown name: usage
// error listing the names; a candidate that cannot run or does not fit: error naming why (with
// --any-strategy, one over the HBM limit is pinned anyway).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vtpu {

struct PlanCommand;

/// Adds the `plan` subcommand to `app`. Keep the handle alive until after run_plan_if_selected().
std::shared_ptr<PlanCommand> add_plan_command(CLI::App& app);

/// After parsing: when `plan` was selected, runs it, sets *exit_code and returns true. Throws
/// vtpu::Error for a bad model file, mesh or profile, ResourceExhaustedError when the model fits
/// on no strategy, a usage error (exit 2) for a --strategy no candidate has, and
/// FailedPreconditionError / ResourceExhaustedError for a --strategy that cannot run / fit.
bool run_plan_if_selected(const PlanCommand& command, int* exit_code);

}  // namespace vtpu
