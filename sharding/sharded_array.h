// ShardedArray: an f32 array laid out over a mesh of virtual cores by a NamedSharding, after
// jax.Array. Each mesh device holds exactly its own block in a DeviceBuffer on that core.
//
// Model. For global shape (5, 10) and P('x') on Mesh(x=4), the blocks are rows [0,2), [2,4),
// [4,5) and [5,5): devices hold 20, 20, 10 and 0 floats. A block is stored at its logical shape,
// row-major and unpadded (the padding of NamedSharding::shard_shape is never materialised), and
// an empty block is a 0-byte DeviceBuffer. Devices with the same block (replicas) each hold a
// copy. device_put scatters from the host with one block copy per device (oneTBB, in parallel);
// gather copies the replica-0 blocks back, which tile the global array exactly once.
//
// Partial arrays (a sharding whose spec has unreduced axes): device_put gives the device with
// partial index 0 the block and every other addend the reduce op's identity (0 for sum, 1 for
// prod, -inf for max, +inf for min), so the pending reduction equals the host array exactly;
// gather folds the addends of each block in partial-index order with the collectives' combine()
// (collectives/reduce_kernels.h), so max and min propagate NaN as lax.pmax / pmin do.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vtpu/runtime/device_buffer.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/sharding/index_range.h"
#include "vtpu/sharding/named_sharding.h"

namespace vtpu {

/// The identity of `op` for f32: 0 (sum), 1 (prod), -inf (max), +inf (min). (Folding two values
/// is collectives/reduce_kernels.h's combine(), the kernel the collectives use.)
float reduce_identity(ReduceOp op);

/// Owns one DeviceBuffer per mesh device. Move-only. Thread-compatible: const methods (gather,
/// local_data, ...) may run concurrently; writing through the mutable local_data needs exclusive
/// access. The buffers keep their arenas alive, so the array may outlive the Runtime. Methods
/// taking a `device` (a mesh device id = core id) throw InvalidArgumentError when it is not in
/// the mesh.
class ShardedArray {
 public:
  /// Copies the row-major host array `host` of shape `global_shape` onto the mesh: every device
  /// in sharding.mesh() (a Runtime core id) gets its block in a buffer labelled
  /// `label` (default "device_put/shard") on that core. The host-side copies run in parallel with
  /// oneTBB. Throws InvalidArgumentError when the shape does not fit the sharding (see
  /// NamedSharding::check_shape), host.size() != product(global_shape), or a mesh device is not a
  /// core of `runtime` (id >= runtime.num_cores()); FailedPreconditionError when a core's arena
  /// has no backing bytes (hbm_backing=false); OutOfMemoryError (ResourceExhausted) when a block
  /// does not fit, in which case nothing stays allocated.
  static ShardedArray device_put(Runtime& runtime, std::span<const float> host,
                                 std::vector<int64_t> global_shape, NamedSharding sharding,
                                 const std::string& label = "device_put/shard");

  /// Adopts existing buffers, e.g. the output of a collective: buffers[i] belongs to
  /// sharding.mesh().devices()[i] and must lie on that core and hold exactly that device's block
  /// (product(local_shape) * 4 bytes). Throws InvalidArgumentError naming the first buffer that
  /// does not match, or when the shape does not fit the sharding.
  static ShardedArray from_buffers(std::vector<int64_t> global_shape, NamedSharding sharding,
                                   std::vector<DeviceBuffer> buffers);

  ShardedArray(ShardedArray&&) noexcept = default;
  ShardedArray& operator=(ShardedArray&&) noexcept = default;
  ShardedArray(const ShardedArray&) = delete;
  ShardedArray& operator=(const ShardedArray&) = delete;

  /// The global array, row-major, assembled from the replica-0 blocks (in parallel with oneTBB);
  /// for a partial array, the fold of each block's addends in partial-index order (the order in
  /// which the collectives fold ranks). Throws FailedPreconditionError if a buffer has no backing
  /// bytes.
  std::vector<float> gather() const;

  const std::vector<int64_t>& global_shape() const { return global_shape_; }
  const NamedSharding& sharding() const { return sharding_; }
  /// Elements of the global array: product(global_shape()).
  int64_t num_elements() const { return num_elements_; }

  /// The block `device` holds, per dimension [start, stop) of the global array.
  std::vector<IndexRange> index_ranges(int device) const;
  /// Logical shape of the block `device` holds (may contain 0).
  std::vector<int64_t> local_shape(int device) const;
  /// The block's elements, row-major over local_shape(device); empty for an empty block. The span
  /// stays valid until the core's arena compacts; hold `buffer(device).pin()` while using it
  /// across allocations.
  std::span<const float> local_data(int device) const;
  std::span<float> local_data(int device);
  /// The buffer of `device` (on core `device`).
  const DeviceBuffer& buffer(int device) const;

  /// "ShardedArray(f32[5,10], NamedSharding(mesh=Mesh(x=4), spec=P('x')))".
  std::string to_string() const;

 private:
  ShardedArray(std::vector<int64_t> global_shape, NamedSharding sharding,
               std::vector<DeviceBuffer> buffers);
  size_t slot_of(int device) const;

  std::vector<int64_t> global_shape_;
  NamedSharding sharding_;
  int64_t num_elements_ = 0;
  std::vector<DeviceBuffer> buffers_;  // one per mesh device, in mesh (row-major) order
};

}  // namespace vtpu
