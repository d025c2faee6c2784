// NamedSharding: a Mesh plus a PartitionSpec, after jax.sharding.NamedSharding. It answers, for a
// global array shape, which block of the array each device holds.
//
// Model. Dimension d with spec entry (a1, ..., ak) is cut into n = |a1| * ... * |ak| shards. A
// device's shard index on d is row-major over its coordinates on those axes, in the listed order:
// i = ((c_a1 * |a2| + c_a2) * |a3| + ...) + c_ak. Every shard has the padded size
// c = ceil(dim / n) (GSPMD's rule, as torch.chunk), and shard i covers
// [min(i * c, dim), min((i + 1) * c, dim)), so the last shards may be short or empty:
//
//     dim 5 over 4 shards: c = 2, sizes 2, 2, 1, 0
//     dim 6 over 4 shards: c = 2, sizes 2, 2, 2, 0
//
// Devices that differ only on mesh axes the spec does not name hold the same block; their
// replica id is row-major over those unnamed axes, in mesh axis order (as JAX numbers replicas).
//
// Partial arrays (spec.unreduced() non-empty): the unreduced mesh axes are not replica axes.
// Devices that differ only on them hold the same block range but different addends; their
// partial index is row-major over the unreduced axes in mesh order, and the logical block is the
// fold of the addends in partial-index order with spec.reduce_op(). Replica ids then run over
// the remaining unnamed axes (the "replicated" ones), whose devices hold equal addends.
// With mode kStrict, every dimension must divide evenly (as jax.device_put demands).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vtpu/sharding/index_range.h"
#include "vtpu/sharding/mesh.h"
#include "vtpu/sharding/partition_spec.h"

namespace vtpu {

/// A shape as Python prints a tuple: "(5, 10)", "(8,)", "()".
std::string shape_text(const std::vector<int64_t>& shape);

/// How a NamedSharding treats a dimension that its shard count does not divide.
enum class ShardingMode {
  kPadded,  // ceil-division shards; trailing shards are short or empty (GSPMD, torch.chunk)
  kStrict,  // throw InvalidArgumentError naming the dimension (jax.device_put's rule)
};

/// Immutable. Thread-safe.
///
/// Every method that takes `global_shape` (array dimensions, in elements) first checks it: it
/// throws InvalidArgumentError when the spec has more entries than the shape has dimensions, a
/// dimension is negative, or (kStrict) a dimension is not divisible by its shard count. Methods
/// that take a `device` throw InvalidArgumentError when the device is not in the mesh.
class NamedSharding {
 public:
  /// Throws InvalidArgumentError when the spec (entries or unreduced set) names an axis the mesh
  /// lacks (listing the mesh's axes) or uses one axis twice anywhere in the spec (including an
  /// axis that is both in an entry and unreduced).
  NamedSharding(Mesh mesh, PartitionSpec spec, ShardingMode mode = ShardingMode::kPadded);

  const Mesh& mesh() const { return mesh_; }
  const PartitionSpec& spec() const { return spec_; }
  ShardingMode mode() const { return mode_; }

  /// Number of shards along array dimension `dim` (>= 0): the product of the sizes of the axes
  /// its entry names; 1 for a None entry or a dim past the spec. Throws InvalidArgumentError for
  /// dim < 0.
  int64_t num_shards(int dim) const;
  /// Checks `global_shape` as described above; returns normally when it is acceptable.
  void check_shape(const std::vector<int64_t>& global_shape) const;
  /// True when every dimension divides evenly by its shard count (no padding). Checks the shape
  /// (rank and signs only).
  bool is_even(const std::vector<int64_t>& global_shape) const;
  /// The padded shard shape: ceil(global_shape[d] / num_shards(d)) per dimension.
  std::vector<int64_t> shard_shape(const std::vector<int64_t>& global_shape) const;
  /// Shard index of `device` along dimension `dim`, in [0, num_shards(dim)).
  int64_t shard_index(int device, int dim) const;
  /// The block `device` holds: per dimension [start, stop), clamped to the dimension, so a block
  /// may be short or empty.
  std::vector<IndexRange> index_ranges(int device, const std::vector<int64_t>& global_shape) const;
  /// Logical (unpadded) shape of the block `device` holds: stop - start per dimension.
  std::vector<int64_t> local_shape(int device, const std::vector<int64_t>& global_shape) const;
  /// Replica id of `device`: row-major index over the mesh axes the spec neither names nor lists
  /// as unreduced, in mesh axis order; 0 when there are none.
  int64_t replica_id(int device) const;
  /// Number of devices holding each addend of each block: the product of the replicated (unnamed,
  /// not unreduced) axes' sizes.
  int64_t num_replicas() const;
  /// True when the array is not partial and no entry names an axis of size > 1: every device
  /// holds the whole array.
  bool is_fully_replicated() const;
  /// True when the spec has unreduced axes (the array is a pending reduction).
  bool is_partial() const { return !partial_axes_.empty(); }
  /// Mesh axis indices of the unreduced axes, in mesh order.
  const std::vector<int>& partial_axis_indices() const { return partial_axes_; }
  /// Mesh axis indices of the axes entry `dim` names, major first (empty past the spec).
  const std::vector<int>& dim_axis_indices(int dim) const;
  /// Number of addends of each block: the product of the unreduced axes' sizes (1 if none).
  int64_t num_partials() const;
  /// Partial index of `device`: row-major over the unreduced axes in mesh order; 0 if none.
  int64_t partial_index(int device) const;

  /// "NamedSharding(mesh=Mesh(x=4, y=2), spec=P('x', None))", with ", strict" before the closing
  /// parenthesis in kStrict mode; the spec shows unreduced axes as "P('x', unreduced={'y'})".
  std::string to_string() const;

  friend bool operator==(const NamedSharding& a, const NamedSharding& b) {
    return a.mesh_ == b.mesh_ && a.spec_ == b.spec_ && a.mode_ == b.mode_;
  }

 private:
  /// The rank and sign checks of check_shape, without the strict divisibility check.
  void check_rank(const std::vector<int64_t>& global_shape) const;

  Mesh mesh_;
  PartitionSpec spec_;
  ShardingMode mode_;
  std::vector<std::vector<int>> dim_axes_;  // per spec entry: mesh axis indices, major first
  std::vector<int> unnamed_axes_;  // mesh axis indices neither named nor unreduced, mesh order
  std::vector<int> partial_axes_;  // mesh axis indices of the unreduced axes, mesh order
};

}  // namespace vtpu
