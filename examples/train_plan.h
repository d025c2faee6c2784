// The part of a `vtpu plan` file that `vtpu train ... --plan PLAN.json` reads: the mesh and the
// strategy (the shared contract between the planner and the trainers, "format": "vtpu-plan",
// "version": 1). Shardings and estimates are the planner's business and are not read here.
//
//   {"format": "vtpu-plan", "version": 1, "model": "mlp",
//    "mesh": {"axes": ["data"], "shape": [8]},
//    "strategy": {"name": "fsdp(data)", "data": "data", "tensor": null, "fsdp": "data"}, ...}
//
// A strategy axis is null, one axis name, or a list of axis names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vtpu::examples {

/// A parsed plan file. Plain data, thread-compatible.
struct TrainPlan {
  std::string path;                    // the file it came from (for messages)
  std::string model;                   // "model"; empty when absent
  std::vector<std::string> mesh_axes;  // mesh.axes, distinct names
  std::vector<int64_t> mesh_shape;     // mesh.shape, each >= 1, one per axis
  std::string strategy_name;           // strategy.name; empty when absent
  std::vector<std::string> data;       // strategy.data axes (empty: null)
  std::vector<std::string> tensor;     // strategy.tensor axes (empty: null)
  std::vector<std::string> fsdp;       // strategy.fsdp axes (empty: null)

  /// Product of mesh_shape: the cores the plan runs on.
  int64_t num_cores() const;
  /// The strategy as the file names it, for messages: "name (data: [..], tensor: [..], fsdp:
  /// [..])".
  std::string describe_strategy() const;
};

/// Reads and checks a plan file. Throws NotFoundError if it cannot be opened, and
/// InvalidArgumentError naming the file and the field for malformed JSON, a format other than
/// "vtpu-plan", a version other than 1, a missing or bad mesh (axes and shape of different
/// lengths, a repeated axis, a size < 1, more than 4096 cores), or a strategy axis that is not a
/// mesh axis. Thread-safe.
TrainPlan load_train_plan(const std::string& path);

/// How `vtpu train fsdp` runs a plan. Over all mesh axes of size > 1:
///   kFsdp: strategy.fsdp covers them, tensor is null, and data is null or the same axes;
///   kDataParallel: strategy.data covers them, tensor and fsdp are null.
enum class MlpPlanMode { kFsdp, kDataParallel };
/// Throws UnimplementedError naming the strategy for anything else (tensor parallelism, FSDP over
/// part of the mesh (HSDP), data over other axes than fsdp, no strategy at all), and
/// InvalidArgumentError when the plan's model is set and is not "mlp". Thread-safe.
MlpPlanMode mlp_plan_mode(const TrainPlan& plan);

}  // namespace vtpu::examples
