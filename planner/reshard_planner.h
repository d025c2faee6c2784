// Reshard planning: the cheapest ReshardPlan (sharding/reshard_plan.h) that turns an array sharded
// one way into the same array sharded another way on the same mesh, after GSPMD's resharding
// (xla/service/spmd/spmd_partitioner.cc) and PyTorch DTensor's redistribute
// (torch/distributed/tensor/_redistribute.py). Planning is pure; execute_reshard
// (sharding/reshard.h) runs a plan, and reshard() below does both.
//
// Model. A sharding is, per array dimension, the mesh axes that split it (major first), plus the
// set of partial (unreduced) mesh axes with their reduce op. A reshard is a path of steps from
// the source state to the target state; each step is one collective over the replica groups of
// the mesh axes it names (the devices that differ only in their coordinates on those axes,
// ranked row-major over them), or a local step:
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
//   permute         between two states with the same tiling         same tiling, other order
//                   (equal shard counts per dimension), or to a mesh that orders the devices
//                   differently
//
// Unreduced axes of size 1 hold one addend per block, so the planner treats them as already
// reduced: no step names them, and the steps' specs leave them out (the first step's spec_before
// and the last step's spec_after are the source's and the target's as given). Fold order: one
// all-reduce over unreduced axes U folds in partial index order (row-major over U), as
// ShardedArray::gather() does; a plan that reduces U in several steps (e.g. one all-reduce or
// reduce-scatter per axis, which the cost model may prefer) folds axis by axis, in the plan's
// order, so for sum and prod of values whose fold is not exact in f32 its result can differ from
// gather()'s in the last bits.
//
// Only the minor-most axis of a dimension can leave it and an axis can only join a dimension as
// its minor-most axis, because the order of axes inside a dimension fixes which block a device
// holds (GSPMD's tile assignment). The default planner (ReshardStrategy::kSearch) runs Dijkstra
// over these states with the alpha-beta estimate below as edge weights, so it finds the cheapest
// path in this vocabulary: e.g. P('z', ('x','y')) -> P(('x','y'), 'z') on 2x2x2 becomes an
// all-gather over y, a slice and one permute (1 MiB per core for a 1024x1024 f32 array) instead
// of gathering everything. ReshardStrategy::kGreedy is DTensor's redistribute rule (per mesh
// axis, source placement -> target placement, partial axes first), extended to several axes on
// one dimension as GSPMD allows:
//   1. each unreduced axis the target shards dimension d with, as d's next axis: reduce-scatter;
//      the other unreduced axes the target does not keep: one all-reduce over all of them;
//   2. same tiling, other device order: one permute, done;
//   3. per dimension whose axes are not a prefix of the target's: its minor-most axis moves by
//      all-to-all when the target has it next on another dimension, else the axes past the
//      common prefix are all-gathered; repeat;
//   4. slice the axes the target adds, make the target's new unreduced axes partial, and permute
//      if the target mesh orders the devices differently.
// The search falls back to the greedy rule when the state space is larger than
// kMaxSearchStates.
//
// Uneven dimensions. A dimension D over n shards has blocks of ceil(D / n) (the last short or
// empty). Every collective runs on blocks padded to that size and the result is trimmed back to
// the logical block, so no step ever leaves padding in an array: a (5, 10) array with 2,2,1,0
// rows on 4 cores, all-gathered, is (5, 10) on every core. Padding makes a gather of part of a
// dimension's axes exact only when the chunks nest, ceil(D / n_P) == k * ceil(D / (n_P * k))
// for the kept prefix P and the k shards that go; otherwise the planner gathers more of the
// dimension (at worst all of it) and slices back. docs/SHARDING.md works an example.
//
// Cost. Each step carries bytes per core and an alpha-beta estimate from a CostModel
// (planner/cost_model.h: a hardware profile, calibrated or from its links and topology, or a
// uniform alpha-beta; Alpa's model; B in bytes):
//   all-gather      alpha + beta * (n-1)/n * B        B = gathered (output) bytes per core
//   reduce-scatter  alpha + beta * (n-1)/n * B        B = input bytes per core
//   all-reduce      2 * (alpha + beta * (n-1)/n * B)  (a reduce-scatter then an all-gather)
//   all-to-all      alpha + beta * (n-1)/n^2 * B * all_to_all_factor, B = bytes over the group
//                   (n times the per-core buffer); Alpa uses factor n/2 for V100 + NVLink
//   permute         alpha + beta * B                  B = bytes one core sends
//   slice, partial  0 (local)
#pragma once

#include <cstdint>
#include <vector>

#include "vtpu/planner/cost_model.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/sharding/named_sharding.h"
#include "vtpu/sharding/reshard.h"
#include "vtpu/sharding/reshard_plan.h"
#include "vtpu/sharding/sharded_array.h"

