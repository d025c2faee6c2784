// A `vtpu plan --emit` file as the trainers read it, and what `vtpu train` can run: the one plan
// reader of `vtpu train mlp|fsdp|transformer --plan PLAN.json`, and the rules the planner
// (`vtpu plan`, through plan_constraints) and the trainers share, so that every plan the planner
// emits for the mlp and transformer models runs. Format: docs/SHARDING.md, "Plan files"
// ("format": "vtpu-plan", "version": 1):
//
//   {"format": "vtpu-plan", "version": 1, "model": "mlp",
//    "mesh": {"axes": ["data", "model"], "shape": [2, 4]},
//    "strategy": {"name": "dp(data)+tp(model)", "data": ["data"], "tensor": ["model"],
//                 "fsdp": null, "batch_axes": ["data"]},
//    "layers": [{"name": "fc1", "sharding": "column", ...}, ...],
//    "estimate": {"step_seconds": ..., "hbm_bytes_per_core": ..., "batch": 64, ...}, ...}
//
// A strategy role is null or a list of axis names (`vtpu plan` writes lists; one axis name as a
// string, as plan files before nu8 N10 wrote it, is read as a list of one); a role on several axes
// uses them together, flattened row-major in the order listed (JAX's P(('data', 'model'))). The
// shardings are the planner's record: each is checked to be a PartitionSpec the plan's mesh can
// hold, but the trainers run their own Megatron layout, which `layers` must agree with.
// "model_graph" (the model the plan was made for, in the model-file format) gives the run's sizes
// and must be the trainer's architecture (mlp_plan_model, transformer_plan_model).
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
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vtpu/sharding/data_tensor_layout.h"
#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/planner/auto_planner.h"
#include "vtpu/sharding/mesh.h"
#include "vtpu/planner/model_graph.h"

namespace vtpu {

/// The "estimate" of a `vtpu plan --emit` file (format "vtpu-plan", version 1), as
/// parse_train_plan (planner/plan_file.h) reads it into TrainPlan::estimate. Plain data.
struct PlanEstimate {
  std::string source;                 // the file it came from, for messages
  std::string strategy;               // strategy.name ("" when absent)
  std::string hardware;               // estimate.hardware ("" when absent)
  double step_seconds = 0.0;          // estimate.step_seconds (0 when absent)
  double compute_seconds = 0.0;       // estimate.compute_seconds (0 when absent)
  double comm_seconds = 0.0;          // estimate.comm_seconds (0 when absent)
  uint64_t hbm_bytes_per_core = 0;    // estimate.hbm_bytes_per_core (0 when absent)
  uint64_t input_bytes_per_core = 0;  // estimate.input_bytes_per_core (0 in older plans)
  double oversubscription = 1.0;      // estimate.oversubscription (1 when absent)
  int64_t batch = 0;                  // estimate.batch, the global batch (0 when absent)
  /// Why no run can be judged against this estimate ("" when one can): set by parse_train_plan
  /// for a plan that records no strategy for its estimate (no strategy.name or
  /// estimate.strategy; adversarial pass adv15, ADV23). compare_estimate then marks the step and
  /// HBM rows not judged with it.
  std::string not_judged_reason;
  /// estimate.hardware_profile: the profile the plan was priced with (`vtpu plan --emit` embeds
  /// it), validated as a profile file is. nullopt in a plan without one (older or hand-written
  /// plans): the report then looks `hardware` up among the shipped profiles.
  std::optional<HardwareProfile> profile;
  std::string hardware_file;  // estimate.hardware_file: where vtpu plan read it ("" when shipped)

  /// The profile the estimate was priced with: `profile`, else the shipped profile named
  /// `hardware`, else nullopt (no name, or a name no shipped profile has).
  std::optional<HardwareProfile> priced_with() const;

