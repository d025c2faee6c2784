// shard_map with named mesh axes, after jax.shard_map: a function runs on every core of a mesh
// with that core's blocks of the inputs, calls collectives by mesh axis name (psum(x, "data")),
// and its per-core results are assembled into sharded arrays by the out specs.
//
//     Runtime rt(options);                                    // 8 cores
//     DeviceMesh mesh = make_mesh(rt, {2, 4}, {"data", "model"});
//     ShardedArray x = ShardedArray::device_put(rt, host, {8, 16},
//                                               NamedSharding(mesh, P("data", "model")));
//     auto f = shard_map(mesh, {P("data", "model")}, {P(None, "model")},
//                        [](ShardMapContext& ctx, std::span<const LocalArray> in) {
//                          return outputs(ctx.psum(in[0], "data"));       // over rows
//                        });
//     std::vector<ShardedArray> out = f(x);
//
// A DeviceMesh is a Mesh bound to a Runtime; it makes the communicators of an axis set (one per
// replica group, Mesh::replica_groups) on first use and reuses them for every later call, from
// every copy of the mesh. Differences from JAX are listed in docs/JAX.md.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "vtpu/collectives/communicator.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/sharding/local_array.h"
#include "vtpu/sharding/mesh.h"
#include "vtpu/sharding/partition_spec.h"
#include "vtpu/sharding/sharded_array.h"

namespace vtpu {

/// One mesh axis name or a tuple of them, as a JAX collective's axis_name: "x" or {"x", "y"}.
/// A tuple is flattened row-major in the given order (JAX's rule): on a (2, 4) mesh ("x", "y"),
/// axis_index({"x", "y"}) of the device at (1, 2) is 1 * 4 + 2 = 6.
class AxisNames {
 public:
  AxisNames(const char* name) : names_{name} {}             // NOLINT(runtime/explicit)
  AxisNames(std::string name) : names_{std::move(name)} {}  // NOLINT(runtime/explicit)
  AxisNames(std::initializer_list<std::string> names) : names_(names) {}
  AxisNames(std::vector<std::string> names) : names_(std::move(names)) {}  // NOLINT
  const std::vector<std::string>& names() const { return names_; }
  /// "'x'" or "('x', 'y')", as JAX prints it.
  std::string to_string() const;

 private:
  std::vector<std::string> names_;
};

/// A Mesh bound to the Runtime whose cores it names, with the communicators of its axis sets.
/// Copies share the communicators. Thread-safe. Must not outlive its Runtime.
class DeviceMesh : public Mesh {
 public:
  /// Throws InvalidArgumentError when a device id is not a core of `runtime`.
  DeviceMesh(Runtime& runtime, Mesh mesh);
  DeviceMesh(Runtime& runtime, Mesh mesh, CommunicatorOptions options);

  Runtime& runtime() const { return *runtime_; }
  /// The communicator of `device`'s replica group over `axes` (flattened in the given order),
  /// made with the groups of that axis tuple on first use and reused afterwards. Throws
  /// InvalidArgumentError for an unknown or repeated axis name or a device not in the mesh.
  Communicator& communicator(const AxisNames& axes, int device) const;
  /// Mesh axis positions of `axes`, in the given order. Throws InvalidArgumentError for an
  /// unknown or repeated name.
  std::vector<int> axis_positions(const AxisNames& axes) const;
  /// Clears an abort on every communicator made so far (Communicator::reset), so that a failed
  /// shard_map does not fail every later one. Host side only, when no program uses the mesh.
  void reset_communicators() const;
  /// Held by ShardMap for a whole call: shard_map calls on one mesh (from any thread, through
  /// any copy) run one at a time, since a failing call aborts and then resets the communicators
  /// the other would be using. A fn must not call shard_map on its own mesh.
  std::unique_lock<std::mutex> lock_for_run() const;

