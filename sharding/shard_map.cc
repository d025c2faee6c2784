#include "vtpu/sharding/shard_map.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

#include "vtpu/common/error.h"
#include "vtpu/common/float16.h"
#include "vtpu/runtime/process_exchange.h"
#include "vtpu/sharding/block_copy.h"
#include "vtpu/sharding/named_sharding.h"

namespace vtpu {
namespace {

std::string dims_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string array_text(const LocalArray& a) {
  return std::string(element_type_name(a.dtype())) + dims_text(a.shape());
}

// An axis argument in [-rank, rank) (JAX accepts negative axes), as a non-negative one.
int normalize_axis(int axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank) {
    throw InvalidArgumentError(std::string(what) + " " + std::to_string(axis) + " (expected " +
                               std::to_string(-rank) + ".." + std::to_string(rank - 1) + ")");
  }
  return axis < 0 ? static_cast<int>(axis + rank) : axis;
}

float to_f32(float v) { return v; }
float to_f32(BFloat16 v) { return bf16_to_float(v); }
float to_f32(Float16 v) { return f16_to_float(v); }
template <typename T>
T from_f32(float v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return float_to_bf16(v);
  } else if constexpr (std::is_same_v<T, Float16>) {
    return float_to_f16(v);
  } else {
    return v;
  }
}

}  // namespace

std::string AxisNames::to_string() const {
  if (names_.size() == 1) return "'" + names_[0] + "'";
  std::string s = "(";
  for (size_t i = 0; i < names_.size(); ++i) s += (i ? ", '" : "'") + names_[i] + "'";
  return s + ")";
}

// ---- DeviceMesh ----------------------------------------------------------------------------

struct DeviceMesh::Communicators {
  struct Set {
    std::vector<std::unique_ptr<Communicator>> communicators;  // one per replica group
    std::unordered_map<int, Communicator*> by_device;
  };
  CommunicatorOptions options;
  std::mutex run_mu;  // held by each ShardMap call for its whole run
  std::mutex mu;
  std::map<std::vector<int>, Set> sets;  // by axis positions; GUARDED_BY(mu)
};

DeviceMesh::DeviceMesh(Runtime& runtime, Mesh mesh)
    : DeviceMesh(runtime, std::move(mesh), CommunicatorOptions::from_runtime(runtime.options())) {}

DeviceMesh::DeviceMesh(Runtime& runtime, Mesh mesh, CommunicatorOptions options)
    : Mesh(std::move(mesh)), runtime_(&runtime), comms_(std::make_shared<Communicators>()) {
  for (int id : devices()) {
    if (id >= runtime.num_cores()) {
      throw InvalidArgumentError("mesh device " + std::to_string(id) + " of " + to_string() +
                                 " is not a core of the runtime (expected 0.." +
                                 std::to_string(runtime.num_cores() - 1) + ")");
    }
  }
  comms_->options = std::move(options);
}

std::vector<int> DeviceMesh::axis_positions(const AxisNames& axes) const {
  std::vector<int> positions;
  for (const std::string& name : axes.names()) {
    const int p = axis_index(name);
    if (std::ranges::find(positions, p) != positions.end()) {
      throw InvalidArgumentError("axis name '" + name + "' repeated in " + axes.to_string() +
                                 " (expected distinct axes of " + to_string() + ")");
    }
    positions.push_back(p);
  }
  return positions;
}

Communicator& DeviceMesh::communicator(const AxisNames& axes, int device) const {
  const std::vector<int> positions = axis_positions(axes);
  flat_index_of(device);  // throws for a device outside the mesh
  // Every group of the axis tuple is made at once, so that cores asking concurrently from inside
  // run_spmd all find theirs made by whichever came first.
  std::lock_guard<std::mutex> lock(comms_->mu);
  auto it = comms_->sets.find(positions);
  if (it == comms_->sets.end()) {
    Communicators::Set set;
    set.communicators =
        Communicator::for_groups(*runtime_, replica_groups(positions), comms_->options);
    for (const auto& c : set.communicators) {
      for (int id : c->group()) set.by_device[id] = c.get();
    }
    it = comms_->sets.emplace(positions, std::move(set)).first;
  }
  return *it->second.by_device.at(device);
}

void DeviceMesh::reset_communicators() const {
  std::lock_guard<std::mutex> lock(comms_->mu);
  for (auto& [positions, set] : comms_->sets) {
    for (auto& c : set.communicators) {
      if (c->aborted()) c->reset();
    }
  }
}

std::unique_lock<std::mutex> DeviceMesh::lock_for_run() const {
  return std::unique_lock<std::mutex>(comms_->run_mu);
}

