// `vtpu train mlp`: the 64->H->10 MLP on the UCI handwritten digits, data parallel over virtual
// cores (train/mlp_trainer.h), or any strategy of a `vtpu plan` file with --plan
// (cli/train_mlp_plan_command.h).
//
//   vtpu train mlp [--cores N] [--steps S] [--batch B] [--hidden H] [--lr LR] [--seed K]
//                  [--data FILE] [--hbm-bytes SIZE] [--config FILE] [--log-every K] [--json]
//                  [--allocator P] [--memory-profile FILE] [--memory-snapshot FILE]
//                  [--memory-events FILE] [--kernels eigen|pallas] [--optimizer sgd|adam]
//                  [--micro-batches K] [--plan PLAN.json] [--estimate-from PLAN.json]
//
// The memory outputs are written after the last step, before its step buffers are freed; the
// event log also when the run fails, since it then ends with the failing request.
// --estimate-from compares the plain data-parallel run with the estimate of a `vtpu plan --emit`
// file made for it (bench/estimate_report.h).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vtpu {

struct TrainMlpCommand;

/// Adds the `mlp` subcommand to `train`. Keep the returned handle alive until after
/// run_train_mlp_if_selected().
std::shared_ptr<TrainMlpCommand> add_train_mlp_command(CLI::App& train);

/// After parsing: when `train mlp` was selected, runs it, sets *exit_code (0 ok; 1 the replicas
/// drifted apart, or with --plan the losses differ from the single-core reference; 2 a usage
/// error found after parsing) and returns true; false when it was not selected. Bad data, config
/// and plan files and out-of-HBM throw vtpu::Error subclasses naming the value.
bool run_train_mlp_if_selected(const TrainMlpCommand& command, int* exit_code);

}  // namespace vtpu