 private:
  struct Communicators;
  Runtime* runtime_;
  std::shared_ptr<Communicators> comms_;
};

/// jax.make_mesh: a mesh of `axis_shapes` named `axis_names` over cores 0..n-1 of `runtime`
/// (n = product of the shapes). Throws InvalidArgumentError when n exceeds runtime.num_cores(),
/// or as the Mesh constructor does.
DeviceMesh make_mesh(Runtime& runtime, std::vector<int64_t> axis_shapes,
                     std::vector<std::string> axis_names);
/// The same over the given core ids (row-major over the mesh coordinates).
DeviceMesh make_mesh(Runtime& runtime, std::vector<int64_t> axis_shapes,
                     std::vector<std::string> axis_names, std::vector<int> devices);

/// What fn sees on one core: the core, its mesh position, and the named collectives. Every
/// collective returns a new LocalArray on this core and leaves its input unchanged; the
/// overloads taking `LocalArray&&` donate the input, whose buffer may then hold the result.
/// Every core of the axis set must call the same collectives in the same order (as in JAX, the
/// program is SPMD); a core that differs fails with the communicator's desync error, naming both
/// cores' fingerprints (dtype, shape, op). Errors: InvalidArgumentError for an unknown axis name,
/// a bad axis or perm, or dtypes the collective does not take; DeadlineExceededError and
/// AbortedError as Communicator.
class ShardMapContext {
 public:
  ShardMapContext(const DeviceMesh& mesh, CoreContext& core);

  CoreContext& core() const { return core_; }
  const DeviceMesh& mesh() const { return mesh_; }
  /// This core's id (the mesh device id).
  int device() const;

  /// lax.axis_index: this device's index over `axes`, flattened row-major in the given order.
  int64_t axis_index(const AxisNames& axes) const;
  /// lax.axis_size (jax.lax.psum(1, axes)): the product of the axes' sizes.
  int64_t axis_size(const AxisNames& axes) const;

  /// lax.psum / pmax / pmin over `axes`: every core of the group gets the rank-order fold.
  LocalArray psum(const LocalArray& x, const AxisNames& axes);
  LocalArray psum(LocalArray&& x, const AxisNames& axes);
  LocalArray pmax(const LocalArray& x, const AxisNames& axes);
  LocalArray pmin(const LocalArray& x, const AxisNames& axes);
  /// lax.pmean: psum / axis_size. Floating dtypes keep their dtype; integer inputs give f32, as
  /// JAX's true division of an integer array (docs/JAX.md).
  LocalArray pmean(const LocalArray& x, const AxisNames& axes);
  /// lax.all_gather(x, axes, axis=axis, tiled=tiled).
  LocalArray all_gather(const LocalArray& x, const AxisNames& axes, int axis = 0,
                        bool tiled = false);
  /// lax.psum_scatter(x, axes, scatter_dimension=..., tiled=...).
  LocalArray psum_scatter(const LocalArray& x, const AxisNames& axes, int scatter_dimension = 0,
                          bool tiled = false);
  /// lax.all_to_all(x, axes, split_axis, concat_axis, tiled=...): untiled, x.shape[split_axis]
  /// must equal the axis size; that dimension is removed and one of that size is inserted at
  /// concat_axis. Tiled: the split dimension is divided and the concat dimension multiplied.
  LocalArray all_to_all(const LocalArray& x, const AxisNames& axes, int split_axis, int concat_axis,
                        bool tiled = false);
  /// lax.ppermute(x, axes, perm): (source, destination) pairs of axis indices; a device that
  /// receives nothing gets zeros. A repeated source or destination is InvalidArgumentError.
  LocalArray ppermute(const LocalArray& x, const AxisNames& axes,
                      std::span<const PermutePair> perm);
  LocalArray ppermute(LocalArray&& x, const AxisNames& axes, std::span<const PermutePair> perm);

  /// The communicator behind `axes` for this core, for what the named forms do not offer (the
  /// async *_start forms, byte spans into existing buffers).
  Communicator& communicator(const AxisNames& axes) const;

