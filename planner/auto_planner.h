// Auto-sharding planner: for a model chain (planner/model_graph.h), a mesh and a cost model
// (planner/cost_model.h), choose how to shard every parameter and activation so that the
// estimated step time is smallest under each core's HBM limit, and explain every candidate.
// After Alpa's intra-operator pass (Zheng et al., OSDI 2022), which picks one sharding per
// operator with an ILP over per-operator compute/communication costs and resharding costs on
// the edges; on a chain that ILP is a shortest path, solved here exactly by dynamic programming.
//
// Search. A candidate strategy gives every mesh axis of size > 1 one role:
//   data    data parallel: the batch is split, parameters replicated, gradients all-reduced;
//   fsdp    ZeRO-3 / FSDP: the batch is split, parameters, gradients and optimizer state are
//           sharded; each layer all-gathers its parameters before use (forward, and again in
//           backward) and reduce-scatters its gradients;
//   tensor  Megatron tensor parallelism: the layers choose a sharding of their weights;
// a role on several axes uses them together (axis pairs: "dp(data,model)" is 8-way on 2x4).
// Every assignment of roles to the axes is a candidate (3^k for k axes of size > 1). Within a
// candidate, the planner chooses each layer's sharding over the tensor axes by dynamic
// programming over the chain. The state between layers is the activation's layout over the
// tensor axes: R (replicated), S (features sharded) or P (partial sums pending). Layer options:
//   dense        replicated R->R; column (W split on out) R->S; row (W split on in) S->P
//   elementwise  replicated R->R; sharded S->S
//   layer_norm   R->R
//   attention    replicated R->R; heads (Wqkv column, Wo row: Megatron) R->P
//   embedding    replicated ->R; vocab (table split on rows) ->P; features ->S
// and transitions are reshards (forward collective; backward collective of the gradient):
//   P->R all-reduce; P->S reduce-scatter (bwd all-gather); S->R all-gather (bwd reduce-scatter);
//   R->S local slice (bwd all-gather); nothing -> P.
// A layer with R input and split weights (column, heads) gives a partial input gradient: one
// all-reduce in backward (Megatron's "f"), except the first layer, whose input (data, token ids)
// needs no gradient. So a Megatron block, column then row, costs one
// all-reduce in forward and one in backward per attention or MLP. The last activation must not
// be partial (a P output is all-reduced; an S output pays the vocab-parallel cross-entropy's
// all-reduce of 2 floats per token).
//
// Exactness under the HBM limit. Time and HBM both add up along the chain, except FSDP's
// transient buffers, whose peak is a max over the units (every layer with parameters is one FSDP
// unit) of what is gathered or unsharded while a unit is in use, which depends on its neighbour
// units (prefetch; see "HBM" below). The DP keeps, per layer and state, every label (time,
// additive bytes, transient peak so far, the last two units' bytes) that no other label beats on
// all of them (a Pareto frontier): the constrained shortest path, exact. It also drops labels
// that cannot lead to the optimum: those no completion of which fits, and those slower than a
// label every completion of which fits; it builds each frontier by sorting (O(N log N) for N
// labels), so a chain of L layers whose frontier holds O(L) labels near the limit costs
// O(L^2 log L). A second DP finds the smallest HBM exactly (docs/PLANNER.md, "Dynamic
// programming, not an ILP").
//
// Costs per layer, per core (T = local tokens = batch / (data x fsdp cores) x seq_len; t =
// tensor-axis cores; E = dtype bytes):
//   compute  3 x forward FLOPs (forward + backward's two matmuls) / t when the layer is split;
//            time max(FLOPs / peak, HBM traffic / bandwidth) (roofline), traffic 3 x (weights +
//            input + output bytes); on a profile with kernel rates (cost_model.h) the FLOPs term
//            is the sum of the layer's measured kernels instead: its GEMMs forward and backward,
//            elementwise passes, transcendentals and row kernels (layer norm, attention softmax,
//            and the loss's cross-entropy after the last layer; docs/PLANNER.md, "Kernel
//            rates"), its GEMMs at the warm rates when the layer's working set (weights + input
//            + output bytes, the figure that picks the memory level) passes the cache test
//   FLOPs    dense 2 T in out; attention 8 T d^2 + 4 T S d + 5 B h S^2 (projections, scores and
//            context, softmax; full S^2, no causal skipping); layer_norm 8 T d; elementwise
//            flops_per_element T d; embedding T d (a gather)
//   HBM      parameters + gradients + optimizer state (Adam 2x, momentum 1x, SGD 0) of the
//            local shard (under FSDP, of the flat parameter padded to a multiple of the fsdp
//            cores), plus saved activations (dense/elementwise/embedding output; layer_norm
//            output and 2 statistics per token; attention Q, K, V, scores, context and output;
//            the output of a reshard between layers), plus FSDP's transient peak: the largest
//            over units u of what `vtpu train fsdp` holds with prefetch (PyTorch FSDP's
//            FULL_SHARD with forward and BACKWARD_PRE prefetch), U(u) = u's gathered
//            parameters = its unsharded gradient: forward U(u) + U(next); backward U(prev) +
//            2 U(u) + U(next) (u gathered and its gradient, prev prefetched, next's gradient in
//            its reduce-scatter); the first unit's backward U(u) + U(next) (its input needs no
//            gradient, so its parameters are freed first); plus the step's input batch. The
//            limit is checked against the whole sum (the limit is the arena).
//   comm     the reshards above over the tensor axes (B = the activation's bytes over the tensor
//            group), FSDP all-gather x 2 + reduce-scatter of the layer's (tensor-local)
//            parameters over the fsdp axes, all-reduce of the (fsdp-local) gradients over the
//            data axes (one bucket per step, as DDP: priced as ONE all-reduce of the whole
//            bucket, t(B), each layer holding a per-byte share (t(B_max) - 2 alpha) / B_max of it
//            and the row "(gradient bucket)" after the layers the rest, so that on measured
//            curves the total is the one all-reduce, not a sum of small ones); plus the
//            optimizer update (HBM-bound: Adam reads and writes 7, SGD 3 words per local
//            parameter)
// Step time = compute + communication (no overlap; see cost_model.h).
//
// Constraints (PlanConstraints): the program that runs the plan may implement only some
// strategies and one sharding per layer under tensor parallelism (`vtpu train`: see
// planner/plan_file.h). A constrained layer keeps only that option in the DP (a strategy whose
// tensor cores cannot split it that way cannot run), and a strategy the runner rejects is still
// costed and listed but marked "cannot run" and never wins.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "vtpu/planner/cost_model.h"
#include "vtpu/planner/model_graph.h"
#include "vtpu/sharding/mesh.h"