DeviceMesh make_mesh(Runtime& runtime, std::vector<int64_t> axis_shapes,
                     std::vector<std::string> axis_names) {
  int64_t n = 1;
  for (int64_t s : axis_shapes) n *= s;
  if (n > runtime.num_cores()) {
    throw InvalidArgumentError("make_mesh of " + std::to_string(n) + " devices on a runtime of " +
                               std::to_string(runtime.num_cores()) + " cores (expected at most " +
                               std::to_string(runtime.num_cores()) + ")");
  }
  return DeviceMesh(runtime, Mesh(std::move(axis_shapes), std::move(axis_names)));
}

DeviceMesh make_mesh(Runtime& runtime, std::vector<int64_t> axis_shapes,
                     std::vector<std::string> axis_names, std::vector<int> devices) {
  return DeviceMesh(runtime,
                    Mesh(std::move(axis_shapes), std::move(axis_names), std::move(devices)));
}

// ---- ShardMapContext -----------------------------------------------------------------------

ShardMapContext::ShardMapContext(const DeviceMesh& mesh, CoreContext& core)
    : mesh_(mesh), core_(core) {}

int ShardMapContext::device() const { return core_.core_id(); }

int64_t ShardMapContext::axis_index(const AxisNames& axes) const {
  const std::vector<int> positions = mesh_.axis_positions(axes);
  const std::vector<int64_t> coords = mesh_.coords_of(device());
  int64_t index = 0;
  for (int p : positions) index = index * mesh_.shape()[p] + coords[p];
  return index;
}

int64_t ShardMapContext::axis_size(const AxisNames& axes) const {
  int64_t n = 1;
  for (int p : mesh_.axis_positions(axes)) n *= mesh_.shape()[p];
  return n;
}

Communicator& ShardMapContext::communicator(const AxisNames& axes) const {
  for (const CachedCommunicator& c : cache_) {
    if (c.names == axes.names()) return *c.communicator;
  }
  Communicator& c = mesh_.communicator(axes, device());
  cache_.push_back({axes.names(), &c});
  return c;
}

template <typename Op>
LocalArray ShardMapContext::run(const LocalArray& x, std::vector<int64_t> out_shape,
                                const AxisNames& axes, Op&& op) {
  Communicator& comm = communicator(axes);
  LocalArray out = LocalArray::empty(core_, x.dtype(), std::move(out_shape));
  // Pinned: another allocation on this core may compact the arena while the bytes are in use.
  const BufferPin in_pin = x.buffer().pin();
  const BufferPin out_pin = out.buffer().pin();
  op(comm, x.bytes(), out.mutable_bytes());
  return out;
}

LocalArray ShardMapContext::reduce(const LocalArray& x, const AxisNames& axes, ReduceOp op) {
  return run(x, x.shape(), axes, [&](Communicator& c, auto in, auto out) {
    c.all_reduce_bytes(core_, x.dtype(), in, out, x.shape(), op);
  });
}

LocalArray ShardMapContext::psum(const LocalArray& x, const AxisNames& axes) {
  return reduce(x, axes, ReduceOp::kSum);
}

LocalArray ShardMapContext::psum(LocalArray&& x, const AxisNames& axes) {
  if (!x.owns_buffer()) return reduce(x, axes, ReduceOp::kSum);
  Communicator& comm = communicator(axes);
  const BufferPin pin = x.buffer().pin();
  std::span<std::byte> b = x.mutable_bytes();
  comm.all_reduce_bytes(core_, x.dtype(), b, b, x.shape(), ReduceOp::kSum);
  return std::move(x);
}

LocalArray ShardMapContext::pmax(const LocalArray& x, const AxisNames& axes) {
  return reduce(x, axes, ReduceOp::kMax);
}

LocalArray ShardMapContext::pmin(const LocalArray& x, const AxisNames& axes) {
  return reduce(x, axes, ReduceOp::kMin);
}

LocalArray ShardMapContext::pmean(const LocalArray& x, const AxisNames& axes) {
  LocalArray sum = reduce(x, axes, ReduceOp::kSum);
  const float n = static_cast<float>(axis_size(axes));
  // JAX: psum(x) / psum(1); the sum is exact in the input dtype, then true division.
  return visit_data_type(x.dtype(), [&]<typename T>(TypeTag<T>) -> LocalArray {
    if constexpr (std::is_integral_v<T>) {
      LocalArray out = LocalArray::empty(core_, ElementType::kF32, x.shape());
      std::span<const T> s = std::as_const(sum).data<T>();
      std::span<float> o = out.data<float>();
      for (size_t i = 0; i < s.size(); ++i) o[i] = static_cast<float>(s[i]) / n;
      return out;
    } else if constexpr (std::is_same_v<T, double>) {
      throw_unsupported_data_type(x.dtype());
    } else {
      for (T& v : sum.data<T>()) v = from_f32<T>(to_f32(v) / n);
      return std::move(sum);
    }
  });
}

