#include "vtpu/sharding/sharded_array.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "vtpu/collectives/reduce_kernels.h"
#include "vtpu/common/error.h"
#include "vtpu/common/parallel_for.h"
#include "vtpu/sharding/block_copy.h"

namespace vtpu {

bool is_sharded_array_dtype(ElementType dtype) {
  switch (dtype) {
    case ElementType::kF32:
    case ElementType::kBf16:
    case ElementType::kF16:
    case ElementType::kS32:
    case ElementType::kS64:
      return true;
    default:
      return false;
  }
}

void check_sharded_array_dtype(ElementType dtype, const char* what) {
  if (!is_sharded_array_dtype(dtype)) {
    throw InvalidArgumentError(std::string(what) + " of element type " +
                               std::string(element_type_name(dtype)) +
                               " (expected f32, bf16, f16, s32 or s64)");
  }
}

void fill_reduce_identity(ElementType dtype, ReduceOp op, std::span<std::byte> block) {
  check_sharded_array_dtype(dtype, "fill_reduce_identity");
  visit_data_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T identity = reduce_identity_of<T>(op);
    for (size_t off = 0; off + sizeof(T) <= block.size(); off += sizeof(T)) {
      std::memcpy(block.data() + off, &identity, sizeof(T));
    }
  });
}

float reduce_identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return 0.0f;
    case ReduceOp::kProd:
      return 1.0f;
    case ReduceOp::kMax:
      return -std::numeric_limits<float>::infinity();
    case ReduceOp::kMin:
      return std::numeric_limits<float>::infinity();
  }
  return 0.0f;
}

ShardedArray::ShardedArray(ElementType dtype, std::vector<int64_t> global_shape,
                           NamedSharding sharding, std::vector<DeviceBuffer> buffers)
    : dtype_(dtype),
      global_shape_(std::move(global_shape)),
      sharding_(std::move(sharding)),
      num_elements_(num_elements_of(global_shape_)),
      buffers_(std::move(buffers)) {}

ShardedArray ShardedArray::device_put(Runtime& runtime, std::span<const float> host,
                                      std::vector<int64_t> global_shape, NamedSharding sharding,
                                      const std::string& label) {
  return device_put(runtime, ElementType::kF32, std::as_bytes(host), std::move(global_shape),
                    std::move(sharding), label);
}

ShardedArray ShardedArray::device_put(Runtime& runtime, ElementType dtype,
                                      std::span<const std::byte> host,
                                      std::vector<int64_t> global_shape, NamedSharding sharding,
                                      const std::string& label) {
  check_sharded_array_dtype(dtype, "device_put");
  sharding.check_shape(global_shape);
  const int64_t n = num_elements_of(global_shape);
  const uint64_t element_bytes = element_size_bytes(dtype);
  if (host.size() != static_cast<uint64_t>(n) * element_bytes) {
    throw InvalidArgumentError(
        "device_put got a host array of " + std::to_string(host.size() / element_bytes) +
        " elements (" + std::to_string(host.size()) + " bytes) for " +
        std::string(element_type_name(dtype)) + " global shape " + shape_text(global_shape) +
        " (expected " + std::to_string(n) + " elements)");
  }
  const std::vector<int>& devices = sharding.mesh().devices();
  for (int id : devices) {
    if (id >= runtime.num_cores()) {
      throw InvalidArgumentError("mesh device " + std::to_string(id) + " of " +
                                 sharding.mesh().to_string() + " is not a core of the runtime (" +
                                 "expected core ids 0.." + std::to_string(runtime.num_cores() - 1) +
                                 ")");
    }
    if (runtime.is_local(id) && !runtime.core(id).hbm().has_backing()) {
      throw FailedPreconditionError("device_put to core " + std::to_string(id) +
                                    ", whose HBM arena is metadata-only (hbm_backing=false) and "
                                    "cannot hold data");
    }
  }
  // Allocate in mesh order first, so that an out-of-memory error is deterministic and frees
  // every buffer already made; then copy in parallel. Only this process's cores get blocks.
  std::vector<std::vector<IndexRange>> boxes(devices.size());
  std::vector<DeviceBuffer> buffers(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!runtime.is_local(devices[i])) continue;
    boxes[i] = sharding.index_ranges(devices[i], global_shape);
    std::vector<int64_t> local;
    for (const IndexRange& r : boxes[i]) local.push_back(r.size());
    buffers[i] = runtime.allocate_array(devices[i], dtype, local, label);
  }
  parallel_for_index(devices.size(), [&](size_t i) {
    if (!buffers[i].valid()) return;  // another process's device
    // Pinned: a core's program may allocate meanwhile and compact the arena (auto-defragment).
    const BufferPin pin = buffers[i].pin();
    const std::span<std::byte> block = buffers[i].as<std::byte>();
    if (sharding.partial_index(devices[i]) == 0) {
      copy_block_bytes(BlockCopyDirection::kExtract, host.data(), host.size(), block.data(),
                       block.size(), global_shape, boxes[i], element_bytes);
    } else {
      fill_reduce_identity(dtype, sharding.spec().reduce_op(), block);
    }
  });
  ShardedArray array(dtype, std::move(global_shape), std::move(sharding), std::move(buffers));
  array.set_processes(runtime);
  return array;
}

