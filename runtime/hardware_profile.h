// Hardware profiles: the figures of one accelerator chip that a cost model needs (peak FLOP/s per
// dtype, HBM bytes and bandwidth, on-core memories, interconnect links), loaded from JSON.
//
// vtpu ships profiles for TPU v4, v5e and v5p (profiles/tpu_*.json, embedded in the library at
// build time and installed under share/vtpu/profiles) with the public figure and its source for
// every field ("sources" in the JSON; figures that are not published are marked UNSURE there and
// in docs/KERNELS.md). A "this machine" profile is written by `vtpu bench hardware` (examples/),
// which measures memcpy bandwidth and single-threaded Eigen GEMM throughput. Used by the pipelined
// kernels' simulated time (runtime/pallas_call.h) and meant for the sharding planner's cost model.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "vtpu/runtime/thread_pinning.h"

namespace vtpu {

/// A calibrated alpha-beta fit of one collective (written by `vtpu bench collectives --calibrate`,
/// read by planner/cost_model.h). The time of the collective over a group of `group_size` cores
/// is the formula of planner/cost_model.h with these alpha and beta, B in bytes as defined there.
///
/// A calibrated fit may also carry the measured curve it was fitted to: `measured` holds
/// (B, seconds) points, B in bytes as the formula defines it and seconds the whole collective's
/// time (both terms of an all-reduce), B strictly increasing. The cost model then interpolates
/// the curve instead of evaluating the formula inside its range (a performance table, as XLA's
/// latency-hiding scheduler's cost model interpolates measured collective tables: openxla.org,
/// "LHS Cost Model"), because one alpha + beta x cannot follow a curve whose algorithm changes
/// with size (on this machine the 8-core all-reduce switches from recursive doubling to direct at
/// 16 KiB, and the line was 40% low there). JSON: "measured": [[B, seconds], ...]; absent when
/// empty.
struct CollectiveFit {
  double alpha_seconds = 0.0;          // latency term of the formula, seconds (>= 0)
  double beta_seconds_per_byte = 0.0;  // inverse bandwidth of the formula, seconds per byte (> 0)
  int group_size = 0;                  // cores in the group the fit was measured on (>= 2)
  /// (B bytes, seconds) of the calibration sweep; B > 0 strictly increasing, seconds > 0 (at
  /// most 60). Empty: the formula alone.
  std::vector<std::pair<double, double>> measured;
};

/// Measured kernel throughputs of a host (written by `vtpu bench hardware` and `vtpu bench
/// collectives --calibrate`, read by planner/cost_model.h). Empty on the TPU profiles, whose
/// compute is priced at the peak FLOP/s. Plain data.
struct KernelRates {
  /// f32 GEMM C(m, n) = A(m, k) B(k, n), row-major Eigen, one thread: FLOP/s (2 m k n per call)
  /// measured at every (m, k, n) in gemm_sizes^3 (sizes strictly increasing, >= 1), stored at
  /// index (i_m * S + i_k) * S + i_n with S = gemm_sizes.size(). Empty: no table.
  std::vector<int64_t> gemm_sizes;
  std::vector<double> gemm_flops_per_second;
  /// The same GEMMs WARM: FLOP/s with the same operands reused by every call, so that they stay
  /// in the cache (gemm_flops_per_second's operands are rotated out of it). Same (m, k, n) grid
  /// and index as gemm_flops_per_second. planner/cost_model.h uses it for a GEMM whose working
  /// set fits the profile's cache level. Empty (a profile measured before it existed): every GEMM
  /// is priced at the cold rate.
  std::vector<double> gemm_warm_flops_per_second;
  /// Elementwise kernels, elements per second, by name (see kElementwiseKernels in the .cc and
  /// docs/PLANNER.md's term table for what each measures). Empty: none measured.
  std::map<std::string, double> elementwise_per_second;
  /// Row kernels (a reduction along each row, then an elementwise pass over it): seconds for
  /// one row of `length` elements = seconds_per_row + seconds_per_element x length, fitted to
  /// rows of several lengths, by name (see row_kernel_names()). Empty: none measured.
  struct RowFit {
    double seconds_per_row = 0;      // >= 0
    double seconds_per_element = 0;  // > 0
  };
  std::map<std::string, RowFit> row_kernels;
  bool empty() const {
    return gemm_sizes.empty() && gemm_warm_flops_per_second.empty() &&
           elementwise_per_second.empty() && row_kernels.empty();
  }
  /// Throws InvalidArgumentError naming the first bad entry: a size out of order or range, a
  /// table whose length is not gemm_sizes.size()^3 (the warm one: when it is not empty), a rate
  /// below 1 FLOP/s or not finite, an unknown or missing kernel.
  void validate(const std::string& profile_name) const;
};

/// The elementwise kernel names a profile's kernels.elementwise_per_second must hold when it has
/// any kernel rates: "pass" (an Eigen elementwise pass y = a x + b over a float array, elements
/// per second), "transcendental" (the trainers' GELU forward and backward, one tanh each, one
/// element at a time: transcendentals per second; train/nn_kernels.h).
const std::vector<std::string>& elementwise_kernel_names();
/// The row kernel names kernels.row_kernels must hold when the profile has any kernel rates:
/// "layer_norm" (forward and backward of one row), "softmax" (one row of a causal attention
/// block: forward over its first i + 1 entries, backward over the row), "cross_entropy"
/// (softmax cross-entropy of one row of logits and its gradient). Measured on the trainers' own
/// kernels (train/nn_kernels.h).
const std::vector<std::string>& row_kernel_names();

/// One chip's figures. Units are in the names: bytes, bytes per second, FLOP per second, seconds.
/// Plain data, thread-compatible.
struct HardwareProfile {
  std::string name;         // "v5e", "v4", "v5p", "this_machine", ...
  std::string description;  // free text
  int cores_per_chip = 1;   // cores the per-chip figures are split over (1: figures are per core)
  /// Peak FLOP/s per XLA dtype name ("bf16", "f32", "int8", ...); at least one entry.
  std::map<std::string, double> peak_flops_per_second;
  uint64_t hbm_bytes = 0;                // HBM capacity per chip
  double hbm_bytes_per_second = 0.0;     // HBM bandwidth per chip
  uint64_t vmem_bytes = 0;               // physical VMEM per core
  uint64_t scoped_vmem_limit_bytes = 0;  // default scoped VMEM limit of a kernel (<= vmem_bytes)
  uint64_t smem_bytes = 0;               // scalar memory per core
  uint64_t accumulator_bytes = 0;        // matrix-unit accumulator memory per core (vtpu model)
  double link_bytes_per_second = 0.0;    // one direction of one inter-chip link
  double link_latency_seconds = 0.0;     // one hop
  int links_per_chip = 0;
  std::string topology;  // "torus_2d", "torus_3d", "ring", "shared_memory"
  /// Host CPUs that the virtual cores' threads share (`vtpu bench hardware`: the online CPUs).
  /// 0 (absent in the JSON; the TPU profiles): every core is its own hardware, nothing is
  /// shared. planner/cost_model.h slows per-core work by cores / host_cpus when more cores than
  /// CPUs run at once.
  int host_cpus = 0;
  /// A CPU cache level the cost model prices memory traffic at when an operation's working set
  /// fits (planner/cost_model.h): its capacity per CPU in bytes and its copy bandwidth in bytes
  /// copied per second (the unit of hbm_bytes_per_second). Both 0 (absent; the TPU profiles): no
  /// cache level, all traffic at hbm_bytes_per_second. Both or neither must be set.
  uint64_t cache_bytes = 0;
  double cache_bytes_per_second = 0.0;
  /// The last-level cache (the L3 on this machine) behind that level: the largest working set,
  /// in bytes, that the process's CPUs together keep in it, and its copy bandwidth in bytes
  /// copied per second. `vtpu bench hardware` measures both from a sweep of copies
  /// (bench/kernel_bench.h, `last_level_cache_from_sweep`), not from sysconf, which on this VM
  /// reports the host's whole 508 MiB. planner/cost_model.h prices a working set that misses
  /// cache_bytes but fits here at this bandwidth, and its GEMMs at the warm rates. Both 0
  /// (absent: the TPU profiles and older host profiles): no such level.
  /// Both or neither must be set, and llc_bytes must exceed cache_bytes.
  uint64_t llc_bytes = 0;
  double llc_bytes_per_second = 0.0;
  /// Calibrated collectives by name ("all_gather", "reduce_scatter", "all_reduce", "all_to_all"):
  /// one or more fits each, measured on distinct group sizes (planner/cost_model.h picks one per
  /// replica group: the fit of that size, else the nearest in log n). Empty for the TPU profiles,
  /// whose collective times follow from the link figures and the topology. JSON key
  /// "collectives": {"all_gather": {"alpha_seconds": .., "beta_seconds_per_byte": ..,
  /// "group_size": 8}, "all_reduce": [{.., "group_size": 2, "measured": [[8, 3.4e-6], ...]},
  /// {.., "group_size": 8}], ...}: a
  /// collective is one fit object or a non-empty array of them (to_json writes the object form
  /// for one fit, the array sorted by group_size for several).
  std::map<std::string, std::vector<CollectiveFit>> collectives;
  /// How the virtual cores' threads were pinned while `collectives` were calibrated
  /// (runtime/thread_pinning.h): one record per calibrated group size, sorted by cores, with
  /// distinct core counts. JSON key "thread_pinning": [{"mode": "auto", "cores": 2, "host_cpus":
  /// 2, "pinned": true, "cpus": [0, 1]}, {"mode": "auto", "cores": 8, ..., "pinned": false,
  /// "reason": "8 cores > 2 CPUs"}]. Optional: empty (absent) in the TPU profiles and in profiles
  /// calibrated before it was recorded. The trainers' estimate report warns when a
  /// run's pinning differs from it (bench/estimate_report.h).
  std::vector<ThreadPinning> thread_pinning;
  /// Measured kernel throughputs (host profiles); JSON key "kernels": {"gemm_sizes": [...],
  /// "gemm_flops_per_second": [...], optional "gemm_warm_flops_per_second": [...],
  /// "elementwise_per_second": {"pass": ..., "transcendental": ...}, "row_kernels":
  /// {"layer_norm": {"seconds_per_row": .., "seconds_per_element": ..}, ...}}. Absent on the TPU
  /// profiles.
  KernelRates kernels;
  /// Source of each figure, keyed by field name ("hbm_bytes_per_second", or
  /// "peak_flops_per_second.bf16"); "UNSURE: ..." where the figure is not published.
  std::map<std::string, std::string> sources;
  /// The file the profile was read from (load_json_file); empty for a shipped or built profile.
  /// Not part of the JSON.
  std::string source_path;

  /// Peak FLOP/s for `dtype` ("f32", "bf16"). Throws InvalidArgumentError naming the dtype, the
  /// dtypes the profile lists, and the file it came from (source_path) when there is one.
  double peak_flops(const std::string& dtype) const;

  /// Throws InvalidArgumentError naming the first field that is missing or out of range.
  void validate() const;
  /// Parses and validates; unknown keys are an error. Sizes may be integers or strings ("16M").
  static HardwareProfile from_json(const nlohmann::json& j,
                                   const std::string& where = "hardware profile");
  nlohmann::json to_json() const;
  /// Reads a JSON file. Throws NotFoundError / InvalidArgumentError (with the path).
  static HardwareProfile load_json_file(const std::string& path);

  /// A shipped profile by name ("v4", "v5e", "v5p"), or, when `name_or_path` ends in ".json", the
  /// file at that path. Throws NotFoundError listing the shipped names for anything else.
  static HardwareProfile get(const std::string& name_or_path);
  /// Names of the shipped profiles, sorted.
  static std::vector<std::string> builtin_names();
};

}  // namespace vtpu
