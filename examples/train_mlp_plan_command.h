// `vtpu train mlp --plan PLAN.json`: runs any plan the planner emits for the digits MLP
// (`vtpu plan examples/models/mlp.json --emit PLAN.json`), dispatching on its strategy
// (examples/train_plan.h, mlp_plan_mode):
//   dp(...)             data parallel: train_mlp (examples/mlp_trainer.h) on the mesh's cores
//   fsdp(...)           ZeRO-3 over the whole mesh: train_fsdp (examples/fsdp_trainer.h)
//   tp(...), dp+tp      Megatron tensor parallelism, with data parallelism on the other mesh
//                       axes: train_mlp_tensor_parallel (examples/mlp_tp_trainer.h)
// and checks the losses against train_mlp on 1 core in the same process (issue 6: within 1e-4
// relative). The mesh's core count replaces --cores (both given and different is an error); the
// global batch defaults to the plan's (estimate.batch), so that the run is the one estimated.
// SGD or Adam, as `train mlp --optimizer` says, in every mode. When the plan has an estimate
// (a `vtpu plan --emit` file), the report ends with the planner's estimate against the measured
// step time and HBM per core (compare_estimate, examples/estimate_report.h), and --json adds it as
// "estimate_vs_measured".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "examples/mlp_trainer.h"
#include "runtime/runtime_options.h"

namespace vtpu::examples {

/// What `vtpu train mlp` passes on. Plain data.
struct TrainMlpPlanArgs {
  std::string plan_path;
  RuntimeOptions options;    // num_cores is replaced by the plan's
  std::optional<int> cores;  // --cores, when given
  MlpConfig mlp;             // learning_rate already the optimizer's default when --lr is absent
  bool batch_given = false;  // --batch was given (else the plan's batch, if it has one)
  std::string data_path;
  bool json = false;
};

/// Runs the plan and prints the report (text or JSON). Returns 0 when the losses match the
/// single-core run within 1e-4 relative, else 1. Throws what load_train_plan, mlp_plan_mode and
/// the trainers throw (a bad or unrunnable plan, a bad config, out of HBM), and
/// InvalidArgumentError for --cores that differs from the plan's mesh or a --batch other than the
/// one the plan's estimate is for.
int run_train_mlp_plan(const TrainMlpPlanArgs& args);

}  // namespace vtpu::examples