namespace {

// The collectives check these too, in a communicator's words (ranks, reduce_scatter); these
// checks come first so that the error speaks JAX's (axis indices, psum_scatter).
void check_divides(const LocalArray& x, const char* what, const char* dim_name, int dim, int64_t n,
                   bool exact, const AxisNames& axes) {
  const int64_t size = x.shape()[static_cast<size_t>(dim)];
  if (exact ? size != n : size % n != 0) {
    throw InvalidArgumentError(
        std::string(what) + " over " + axes.to_string() + " of " + array_text(x) + ": " + dim_name +
        " " + std::to_string(dim) + " has size " + std::to_string(size) + " (expected " +
        (exact ? "the axis size " : "a multiple of the axis size ") + std::to_string(n) + ")");
  }
}

void check_perm(std::span<const PermutePair> perm, int64_t n, const AxisNames& axes) {
  std::vector<bool> is_source(static_cast<size_t>(n)), is_destination(static_cast<size_t>(n));
  for (const auto& [source, destination] : perm) {
    const std::string pair = "ppermute over " + axes.to_string() + ": pair (" +
                             std::to_string(source) + ", " + std::to_string(destination) + ")";
    if (source < 0 || source >= n || destination < 0 || destination >= n) {
      throw InvalidArgumentError(pair + " names an axis index outside 0.." + std::to_string(n - 1));
    }
    if (is_source[static_cast<size_t>(source)] ||
        is_destination[static_cast<size_t>(destination)]) {
      throw InvalidArgumentError(
          pair + " repeats a " +
          (is_source[static_cast<size_t>(source)] ? "source" : "destination") +
          " (expected each at most once)");
    }
    is_source[static_cast<size_t>(source)] = true;
    is_destination[static_cast<size_t>(destination)] = true;
  }
}

}  // namespace

LocalArray ShardMapContext::all_gather(const LocalArray& x, const AxisNames& axes, int axis,
                                       bool tiled) {
  axis = normalize_axis(axis, x.ndim() + (tiled ? 0 : 1), "all_gather axis");
  const int n = static_cast<int>(axis_size(axes));
  return run(x, Communicator::all_gather_shape(x.shape(), n, axis, tiled), axes,
             [&](Communicator& c, auto in, auto out) {
               c.all_gather_bytes(core_, x.dtype(), in, out, x.shape(), axis, tiled);
             });
}

LocalArray ShardMapContext::psum_scatter(const LocalArray& x, const AxisNames& axes,
                                         int scatter_dimension, bool tiled) {
  const int d = normalize_axis(scatter_dimension, x.ndim(), "psum_scatter scatter_dimension");
  const int n = static_cast<int>(axis_size(axes));
  check_divides(x, "psum_scatter", "scatter_dimension", d, n, !tiled, axes);
  return run(x, Communicator::reduce_scatter_shape(x.shape(), n, d, tiled), axes,
             [&](Communicator& c, auto in, auto out) {
               c.reduce_scatter_bytes(core_, x.dtype(), in, out, x.shape(), ReduceOp::kSum, d,
                                      tiled);
             });
}

LocalArray ShardMapContext::all_to_all(const LocalArray& x, const AxisNames& axes, int split_axis,
                                       int concat_axis, bool tiled) {
  const int64_t r = x.ndim();
  const int split = normalize_axis(split_axis, r, "all_to_all split_axis");
  const int concat = normalize_axis(concat_axis, r, "all_to_all concat_axis");
  const int64_t n = axis_size(axes);
  if (tiled) {
    check_divides(x, "all_to_all", "split_axis", split, n, false, axes);
    return run(x, Communicator::all_to_all_shape(x.shape(), static_cast<int>(n), split, concat),
               axes, [&](Communicator& c, auto in, auto out) {
                 c.all_to_all_bytes(core_, x.dtype(), in, out, x.shape(), split, concat);
               });
  }
  check_divides(x, "untiled all_to_all", "split_axis", split, n, true, axes);
  // Untiled is the tiled exchange on the input with a unit dimension added where the output's
  // new axis goes: the split dimension (size n) becomes 1 and the unit dimension becomes n, which
  // is np.insert(np.delete(shape, split), concat, n) once the unit split dimension is dropped.
  std::vector<int64_t> others = x.shape();
  others.erase(others.begin() + split);
  std::vector<int64_t> wide;
  int wide_split = -1, wide_concat = -1;
  for (size_t k = 0; k <= others.size(); ++k) {
    if (static_cast<int>(k) == split) wide_split = static_cast<int>(wide.size()), wide.push_back(n);
    if (static_cast<int>(k) == concat)
      wide_concat = static_cast<int>(wide.size()), wide.push_back(1);
    if (k < others.size()) wide.push_back(others[k]);
  }
  std::vector<int64_t> out_shape = others;
  out_shape.insert(out_shape.begin() + concat, n);
  return run(x, out_shape, axes, [&](Communicator& c, auto in, auto out) {
    c.all_to_all_bytes(core_, x.dtype(), in, out, wide, wide_split, wide_concat);
  });
}

