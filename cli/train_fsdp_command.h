// `vtpu train fsdp`: the digits MLP trained with ZeRO-3 / FSDP (train/fsdp_trainer.h), checked
// in the same process against the single-core `train mlp` run and compared with data-parallel
// `train mlp` on the same cores.
//
//   vtpu train fsdp [--cores N] [--steps S] [--batch B] [--hidden H] [--lr LR] [--seed K]
//                   [--optimizer sgd|adam] [--plan PLAN.json] [--prefetch on|off] [--data FILE]
//                   [--hbm-bytes SIZE] [--config FILE] [--log-every K] [--json]
//
// --config FILE: runtime options, under the flags as in train mlp (train/
// train_runtime_config.h): num_cores is the default of --cores and must match a --plan mesh.
//
// It runs four trainings with the same seed, global batch and optimizer: FSDP on N cores, data
// parallel (train_mlp) on N cores, train_mlp on 1 core with N micro-batches as the reference (it
// performs the N-core runs' f32 gradient additions in their order, train/mlp_trainer.h), and,
// for comparison only, train_mlp on 1 core with the whole batch in one GEMM (skipped for N = 1).
// It prints the max relative difference of the per-step losses against the reference (checked)
// and against the one-batch run (printed), and core 0's HBM at its peak by what the bytes hold
// (the arena's chunk records) for the reference, DP and FSDP side by side, with the ratio
// 1 core / FSDP.
//
// --plan reads the mesh and strategy of a `vtpu plan` file (docs/PLANNER.md, "Plan files"; see
// planner/trainer_plans.h): strategy.fsdp over the whole mesh runs FSDP, strategy.data alone runs
// data parallel (then only DP and the reference run); anything else is an error naming the
// strategy. The mesh's core count replaces --cores (both given and different is an error); the
// hidden size and optimizer default to the plan's model_graph (mlp_plan_model: another
// architecture, or a --hidden or --optimizer that differs, is an error).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vtpu {

struct TrainFsdpCommand;

/// Adds the `fsdp` subcommand to `train`. Keep the returned handle alive until after
/// run_train_fsdp_if_selected().
std::shared_ptr<TrainFsdpCommand> add_train_fsdp_command(CLI::App& train);

/// After parsing: when `train fsdp` was selected, runs it, sets *exit_code (0 when the losses
/// match the reference within 1e-4 relative and FSDP's padding stayed 0, 1 otherwise) and returns
/// true; false when it was not selected. Bad configs and plans throw vtpu::Error subclasses naming
/// the value.
bool run_train_fsdp_if_selected(const TrainFsdpCommand& command, int* exit_code);

}  // namespace vtpu
