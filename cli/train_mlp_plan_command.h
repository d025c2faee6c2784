// `vtpu train mlp --plan PLAN.json`: runs any plan the planner emits for the digits MLP
// (`vtpu plan examples/models/mlp.json --emit PLAN.json`), dispatching on its strategy
// (planner/trainer_plans.h, mlp_plan_mode):
//   dp(...)             data parallel: train_mlp (train/mlp_trainer.h) on the mesh's cores
//   fsdp(...)           ZeRO-3 over the whole mesh: train_fsdp (train/fsdp_trainer.h)
//   tp(...), dp+tp      Megatron tensor parallelism, with data parallelism on the other mesh
//                       axes: train_mlp_tensor_parallel (train/mlp_tp_trainer.h)
// and checks the losses against train_mlp on 1 core in the same process (within 1e-4
// relative) with one micro-batch per core of the data-parallel group (train/mlp_reference.h:
// the same f32 gradient additions in the same order, as `vtpu train fsdp` checks); the one-batch
// 1-core run is printed beside it, not checked. The mesh's core count replaces --cores (both given
// and different is an error); the global batch defaults to the plan's (estimate.batch), and the
// hidden size and optimizer to its model_graph's (mlp_plan_model, planner/trainer_plans.h: a
// model_graph that is not this MLP is an error, and so is a --hidden or --optimizer that differs),
// so that the run is the one estimated. SGD or Adam, as `train mlp --optimizer` says, in every
// mode. When the plan has an estimate (a `vtpu plan --emit` file), the report ends with the
// planner's estimate against the measured step time and HBM per core (compare_estimate,
// bench/estimate_report.h), and --json adds it as "estimate_vs_measured".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "vtpu/train/mlp_trainer.h"
#include "vtpu/train/train_runtime_config.h"

namespace vtpu {

/// What `vtpu train mlp` passes on. Plain data.
struct TrainMlpPlanArgs {
  std::string plan_path;
  /// --config (train/train_runtime_config.h) with --hbm-bytes and --allocator applied to its
  /// options; num_cores is replaced by the plan's.
  TrainRuntimeConfig config;
  std::optional<int> cores;      // --cores, when given
  MlpConfig mlp;                 // the flags' values (the defaults where absent)
  bool batch_given = false;      // --batch was given (else the plan's batch, if it has one)
  bool hidden_given = false;     // --hidden was given (else the plan's model_graph's, if any)
  bool optimizer_given = false;  // --optimizer was given (else the plan's, if any)
  bool lr_given = false;         // --lr was given (else the optimizer's default)
  std::string data_path;
  bool json = false;
};

/// Runs the plan and prints the report (text or JSON). Returns 0 when the losses match the
/// micro-batched single-core reference (run_mlp_reference) within 1e-4 relative, else 1. Throws
/// what load_train_plan, mlp_plan_mode and the trainers throw (a bad or unrunnable plan, a bad
/// config, out of HBM), and InvalidArgumentError for --cores or a --config num_cores that differs
/// from the plan's mesh, a
/// --batch other than the one the plan's estimate is for, or a --hidden or --optimizer other than
/// its model_graph's.
int run_train_mlp_plan(const TrainMlpPlanArgs& args);

}  // namespace vtpu