LocalArray ShardMapContext::ppermute(const LocalArray& x, const AxisNames& axes,
                                     std::span<const PermutePair> perm) {
  check_perm(perm, axis_size(axes), axes);
  return run(x, x.shape(), axes, [&](Communicator& c, auto in, auto out) {
    c.collective_permute_bytes(core_, x.dtype(), in, out, x.shape(), perm);
  });
}

LocalArray ShardMapContext::ppermute(LocalArray&& x, const AxisNames& axes,
                                     std::span<const PermutePair> perm) {
  if (!x.owns_buffer()) return ppermute(std::as_const(x), axes, perm);
  check_perm(perm, axis_size(axes), axes);
  Communicator& comm = communicator(axes);
  const BufferPin pin = x.buffer().pin();
  std::span<std::byte> b = x.mutable_bytes();
  comm.collective_permute_bytes(core_, x.dtype(), b, b, x.shape(), perm);
  return std::move(x);
}

// ---- ShardMap ------------------------------------------------------------------------------

namespace {

// True when `have` lays the array out as `want` does (P('x') and P('x', None) alike).
bool same_layout(const NamedSharding& have, const NamedSharding& want) {
  return have.mesh() == want.mesh() && have.spec().normalized() == want.spec().normalized() &&
         !have.is_partial();
}

// The array with `want`'s layout, through the host: the resharding collectives' plans come from
// planner/, which sits above sharding/.
ShardedArray relayout(Runtime& runtime, const ShardedArray& a, const NamedSharding& want) {
  return visit_data_type(a.dtype(), [&]<typename T>(TypeTag<T>) -> ShardedArray {
    if constexpr (std::is_same_v<T, double>) {
      throw UnimplementedError("shard_map cannot reshard a " +
                               std::string(element_type_name(a.dtype())) +
                               " input; device_put it with its in spec's sharding");
    }
    const std::vector<T> host = a.gather<T>();
    return ShardedArray::device_put(runtime, a.dtype(), std::as_bytes(std::span<const T>(host)),
                                    a.global_shape(), want, "shard_map/reshard");
  });
}

// Per-core results, indexed [mesh slot][output].
using CoreResults = std::vector<std::vector<LocalArray>>;

}  // namespace

ShardMap::ShardMap(DeviceMesh mesh, std::vector<PartitionSpec> in_specs,
                   std::vector<PartitionSpec> out_specs, ShardMapFn fn, ShardMapOptions options)
    : mesh_(std::move(mesh)),
      in_specs_(std::move(in_specs)),
      out_specs_(std::move(out_specs)),
      fn_(std::move(fn)),
      options_(options) {
  // NamedSharding rejects a spec naming an axis the mesh lacks (or one twice), naming it.
  for (const PartitionSpec& s : in_specs_) NamedSharding(mesh_, s);
  for (const PartitionSpec& s : out_specs_) NamedSharding(mesh_, s);
}

ShardMap shard_map(DeviceMesh mesh, std::vector<PartitionSpec> in_specs,
                   std::vector<PartitionSpec> out_specs, ShardMapFn fn, ShardMapOptions options) {
  return ShardMap(std::move(mesh), std::move(in_specs), std::move(out_specs), std::move(fn),
                  options);
}