namespace vtpu {

/// A uniform alpha-beta model (one alpha, beta and all-to-all constant for every collective and
/// group), kept for callers that set the three numbers; plan_reshard turns it into
/// CostModel::uniform. Prefer a CostModel from a hardware profile. Defaults measured on the
/// development machine (2 CPUs, shared) with `vtpu bench collectives --cores 8 --op
/// all_gather|all_to_all`: small messages took 44-107 us (alpha), all-gather
/// busbw was 0.19-0.25 GB/s from 1 MiB to 16 MiB (beta = 1 / 0.2 GB/s), and all-to-all busbw
/// 0.06-0.07 GB/s, about 3x slower per byte than the all-gather (the all-to-all factor).
struct ReshardCostModel {
  double alpha_seconds = 5e-5;          // latency per collective, seconds
  double beta_seconds_per_byte = 5e-9;  // inverse bus bandwidth, seconds per byte (0.2 GB/s)
  double all_to_all_factor = 3.0;       // the constant of the all-to-all formula (Alpa: n/2)
};

/// How plan_reshard chooses the steps.
enum class ReshardStrategy {
  /// Dijkstra over sharding states, each edge one step of the vocabulary above (all-gather of the
  /// k minor-most axes of a dimension, all-to-all of a minor-most axis to another dimension,
  /// reduce-scatter or all-reduce of unreduced axes, local slice or make-partial, and a permute
  /// between equal tilings), weighted by the alpha-beta estimate; ties go to fewer steps. Optimal
  /// under the cost model within that vocabulary. Falls back to kGreedy past kMaxSearchStates
  /// settled (or kMaxDiscoveredStatesPerSettled * kMaxSearchStates discovered) states.
  kSearch,
  /// The four phases of the header comment, without search (DTensor's style).
  kGreedy,
};

/// States the search may settle before it gives up and plans greedily. A mesh of k axes and an
/// array of rank r have at most (r + 2)^k * k! states; 2x2x2 meshes of rank-2 arrays have < 600.
inline constexpr size_t kMaxSearchStates = 200000;
/// The search also gives up once it has discovered (settled or queued) this many times
/// kMaxSearchStates states, which bounds its memory (a few hundred bytes per state).
inline constexpr size_t kMaxDiscoveredStatesPerSettled = 2;
/// The search tries an all-reduce over every non-empty subset of the unreduced axes (of size > 1)
/// while there are at most this many of them (2^10 - 1 moves from a state). Past it, it tries each
/// axis alone, all of them at once, and the ones the target does not keep at once: linear in the
/// axis count, still complete (a subset is a chain of single-axis all-reduces), but it may miss a
/// subset that is cheaper than both.
inline constexpr size_t kMaxAllReduceSubsetAxes = 10;

/// Plans the reshard of an array of `global_shape` (elements per dimension) from `source` to
/// `target`. Throws InvalidArgumentError when the shape does not fit either sharding (a spec
/// longer than the rank, strict divisibility; see NamedSharding::check_shape), has more than 2^60
/// elements (num_elements_of), needs a collective buffer of more than 2^60 elements (a block
/// padded to a multiple of the shard count: 2^60 elements over 7 shards pad to 2^60 + 6; the
/// error names the array's shape and the buffer's), or the target's
/// mesh differs from the source's in shape, axis names or set of devices (a different device
/// order is allowed and becomes a permute). A 0-element array gets no steps: every block is
/// empty in both shardings, so nothing moves (XLA's ZeroSizedHloElimination likewise drops the
/// SPMD partitioner's zero-element collectives). Pure: touches no runtime. Thread-safe. `cost`
/// is used as given: a model whose core count is unset (CostModel::for_cores not called) prices
/// no oversubscription.
ReshardPlan plan_reshard(const std::vector<int64_t>& global_shape, const NamedSharding& source,
                         const NamedSharding& target, const CostModel& cost,
                         ReshardStrategy strategy = ReshardStrategy::kSearch);
/// The same priced as `vtpu reshard` prices it: the shipped this_machine profile for the mesh's
/// cores all running at once, CostModel::this_machine().for_cores(source.mesh().size()) (each
/// step runs all its replica groups concurrently, so every core of the mesh is busy; with the
/// shipped profile's 2 host CPUs a 2-core group of an 8-core mesh costs s(8) / s(2) = 4 times
/// its 2-core fit), so that the library and the CLI price the same reshard alike.
ReshardPlan plan_reshard(const std::vector<int64_t>& global_shape, const NamedSharding& source,
                         const NamedSharding& target,
                         ReshardStrategy strategy = ReshardStrategy::kSearch);
/// The same with a uniform model (CostModel::uniform of the three numbers).
ReshardPlan plan_reshard(const std::vector<int64_t>& global_shape, const NamedSharding& source,
                         const NamedSharding& target, const ReshardCostModel& cost,
                         ReshardStrategy strategy = ReshardStrategy::kSearch);

/// plan_reshard (priced for the mesh's cores, as `vtpu reshard`) then execute_reshard.
ShardedArray reshard(Runtime& runtime, const ShardedArray& array, const NamedSharding& target);

}  // namespace vtpu