namespace vtpu {

/// What a mesh axis does in a strategy.
enum class AxisRole { kNone, kData, kTensor, kFsdp };

/// One layer's chosen sharding in a candidate. Plain data.
struct LayerPlan {
  std::string layer;
  std::string choice;      // "replicated", "column", "row", "sharded", "heads", "vocab", "features"
  char in_state = 'R';     // activation layout over the tensor axes before the layer: R, S or P
  char out_state = 'R';    // after the layer
  std::string reshard_in;  // collective before the layer ("all_reduce", "" for none, ...)
  double compute_seconds = 0;
  double comm_seconds = 0;
  double comm_bytes_per_core = 0;
};

/// One strategy and the best per-layer plan for it. Plain data.
struct PlanCandidate {
  std::string name;             // "dp(data)+tp(model)", "fsdp(data,model)"
  std::vector<AxisRole> roles;  // per mesh axis
  std::vector<std::string> data_axes, tensor_axes, fsdp_axes;  // mesh order
  bool feasible = true;  // false: the batch or a dimension does not split
  std::string infeasible_reason;
  /// Infeasible only because PlanConstraints::tensor_sharding requires a layer sharding that does
  /// not divide over the tensor axes: without the constraints the layer could stay replicated
  /// and the strategy would be feasible (false when the batch does not split, or when feasible).
  bool infeasible_by_constraints = false;
  bool fits = false;              // some per-layer plan fits the HBM limit
  std::vector<LayerPlan> layers;  // the fastest plan that fits (else the smallest in HBM)
  /// The step's communication after the last layer, which no layer's row holds, as rows of their
  /// own (layer in parentheses, choice "-"; no compute): "(final all-reduce)" of a partial last
  /// activation over the tensor axes (P->R, reshard_in "all_reduce"), or "(loss all-reduce)" of
  /// a sharded one (S->S: the vocab-parallel cross-entropy's all-reduce of 2 values per token),
  /// or, for FSDP without data axes, of the batch shards' summed loss (one element over the FSDP
  /// axes; in_state, out_state '-'); and "(gradient bucket)", the rest of the data axes' one
  /// gradient all-reduce per step: its time t(B) for the bucket's B bytes less the per-byte
  /// shares the layers' rows hold (2 alpha, the latency, on a straight alpha + beta x; in_state,
  /// out_state '-', reshard_in "", 0 bytes: the layers carry the bytes). Empty when there is none.
  /// The comm of `layers` and these rows adds up to comm_seconds and comm_bytes_per_core.
  std::vector<LayerPlan> after_layers;
  double compute_seconds = 0, comm_seconds = 0, step_seconds = 0;
  double comm_bytes_per_core = 0;     // bytes one core sends per step
  uint64_t hbm_bytes_per_core = 0;    // of `layers`
  uint64_t param_bytes_per_core = 0;  // parameters + gradients + optimizer state of `layers`
  uint64_t activation_bytes_per_core = 0;
  uint64_t transient_bytes_per_core = 0;  // FSDP's gathered parameters and gradients, peak
  /// The step's input batch per core: the first layer's input (int32 ids for an embedding) and
  /// one int32 label per token. Not in hbm_bytes_per_core (the plan file's estimate keeps them
  /// apart; docs/PLANNER.md "Estimate against measurement"), but counted against the limit.
  uint64_t input_bytes_per_core = 0;
  /// The smallest HBM per core any per-layer plan of the strategy needs, the input batch
  /// included: what the limit must be for it to fit. Exact (a DP of its own), fitting or not.
  uint64_t min_hbm_bytes_per_core = 0;
  /// Why the program that runs plans cannot run this strategy ("" when it can; see
  /// PlanConstraints). Such a candidate is costed but never wins.
  std::string unsupported_reason;
  std::string why_lost;  // "" for the winner
  /// The strategy has tensor axes but the chosen plan splits no layer over them (every layer
  /// replicated: those axes only repeat the compute).
  bool tensor_splits_nothing = false;