namespace {

// The dtype and shape of each output, as every core must return them.
struct OutputKind {
  ElementType dtype;
  std::vector<int64_t> shape;
  friend bool operator==(const OutputKind&, const OutputKind&) = default;
};

// Checks that every core of this process returned `num_outputs` arrays (the count of its first
// core's results when `num_outputs` is empty) and that output `i` has one dtype and shape on
// each; returns them, with the device they were taken from, or nothing when this process hosts
// no device of the mesh.
std::optional<std::pair<int, std::vector<OutputKind>>> local_output_kinds(
    const Mesh& mesh, const Runtime& runtime, const CoreResults& results,
    std::optional<size_t> num_outputs) {
  std::vector<size_t> slots;  // this process's
  for (size_t s = 0; s < results.size(); ++s) {
    if (runtime.is_local(mesh.devices()[s])) slots.push_back(s);
  }
  if (slots.empty()) return std::nullopt;
  const size_t count = num_outputs.value_or(results[slots[0]].size());
  for (size_t s : slots) {
    if (results[s].size() != count) {
      throw InvalidArgumentError("shard_map fn returned " + std::to_string(results[s].size()) +
                                 " outputs on device " + std::to_string(mesh.devices()[s]) +
                                 " (expected " + std::to_string(count) + ", one per out spec)");
    }
  }
  for (size_t s : slots) {
    for (size_t i = 0; i < count; ++i) {
      if (!results[s][i].buffer().valid()) {
        throw InvalidArgumentError("shard_map output " + std::to_string(i) + " on device " +
                                   std::to_string(mesh.devices()[s]) +
                                   " is an empty LocalArray (default-constructed or released; "
                                   "expected an array)");
      }
    }
  }
  std::vector<OutputKind> kinds;
  for (size_t i = 0; i < count; ++i) {
    const LocalArray& ref = results[slots[0]][i];
    for (size_t s : slots) {
      const LocalArray& a = results[s][i];
      if (a.dtype() != ref.dtype() || a.shape() != ref.shape()) {
        throw InvalidArgumentError(
            "shard_map output " + std::to_string(i) + " is " + array_text(ref) + " on device " +
            std::to_string(mesh.devices()[slots[0]]) + " but " + array_text(a) + " on device " +
            std::to_string(mesh.devices()[s]) + " (expected one dtype and shape on every device)");
      }
    }
    kinds.push_back({ref.dtype(), ref.shape()});
  }
  return std::pair{mesh.devices()[slots[0]], std::move(kinds)};
}

// The kinds as int64s for the exchange between processes: device, count, then per output its
// dtype, rank and dims; {-1} for a process without devices of the mesh.
std::vector<int64_t> encode_kinds(const std::optional<std::pair<int, std::vector<OutputKind>>>& k) {
  if (!k) return {-1};
  std::vector<int64_t> v{k->first, static_cast<int64_t>(k->second.size())};
  for (const OutputKind& o : k->second) {
    v.push_back(static_cast<int64_t>(o.dtype));
    v.push_back(static_cast<int64_t>(o.shape.size()));
    v.insert(v.end(), o.shape.begin(), o.shape.end());
  }
  return v;
}

std::optional<std::pair<int, std::vector<OutputKind>>> decode_kinds(std::span<const int64_t> v) {
  if (v.empty() || v[0] < 0) return std::nullopt;
  std::pair<int, std::vector<OutputKind>> k{static_cast<int>(v[0]), {}};
  size_t at = 2;
  for (int64_t i = 0; i < v[1]; ++i) {
    OutputKind o{static_cast<ElementType>(v[at]), {}};
    const size_t rank = static_cast<size_t>(v[at + 1]);
    o.shape.assign(v.begin() + static_cast<std::ptrdiff_t>(at + 2),
                   v.begin() + static_cast<std::ptrdiff_t>(at + 2 + rank));
    at += 2 + rank;
    k.second.push_back(std::move(o));
  }
  return k;
}

// Every output's dtype and shape, the same on every device of every process (the processes
// exchange theirs, or the error a process found in its own, so that all of them throw it);
// throws InvalidArgumentError naming two devices that differ.
std::vector<OutputKind> output_kinds(const Mesh& mesh, const Runtime& runtime,
                                     const CoreResults& results,
                                     std::optional<size_t> num_outputs) {
  if (runtime.process_count() == 1) {
    auto mine = local_output_kinds(mesh, runtime, results, num_outputs);
    return mine ? std::move(mine->second) : std::vector<OutputKind>{};
  }
  // The message: 'K' and the encoded kinds, or 'E' and the error's text.
  std::string message;
  try {
    const std::vector<int64_t> encoded =
        encode_kinds(local_output_kinds(mesh, runtime, results, num_outputs));
    message = "K" + std::string(reinterpret_cast<const char*>(encoded.data()),
                                encoded.size() * sizeof(int64_t));
  } catch (const InvalidArgumentError& e) {
    message = std::string("E") + e.what();
  }
  const std::vector<std::string> parts = all_gather_strings(runtime.process_group(), message);
  for (const std::string& part : parts) {
    if (part.starts_with("E")) throw InvalidArgumentError(part.substr(1));
  }
  std::optional<std::pair<int, std::vector<OutputKind>>> first;
  for (const std::string& part : parts) {
    std::vector<int64_t> encoded((part.size() - 1) / sizeof(int64_t));
    std::memcpy(encoded.data(), part.data() + 1, encoded.size() * sizeof(int64_t));
    const auto theirs = decode_kinds(encoded);
    if (!theirs) continue;
    if (!first) {
      first = theirs;
      continue;
    }
    if (theirs->second.size() != first->second.size()) {
      throw InvalidArgumentError("shard_map fn returned " + std::to_string(theirs->second.size()) +
                                 " outputs on device " + std::to_string(theirs->first) + " but " +
                                 std::to_string(first->second.size()) + " on device " +
                                 std::to_string(first->first) + " (expected " +
                                 std::to_string(first->second.size()) + ", one per out spec)");
    }
    for (size_t i = 0; i < first->second.size(); ++i) {
      const OutputKind &a = first->second[i], &b = theirs->second[i];
      if (!(a == b)) {
        throw InvalidArgumentError("shard_map output " + std::to_string(i) + " is " +
                                   std::string(element_type_name(a.dtype)) + dims_text(a.shape) +
                                   " on device " + std::to_string(first->first) + " but " +
                                   std::string(element_type_name(b.dtype)) + dims_text(b.shape) +
                                   " on device " + std::to_string(theirs->first) +
                                   " (expected one dtype and shape on every device)");
      }
    }
  }
  return first ? std::move(first->second) : std::vector<OutputKind>{};
}

// The blocks of output `i` at mesh slots `slots` (one list in every process) that other processes
// hold, by slot, received from them; this process's own are left out (read them from `results`).
// Every block has `nbytes` bytes. With one process, nothing. Collective across processes.
std::map<size_t, std::vector<std::byte>> exchange_blocks(const DeviceMesh& mesh,
                                                         const CoreResults& results, size_t i,
                                                         const std::set<size_t>& slots,
                                                         uint64_t nbytes) {
  std::map<size_t, std::vector<std::byte>> out;
  const Runtime& runtime = mesh.runtime();
  if (runtime.process_count() == 1) return out;
  std::vector<std::byte> mine;
  for (size_t s : slots) {
    if (!runtime.is_local(mesh.devices()[s])) continue;
    const BufferPin pin = results[s][i].buffer().pin();
    const std::span<const std::byte> b = results[s][i].bytes();
    mine.insert(mine.end(), b.begin(), b.end());
  }
  const std::vector<std::vector<std::byte>> parts = runtime.process_group().all_gather(mine);
  std::vector<size_t> offset(parts.size(), 0);
  for (size_t s : slots) {
    const auto p = static_cast<size_t>(runtime.process_of(mesh.devices()[s]));
    if (offset[p] + nbytes > parts[p].size()) {
      throw InternalError("shard_map output " + std::to_string(i) + ": process " +
                          std::to_string(p) + " sent " + std::to_string(parts[p].size()) +
                          " bytes (expected its blocks of " + std::to_string(nbytes) + " bytes)");
    }
    if (!runtime.is_local(mesh.devices()[s])) {
      const auto at = parts[p].begin() + static_cast<std::ptrdiff_t>(offset[p]);
      out[s].assign(at, at + static_cast<std::ptrdiff_t>(nbytes));
    }
    offset[p] += nbytes;
  }
  return out;
}

// Mesh axes that `spec` neither splits a dimension over nor leaves unreduced: the output must be
// the same on every device along them.
std::vector<int> replicated_axes(const Mesh& mesh, const PartitionSpec& spec) {
  std::vector<int> axes;
  const std::vector<std::string> named = spec.axes();
  for (int a = 0; a < mesh.num_axes(); ++a) {
    const std::string& name = mesh.axis_names()[a];
    if (std::ranges::find(named, name) == named.end() &&
        std::ranges::find(spec.unreduced(), name) == spec.unreduced().end()) {
      axes.push_back(a);
    }
  }
  return axes;
}

// The mesh slot of the device at `slot`'s coordinates with 0 on `axes`.
size_t replica_source(const Mesh& mesh, size_t slot, const std::vector<int>& axes) {
  std::vector<int64_t> coords = mesh.coords_of(mesh.devices()[slot]);
  for (int a : axes) coords[a] = 0;
  return static_cast<size_t>(mesh.flat_index_of(mesh.device_at(coords)));
}

// The slots whose blocks this process must receive to compare (or copy) every local slot with
// its source over `axes` (one axis each when `one_axis`, else all at once): the sources hosted
// by another process than their replica. The same set in every process.
std::set<size_t> remote_sources(const DeviceMesh& mesh, const std::vector<int>& axes,
                                bool one_axis) {
  std::set<size_t> slots;
  const Runtime& runtime = mesh.runtime();
  if (runtime.process_count() == 1) return slots;
  const std::vector<std::vector<int>> sets =
      one_axis ? [&] {
        std::vector<std::vector<int>> v;
        for (int a : axes) v.push_back({a});
        return v;
      }()
               : std::vector<std::vector<int>>{axes};
  for (const std::vector<int>& set : sets) {
    for (size_t s = 0; s < mesh.devices().size(); ++s) {
      const size_t src = replica_source(mesh, s, set);
      if (runtime.process_of(mesh.devices()[src]) != runtime.process_of(mesh.devices()[s])) {
        slots.insert(src);
      }
    }
  }
  return slots;
}

// A block of output `i`: this process's from `results`, another's from `received`.
std::span<const std::byte> block_bytes(const DeviceMesh& mesh, const CoreResults& results,
                                       const std::map<size_t, std::vector<std::byte>>& received,
                                       size_t slot, size_t i) {
  if (mesh.runtime().is_local(mesh.devices()[slot])) return results[slot][i].bytes();
  return received.at(slot);
}

// check_vma by value: every device's block of output `i` equals the block of the device with
// index 0 on each replicated axis, byte for byte. Across processes each process compares its own
// devices' blocks, and all of them throw the first process's finding.
void check_replicated(const DeviceMesh& mesh, const CoreResults& results, size_t i,
                      const PartitionSpec& spec, uint64_t nbytes) {
  const std::vector<int> axes = replicated_axes(mesh, spec);
  const Runtime& runtime = mesh.runtime();
  const auto received = exchange_blocks(mesh, results, i, remote_sources(mesh, axes, true), nbytes);
  std::string finding;
  for (int a : axes) {
    for (size_t s = 0; s < results.size() && finding.empty(); ++s) {
      if (!runtime.is_local(mesh.devices()[s])) continue;
      const size_t src = replica_source(mesh, s, {a});
      if (src == s) continue;
      const std::span<const std::byte> x = block_bytes(mesh, results, received, src, i);
      if (!std::ranges::equal(x, results[s][i].bytes())) {
        finding = "shard_map output " + std::to_string(i) + " differs along mesh axis '" +
                  mesh.axis_names()[a] + "', which out spec " + spec.to_string() +
                  " leaves out: devices " + std::to_string(mesh.devices()[src]) + " and " +
                  std::to_string(mesh.devices()[s]) + " hold different values (check_vma)";
      }
    }
  }
  if (runtime.process_count() > 1) {
    for (const std::string& f : all_gather_strings(runtime.process_group(), finding)) {
      if (!f.empty()) throw InvalidArgumentError(f);
    }
  }
  if (!finding.empty()) throw InvalidArgumentError(finding);
}

// The buffers of output `i`, one per mesh device of this process (empty for the others'):
// owned blocks are taken, views copied, and without check_vma the replicas copy their source
// device's block (received from its process when another hosts it).
std::vector<DeviceBuffer> output_buffers(const DeviceMesh& mesh, CoreResults& results, size_t i,
                                         const PartitionSpec& spec, bool copy_replicas,
                                         const OutputKind& kind) {
  const std::vector<int> axes = copy_replicas ? replicated_axes(mesh, spec) : std::vector<int>{};
  const Runtime& runtime = mesh.runtime();
  const uint64_t nbytes =
      static_cast<uint64_t>(num_elements_of(kind.shape)) * element_size_bytes(kind.dtype);
  const auto received =
      axes.empty() ? std::map<size_t, std::vector<std::byte>>{}
                   : exchange_blocks(mesh, results, i, remote_sources(mesh, axes, false), nbytes);
  std::vector<DeviceBuffer> buffers(results.size());
  std::vector<bool> take(results.size(), false);
  for (size_t s = 0; s < results.size(); ++s) {
    const int device = mesh.devices()[s];
    if (!runtime.is_local(device)) continue;
    const size_t src = axes.empty() ? s : replica_source(mesh, s, axes);
    if (src == s && results[s][i].owns_buffer() && results[s][i].buffer().core_id() == device) {
      take[s] = true;
      continue;
    }
    DeviceBuffer b = mesh.runtime().allocate_array(device, kind.dtype, kind.shape, "shard_map/out");
    const std::span<const std::byte> from = block_bytes(mesh, results, received, src, i);
    if (!from.empty()) std::memcpy(b.data(), from.data(), from.size());
    buffers[s] = std::move(b);
  }
  for (size_t s = 0; s < results.size(); ++s) {
    if (take[s]) buffers[s] = std::move(results[s][i]).release();
  }
  return buffers;
}

}  // namespace

