// `vtpu train transformer`: the decoder-only transformer of train/transformer_model.h on
// Debian's fortunes text, data parallel x Megatron tensor parallel over a mesh of virtual cores
// (train/transformer_trainer.h), checked against a single-core run of the same steps.
//
//   vtpu train transformer [--mesh DxT | --cores N | --plan PLAN.json] [--steps 200] [--seed 0]
//                          [--batch 16] [--lr 0.003] [--data FILE] [--log-every 25]
//                          [--hbm-bytes SIZE] [--config FILE] [--kernels eigen]
//                          [--no-reference] [--json]
//
// --config FILE: runtime options, under the flags as in train mlp (train/
// train_runtime_config.h): num_cores alone means --mesh 1xN, as --cores does, and must match
// --mesh or --plan.
//
// --mesh 2x4 (default): data parallel over 2, tensor parallel over 4 (8 cores). --cores N alone
// means --mesh 1xN. --plan reads the mesh and the strategy of a `vtpu plan --emit` file
// (planner/trainer_plans.h; docs/PLANNER.md): the data axes flattened into one
// data-parallel group (dp(data,model) on 2x4 is 8-way data parallel, as JAX's P(('data',
// 'model'))), the tensor axes likewise, each on the mesh's own replica groups; the global batch
// defaults to the plan's. The single-core reference runs first unless --no-reference, as one
// micro-batch per data shard added in the data-parallel all-reduce's rank order
// (TransformerConfig::micro_batches), so a pure data-parallel mesh matches it exactly; the report
// gives both runs' losses, their max relative difference (exit 1 when above 1e-4), the
// uniform-guess loss ln(distinct bytes), times, all-reduce counts and HBM per core.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>

namespace vtpu {

struct TrainTransformerCommand;

/// Adds `transformer` under `train`. Keep the handle alive until after the run.
std::shared_ptr<TrainTransformerCommand> add_train_transformer_command(CLI::App& train);

/// After parsing: when `train transformer` was selected, runs it, sets *exit_code (0 ok, 1 the
/// mesh's losses differ from the single-core ones by more than 1e-4 relative, 2 a usage error)
/// and returns true. Throws vtpu::Error for bad input found while running (a bad plan file, heads
/// or hidden not divisible by the tensor axis, a missing data file).
bool run_train_transformer_if_selected(const TrainTransformerCommand& command, int* exit_code);

}  // namespace vtpu
