// What `vtpu train` can run of a plan file (planner/plan_file.h): the trainers' architectures,
// the layouts they implement, and the constraints the planner shares with them (`vtpu plan`,
// through plan_constraints), so that every plan the planner emits for the mlp and transformer
// models runs.
//
// What runs (plan_unsupported_reason):
//   model        strategies                                       run by
//   mlp          dp, tp, dp+tp over any axes; fsdp over the       vtpu train mlp --plan (all);
//                whole mesh                                       vtpu train fsdp --plan (fsdp, dp)
//   transformer  dp, tp, dp+tp over any axes                      vtpu train transformer --plan
// Under tensor parallelism each layer takes the sharding the trainer implements
// (required_tensor_sharding): mlp fc1 column, relu sharded, fc2 row; transformer attention by
// heads, MLP fc1 column, GELU sharded, fc2 row, everything else replicated (Megatron-LM).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "vtpu/planner/auto_planner.h"
#include "vtpu/planner/model_graph.h"
#include "vtpu/planner/plan_file.h"
#include "vtpu/sharding/data_tensor_layout.h"

namespace vtpu {

/// Whether a plan's FSDP run prefetches (async all-gathers ahead of use, reduce-scatters
/// overlapped: `train fsdp --prefetch on`). The planner prices FSDP's collectives one after the
/// other, not overlapped with compute (planner/auto_planner.cc), so a plan runs them
/// synchronously; `train fsdp --plan P --prefetch on` asks for the overlap anyway. On this 2-CPU
/// host the async hand-off to each core's communication worker costs more than it overlaps
/// (bench/RESULTS.md, "FSDP").
inline constexpr bool kPlanFsdpPrefetch = false;

/// The digits MLP a plan's model_graph describes. Plain data.
struct MlpPlanModel {
  int64_t hidden = 0;     // fc1.out
  std::string optimizer;  // "sgd" or "adam"
};
/// The sizes of the plan's model_graph for `vtpu train mlp|fsdp`, or nullopt when the plan has
/// none or it is another model than "mlp" (require_plan_model refuses that by name). Throws
/// InvalidArgumentError naming the file, the layer and what the trainer has when the model_graph is
/// not the trainer's architecture: exactly fc1 dense 64 -> H, relu elementwise H, fc2 dense H -> 10
/// (both with bias), f32, seq_len 1, optimizer sgd or adam. Thread-safe.
std::optional<MlpPlanModel> mlp_plan_model(const TrainPlan& plan);

/// The decoder-only transformer a plan's model_graph describes (train/transformer_model.h).
struct TransformerPlanModel {
  int64_t vocab = 0, context = 0, d_model = 0, heads = 0, layers = 0, hidden = 0;
};
/// The sizes of the plan's model_graph for `vtpu train transformer`, or nullopt when the plan
/// has none or it is another model than "transformer". Throws InvalidArgumentError naming the file,
/// the layer and what the trainer has when it is not the trainer's architecture: embed (embedding
/// vocab V, d_model D, positions = seq_len), then per block i blocks.i.ln1 (layer_norm D),
/// blocks.i.attn (attention D, H heads, bias), blocks.i.ln2, blocks.i.mlp.fc1 (dense D -> F),
/// blocks.i.mlp.gelu (elementwise F), blocks.i.mlp.fc2 (dense F -> D), then ln_f (layer_norm D) and
/// head (dense D -> V); at least one block, the same H and F in every block, f32, optimizer adam.
/// Thread-safe.
std::optional<TransformerPlanModel> transformer_plan_model(const TrainPlan& plan);

/// The digits MLP `vtpu train mlp|fsdp` runs, 64 -> hidden -> 10, as a model graph: fc1 dense
/// 64 -> hidden, relu elementwise hidden, fc2 dense hidden -> 10 (both with bias), f32, seq_len 1.
ModelGraph mlp_model_graph(int64_t hidden);
/// The transformer `vtpu train transformer` runs with sizes `m`, as a model graph: embed
/// (vocab, d_model, positions = context), per block ln1, attn, ln2, mlp.fc1, mlp.gelu, mlp.fc2,
/// then ln_f and head (transformer_plan_model's layout), f32, seq_len = context.
ModelGraph transformer_model_graph(const TransformerPlanModel& m);
/// Checks the plan's `layers` and `parameter_shapes`, each when the file has it, against `model`,
/// the model the trainer runs (`command`, e.g. "vtpu train mlp", begins the explanations):
/// `layers` must list every layer of `model`, in order and by name, each with the sharding the
/// trainer gives it: required_tensor_sharding under tensor parallelism, else "replicated" (data
/// parallelism and FSDP split no layer; FSDP's parameter shards are in `shardings`); and
/// `parameter_shapes` must have exactly model_parameter_shapes(model) (planner/model_graph.h).
/// Throws InvalidArgumentError naming the file, the entry, its value and what was expected
///. Thread-safe.
void check_plan_layout(const TrainPlan& plan, const ModelGraph& model, const std::string& command);

/// Checks that `model` is the architecture `vtpu train` runs for its name, as mlp_plan_model and
/// transformer_plan_model check a plan's model_graph (the one check, shared with `vtpu plan
/// --emit`): nothing for a model named other than "mlp" or "transformer". `where` begins the
/// message ("model file 'm.json'"). Throws InvalidArgumentError naming the first layer that
/// differs and the trainer's model, e.g. "model file 'm.json' has layers[1] 'fc2' dense 64 -> 10
/// (expected 'relu' elementwise dim 64), which vtpu train mlp does not run (its model: ...)".
/// Thread-safe.
void require_trainer_architecture(const ModelGraph& model, const std::string& where);

/// A run setting from the plan's model: `planned` when `given` is empty, else *given when it
/// equals `planned`. Throws InvalidArgumentError naming the file, for example "plan file 'p.json'
/// is for hidden 128 (fc1.out), --hidden is 64 (expected 128, or --hidden left out)".
/// `what` names the setting ("hidden"), `field` where the plan has it ("fc1.out"), `flag` the
/// option ("--hidden"). Thread-safe.
int64_t plan_setting(const TrainPlan& plan, const std::string& what, const std::string& field,
                     const std::string& flag, int64_t planned, std::optional<int64_t> given);
std::string plan_setting(const TrainPlan& plan, const std::string& what, const std::string& field,
                         const std::string& flag, const std::string& planned,
                         std::optional<std::string> given);

/// Checks a trainer's --cores against the plan's mesh: nothing when `cores` is unset or equals
/// plan.num_cores(). Otherwise throws InvalidArgumentError naming the value, the plan file, its
/// mesh and its cores: "--cores 4 but plan 'p.json' has mesh data=2 model=4 (8 cores; expected
/// --cores 8, or --cores left out)". The one check of `vtpu train mlp|fsdp|transformer --plan`
/// and `train mlp --estimate-from`, each of which runs it through check_usage
/// (cli/cli_validators.h): a flag that contradicts the plan is a usage error, exit 2
/// (transformer named the flattened "8x1" and exited 2, mlp and fsdp
/// exited 1). Thread-safe.
void check_plan_cores(const TrainPlan& plan, std::optional<int> cores);

/// Throws InvalidArgumentError when the plan's model is set and is not `model`, naming the
/// file, both names and `command` ("vtpu train mlp"). Thread-safe.
void require_plan_model(const TrainPlan& plan, const std::string& model,
                        const std::string& command);

/// Why `vtpu train` cannot run this strategy of `model` on a mesh of `mesh_shape` (axes
/// `axis_names`), or "" when it can (the table at the top). Roles as in TrainPlan. Thread-safe.
std::string plan_unsupported_reason(const std::string& model,
                                    const std::vector<int64_t>& mesh_shape,
                                    const std::vector<std::string>& axis_names,
                                    const std::vector<std::string>& data,
                                    const std::vector<std::string>& tensor,
                                    const std::vector<std::string>& fsdp);
/// The sharding the trainer of `model` gives layer `layer_name` under tensor parallelism
/// ("column", "row", "sharded", "heads", "replicated"), or "" when `model` has no trainer.
/// Thread-safe.
std::string required_tensor_sharding(const std::string& model, const std::string& layer_name);
/// The planner's constraints for `model` (the two functions above); no constraints for a model
/// that `vtpu train` does not run. The result refers to copies of `mesh_shape` and `axis_names`.
/// Thread-safe.
PlanConstraints plan_constraints(const std::string& model, const std::vector<int64_t>& mesh_shape,
                                 const std::vector<std::string>& axis_names);

/// The `vtpu train` command whose --plan runs candidate `k` of a plan for `model`: "vtpu train
/// fsdp" for an mlp strategy with FSDP axes (the command built for FSDP, which also compares it
/// with data parallel), "vtpu train mlp" for another mlp strategy, "vtpu train transformer" for
/// the transformer, "" for a model vtpu train does not run. What `vtpu plan` prints after "run
/// the plan with:". Thread-safe.
std::string plan_run_command(const std::string& model, const PlanCandidate& k);

/// The data x tensor layout of a plan without FSDP (data and tensor roles flattened, see
/// sharding/data_tensor_layout.h). Throws UnimplementedError when the plan uses FSDP, naming the
/// strategy and `command`, and UnimplementedError when `layers` gives a layer another sharding
/// than required_tensor_sharding(plan.model, layer) under tensor parallelism. Thread-safe.
DataTensorLayout plan_data_tensor_layout(const TrainPlan& plan, const std::string& command);

/// How the digits MLP runs a plan. Over all mesh axes of size > 1:
///   kFsdp: strategy.fsdp covers them, tensor is null, and data is null or the same axes;
///   kDataParallel: strategy.data covers them, tensor and fsdp are null;
///   kTensorParallel: data and tensor together cover them (tensor not null), fsdp is null.
enum class MlpPlanMode { kFsdp, kDataParallel, kTensorParallel };
/// Throws InvalidArgumentError when the plan's model is set and is not "mlp"; UnimplementedError
/// naming the strategy and the reason for anything plan_unsupported_reason rejects, and for
/// tensor parallelism unless `allow_tensor` (`vtpu train fsdp` runs FSDP and data parallel
/// plans; `vtpu train mlp --plan` runs all three). Thread-safe.
MlpPlanMode mlp_plan_mode(const TrainPlan& plan, bool allow_tensor = false);
/// Checks that `vtpu train mlp --estimate-from` can compare a run with `plan`: the plan's mesh
/// has one core, or the plan is data parallel over every mesh axis of size > 1 (what `vtpu train
/// mlp` runs without --plan). Throws InvalidArgumentError otherwise, naming `train mlp
/// --estimate-from`, the plan's strategy, what the flag takes, and the command that runs the
/// strategy (`vtpu train mlp --plan` for tensor parallel, `vtpu train fsdp --plan` for FSDP);
/// what mlp_plan_mode(plan, true) throws for a plan no trainer runs. Thread-safe.
void check_mlp_estimate_plan(const TrainPlan& plan);

}  // namespace vtpu
