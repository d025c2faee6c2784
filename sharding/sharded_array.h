// ShardedArray: a typed array (f32, bf16, f16, s32 or s64) laid out over a mesh of virtual cores by
// a NamedSharding, after jax.Array. Each mesh device holds exactly its own block in a DeviceBuffer
// on that core.
//
// Model. For global shape (5, 10) and P('x') on Mesh(x=4), the blocks are rows [0,2), [2,4),
// [4,5) and [5,5): devices hold 20, 20, 10 and 0 elements. A block is stored at its logical
// shape, row-major (the padding of NamedSharding::shard_shape is never materialised), and an
// empty block is a 0-byte DeviceBuffer. Each block is charged its padded bytes under the TPU
// tiled layout for its dtype and local shape (Runtime::allocate_array; RuntimeOptions::pad_arrays
// turns that off), as a TPU stores it: f32[1437,64] replicated takes 1440 x 128 x 4 = 737,280
// bytes per core, not 367,872. Devices with the same block (replicas) each hold a
// copy. device_put scatters from the host with one block copy per device (in parallel);
// gather copies the replica-0 blocks back, which tile the global array exactly once.
//
// Partial arrays (a sharding whose spec has unreduced axes): device_put gives the device with
// partial index 0 the block and every other addend the reduce op's identity (0 for sum, 1 for
// prod, -inf for max, +inf for min; for integers the type's lowest and highest values), so the
// pending reduction equals the host array exactly; gather folds the addends of each block in
// partial-index order with the collectives' combine() (collectives/reduce_kernels.h), so max and
// min propagate NaN as lax.pmax / pmin do.
//
// Several processes (runtime/process_group.h): as jax.Array in multi-process JAX, an array spans
// the mesh's devices in every process but each process holds only the blocks of its own cores
// (its addressable shards). Every process runs the same host code: device_put is given the same
// host array in every process and places the local blocks only; gather is collective, every
// process sends its replica-0 blocks (ProcessGroup::all_gather) and assembles the whole array.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "vtpu/collectives/types.h"
#include "vtpu/common/bfloat16.h"
#include "vtpu/common/element_type.h"
#include "vtpu/common/float16.h"
#include "vtpu/runtime/device_buffer.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/sharding/index_range.h"
#include "vtpu/sharding/named_sharding.h"

namespace vtpu {

/// The identity of `op` for f32: 0 (sum), 1 (prod), -inf (max), +inf (min). (Folding two values
/// is collectives/reduce_kernels.h's combine(), the kernel the collectives use.)
float reduce_identity(ReduceOp op);

/// The identity of `op` in T: as reduce_identity() for floating types; for integers 0 (sum),
/// 1 (prod), the lowest value (max) and the highest value (min).
template <typename T>
T reduce_identity_of(ReduceOp op) {
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case ReduceOp::kSum:
        return T{0};
      case ReduceOp::kProd:
        return T{1};
      case ReduceOp::kMax:
        return std::numeric_limits<T>::lowest();
      case ReduceOp::kMin:
        return std::numeric_limits<T>::max();
    }
    return T{0};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return float_to_bf16(reduce_identity(op));  // 0, 1 and +-inf are exact in bf16
  } else if constexpr (std::is_same_v<T, Float16>) {
    return float_to_f16(reduce_identity(op));  // and in f16
  } else {
    return static_cast<T>(reduce_identity(op));
  }
}

/// Fills `block`, elements of `dtype`, with reduce_identity_of(op). Throws InvalidArgumentError
/// for a dtype ShardedArray does not hold.
void fill_reduce_identity(ElementType dtype, ReduceOp op, std::span<std::byte> block);

/// The element types a ShardedArray holds: f32, bf16, f16, s32, s64.
bool is_sharded_array_dtype(ElementType dtype);
/// Throws InvalidArgumentError naming `dtype` and the supported types unless
/// is_sharded_array_dtype(dtype); `what` names the caller ("device_put").
void check_sharded_array_dtype(ElementType dtype, const char* what);