  /// Bytes of the arena per core that the limit is checked against: hbm_bytes_per_core +
  /// input_bytes_per_core when the candidate fits, else min_hbm_bytes_per_core.
  uint64_t arena_bytes_per_core() const {
    return fits ? hbm_bytes_per_core + input_bytes_per_core : min_hbm_bytes_per_core;
  }
};

/// What the program that will run the plan can execute (for `vtpu train`: planner/plan_file.h).
/// Empty: no constraints. The functions must be thread-safe if the planner runs on several
/// threads.
struct PlanConstraints {
  /// Who runs the plan, for messages ("vtpu train mlp").
  std::string runner;
  /// "" when a strategy can run, else why not. Sees the candidate's name and roles (data_axes,
  /// tensor_axes, fsdp_axes) and its costs. Null: every strategy can run.
  std::function<std::string(const PlanCandidate&)> unsupported;
  /// The one sharding a layer may take when the strategy has tensor axes ("column", "row",
  /// "sharded", "heads", "replicated", ...), "" for any. Null: any.
  std::function<std::string(const ModelLayer&)> tensor_sharding;
  /// Whether the runner charges each array in HBM its padded bytes under XLA's TPU tiled layout
  /// (RuntimeOptions::pad_arrays; default true): the HBM estimates count every parameter,
  /// gradient, optimizer state, activation and input array so, one by one (docs/PLANNER.md).
  bool pad_arrays = true;
};

/// The planner's result. Plain data, thread-compatible.
struct AutoShardingPlan {
  ModelGraph model;
  std::vector<int64_t> mesh_shape;
  std::vector<std::string> axis_names;
  std::string hardware;  // the profile's name
  /// The whole profile the estimate was priced with. to_json embeds it (estimate.hardware_profile)
  /// so that `vtpu train --plan` compares with, and probes against, this profile and not a
  /// shipped one of the same name (a calibrated `this_machine` file names itself `this_machine`).
  HardwareProfile profile;
  /// Per core, against hbm + input batch. On a host profile (host_cpus > 0) without an explicit
  /// limit, the host's RAM divided by the mesh's cores (they share it).
  uint64_t hbm_limit_bytes = 0;
  /// The host RAM the mesh's virtual cores share, when hbm_limit_bytes is its share; else 0.
  uint64_t host_ram_bytes = 0;
  /// s(N) of planner/cost_model.h for the mesh's N cores: 1 on a TPU profile, N / host_cpus on
  /// this machine when the mesh has more cores than CPUs.
  double oversubscription = 1.0;
  std::vector<PlanCandidate> candidates;  // every strategy, winner first then by step time
  int winner = -1;                        // index into candidates; -1 when nothing fits
  /// Index into candidates of the strategy choose() pinned in place of the winner (a what-if or
  /// manual override, as Alpa and JAX let a user fix a sharding); -1 when none was pinned.
  int pinned = -1;