 private:
  // A collective over `axes` whose output has `out_shape`: allocates the output and runs `op`
  // with the input and output bytes pinned.
  template <typename Op>
  LocalArray run(const LocalArray& x, std::vector<int64_t> out_shape, const AxisNames& axes,
                 Op&& op);
  LocalArray reduce(const LocalArray& x, const AxisNames& axes, ReduceOp op);

  struct CachedCommunicator {
    std::vector<std::string> names;
    Communicator* communicator;
  };
  const DeviceMesh& mesh_;
  CoreContext& core_;
  // This core's communicators by axis names, so that a repeated collective takes no lock.
  mutable std::vector<CachedCommunicator> cache_;
};

/// The function shard_map runs on every core: it gets this core's block of every input (in the
/// order of the in specs) and returns its block of every output (in the order of the out specs).
using ShardMapFn =
    std::function<std::vector<LocalArray>(ShardMapContext&, std::span<const LocalArray>)>;

struct ShardMapOptions {
  /// JAX's check_vma: an out spec that leaves a mesh axis out promises the output is equal on
  /// every device along it. true (default): shard_map compares those blocks byte for byte and
  /// throws InvalidArgumentError naming the output, the axis and the first two devices that
  /// differ. (JAX checks this statically; vtpu compares the values.) false: no check; the
  /// device with index 0 on the unnamed axes supplies the block.
  bool check_vma = true;
  /// A single out spec is a prefix for every output, as JAX's single P for a tuple result: the
  /// number of outputs is whatever fn returns (the same on every core), each laid out by it.
  bool out_spec_prefix = false;
};

/// fn's return value from its outputs, as JAX's fn returns a tuple: `return outputs(a, b);`
/// (a braced std::vector cannot hold move-only arrays).
template <typename... Arrays>
std::vector<LocalArray> outputs(Arrays&&... arrays) {
  std::vector<LocalArray> out;
  out.reserve(sizeof...(arrays));
  (out.push_back(std::forward<Arrays>(arrays)), ...);
  return out;
}

/// A function mapped over a mesh: call it with the inputs. Thread-compatible.
class ShardMap {
 public:
  ShardMap(DeviceMesh mesh, std::vector<PartitionSpec> in_specs,
           std::vector<PartitionSpec> out_specs, ShardMapFn fn, ShardMapOptions options = {});

  /// Runs fn on every core of the mesh (Runtime::run_spmd). An input whose sharding is not
  /// NamedSharding(mesh, in_spec) is resharded to it first (sharding/reshard.h); the blocks fn
  /// sees are read-only views of the inputs. Output i has the dtype fn returned and the global
  /// shape local shape x shard count per dimension of out_specs[i]. Throws InvalidArgumentError
  /// when the number of inputs or outputs differs from the specs, a spec names an axis the mesh
  /// lacks, cores return different dtypes or shapes for one output (naming both), or a
  /// check_vma comparison fails; fn's own exception otherwise (the first core's).
  std::vector<ShardedArray> operator()(std::span<const ShardedArray* const> inputs) const;
  template <typename... Arrays>
  std::vector<ShardedArray> operator()(const Arrays&... inputs) const {
    const ShardedArray* list[] = {&inputs..., nullptr};
    return (*this)(std::span<const ShardedArray* const>(list, sizeof...(inputs)));
  }

  const DeviceMesh& mesh() const { return mesh_; }

 private:
  DeviceMesh mesh_;
  std::vector<PartitionSpec> in_specs_;
  std::vector<PartitionSpec> out_specs_;
  ShardMapFn fn_;
  ShardMapOptions options_;
};

/// jax.shard_map(fn, mesh=mesh, in_specs=..., out_specs=...), with the mesh first.
ShardMap shard_map(DeviceMesh mesh, std::vector<PartitionSpec> in_specs,
                   std::vector<PartitionSpec> out_specs, ShardMapFn fn,
                   ShardMapOptions options = {});

}  // namespace vtpu
