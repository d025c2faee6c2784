#include "vtpu/sharding/reshard.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <span>

#include "vtpu/collectives/communicator.h"
#include "vtpu/common/error.h"
#include "vtpu/runtime/process_exchange.h"
#include "vtpu/sharding/block_copy.h"

namespace vtpu {

namespace {

std::vector<IndexRange> origin_box(const std::vector<int64_t>& shape) {
  std::vector<IndexRange> box;
  for (int64_t s : shape) box.push_back({0, s});
  return box;
}

/// dst (shape dst_shape) = the identity of `op` everywhere, then src (shape src_shape) at the
/// origin. Blocks are raw bytes of `dtype`.
void pad_block(ElementType dtype, std::span<const std::byte> src,
               const std::vector<int64_t>& src_shape, std::span<std::byte> dst,
               const std::vector<int64_t>& dst_shape, ReduceOp op) {
  fill_reduce_identity(dtype, op, dst);
  copy_block_bytes(BlockCopyDirection::kInsert, src.data(), src.size(), dst.data(), dst.size(),
                   dst_shape, origin_box(src_shape), element_size_bytes(dtype));
}

/// dst (shape dst_shape) = src[origin box of dst_shape] for src of shape src_shape.
void trim_block(ElementType dtype, std::span<const std::byte> src,
                const std::vector<int64_t>& src_shape, std::span<std::byte> dst,
                const std::vector<int64_t>& dst_shape) {
  copy_block_bytes(BlockCopyDirection::kExtract, src.data(), src.size(), dst.data(), dst.size(),
                   src_shape, origin_box(dst_shape), element_size_bytes(dtype));
}

/// The communicator each device of a step uses.
std::map<int, Communicator*> step_comms(ReshardCommunicatorCache& cache, const ReshardStep& step) {
  std::map<int, Communicator*> of_device;
  if (step.replica_groups.empty()) return of_device;
  const std::vector<std::unique_ptr<Communicator>>& comms = cache.get(step.replica_groups);
  for (size_t g = 0; g < step.replica_groups.size(); ++g) {
    for (int dev : step.replica_groups[g]) of_device[dev] = comms[g].get();
  }
  return of_device;
}

/// What every core of one step shares, set up on the host before the step's program runs.
struct StepSetup {
  ElementType dtype;
  const ReshardStep& step;
  const std::vector<int64_t>& shape;  // the array's global shape
  const NamedSharding& before;
  const NamedSharding& after;
  std::map<int, Communicator*> of_device;
  std::map<int, int> source_of;  // permute: destination device -> source device
  std::vector<PermutePair> rank_pairs;
};

/// One core's view of a step: its input block and its result block (bytes of the array's dtype),
/// with their shapes.
struct CoreBlocks {
  std::span<const std::byte> in;
  std::vector<int64_t> in_shape;
  std::span<std::byte> res;
  std::vector<int64_t> out_shape;
};

DeviceBuffer scratch(CoreContext& ctx, ElementType dtype, const std::vector<int64_t>& shape) {
  return ctx.allocate_array(dtype, shape, "reshard/scratch");
}

/// All-gather, reduce-scatter or all-to-all on the block padded to the step's buffer shape.
void run_padded_collective(CoreContext& ctx, const StepSetup& s, const CoreBlocks& b) {
  const ReshardStep& step = s.step;
  Communicator& comm = *s.of_device.at(ctx.core_id());
  const int n = static_cast<int>(comm.size());
  std::vector<int64_t> send_shape = b.in_shape;
  std::vector<int64_t> recv_shape;
  const size_t d = static_cast<size_t>(step.dim);
  send_shape[d] = step.buffer_shape[d];
  if (step.op == ReshardOpKind::kAllGather) {
    recv_shape = Communicator::all_gather_shape(send_shape, n, step.dim, /*tiled=*/true);
  } else if (step.op == ReshardOpKind::kReduceScatter) {
    recv_shape = Communicator::reduce_scatter_shape(send_shape, n, step.dim, /*tiled=*/true);
  } else {
    const size_t e = static_cast<size_t>(step.split_dim);
    send_shape[e] = step.buffer_shape[e];
    recv_shape = Communicator::all_to_all_shape(send_shape, n, step.split_dim, step.dim);
  }
  DeviceBuffer send_buf = scratch(ctx, s.dtype, send_shape);
  DeviceBuffer recv_buf = scratch(ctx, s.dtype, recv_shape);
  const BufferPin send_pin = send_buf.pin();
  const BufferPin recv_pin = recv_buf.pin();
  pad_block(s.dtype, b.in, b.in_shape, send_buf.as<std::byte>(), send_shape, step.reduce_op);
  const std::span<const std::byte> send = send_buf.as<const std::byte>();
  const std::span<std::byte> recv = recv_buf.as<std::byte>();
  if (step.op == ReshardOpKind::kAllGather) {
    comm.all_gather_bytes(ctx, s.dtype, send, recv, send_shape, step.dim, /*tiled=*/true);
  } else if (step.op == ReshardOpKind::kReduceScatter) {
    comm.reduce_scatter_bytes(ctx, s.dtype, send, recv, send_shape, step.reduce_op, step.dim,
                              /*tiled=*/true);
  } else {
    comm.all_to_all_bytes(ctx, s.dtype, send, recv, send_shape, step.split_dim, step.dim);
  }
  trim_block(s.dtype, recv_buf.as<const std::byte>(), recv_shape, b.res, b.out_shape);
}

void run_permute(CoreContext& ctx, const StepSetup& s, const CoreBlocks& b) {
  const ReshardStep& step = s.step;
  Communicator& comm = *s.of_device.at(ctx.core_id());
  DeviceBuffer send_buf = scratch(ctx, s.dtype, step.buffer_shape);
  DeviceBuffer recv_buf = scratch(ctx, s.dtype, step.buffer_shape);
  const BufferPin send_pin = send_buf.pin();
  const BufferPin recv_pin = recv_buf.pin();
  pad_block(s.dtype, b.in, b.in_shape, send_buf.as<std::byte>(), step.buffer_shape,
            ReduceOp::kSum);  // zeros
  comm.collective_permute_bytes(ctx, s.dtype, send_buf.as<const std::byte>(),
                                recv_buf.as<std::byte>(), step.buffer_shape, s.rank_pairs);
  if (s.source_of.count(ctx.core_id())) {
    trim_block(s.dtype, recv_buf.as<const std::byte>(), step.buffer_shape, b.res, b.out_shape);
  } else {
    std::copy(b.in.begin(), b.in.end(), b.res.begin());  // it already holds its block
  }
}

void run_slice(int dev, const StepSetup& s, const CoreBlocks& b) {
  const std::vector<IndexRange> have = s.before.index_ranges(dev, s.shape);
  std::vector<IndexRange> box = s.after.index_ranges(dev, s.shape);
  for (size_t k = 0; k < box.size(); ++k) {
    box[k].start -= have[k].start;
    box[k].stop -= have[k].start;
  }
  copy_block_bytes(BlockCopyDirection::kExtract, b.in.data(), b.in.size(), b.res.data(),
                   b.res.size(), b.in_shape, box, element_size_bytes(s.dtype));
}

void run_make_partial(int dev, const StepSetup& s, const CoreBlocks& b) {
  // Only the new unreduced axes decide who keeps the value: kept ones already hold addends.
  const Mesh& mesh = s.before.mesh();
  const std::vector<int64_t> coords = mesh.coords_of(dev);
  bool keeps = true;
  for (const std::string& name : s.step.axes) {
    keeps = keeps && coords[static_cast<size_t>(mesh.axis_index(name))] == 0;
  }
  if (keeps) {
    std::copy(b.in.begin(), b.in.end(), b.res.begin());
  } else {
    fill_reduce_identity(s.dtype, s.step.reduce_op, b.res);
  }
}

/// One core's part of a step: its new block, in a buffer of its own HBM.
DeviceBuffer run_step_on_core(CoreContext& ctx, const StepSetup& s, const DeviceBuffer& in_buf) {
  const int dev = ctx.core_id();
  const std::vector<int64_t> out_shape = s.after.local_shape(dev, s.shape);
  DeviceBuffer result =
      ctx.allocate_array(s.dtype, out_shape, "reshard/" + reshard_op_name(s.step.op));
  const BufferPin in_pin = in_buf.pin();
  const BufferPin out_pin = result.pin();
  const CoreBlocks b{in_buf.as<const std::byte>(), s.before.local_shape(dev, s.shape),
                     result.as<std::byte>(), out_shape};
  switch (s.step.op) {
    case ReshardOpKind::kAllReduce:
      s.of_device.at(dev)->all_reduce_bytes(ctx, s.dtype, b.in, b.res, out_shape, s.step.reduce_op);
      break;
    case ReshardOpKind::kAllGather:
    case ReshardOpKind::kReduceScatter:
    case ReshardOpKind::kAllToAll:
      run_padded_collective(ctx, s, b);
      break;
    case ReshardOpKind::kCollectivePermute:
      run_permute(ctx, s, b);
      break;
    case ReshardOpKind::kSlice:
      run_slice(dev, s, b);
      break;
    case ReshardOpKind::kMakePartial:
      run_make_partial(dev, s, b);
      break;
  }
  return result;
}

/// Runs one step on every device of the source mesh; returns each device's new block.
std::map<int, DeviceBuffer> run_step(Runtime& runtime, const StepSetup& s,
                                     const std::map<int, const DeviceBuffer*>& current,
                                     ReshardStepTiming* timing) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int>& devices = s.before.mesh().devices();
  std::map<int, double> seconds_before;  // cached communicators keep counting across steps
  for (const auto& [dev, comm] : s.of_device) seconds_before[dev] = comm->stats(dev).seconds;
  std::map<int, DeviceBuffer> out;  // another process's devices keep an empty buffer
  for (int dev : devices) out[dev] = DeviceBuffer();  // slots exist before the cores write
  runtime.run_spmd(devices, [&](CoreContext& ctx) {
    // The map's nodes exist: no rehash, distinct slots.
    out.at(ctx.core_id()) = run_step_on_core(ctx, s, *current.at(ctx.core_id()));
  });
  if (timing != nullptr) {
    timing->wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& [dev, comm] : s.of_device) {
      if (!runtime.is_local(dev)) continue;
      timing->collective_seconds =
          std::max(timing->collective_seconds, comm->stats(dev).seconds - seconds_before.at(dev));
    }
  }
  return out;
}