  /// The candidate to_string details and to_json emits: `pinned` when set, else `winner` (-1
  /// when neither).
  int chosen() const { return pinned >= 0 ? pinned : winner; }
  /// Names of the candidates, in table order.
  std::vector<std::string> candidate_names() const;
  /// Pins the candidate named `name` (as the table prints it, e.g. "fsdp(x)", "dp(data,model)",
  /// or with its roles in another order: canonical_strategy_name).
  /// Throws InvalidArgumentError when no candidate has that name (listing the names);
  /// FailedPreconditionError when the candidate cannot run (the batch or a dimension does not
  /// split, or the constraints' runner does not implement it), naming why; ResourceExhaustedError
  /// when no per-layer plan of it fits the HBM limit, naming the bytes it needs, unless
  /// `allow_over_hbm` (then its smallest plan is pinned).
  void choose(const std::string& name, bool allow_over_hbm = false);

  /// The table of `vtpu plan` (README "Planner" explains the columns; the strategy column is as
  /// wide as the longest name), then the chosen candidate's layers. The result column marks the
  /// winner "WINNER" and a pinned candidate "CHOSEN (--strategy)". With nothing chosen the last
  /// line says why: "no strategy can run (every candidate is marked \"cannot run\")" or "no
  /// strategy fits the HBM limit of X per core".
  std::string to_string() const;
  /// The plan file (docs/PLANNER.md, "Plan files"; format "vtpu-plan", version 1) of the chosen
  /// candidate: emit_train_plan (planner/plan_file.h), whose reader reads it back; a pinned one
  /// adds "pinned": {"winner": name or null, "why_lost": ...}. Throws FailedPreconditionError
  /// when nothing fits and nothing was pinned.
  nlohmann::json to_json() const;
  /// Returns when a candidate was pinned (choose() checked it). Else throws
  /// ResourceExhaustedError when no runnable candidate fits, naming the HBM limit and the
  /// smallest HBM per core that would fit (bytes, exact, the input batch included) and the
  /// strategy that needs it;
  /// FailedPreconditionError when no feasible candidate can be run, and InvalidArgumentError when
  /// no candidate is feasible, both with cannot_run_summary().
  void require_fit() const;
  /// Why the candidates that cannot run (infeasible, or not runnable under the constraints)
  /// cannot, each distinct reason once with its count, most frequent first (ties: table order),
  /// at most kMaxReasons of them, then the count of the rest: "none of the 6561 candidates can
  /// run: 1792 because batch 16 does not split over 64 data x fsdp cores; ...; 1857 for 6 other
  /// reasons (the table gives each candidate's)" ("for another reason" when one is left). "" when
  /// every candidate can run (the error named the first row's reason
  /// only, while most tp candidates failed on the heads).
  std::string cannot_run_summary() const;
  static constexpr size_t kMaxReasons = 3;

