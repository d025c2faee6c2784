// Reshard plans: the steps that turn an array sharded one way into the same array sharded another
// way on the same mesh, as plain data. planner/reshard_planner.h chooses and prices the steps;
// sharding/reshard.h runs them. The step vocabulary (after GSPMD's resharding and PyTorch
// DTensor's redistribute), on the replica groups of the mesh axes a step names:
//
//   all-gather      the k minor-most axes leave a dimension        sharded -> replicated
//   all-to-all      the minor-most axis of dimension d becomes the  a sharded dimension moves
//                   minor-most axis of dimension e (split e, concatenate d)
//   all-reduce      unreduced axes are reduced                      partial -> replicated
//   reduce-scatter  an unreduced axis becomes the minor-most axis   partial -> sharded
//                   of a dimension
//   dynamic slice   an unused axis becomes a minor-most axis        replicated -> sharded (local)
//   make partial    an unused axis becomes unreduced: partial index replicated -> partial (local)
//                   0 keeps the value, the others get the identity
//   permute         between two states with the same tiling, or to a mesh that orders the
//                   devices differently
//
// Collectives run on blocks padded to ceil(D / n) per dimension; a step's buffer_shape is that
// padded block, and execution trims every result back to the logical block.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "vtpu/collectives/types.h"
#include "vtpu/sharding/named_sharding.h"

namespace vtpu {

/// One step of a reshard plan.
enum class ReshardOpKind {
  kAllReduce,          // partial -> replicated, over the unreduced axes
  kReduceScatter,      // partial -> sharded, tiled on `dim`
  kAllGather,          // sharded -> replicated, tiled on `dim`
  kAllToAll,           // a sharded dimension moves: split `split_dim`, concatenate `dim`
  kCollectivePermute,  // same tiling, different device order
  kSlice,              // replicated -> sharded: local dynamic slice, no communication
  kMakePartial,        // replicated -> partial: local, addends other than index 0 get the identity
};

/// "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "collective_permute",
/// "dynamic_slice", "make_partial".
std::string reshard_op_name(ReshardOpKind op);

/// A step of a plan. Plain data, thread-compatible.
struct ReshardStep {
  ReshardOpKind op = ReshardOpKind::kSlice;
  /// Mesh axes the replica groups run over, major first (the unreduced or sliced axes for the
  /// local steps; every mesh axis for a permute).
  std::vector<std::string> axes;
  /// Device ids of each replica group, in rank order (row-major over `axes`). Local steps: empty.
  std::vector<std::vector<int>> replica_groups;
  int dim = -1;        // all_gather / reduce_scatter dimension; all_to_all concat dimension
  int split_dim = -1;  // all_to_all split dimension
  ReduceOp reduce_op = ReduceOp::kSum;     // all_reduce, reduce_scatter, make_partial
  std::vector<std::pair<int, int>> pairs;  // permute: (source device, destination device)
  PartitionSpec spec_before;               // on the source mesh
  PartitionSpec spec_after;                // on the source mesh (permute: the target mesh)
  /// Shape of the padded per-core buffer the collective takes (elements per dimension); the
  /// logical block for local steps.
  std::vector<int64_t> buffer_shape;
  uint64_t buffer_bytes = 0;  // bytes of buffer_shape (f32)
  /// The B of the planner's cost formula (planner/reshard_planner.h), in bytes.
  double formula_bytes = 0;
  /// Bytes one core sends in the step under a bandwidth-optimal algorithm (the (n-1)/n and
  /// 2(n-1)/n factors applied; at most, over the cores); 0 for local steps.
  uint64_t sent_bytes_per_core = 0;
  double estimated_seconds = 0;  // the planner's estimate with the plan's cost model
  /// The op's name with its reduction where it has one: "all_gather", "all_reduce(max)".
  std::string op_label() const;
  /// One line: "all_gather over z (4 groups of 2) on dim 0: P('z', ('x', 'y')) -> ...".
  std::string to_string() const;
};

/// A reshard plan: a value that can be printed without running it. Thread-compatible.
struct ReshardPlan {
  std::vector<int64_t> global_shape;
  NamedSharding source;
  NamedSharding target;
  /// The cost model that priced the steps, as text without its "cost model: " label: its
  /// one-line summary and its full description, both without compute terms. Text because the
  /// cost model lives above this layer (planner/cost_model.h).
  std::string cost_model;
  std::string cost_model_detail;
  std::vector<ReshardStep> steps;
  /// Sharding states the planner's search discovered (settled or queued) before it reached the
  /// target or gave up; 0 for a greedy plan.
  size_t search_states = 0;

  uint64_t total_sent_bytes_per_core() const;
  double total_estimated_seconds() const;
  /// The header (array, mesh, specs, the cost model's line: `cost_model`, or with
  /// `verbose_cost` `cost_model_detail`), then a table: one row per step with op, mesh axes,
  /// groups x size, dims (the dimension gathered, scattered or sliced; "split S, concat C" for an
  /// all-to-all that splits its block along S and concatenates the received pieces along C; "N
  /// pairs" for a permute), per-core buffer shape, bytes sent per core, estimated time and spec
  /// after, then the totals.
  std::string to_string(bool verbose_cost = false) const;
  /// The plan as JSON, with the fields of to_string() (names as `vtpu plan --json` names them):
  /// "dtype" ("f32"), "global_shape" (elements per dimension), "mesh" {"axes", "shape"}, "from"
  /// and "to" (PartitionSpec text), "cost_model" (`cost_model`),
  /// "steps" (one object per step: "op" (reshard_op_name), "reduce_op" ("sum", ...; null for an
  /// op without a reduction), "collective" (false for the local slice and make-partial),
  /// "axes", "replica_groups" (device ids in rank order; [] for a local step), "dim" and
  /// "split_dim" (null when unused), "pairs" ([source, destination] device pairs of a permute,
  /// else []), "spec_before", "spec_after", "buffer_shape" (elements), "buffer_bytes",
  /// "comm_bytes_per_core" (sent_bytes_per_core) and "comm_seconds" (estimated_seconds)), then
  /// the totals "comm_bytes_per_core" and "comm_seconds". Thread-compatible.
  nlohmann::json to_json() const;
};

}  // namespace vtpu
