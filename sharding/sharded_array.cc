#include "vtpu/sharding/sharded_array.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "vtpu/collectives/reduce_kernels.h"
#include "vtpu/common/error.h"
#include "vtpu/sharding/block_copy.h"

namespace vtpu {

namespace {

/// Runs fn(i) for i in [0, n) on oneTBB's workers. An exception from fn is rethrown to the
/// caller (oneTBB cancels the remaining work and rethrows the first one).
template <typename Fn>
void parallel_over(size_t n, const Fn& fn) {
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n), [&](const tbb::blocked_range<size_t>& r) {
    for (size_t i = r.begin(); i != r.end(); ++i) fn(i);
  });
}

}  // namespace

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

ShardedArray::ShardedArray(std::vector<int64_t> global_shape, NamedSharding sharding,
                           std::vector<DeviceBuffer> buffers)
    : global_shape_(std::move(global_shape)),
      sharding_(std::move(sharding)),
      num_elements_(num_elements_of(global_shape_)),
      buffers_(std::move(buffers)) {}

ShardedArray ShardedArray::device_put(Runtime& runtime, std::span<const float> host,
                                      std::vector<int64_t> global_shape, NamedSharding sharding,
                                      const std::string& label) {
  sharding.check_shape(global_shape);
  const int64_t n = num_elements_of(global_shape);
  if (host.size() != static_cast<size_t>(n)) {
    throw InvalidArgumentError("device_put got a host array of " + std::to_string(host.size()) +
                               " elements for global shape " + shape_text(global_shape) +
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
    if (!runtime.core(id).hbm().has_backing()) {
      throw FailedPreconditionError("device_put to core " + std::to_string(id) +
                                    ", whose HBM arena is metadata-only (hbm_backing=false) and "
                                    "cannot hold data");
    }
  }
  // Allocate in mesh order first, so that an out-of-memory error is deterministic and frees
  // every buffer already made; then copy in parallel.
  std::vector<std::vector<IndexRange>> boxes(devices.size());
  std::vector<DeviceBuffer> buffers(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    boxes[i] = sharding.index_ranges(devices[i], global_shape);
    int64_t block_elements = 1;
    for (const IndexRange& r : boxes[i]) block_elements *= r.size();
    buffers[i] =
        runtime.allocate(devices[i], static_cast<uint64_t>(block_elements) * sizeof(float), label);
  }
  parallel_over(devices.size(), [&](size_t i) {
    // Pinned: a core's program may allocate meanwhile and compact the arena (auto-defragment).
    const BufferPin pin = buffers[i].pin();
    if (sharding.partial_index(devices[i]) == 0) {
      extract_block(host, global_shape, boxes[i], buffers[i].as<float>());
    } else {
      const std::span<float> block = buffers[i].as<float>();
      std::fill(block.begin(), block.end(), reduce_identity(sharding.spec().reduce_op()));
    }
  });
  return ShardedArray(std::move(global_shape), std::move(sharding), std::move(buffers));
}

ShardedArray ShardedArray::from_buffers(std::vector<int64_t> global_shape, NamedSharding sharding,
                                        std::vector<DeviceBuffer> buffers) {
  sharding.check_shape(global_shape);
  num_elements_of(global_shape);  // checks the size fits
  const std::vector<int>& devices = sharding.mesh().devices();
  if (buffers.size() != devices.size()) {
    throw InvalidArgumentError("from_buffers got " + std::to_string(buffers.size()) +
                               " buffers for " + sharding.mesh().to_string() + " (expected " +
                               std::to_string(devices.size()) + ", one per mesh device)");
  }
  for (size_t i = 0; i < devices.size(); ++i) {
    const std::vector<int64_t> local = sharding.local_shape(devices[i], global_shape);
    const uint64_t want = static_cast<uint64_t>(num_elements_of(local)) * sizeof(float);
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
          std::to_string(want) + " bytes for its f32 block of shape " + shape_text(local) + ")");
    }
  }
  return ShardedArray(std::move(global_shape), std::move(sharding), std::move(buffers));
}

std::vector<float> ShardedArray::gather() const {
  std::vector<float> out(static_cast<size_t>(num_elements_));
  const std::vector<int>& devices = sharding_.mesh().devices();
  // Replica-0 slots with partial index p: for each p, their blocks tile the array.
  std::vector<std::vector<size_t>> owners(static_cast<size_t>(sharding_.num_partials()));
  for (size_t i = 0; i < devices.size(); ++i) {
    if (sharding_.replica_id(devices[i]) == 0) {
      owners[static_cast<size_t>(sharding_.partial_index(devices[i]))].push_back(i);
    }
  }
  const ReduceOp op = sharding_.spec().reduce_op();
  for (size_t p = 0; p < owners.size(); ++p) {  // in partial-index order: a left fold
    parallel_over(owners[p].size(), [&](size_t k) {
      const size_t i = owners[p][k];
      // Pinned: a core's program may allocate meanwhile and compact the arena (auto-defragment),
      // which would move the block while it is copied.
      const BufferPin pin = buffers_[i].pin();
      const std::span<const float> block = buffers_[i].as<const float>();
      const std::vector<IndexRange> box = sharding_.index_ranges(devices[i], global_shape_);
      if (p == 0) {
        insert_block(block, global_shape_, box, std::span<float>(out));
        return;
      }
      std::vector<float> acc(block.size());
      extract_block(std::span<const float>(out), global_shape_, box, std::span<float>(acc));
      for (size_t e = 0; e < acc.size(); ++e) acc[e] = combine(acc[e], block[e], op);
      insert_block(std::span<const float>(acc), global_shape_, box, std::span<float>(out));
    });
  }
  return out;
}

size_t ShardedArray::slot_of(int device) const {
  return static_cast<size_t>(sharding_.mesh().flat_index_of(device));
}

std::vector<IndexRange> ShardedArray::index_ranges(int device) const {
  return sharding_.index_ranges(device, global_shape_);
}

std::vector<int64_t> ShardedArray::local_shape(int device) const {
  return sharding_.local_shape(device, global_shape_);
}

std::span<const float> ShardedArray::local_data(int device) const {
  return buffers_[slot_of(device)].as<const float>();
}

std::span<float> ShardedArray::local_data(int device) {
  return buffers_[slot_of(device)].as<float>();
}

const DeviceBuffer& ShardedArray::buffer(int device) const { return buffers_[slot_of(device)]; }

std::string ShardedArray::to_string() const {
  std::string dims;
  for (size_t i = 0; i < global_shape_.size(); ++i) {
    dims += (i ? "," : "") + std::to_string(global_shape_[i]);
  }
  return "ShardedArray(f32[" + dims + "], " + sharding_.to_string() + ")";
}

}  // namespace vtpu