/// Owns one DeviceBuffer per mesh device of this process. Move-only. Thread-compatible: const
/// methods (local_data, ...) may run concurrently, and so may gather in one process (across
/// processes it is a collective: one host thread calls it, in the same order everywhere);
/// writing through the mutable local_data needs exclusive access. The buffers keep their arenas
/// alive, so the array may outlive the Runtime. Methods taking a `device` (a mesh device id =
/// core id) throw InvalidArgumentError when it is not in the mesh.
class ShardedArray {
 public:
  /// Copies the row-major host array `host` (elements of `dtype`, as raw bytes) of shape
  /// `global_shape` onto the mesh: every device in sharding.mesh() (a Runtime core id) gets its
  /// block in a buffer labelled `label` (default "device_put/shard") on that core, allocated with
  /// Runtime::allocate_array (charged its padded bytes unless RuntimeOptions::pad_arrays is off).
  /// Across processes each process places the blocks of its own cores, from the same `host`.
  /// The host-side copies run in parallel (common/parallel_for.h). Throws InvalidArgumentError
  /// when the shape does not fit the sharding (see NamedSharding::check_shape), an unsupported
  /// dtype, host.size() != product(global_shape) x the element size, or a mesh device is not a
  /// core of `runtime` (id >= runtime.num_cores()); FailedPreconditionError when a core's arena
  /// has no backing bytes (hbm_backing=false); OutOfMemoryError (ResourceExhausted) when a block
  /// does not fit, in which case nothing stays allocated.
  static ShardedArray device_put(Runtime& runtime, ElementType dtype,
                                 std::span<const std::byte> host, std::vector<int64_t> global_shape,
                                 NamedSharding sharding,
                                 const std::string& label = "device_put/shard");
  /// Typed form: T is float, BFloat16, Float16, int32_t or int64_t (the dtype is
  /// data_type_of<T>()).
  template <typename T>
  static ShardedArray device_put(Runtime& runtime, std::span<const T> host,
                                 std::vector<int64_t> global_shape, NamedSharding sharding,
                                 const std::string& label = "device_put/shard") {
    return device_put(runtime, data_type_of<T>(), std::as_bytes(host), std::move(global_shape),
                      std::move(sharding), label);
  }
  template <typename T>
  static ShardedArray device_put(Runtime& runtime, const std::vector<T>& host,
                                 std::vector<int64_t> global_shape, NamedSharding sharding,
                                 const std::string& label = "device_put/shard") {
    return device_put(runtime, std::span<const T>(host), std::move(global_shape),
                      std::move(sharding), label);
  }
  /// The f32 form (a span of float, or anything that converts to one).
  static ShardedArray device_put(Runtime& runtime, std::span<const float> host,
                                 std::vector<int64_t> global_shape, NamedSharding sharding,
                                 const std::string& label = "device_put/shard");

  /// Adopts existing buffers, e.g. the output of a collective: buffers[i] belongs to
  /// sharding.mesh().devices()[i] and must lie on that core and hold exactly that device's block
  /// (product(local_shape) x the element size of `dtype` bytes). Throws InvalidArgumentError
  /// naming the first buffer that does not match, for an unsupported dtype, or when the shape
  /// does not fit the sharding.
  static ShardedArray from_buffers(std::vector<int64_t> global_shape, NamedSharding sharding,
                                   std::vector<DeviceBuffer> buffers,
                                   ElementType dtype = ElementType::kF32);
  /// The same for an array of `runtime`, which may span several processes: buffers[i] of a
  /// device hosted by another process must be empty (default-constructed), and every other one
  /// as above. Throws InvalidArgumentError naming the first buffer that does not match.
  static ShardedArray from_buffers(const Runtime& runtime, std::vector<int64_t> global_shape,
                                   NamedSharding sharding, std::vector<DeviceBuffer> buffers,
                                   ElementType dtype = ElementType::kF32);

  ShardedArray(ShardedArray&&) noexcept = default;
  ShardedArray& operator=(ShardedArray&&) noexcept = default;
  ShardedArray(const ShardedArray&) = delete;
  ShardedArray& operator=(const ShardedArray&) = delete;