void ShardedArray::set_processes(const Runtime& runtime) {
  if (runtime.process_count() == 1) return;
  processes_ = runtime.shared_process_group();
  cores_per_process_ = runtime.local_num_cores();
}

ShardedArray ShardedArray::from_buffers(std::vector<int64_t> global_shape, NamedSharding sharding,
                                        std::vector<DeviceBuffer> buffers, ElementType dtype) {
  return adopt_buffers(nullptr, std::move(global_shape), std::move(sharding), std::move(buffers),
                       dtype);
}

ShardedArray ShardedArray::from_buffers(const Runtime& runtime, std::vector<int64_t> global_shape,
                                        NamedSharding sharding, std::vector<DeviceBuffer> buffers,
                                        ElementType dtype) {
  return adopt_buffers(&runtime, std::move(global_shape), std::move(sharding), std::move(buffers),
                       dtype);
}

ShardedArray ShardedArray::adopt_buffers(const Runtime* runtime, std::vector<int64_t> global_shape,
                                         NamedSharding sharding, std::vector<DeviceBuffer> buffers,
                                         ElementType dtype) {
  check_sharded_array_dtype(dtype, "from_buffers");
  sharding.check_shape(global_shape);
  num_elements_of(global_shape);  // checks the size fits
  const std::vector<int>& devices = sharding.mesh().devices();
  if (buffers.size() != devices.size()) {
    throw InvalidArgumentError("from_buffers got " + std::to_string(buffers.size()) +
                               " buffers for " + sharding.mesh().to_string() + " (expected " +
                               std::to_string(devices.size()) + ", one per mesh device)");
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    if (runtime != nullptr && !runtime->is_local(devices[i])) {
      if (buffers[i].valid()) {
        throw InvalidArgumentError("from_buffers: buffer " + std::to_string(i) + " is on core " +
                                   std::to_string(buffers[i].core_id()) + " for mesh device " +
                                   std::to_string(devices[i]) + " of process " +
                                   std::to_string(runtime->process_of(devices[i])) +
                                   " (expected an empty buffer: this is process " +
                                   std::to_string(runtime->process_index()) + ")");
      }
      continue;
    }
    const std::vector<int64_t> local = sharding.local_shape(devices[i], global_shape);
    const uint64_t want = static_cast<uint64_t>(num_elements_of(local)) * element_size_bytes(dtype);
    if (!buffers[i].valid() || buffers[i].core_id() != devices[i]) {
      throw InvalidArgumentError("from_buffers: buffer " + std::to_string(i) + " is on core " +
                                 std::to_string(buffers[i].core_id()) + " (expected core " +
                                 std::to_string(devices[i]) + ", mesh device " + std::to_string(i) +
                                 ")");
    }
    if (buffers[i].size_bytes() != want) {
      throw InvalidArgumentError(
          "from_buffers: buffer " + std::to_string(i) + " on core " + std::to_string(devices[i]) +
          " holds " + std::to_string(buffers[i].size_bytes()) + " bytes (expected " +
          std::to_string(want) + " bytes for its " + std::string(element_type_name(dtype)) +
          " block of shape " + shape_text(local) + ")");
    }
  }
  ShardedArray array(dtype, std::move(global_shape), std::move(sharding), std::move(buffers));
  if (runtime != nullptr) array.set_processes(*runtime);
  return array;
}

void ShardedArray::check_dtype(ElementType want, const char* what) const {
  if (want != dtype_) {
    throw InvalidArgumentError(std::string(what) + "<" + std::string(element_type_name(want)) +
                               "> of a " + std::string(element_type_name(dtype_)) + " array " +
                               "(expected the array's dtype, " +
                               std::string(element_type_name(dtype_)) + ")");
  }
}