std::vector<ShardedArray> ShardMap::operator()(std::span<const ShardedArray* const> inputs) const {
  if (inputs.size() != in_specs_.size()) {
    throw InvalidArgumentError("shard_map got " + std::to_string(inputs.size()) +
                               " inputs (expected " + std::to_string(in_specs_.size()) +
                               ", one per in spec)");
  }
  std::vector<ShardedArray> resharded;
  resharded.reserve(inputs.size());  // no reallocation: args points into it
  std::vector<const ShardedArray*> args(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const NamedSharding want(mesh_, in_specs_[k]);
    if (!want.is_even(inputs[k]->global_shape())) {
      throw InvalidArgumentError("shard_map input " + std::to_string(k) + " of shape " +
                                 dims_text(inputs[k]->global_shape()) +
                                 " does not divide evenly by in spec " + in_specs_[k].to_string() +
                                 " on " + mesh_.to_string());
    }
    args[k] = inputs[k];
    if (!same_layout(inputs[k]->sharding(), want)) {
      resharded.push_back(relayout(mesh_.runtime(), *inputs[k], want));
      args[k] = &resharded.back();
    }
  }
  const std::vector<int>& devices = mesh_.devices();
  CoreResults results(devices.size());
  const std::unique_lock<std::mutex> run_lock = mesh_.lock_for_run();
  // Another program's failure on these cores (a plain run_spmd, a shard_map on another mesh)
  // aborts the communicators through the runtime's abort handler; this call starts clean.
  mesh_.reset_communicators();
  try {
    mesh_.runtime().run_spmd(devices, [&](CoreContext& core) {
      const int id = core.core_id();
      std::vector<LocalArray> blocks;
      blocks.reserve(args.size());
      for (const ShardedArray* a : args) {
        blocks.push_back(LocalArray::view(a->dtype(), a->local_shape(id), a->buffer(id)));
      }
      ShardMapContext ctx(mesh_, core);
      results[static_cast<size_t>(mesh_.flat_index_of(id))] = fn_(ctx, blocks);
    });
  } catch (...) {
    mesh_.reset_communicators();
    throw;
  }
  const bool prefix = options_.out_spec_prefix && out_specs_.size() == 1;
  const std::vector<OutputKind> kinds =
      output_kinds(mesh_, mesh_.runtime(), results,
                   prefix ? std::nullopt : std::optional<size_t>(out_specs_.size()));
  std::vector<PartitionSpec> out_specs = out_specs_;
  if (prefix) out_specs.assign(kinds.size(), out_specs_[0]);
  std::vector<ShardedArray> outputs;
  for (size_t i = 0; i < out_specs.size(); ++i) {
    const NamedSharding sharding(mesh_, out_specs[i]);
    const OutputKind& ref = kinds[i];
    const std::string ref_text = std::string(element_type_name(ref.dtype)) + dims_text(ref.shape);
    if (out_specs[i].size() > ref.shape.size()) {
      throw InvalidArgumentError("shard_map output " + std::to_string(i) + " is " + ref_text +
                                 ", of lower rank than out spec " + out_specs[i].to_string());
    }
    std::vector<int64_t> global = ref.shape;
    for (size_t d = 0; d < global.size(); ++d) {
      const int64_t shards = sharding.num_shards(static_cast<int>(d));
      if (__builtin_mul_overflow(global[d], shards, &global[d])) {
        throw InvalidArgumentError("shard_map output " + std::to_string(i) + " is " + ref_text +
                                   ": dimension " + std::to_string(d) + " times its " +
                                   std::to_string(shards) +
                                   " shards overflows int64 (expected a global shape that fits)");
      }
    }
    if (options_.check_vma) {
      check_replicated(
          mesh_, results, i, out_specs[i],
          static_cast<uint64_t>(num_elements_of(ref.shape)) * element_size_bytes(ref.dtype));
    }
    outputs.push_back(ShardedArray::from_buffers(
        mesh_.runtime(), std::move(global), sharding,
        output_buffers(mesh_, results, i, out_specs[i], !options_.check_vma, ref), ref.dtype));
  }
  return outputs;
}

}  // namespace vtpu