/// A copy of every block of `array` in the order of `devices` (empty for another process's), so
/// that a plan without steps still returns an array that owns its buffers.
std::vector<DeviceBuffer> copy_buffers(Runtime& runtime, const ShardedArray& array,
                                       const std::vector<int>& devices) {
  std::vector<DeviceBuffer> buffers;
  for (int dev : devices) {
    if (!runtime.is_local(dev)) {
      buffers.emplace_back();
      continue;
    }
    const DeviceBuffer& src = array.buffer(dev);
    DeviceBuffer copy =
        runtime.allocate_array(dev, array.dtype(), array.local_shape(dev), "reshard/copy");
    const BufferPin a = src.pin(), b = copy.pin();
    const std::span<const std::byte> s = src.as<const std::byte>();
    std::copy(s.begin(), s.end(), copy.as<std::byte>().begin());
    buffers.push_back(std::move(copy));
  }
  return buffers;
}

/// Each step's times as the slowest process saw them (each measured its own cores).
void slowest_process_timings(const Runtime& runtime, std::vector<ReshardStepTiming>& timings) {
  const std::vector<ReshardStepTiming> all =
      all_gather_values(runtime.process_group(), std::span<const ReshardStepTiming>(timings));
  for (size_t k = timings.size(); k < all.size(); ++k) {
    ReshardStepTiming& t = timings[k % timings.size()];
    t.wall_seconds = std::max(t.wall_seconds, all[k].wall_seconds);
    t.collective_seconds = std::max(t.collective_seconds, all[k].collective_seconds);
  }
}

}  // namespace