 private:
  /// The table's result column for candidate `i`: WINNER, CHOSEN or why it lost.
  std::string result_text(int i) const;
};

/// `name` with its roles in the order the planner names a candidate: "tp(model)+dp(data)" ->
/// "dp(data)+tp(model)", "tp(b)+fsdp(a)" -> "fsdp(a)+tp(b)". The roles are the parts between
/// top-level "+" (outside parentheses), each "dp(...)", "fsdp(...)" or "tp(...)"; the order of
/// the axes inside a role is kept (it is the order of the mesh axes a dimension is split over).
/// A name with any other part, a role named twice, or no "+" is returned unchanged (and then
/// matches no candidate unless it already did). Pure. Thread-safe.
std::string canonical_strategy_name(const std::string& name);

/// Mesh axes of size > 1 the planner accepts: it tries 3^k strategies (each axis data, tensor or
/// FSDP), so 8 axes are 6,561 candidates (about a second); 12 took 40 s and 0.9 GB.
inline constexpr int kMaxPlannedAxes = 8;

/// Layer evaluations (strategies x layers) the planner accepts: each of the 3^k strategies runs
/// its dynamic program over every layer of the chain, so a plan costs about this product (more
/// when many labels stay on the Pareto frontier). On a loaded 2-CPU host,
/// 6561 strategies x 250 alternating dense/attention layers (1.6 million) took 20 s and x 1000
/// layers (6.6 million) 114 s; 27 strategies x 65536 layers (1.8 million) 15 s. So an accepted
/// plan takes at most tens of seconds, and a refused one would have taken a minute or more.
/// Regression: 6561 strategies x 65536 layers, each within its
/// own limit, ran over 10 minutes and 5 GB with no output.
inline constexpr uint64_t kMaxPlanLayerEvaluations = 2'000'000;

/// The planner's up-front limits on `mesh` for a chain of `num_layers` layers. Throws
/// InvalidArgumentError when the mesh has more than kMaxPlannedAxes axes of size > 1, or when its
/// 3^k strategies x num_layers exceed kMaxPlanLayerEvaluations, naming both counts, their
/// product, the budget and the most layers this mesh allows: "6561 strategies x 65536 layers =
/// 429981696 layer evaluations exceeds the planner's budget of 2000000 (expected at most 304
/// layers on a mesh with 8 axes of size > 1, or fewer such axes)". Pure. Thread-safe.
void check_planner_limits(const Mesh& mesh, size_t num_layers);

/// Plans `model` on a mesh of `mesh_shape` with `axis_names` under `hbm_limit_bytes` per core
/// (0: the cost model's HBM per core; on a host profile, its HBM (the host RAM) / mesh cores),
/// within `constraints`. Prices with
/// `cost.for_cores(mesh size)`: every strategy keeps all of the mesh's cores busy. Never throws
/// for a model that does not fit (see require_fit); throws InvalidArgumentError for a bad mesh
/// (as Mesh does), beyond check_planner_limits (more than kMaxPlannedAxes axes of size > 1, or
/// more than kMaxPlanLayerEvaluations strategies x layers), for byte counts of 2^63 or
/// more, and what the cost model throws (a dtype the profile lacks). Pure. Thread-safe.
AutoShardingPlan plan_auto_sharding(const ModelGraph& model, const std::vector<int64_t>& mesh_shape,
                                    const std::vector<std::string>& axis_names,
                                    const CostModel& cost, uint64_t hbm_limit_bytes = 0,
                                    const PlanConstraints& constraints = {});

}  // namespace vtpu