template <typename T>
std::vector<T> ShardedArray::gather() const {
  check_dtype(data_type_of<T>(), "gather");
  std::vector<T> out(static_cast<size_t>(num_elements_));
  const std::vector<int>& devices = sharding_.mesh().devices();
  // Replica-0 slots with partial index p: for each p, their blocks tile the array.
  std::vector<std::vector<size_t>> owners(static_cast<size_t>(sharding_.num_partials()));
  for (size_t i = 0; i < devices.size(); ++i) {
    if (sharding_.replica_id(devices[i]) == 0) {
      owners[static_cast<size_t>(sharding_.partial_index(devices[i]))].push_back(i);
    }
  }
  const ReduceOp op = sharding_.spec().reduce_op();
  const std::vector<std::vector<std::byte>> remote = exchange_replica_blocks();
  for (size_t p = 0; p < owners.size(); ++p) {  // in partial-index order: a left fold
    parallel_for_index(owners[p].size(), [&](size_t k) {
      const size_t i = owners[p][k];
      // Pinned: a core's program may allocate meanwhile and compact the arena (auto-defragment),
      // which would move the block while it is copied.
      BufferPin pin;
      std::span<const T> block;
      if (buffers_[i].valid()) {
        pin = buffers_[i].pin();
        block = buffers_[i].as<const T>();
      } else {  // another process's block; vector storage is aligned for any element type
        block = {reinterpret_cast<const T*>(remote[i].data()), remote[i].size() / sizeof(T)};
      }
      const std::vector<IndexRange> box = sharding_.index_ranges(devices[i], global_shape_);
      if (p == 0) {
        insert_block(block, global_shape_, box, std::span<T>(out));
        return;
      }
      std::vector<T> acc(block.size());
      extract_block(std::span<const T>(out), global_shape_, box, std::span<T>(acc));
      for (size_t e = 0; e < acc.size(); ++e) acc[e] = combine(acc[e], block[e], op);
      insert_block(std::span<const T>(acc), global_shape_, box, std::span<T>(out));
    });
  }
  return out;
}

template std::vector<float> ShardedArray::gather<float>() const;
template std::vector<BFloat16> ShardedArray::gather<BFloat16>() const;
template std::vector<Float16> ShardedArray::gather<Float16>() const;
template std::vector<int32_t> ShardedArray::gather<int32_t>() const;
template std::vector<int64_t> ShardedArray::gather<int64_t>() const;

std::vector<std::vector<std::byte>> ShardedArray::exchange_replica_blocks() const {
  const std::vector<int>& devices = sharding_.mesh().devices();
  std::vector<std::vector<std::byte>> blocks(devices.size());
  if (processes_ == nullptr) return blocks;
  // This process's replica-0 blocks, in mesh order, one after another.
  std::vector<std::byte> mine;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!buffers_[i].valid() || sharding_.replica_id(devices[i]) != 0) continue;
    const BufferPin pin = buffers_[i].pin();
    const std::span<const std::byte> b = buffers_[i].as<const std::byte>();
    mine.insert(mine.end(), b.begin(), b.end());
  }
  const std::vector<std::vector<std::byte>> parts = processes_->all_gather(mine);
  // Every process knows every block's size, so each part splits in mesh order.
  std::vector<size_t> offset(parts.size(), 0);
  const uint64_t element_bytes = element_size_bytes(dtype_);
  for (size_t i = 0; i < devices.size(); ++i) {
    if (sharding_.replica_id(devices[i]) != 0) continue;
    const size_t p = static_cast<size_t>(process_of(devices[i]));
    const size_t bytes = static_cast<size_t>(
        static_cast<uint64_t>(num_elements_of(local_shape(devices[i]))) * element_bytes);
    if (p >= parts.size() || offset[p] + bytes > parts[p].size()) {
      throw InternalError("gather of " + to_string() + ": process " + std::to_string(p) + " sent " +
                          std::to_string(p < parts.size() ? parts[p].size() : 0) +
                          " bytes (expected its replica-0 blocks)");
    }
    if (!buffers_[i].valid()) {
      blocks[i].assign(parts[p].begin() + static_cast<std::ptrdiff_t>(offset[p]),
                       parts[p].begin() + static_cast<std::ptrdiff_t>(offset[p] + bytes));
    }
    offset[p] += bytes;
  }
  return blocks;
}

size_t ShardedArray::slot_of(int device) const {
  return static_cast<size_t>(sharding_.mesh().flat_index_of(device));
}

int ShardedArray::process_of(int device) const {
  return processes_ == nullptr ? 0 : device / cores_per_process_;
}

bool ShardedArray::is_addressable(int device) const {
  return processes_ == nullptr || process_of(device) == processes_->process_index();
}

bool ShardedArray::is_fully_addressable() const {
  return std::ranges::all_of(sharding_.mesh().devices(),
                             [this](int d) { return is_addressable(d); });
}

std::vector<IndexRange> ShardedArray::index_ranges(int device) const {
  return sharding_.index_ranges(device, global_shape_);
}

std::vector<int64_t> ShardedArray::local_shape(int device) const {
  return sharding_.local_shape(device, global_shape_);
}

const DeviceBuffer& ShardedArray::buffer(int device) const {
  const size_t slot = slot_of(device);
  if (!is_addressable(device)) {
    throw FailedPreconditionError(
        "device " + std::to_string(device) + " of " + to_string() + " is hosted by process " +
        std::to_string(process_of(device)) + " (expected a device of this process, " +
        std::to_string(processes_->process_index()) + "; gather() the array to read it here)");
  }
  return buffers_[slot];
}

std::string ShardedArray::to_string() const {
  std::string dims;
  for (size_t i = 0; i < global_shape_.size(); ++i) {
    dims += (i ? "," : "") + std::to_string(global_shape_[i]);
  }
  return "ShardedArray(" + std::string(element_type_name(dtype_)) + "[" + dims + "], " +
         sharding_.to_string() + ")";
}

}  // namespace vtpu