  /// The global array, row-major, assembled from the replica-0 blocks (in parallel);
  /// for a partial array, the fold of each block's addends in partial-index order (the order in
  /// which the collectives fold ranks), with the collectives' combine() for T. T must be the
  /// dtype's C++ type: InvalidArgumentError naming both otherwise (so gather() of a bf16 array
  /// throws). Throws FailedPreconditionError if a buffer has no backing bytes. Across processes
  /// every process must call it (it exchanges the blocks), and every one gets the whole array.
  template <typename T = float>
  std::vector<T> gather() const;

  const std::vector<int64_t>& global_shape() const { return global_shape_; }
  const NamedSharding& sharding() const { return sharding_; }
  /// The element type (jax.Array.dtype).
  ElementType dtype() const { return dtype_; }
  /// Elements of the global array: product(global_shape()).
  int64_t num_elements() const { return num_elements_; }

  /// The block `device` holds, per dimension [start, stop) of the global array.
  std::vector<IndexRange> index_ranges(int device) const;
  /// Logical shape of the block `device` holds (may contain 0).
  std::vector<int64_t> local_shape(int device) const;
  /// The block's elements as T, row-major over local_shape(device); empty for an empty block.
  /// T must be the dtype's C++ type (InvalidArgumentError naming both otherwise). The span stays
  /// valid until the core's arena compacts; hold `buffer(device).pin()` while using it across
  /// allocations.
  template <typename T = float>
  std::span<const T> local_data(int device) const {
    check_dtype(data_type_of<T>(), "local_data");
    return buffer(device).template as<const T>();
  }
  template <typename T = float>
  std::span<T> local_data(int device) {
    check_dtype(data_type_of<T>(), "local_data");
    return buffer(device).template as<T>();
  }
  /// The buffer of `device` (on core `device`). Throws FailedPreconditionError, naming the
  /// process, for a device hosted by another process (its block is there only; gather() it).
  const DeviceBuffer& buffer(int device) const;
  /// Whether this process holds `device`'s block (jax.Array.addressable_shards); true for every
  /// device in one process.
  bool is_addressable(int device) const;
  /// Whether this process holds every block (jax.Array.is_fully_addressable).
  bool is_fully_addressable() const;

  /// "ShardedArray(bf16[5,10], NamedSharding(mesh=Mesh(x=4), spec=P('x')))".
  std::string to_string() const;

 private:
  ShardedArray(ElementType dtype, std::vector<int64_t> global_shape, NamedSharding sharding,
               std::vector<DeviceBuffer> buffers);
  static ShardedArray adopt_buffers(const Runtime* runtime, std::vector<int64_t> global_shape,
                                    NamedSharding sharding, std::vector<DeviceBuffer> buffers,
                                    ElementType dtype);
  /// Records `runtime`'s processes when there are several (device_put, from_buffers).
  void set_processes(const Runtime& runtime);
  size_t slot_of(int device) const;
  /// The process hosting `device` (0 in one process).
  int process_of(int device) const;
  /// Every mesh slot's replica-0 block as bytes, from the processes that hold them; empty for
  /// this process's own slots (read from their buffers). Collective across processes.
  std::vector<std::vector<std::byte>> exchange_replica_blocks() const;
  /// Throws InvalidArgumentError naming `want` and dtype() when they differ.
  void check_dtype(ElementType want, const char* what) const;

  ElementType dtype_ = ElementType::kF32;
  std::vector<int64_t> global_shape_;
  NamedSharding sharding_;
  int64_t num_elements_ = 0;
  std::vector<DeviceBuffer> buffers_;  // one per mesh device, in mesh (row-major) order; empty for
                                       // the devices of other processes
  // The processes of the runtime, when it has more than one (null: every block is here), and
  // the cores each hosts (process p hosts [p K, (p + 1) K)).
  std::shared_ptr<ProcessGroup> processes_;
  int cores_per_process_ = 0;
};

extern template std::vector<float> ShardedArray::gather<float>() const;
extern template std::vector<BFloat16> ShardedArray::gather<BFloat16>() const;
extern template std::vector<Float16> ShardedArray::gather<Float16>() const;
extern template std::vector<int32_t> ShardedArray::gather<int32_t>() const;
extern template std::vector<int64_t> ShardedArray::gather<int64_t>() const;

}  // namespace vtpu