ReshardCommunicatorCache::ReshardCommunicatorCache(Runtime& runtime) : runtime_(runtime) {}
ReshardCommunicatorCache::~ReshardCommunicatorCache() = default;

const std::vector<std::unique_ptr<Communicator>>& ReshardCommunicatorCache::get(
    const std::vector<std::vector<int>>& groups) {
  auto it = cache_.find(groups);
  if (it == cache_.end()) {
    it = cache_
             .emplace(groups,
                      Communicator::for_groups(
                          runtime_, groups, CommunicatorOptions::from_runtime(runtime_.options())))
             .first;
  }
  return it->second;
}

ShardedArray execute_reshard(Runtime& runtime, const ShardedArray& array, const ReshardPlan& plan,
                             std::vector<ReshardStepTiming>* timings,
                             ReshardCommunicatorCache* communicators) {
  if (timings != nullptr) timings->clear();
  std::unique_ptr<ReshardCommunicatorCache> local_cache;
  if (communicators == nullptr) {
    local_cache = std::make_unique<ReshardCommunicatorCache>(runtime);
    communicators = local_cache.get();
  }
  if (array.global_shape() != plan.global_shape || !(array.sharding() == plan.source)) {
    throw InvalidArgumentError("execute_reshard: the plan is for " +
                               std::string(element_type_name(array.dtype())) +
                               shape_text(plan.global_shape) + " with " + plan.source.to_string() +
                               " but the array is " + array.to_string());
  }
  const std::vector<int64_t>& shape = plan.global_shape;
  const Mesh& src_mesh = plan.source.mesh();
  if (plan.steps.empty()) {
    return ShardedArray::from_buffers(runtime, shape, plan.target,
                                      copy_buffers(runtime, array, plan.target.mesh().devices()),
                                      array.dtype());
  }

  // Current data: one buffer per device id; the first step reads the input array's buffers.
  std::map<int, DeviceBuffer> owned;
  std::map<int, const DeviceBuffer*> current;
  const DeviceBuffer remote;  // another process's device: its block is there
  for (int dev : src_mesh.devices()) {
    current[dev] = runtime.is_local(dev) ? &array.buffer(dev) : &remote;
  }
  NamedSharding cur = plan.source;
  for (const ReshardStep& step : plan.steps) {
    const bool permute = step.op == ReshardOpKind::kCollectivePermute;
    const NamedSharding next = permute ? plan.target : NamedSharding(src_mesh, step.spec_after);
    StepSetup setup{
        array.dtype(), step, shape, cur, next, step_comms(*communicators, step), {}, {}};
    for (const auto& [s, d] : step.pairs) setup.source_of[d] = s;
    if (permute) {
      Communicator& comm = *setup.of_device.begin()->second;
      for (const auto& [s, d] : step.pairs)
        setup.rank_pairs.emplace_back(comm.rank_of(s), comm.rank_of(d));
    }
    ReshardStepTiming timing;
    owned = run_step(runtime, setup, current, timings != nullptr ? &timing : nullptr);
    for (auto& [dev, buffer] : owned) current[dev] = &buffer;
    cur = next;
    if (timings != nullptr) timings->push_back(timing);
  }

  if (timings != nullptr && runtime.process_count() > 1) slowest_process_timings(runtime, *timings);
  std::vector<DeviceBuffer> buffers;
  for (int dev : plan.target.mesh().devices()) buffers.push_back(std::move(owned.at(dev)));
  return ShardedArray::from_buffers(runtime, shape, plan.target, std::move(buffers), array.dtype());
}

}  // namespace vtpu
