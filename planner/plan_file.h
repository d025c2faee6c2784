// Plan files: the writer of `vtpu plan --emit` (emit_train_plan) and the one reader of
// `vtpu train mlp|fsdp|transformer --plan PLAN.json` (parse_train_plan), so that what one writes
// the other reads field for field. What the trainers can run of a plan: planner/trainer_plans.h.
// Format: docs/PLANNER.md, "Plan files" ("format": "vtpu-plan", "version": 1):
//
//   {"format": "vtpu-plan", "version": 1, "model": "mlp",
//    "mesh": {"axes": ["data", "model"], "shape": [2, 4]},
//    "strategy": {"name": "dp(data)+tp(model)", "data": ["data"], "tensor": ["model"],
//                 "fsdp": null, "batch_axes": ["data"]},
//    "layers": [{"name": "fc1", "sharding": "column", ...}, ...],
//    "estimate": {"step_seconds": ..., "hbm_bytes_per_core": ..., "batch": 64, ...}, ...}
//
// A strategy role is null or a list of axis names (`vtpu plan` writes lists; one axis name as a
// string, as older plan files wrote it, is read as a list of one); a role on several axes
// uses them together, flattened row-major in the order listed (JAX's P(('data', 'model'))). The
// shardings are the planner's record: each is checked to be a PartitionSpec the plan's mesh can
// hold, but the trainers run their own Megatron layout, which `layers` must agree with.
// "model_graph" (the model the plan was made for, in the model-file format) gives the run's sizes
// and must be the trainer's architecture (mlp_plan_model, transformer_plan_model).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vtpu/planner/auto_planner.h"
#include "vtpu/planner/model_graph.h"
#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/sharding/mesh.h"

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
  /// estimate.strategy). compare_estimate then marks the step and
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

/// The plan file of `plan`'s chosen candidate (AutoShardingPlan::chosen), what `vtpu plan --emit`
/// writes and parse_train_plan reads: "format", "version", "model", "mesh", "strategy" (each role
/// null or a list of axes, and "batch_axes"), "shardings" (a PartitionSpec for every parameter
/// and every layer's output activation), "parameter_shapes" (model_parameter_shapes),
/// "estimate" (the candidate's times and bytes, the mesh and strategy it was priced for, the
/// hardware profile and the global batch), "layers" (each layer's sharding, its input and
/// output layouts and the reshard before it), "pinned" (when --strategy chose a candidate other
/// than the winner) and "model_graph" (ModelGraph::to_json). Throws FailedPreconditionError when
/// no candidate is chosen (nothing fits), InternalError when a parameter has no spec.
/// Thread-safe.
nlohmann::json emit_train_plan(const AutoShardingPlan& plan);

/// The first mesh axis of size > 1 (of `names`, sizes `shape`) that none of `roles` names; ""
/// when every one is named. Thread-safe.
std::string axis_without_role(const std::vector<int64_t>& shape,
                              const std::vector<std::string>& names,
                              const std::vector<const std::vector<std::string>*>& roles);

/// The estimate of `plan` that a run of `batch` global rows is compared with: nullopt when the
/// plan has no estimate or no step time in it (a hand-written plan). Throws InvalidArgumentError
/// (check_batch) when the estimate is for another global batch. Thread-safe.
std::optional<PlanEstimate> comparable_estimate(const TrainPlan& plan, int64_t batch);

}  // namespace vtpu