  /// Throws InvalidArgumentError when the plan names a batch and it is not `batch`: an estimate
  /// for another batch is not comparable.
  void check_batch(int64_t batch) const;
};


/// Whether a plan's FSDP run prefetches (async all-gathers ahead of use, reduce-scatters
/// overlapped: `train fsdp --prefetch on`). The planner prices FSDP's collectives one after the
/// other, not overlapped with compute (planner/auto_planner.cc), so a plan runs them
/// synchronously; `train fsdp --plan P --prefetch on` asks for the overlap anyway. On this 2-CPU
/// host the async hand-off to each core's communication worker costs more than it overlaps
/// (README, "FSDP": 81 us against 34 us per step on 2 cores, 2026-12-01 16:20 UTC, quiet).
inline constexpr bool kPlanFsdpPrefetch = false;

/// A parsed, checked plan file. Plain data, thread-compatible.
struct TrainPlan {
  std::string path;                    // where it came from (for messages)
  std::string model;                   // "model"; empty when absent
  std::vector<std::string> mesh_axes;  // mesh.axes, distinct names
  std::vector<int64_t> mesh_shape;     // mesh.shape, each >= 1, one per axis
  std::string strategy_name;           // strategy.name; empty when absent
  std::vector<std::string> data;       // strategy.data axes (empty: null)
  std::vector<std::string> tensor;     // strategy.tensor axes (empty: null)
  std::vector<std::string> fsdp;       // strategy.fsdp axes (empty: null)
  /// `layers`: (layer name, sharding) in model order; empty when the file has none.
  std::vector<std::pair<std::string, std::string>> layers;
  bool layers_given = false;  // the file has a `layers` list (possibly empty)
  /// "parameter_shapes": each parameter's global shape (elements per dimension), by name
  /// ("fc1.w"); empty when the file has none.
  std::map<std::string, std::vector<int64_t>> parameter_shapes;
  /// The planner's "estimate" (bench/estimate_report.h): what the run is compared with, and
  /// the global batch it is for. nullopt when the file has none (absent, null or {}); a
  /// hand-written plan may give only some fields (e.g. just "batch"), the others are 0
  /// (oversubscription 1). source and strategy are the plan's path and strategy name.
  std::optional<PlanEstimate> estimate;
  /// "model_graph": the model the plan was made for, in the model-file format (`vtpu plan --emit`
  /// writes it; ModelGraph::to_json). nullopt when absent (a hand-written plan: the trainer's own
  /// sizes). Its sizes are the run's defaults (mlp_plan_model, transformer_plan_model).
  std::optional<ModelGraph> model_graph;

  /// estimate->batch, or 0 when the plan names no batch.
  int64_t estimated_batch() const { return estimate ? estimate->batch : 0; }

  /// Product of mesh_shape: the cores the plan runs on.
  int64_t num_cores() const;
  /// The plan's mesh (device ids 0..n-1).
  Mesh mesh() const;
  /// For messages: "'name' (data: ['x'], tensor: null, fsdp: null)".
  std::string describe_strategy() const;
  /// For messages: "data=2 model=4".
  std::string describe_mesh() const;
};

/// Reads and checks a plan file. Throws NotFoundError if it cannot be opened; else as
/// parse_train_plan with `path` as the source.
TrainPlan load_train_plan(const std::string& path);
/// Checks a plan's JSON. Throws InvalidArgumentError naming `source` and the field for: not an
/// object; a format other than "vtpu-plan" or a version other than 1; a model that is not a
/// string; a missing or bad mesh (axes and shape of different lengths, an empty or repeated axis
/// name, a size outside 1..4096, more than 4096 cores); a missing strategy, an unknown strategy
/// key (expected name, data, tensor, fsdp, batch_axes), a role that is not null, a name or a list
/// of names, an axis that is not a mesh axis, an axis named twice in one role or in the tensor
/// role and another; a mesh axis of size > 1 with no role; `shardings` not an object, or an entry
/// that is not a PartitionSpec string valid on the plan's mesh (PartitionSpec::parse and
/// NamedSharding's checks: an unknown axis, an axis used twice; the error names the key and
/// value); a malformed `layers`; an `estimate`
/// that is not an object, or a field of it of the wrong type or range (step_seconds a number of
/// seconds 1e-12..31557600, 1 ps to a year; compute_seconds, comm_seconds 0 or in that range;
/// hbm_bytes_per_core, input_bytes_per_core integers 0..2^62; oversubscription a number > 0; batch
/// an integer 1..2^40; hardware a string). The one reader of a plan's estimate: the trainers and
/// the estimate report take it from here. Thread-safe.
TrainPlan parse_train_plan(const nlohmann::json& plan, const std::string& source);

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
/// (adversarial pass adv12, ADV3). Thread-safe.
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
/// (new-user pass nu10, NU6: transformer named the flattened "8x1" and exited 2, mlp and fsdp
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

/// The estimate of `plan` that a run of `batch` global rows is compared with: nullopt when the
/// plan has no estimate or no step time in it (a hand-written plan). Throws InvalidArgumentError
/// (check_batch) when the estimate is for another global batch. Thread-safe.
std::optional<PlanEstimate> comparable_estimate(const TrainPlan& plan, int64_t batch);

}  // namespace vtpu
