// Which cores work together in a data x tensor parallel trainer (`vtpu train transformer`, and
// `vtpu train mlp` with a tensor-parallel plan).
//
// A trainer splits the global batch into D data shards and each layer's weights into T tensor
// shards; each of the D x T cores holds one (data shard, tensor shard) pair. Two kinds of
// replica groups follow:
//   tensor group  the T cores of one data shard (one model replica): Megatron's all-reduces of
//                 activations run over it, rank = tensor shard;
//   data group    the D cores holding one tensor shard: the gradient all-reduce runs over it,
//                 rank = data shard.
// On a mesh, the data shards are the mesh axes of the data role flattened row-major in the order
// listed, as JAX flattens P(('data', 'model')); the tensor shards likewise (Mesh::replica_groups).
// So `dp(data,model)` on a 2x4 mesh is D = 8, T = 1, and `dp(model)+tp(data)` on 2x4 is D = 4,
// T = 2 with the tensor groups along the mesh's first axis. grid(D, T) is the mesh (D, T) with
// data first: core (d, t) = d * T + t.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vtpu/collectives/communicator.h"
#include "vtpu/sharding/mesh.h"

namespace vtpu {

/// Plain data, thread-compatible; immutable once built.
struct DataTensorLayout {
  int64_t data = 1;                             // D: data shards (cores per data group)
  int64_t tensor = 1;                           // T: tensor shards (cores per tensor group)
  std::vector<std::vector<int>> data_groups;    // T groups of D cores, rank = data shard
  std::vector<std::vector<int>> tensor_groups;  // D groups of T cores, rank = tensor shard
  // Per core id (0 .. D*T-1):
  std::vector<int> data_rank;     // its data shard
  std::vector<int> tensor_rank;   // its tensor shard
  std::vector<int> data_group;    // index into data_groups
  std::vector<int> tensor_group;  // index into tensor_groups
  // The mesh axes of each role, as given to from_mesh (grid: "data" and "model").
  std::vector<std::string> data_axes;
  std::vector<std::string> tensor_axes;

  int64_t num_cores() const { return data * tensor; }
  /// "2x4" (D x T).
  std::string to_string() const;
  /// The group sizes and the mesh axes of each role: "data-parallel group 8 (mesh axes
  /// data,model) x tensor group 1" for dp(data,model) on a 2x4 mesh, "data-parallel group 2
  /// (mesh axis data) x tensor group 4 (mesh axis model)" for grid(2, 4); a role on no axis
  /// names none. (Not "data 8 x model 1": a plan's mesh axes may be called "data" and "model"
  /// in other roles.)
  std::string describe() const;

  /// The mesh (D, T) with data first: core (d, t) = d * T + t. Throws InvalidArgumentError for
  /// a size < 1.
  static DataTensorLayout grid(int64_t data, int64_t tensor);
  /// From a mesh whose device ids are 0..n-1 and the mesh axes of each role (disjoint; together
  /// every axis of size > 1). Throws InvalidArgumentError for an unknown axis, an axis in both
  /// roles, or an axis of size > 1 in neither (naming it).
  static DataTensorLayout from_mesh(const Mesh& mesh, const std::vector<std::string>& data_axes,
                                    const std::vector<std::string>& tensor_axes);
};

/// One group's all-reduces on a core, as `vtpu train transformer` and `vtpu train mlp --plan`
/// print them: "16 calls (8 per step: ...), 200.00 MiB" (`stats`' count and bytes, `per_step`
/// saying what a step runs), or "none (a group of 1 core)" when `group_size` is 1 (the trainers
/// run no all-reduce over one core). Thread-safe.
std::string describe_group_all_reduce(const CollectiveStats& stats, int64_t group_size,
                                      const std::string& per_step);

}  // namespace vtpu
