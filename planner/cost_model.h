// Cost model: estimated time of collectives, compute and HBM traffic on one hardware profile
// (runtime/hardware_profile.h), for the reshard planner (planner/reshard_planner.h) and the
// auto-sharding planner (planner/auto_planner.h). After Alpa's alpha-beta model (Zheng et al.,
// "Alpa", OSDI 2022, section 4) and the JAX scaling book's treatment of TPU rings ("How to think
// about TPUs").
//
// Collectives. n is the group size and B is ALWAYS the bytes of the whole array the group holds
// together: the gathered output of an all-gather (n times one core's input), the full input of a
// reduce-scatter (one core's input), the buffer of an all-reduce (one core's buffer, which every
// core holds in full), n times one core's buffer for an all-to-all, and one core's block for a
// permute.
//
//   all-gather, reduce-scatter   alpha + beta * (n-1)/n * B
//   all-reduce                   2 * (alpha + beta * (n-1)/n * B)    (reduce-scatter + all-gather)
//   all-to-all                   alpha + beta * (n-1)/n^2 * B * c
//   collective permute           alpha + beta * B                     (0 when B = 0)
//
// The bytes one core sends under a bandwidth-optimal algorithm are the same expressions without
// alpha, beta and c: (n-1)/n B, 2 (n-1)/n B, (n-1)/n^2 B, B.
//
// Where alpha, beta and c come from:
// - A calibrated profile (HardwareProfile::collectives, written by `vtpu bench collectives
//   --calibrate`) gives alpha and beta per collective, fitted to the formula above on groups of
//   one or more sizes n_cal (`--cores 2,4,8` writes one fit per size). A group of n cores uses
//   the fit with n_cal = n when there is one; otherwise the fit whose n_cal is nearest in log n
//   (|log2 n_cal - log2 n| smallest; a tie, n halfway between two calibrated sizes, goes to the
//   larger n_cal, measured with at least as many cores synchronising), used with its alpha and
//   beta as fitted (calibrated_fit()). alpha is not rescaled with n, as in Alpa (on this machine
//   it is mostly the cost of waking and synchronising the cores, not of ring steps; scaling it by
//   (n-1)/(n_cal-1) made the reshard search split one all-gather into one per axis to save
//   "steps"); this is why fits at several sizes exist: on 2 CPUs an 8-core fit's alpha is four
//   threads per CPU time-sharing, which no rescaling turns into a 2-core group's. The only
//   scaling is the oversubscription one below, s(N) / s(n_cal). The all-to-all fit's beta is used
//   with c = 1, and all_to_all_factor() reports c = beta_all_to_all / beta_all_gather (both as
//   priced for n), the constant the formula would need with the all-gather's beta. A permute
//   uses the all-gather's alpha and beta (the fit for its group of 2).
//   A fit that carries its measured curve (CollectiveFit::measured, written by
//   --calibrate) is a performance table: inside the curve's range of B the time is interpolated
//   linearly in B between the two nearest measured sizes, instead of the formula (XLA's
//   latency-hiding scheduler prices collectives from measured tables the same way: openxla.org,
//   "LHS Cost Model"). The table is read through its monotone non-decreasing envelope, the
//   running maximum of the times over increasing sizes: a measured dip (the shipped 2-core
//   all-reduce takes 0.5705 us at 8 B and 0.5255 us at 16 B, noise between runs of a few hundred
//   ns) would otherwise price a larger collective below a smaller one and make a layer's share
//   (seconds - alpha, below) negative. Below the first size the first size's time is used (the
//   latency floor); above the last, the envelope's last time plus the formula's beta term for
//   the extra bytes. A spike, one size far slower than its neighbours (a row whose calls were
//   descheduled on a shared host; CostModel::is_measured_spike), is left out before the envelope
//   is taken: through the running maximum it would price every larger size at its time. The
//   table is read at the same B whatever the group's n, and a permute reads the 2-core all-gather's
//   table at 2 B (a 2-core all-gather of 2 B sends each core's B to its one peer). The
//   oversubscription scaling applies as to the formula. alpha_seconds then reports the table's
//   first time that is not a spike (halved for an all-reduce, as the formula's), so that seconds -
//   alpha stays the bandwidth share that the auto planner charges per layer. Why: one line alpha +
//   beta x cannot follow a curve whose algorithm changes with size; on this machine's 8-core
//   all-reduce the line fitted to 8 B..4 MiB was 40% below the measured time at 16-32 KiB, where
//   the MLP's gradient bucket lies.
// - Otherwise the links and the topology. Mesh axis i maps to torus dimension i (a mesh of more
//   axes than the torus has dimensions folds the extra axes onto the last dimension; an axis of
//   size 1 spans no devices and maps to none, so a 1x8 mesh is one ring), and every
//   torus dimension is a bidirectional ring with wraparound. A collective over k mesh axes that
//   map to k distinct torus dimensions runs on the rings of those dimensions and uses 2k links
//   per chip (one each way per dimension): beta = 1 / (2 k link_bytes_per_second). On
//   topology "ring" every axis shares one ring (2 links); on "shared_memory" (this machine
//   uncalibrated) beta = 1 / link_bytes_per_second. alpha = (n-1) link_latency_seconds, one hop per
//   ring step. c = floor(n^2/4) / (n-1) on a ring (derived in docs/PLANNER.md: uniform
//   all-to-all traffic over a bidirectional ring of n with shortest paths loads each link with
//   floor(n^2/4)/n of one core's buffer; 1 for n = 2, 4/3 for n = 4, 16/7 for n = 8); an
//   all-to-all over several torus dimensions runs one phase per dimension (dimension-ordered) and
//   its time is the sum of the phases. c = 1 on shared memory. A permute moves one block one hop:
//   alpha = link_latency_seconds, beta = 1 / link_bytes_per_second.
// - A uniform model (CostModel::uniform) uses one alpha, beta and c for every collective and
//   group: the old ReshardCostModel, and `vtpu reshard --alpha/--beta/--a2a-factor`.
//
// Compute and memory. Per core: peak = peak_flops_per_second[dtype] / cores_per_chip, HBM bytes
// and bandwidth likewise per core. compute_seconds = FLOPs / peak; hbm_seconds = bytes / HBM
// bandwidth; an operation takes max(compute, HBM) (the roofline): on a TPU the MXU computes while
// the DMA engines stream HBM (XLA pipelines them), and on this machine Eigen's GEMM overlaps its
// loads with arithmetic too. The sum would count the same cycles twice. Communication is NOT
// overlapped with compute in the planner's step time (vtpu's trainers call collectives between
// kernels), so step time = sum of operation times + sum of collective times: an upper bound for
// XLA, which overlaps some collectives.
//
// Kernel rates (profiles with HardwareProfile::kernels: this machine after `vtpu bench hardware`,
// never a TPU profile). FLOPs at the 1024^3 GEMM peak badly misprice small models: their GEMMs
// are small and their elementwise work (GELU's scalar tanh, layer norms, softmaxes) is not GEMM
// at all. A profile with kernels holds measured rates per kernel, as Alpa's operator profiling
// does: the f32 GEMM rate on a grid of (m, k, n) (gemm_flops_per_second, interpolated in log
// space), elementwise rates (elementwise_seconds) and row kernels priced as seconds per row =
// a + b x length (row_seconds). The auto planner then sums a layer's kernels (auto_planner.h)
// instead of pricing its FLOPs at the peak; oversubscription applies to them as to the rest.
// The GEMM table comes twice: cold (operands rotated out of the cache, as in a step that touches
// megabytes) and, optionally, warm (the same operands every call, so they stay cached). A GEMM
// whose operation passes the cache test below (fits_in_cache of the operation's working set, the
// figure that also picks the memory term's bandwidth) is priced from the warm table: the
// cache-aware roofline's compute side, where the level that holds the data decides the attainable
// rate (Ilic, Pratas and Sousa, IEEE CAL 2014). A profile without the warm table prices every
// GEMM cold.
//
// Virtual cores on a host (profiles with host_cpus > 0: this machine, never a TPU profile). Two
// terms, both 1 on the TPU profiles and on a model whose core count is unset (for_cores):
// - Oversubscription. N virtual cores are N threads on C = host_cpus CPUs. When all N compute at
//   once (every strategy of the planner keeps every core busy), the kernel's scheduler gives each
//   thread C/N of a CPU, so per-core compute and memory time are multiplied by
//   s(N) = max(1, N / C). The profile's peak FLOP/s and bandwidths are single-threaded on an idle
//   CPU (`vtpu bench hardware`), so s(N) is the only correction. Calibrated collectives were
//   measured on group_size cores all running (s(group_size) already inside the fit), so the fit
//   chosen for a group (above) is scaled by s(N) / s(group_size), N the mesh's cores: on this
//   2-CPU machine a 2-core fit prices a 2-core mesh as measured and a 2-core group of an 8-core
//   mesh times 4; with only an 8-core fit, a 2-core mesh gets it divided by 4 (which overstates
//   its alpha: see above). Other load on the host is not modelled (the estimate is for a host
//   running only this program).
// - Caches. An operation whose working set (the bytes it touches once: its weights, input and
//   output) fits in the profile's cache level streams its traffic at cache_bytes_per_second, not
//   at hbm_bytes_per_second: the roofline's memory term with the bandwidth of the level that holds
//   the data (the cache-aware roofline, Ilic, Pratas and Sousa, IEEE CAL 2014). The virtual cores
//   time-sharing one CPU share its cache, so the test is working set x ceil(N / C) <=
//   cache_bytes (each of the threads on a CPU must find its data still cached after the others
//   ran). A training loop touches the same buffers every step, so a fitting working set is warm.
//   Behind it, a profile may have a last-level cache (llc_bytes, the L3 here), shared by every
//   CPU of the process: a working set that misses cache_bytes but whose N copies (one per
//   concurrent core: N x working set <= llc_bytes) fit there streams at llc_bytes_per_second.
//   For a training step (with_step_footprint) the test is on the step's whole footprint per core
//   instead: between a layer's forward and its backward every other layer's data passes through
//   the cache, so its weights and saved activations are still there only if all of it fits.
//   Either cache level also decides a layer's GEMM rates (gemm_flops_per_second): the warm table,
//   measured with the operands in the L1/L2, prices an L3-resident layer too, because Eigen packs
//   its operands into cache-sized panels and an L3 read of a panel costs little beside the
//   panel's FLOPs. The cold table (operands rotated through 32 MiB, past this VM's L3) is for
//   working sets that fit neither. Measured: the transformer on one core (T = 1024 tokens; its
//   attention and MLP layers have working sets of 1.3-3 MiB, over the 1 MiB L2 and inside the
//   16 MiB L3) was priced at 11.2 ms with its GEMMs cold against 8.9 ms measured; with the
//   warm table, 8.75 ms (docs/PLANNER.md, the cost terms table).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "vtpu/collectives/types.h"
#include "vtpu/runtime/hardware_profile.h"

namespace vtpu {

/// The estimate of one collective. Plain data.
struct CollectiveCost {
  double alpha_seconds = 0;          // the alpha used
  double beta_seconds_per_byte = 0;  // the beta used
  double factor = 1;                 // the all-to-all constant c used (1 for the others)
  double seconds = 0;                // the formula's value, or the measured curve's (below)
  bool measured = false;             // seconds interpolated from the fit's measured curve
  double sent_bytes_per_core = 0;    // bytes one core sends (see the header)
};

/// Immutable after construction. Thread-safe.
class CostModel {
 public:
  /// From a hardware profile (validated here: throws what HardwareProfile::validate throws).
  explicit CostModel(HardwareProfile profile);
  /// The same alpha, beta and all-to-all constant c for every collective and group (the old
  /// ReshardCostModel). Compute and HBM figures are this machine's shipped profile. Throws
  /// InvalidArgumentError for a negative or non-finite value.
  static CostModel uniform(double alpha_seconds, double beta_seconds_per_byte,
                           double all_to_all_factor);
  /// The shipped profile "this_machine" (the default of `vtpu reshard` and `vtpu plan`).
  static const CostModel& this_machine();

  const HardwareProfile& profile() const { return profile_; }
  bool is_uniform() const { return uniform_; }

  /// This model for a program that keeps `num_cores` virtual cores busy at once (a mesh's cores):
  /// sets N of the header's oversubscription and cache terms. 0 unsets it (the default: no
  /// scaling, as for the reshard planner). On a profile without host_cpus nothing changes.
  /// Throws InvalidArgumentError for num_cores < 0.
  CostModel for_cores(int num_cores) const;
  /// N as set by for_cores (0: unset).
  int concurrent_cores() const { return concurrent_cores_; }
  /// s(n) = max(1, n / host_cpus) of the header; 1 when the profile has no host_cpus or n <= 0.
  double oversubscription_at(int num_cores) const;
  /// s(concurrent_cores()).
  double oversubscription() const { return oversubscription_at(concurrent_cores_); }
  /// Whether an operation touching `working_set_bytes` (bytes) runs from the cache level: the
  /// profile has one and working_set_bytes x ceil(N / host_cpus) <= cache_bytes (header).
  bool fits_in_cache(double working_set_bytes) const;
  /// Whether an operation touching `working_set_bytes` (bytes) misses the cache level but runs
  /// from the last-level cache: !fits_in_cache, the profile has llc_bytes, and
  /// max(working_set_bytes, the step footprint of with_step_footprint) x max(1, N) <= llc_bytes
  /// (the N concurrent cores' data share it; header).
  bool fits_in_last_level_cache(double working_set_bytes) const;
  /// This model for a training step that keeps `bytes_per_core` (bytes: parameters, gradients,
  /// optimizer state, saved activations and input on each core) live: fits_in_last_level_cache
  /// then tests max(working set, that footprint) x max(1, N) against llc_bytes, since between a
  /// layer's forward and its backward the rest of the step's data passes through the shared
  /// cache (header). 0 (the default) tests the working set alone. Throws InvalidArgumentError for
  /// a negative or non-finite value.
  CostModel with_step_footprint(double bytes_per_core) const;

  /// Time and bytes of `kind` (all-gather, reduce-scatter, all-reduce, all-to-all or collective
  /// permute; the others throw UnimplementedError) moving `bytes` (B of the header, in bytes) over
  /// a replica group whose devices differ on the mesh axes at `mesh_axis_positions` (positions in
  /// the mesh's axis list, used to map to torus dimensions) with sizes `axis_sizes` (same order;
  /// the group size n is their product; axes of size 1 are ignored, so they map to no torus
  /// dimension). A group of one device, or B = 0, costs nothing. Throws
  /// InvalidArgumentError when the two lists differ in length or a size is < 1.
  CollectiveCost collective(CollectiveKind kind, double bytes,
                            const std::vector<int>& mesh_axis_positions,
                            const std::vector<int64_t>& axis_sizes) const;

  /// The calibrated fit of `op` ("all_gather", "reduce_scatter", "all_reduce", "all_to_all") that
  /// prices a group of `n` cores: the one measured on n cores, else the nearest group size in
  /// log n, ties to the larger (see the header), unscaled. nullptr when the profile has no fit of
  /// `op` or the model is uniform. The pointer lives as long as this model.
  const CollectiveFit* calibrated_fit(const std::string& op, int64_t n) const;
  /// The time of `fit`'s measured curve (non-empty, sizes ascending) at `bytes` (B as in the
  /// header), seconds, read on the curve's monotone envelope E (E_i = max of the times at sizes
  /// <= size i, spikes left out (is_measured_spike), so a larger collective is never priced
  /// cheaper than a smaller one): linear in
  /// bytes between the envelope's two nearest measured sizes, the first time below the curve, and
  /// above it E_last + fit.beta_seconds_per_byte * beta_factor * (bytes - last size). The result
  /// is therefore non-decreasing in `bytes` and >= the first time. Pure; thread-safe.
  static double measured_seconds(const CollectiveFit& fit, double bytes, double beta_factor);
  /// A measured point this many times above what its neighbours allow is a spike, left out of
  /// the curve (is_measured_spike).
  static constexpr double kSpikeFactor = 3.0;
  /// Whether point i of a measured curve (sizes ascending, at least 3 points) is a spike: a row
  /// whose calls were descheduled on a shared host (one 2-core
  /// all-gather row of 118.6 us between rows of about 2.7 us priced every size above it at 118.6
  /// us through the running maximum, and FSDP on 2 cores at 20x its measured step). An interior
  /// point is one when its time exceeds kSpikeFactor times the larger of its neighbours' (a
  /// collective's time grows with its size, so the next size's time is an upper bound up to
  /// noise); the first when it exceeds kSpikeFactor times the second's; the last when it exceeds
  /// kSpikeFactor times the one before scaled by their size ratio (in the bandwidth regime time
  /// grows with bytes). Noise on a shared host only adds time, so a point far below its
  /// neighbours is kept. Two adjacent spikes hide each other. Thread-safe (pure).
  static bool is_measured_spike(const std::vector<std::pair<double, double>>& m, size_t i);
  /// The sizes of `fit`'s measured curve: "18 sizes 32 B..4.00 MiB" (the number of points, then
  /// the first and last B as in the header, in bytes, by format_bytes); "" when it has none. The
  /// one text of a curve's range: describe() prints it, and so does the `sources` entry that
  /// `vtpu bench collectives --calibrate` writes (bench/calibration.h), so that the two agree.
  /// Pure; thread-safe.
  static std::string measured_sizes_text(const CollectiveFit& fit);
  /// The all-to-all constant c for a group of n over one axis (see the header).
  double all_to_all_factor(int64_t n) const;

  /// Peak FLOP/s of one core for `dtype` (throws like HardwareProfile::peak_flops).
  double peak_flops_per_core(const std::string& dtype) const;
  /// HBM capacity of one core, bytes.
  uint64_t hbm_bytes_per_core() const;
  /// HBM bandwidth of one core, bytes per second.
  double hbm_bytes_per_second_per_core() const;
  /// FLOPs / peak x oversubscription() (seconds).
  double compute_seconds(double flops, const std::string& dtype) const;
  /// bytes / HBM bandwidth x oversubscription() (seconds).
  double hbm_seconds(double bytes) const;
  /// bytes / the bandwidth of the level holding `working_set_bytes` (the cache when
  /// fits_in_cache, the last-level cache when fits_in_last_level_cache, else HBM) x
  /// oversubscription() (seconds).
  double memory_seconds(double bytes, double working_set_bytes) const;
  /// Whether the profile holds measured kernel rates (HardwareProfile::kernels: a host profile
  /// written by `vtpu bench hardware`); the auto planner then prices layers kernel by kernel
  /// (planner/auto_planner.h) instead of at the peak.
  bool has_kernel_rates() const { return !uniform_ && !profile_.kernels.empty(); }
  /// FLOP/s of one core for a GEMM (m, k) x (k, n) (sizes in elements, >= 1) run inside an
  /// operation whose working set is `working_set_bytes` (bytes; the same figure that decides
  /// memory_seconds' level, see the header's "Caches"): for f32 on a profile with a GEMM table,
  /// the measured rates interpolated trilinearly in (log2 m, log2 k, log2 n) on log(rate), each
  /// coordinate clamped to the table's sizes, from the warm table
  /// (KernelRates::gemm_warm_flops_per_second) when the profile has one and the working set
  /// fits either cache level (fits_in_cache or fits_in_last_level_cache), else from the cold
  /// table; otherwise the peak
  /// (peak_flops_per_core). The default working set, +infinity, never fits: the cold table. Not
  /// scaled by oversubscription.
  double gemm_flops_per_second(
      double m, double k, double n, const std::string& dtype,
      double working_set_bytes = std::numeric_limits<double>::infinity()) const;
  /// `count` GEMMs of (m, k) x (k, n) in an operation of `working_set_bytes` (bytes; as for
  /// gemm_flops_per_second): count x 2 m k n / gemm_flops_per_second x oversubscription()
  /// (seconds). 0 when a size or count is 0.
  double gemm_seconds(double m, double k, double n, const std::string& dtype, double count = 1,
                      double working_set_bytes = std::numeric_limits<double>::infinity()) const;
  /// `elements` through the measured elementwise kernel `kernel` (a name of
  /// elementwise_kernel_names()): elements / rate x oversubscription() (seconds). Throws
  /// FailedPreconditionError when the profile did not measure it.
  double elementwise_seconds(const std::string& kernel, double elements) const;
  /// `rows` rows of `length` elements through the measured row kernel `kernel` (a name of
  /// row_kernel_names()): rows x (seconds_per_row + seconds_per_element x length) x
  /// oversubscription() (seconds). Throws FailedPreconditionError when the profile did not
  /// measure it.
  double row_seconds(const std::string& kernel, double rows, double length) const;
  /// max(compute_seconds, hbm_seconds): the roofline time of one operation (see the header).
  double op_seconds(double flops, double hbm_bytes, const std::string& dtype) const;
  /// max(compute_seconds, memory_seconds): the roofline with the level that holds the working
  /// set (bytes).
  double op_seconds(double flops, double traffic_bytes, double working_set_bytes,
                    const std::string& dtype) const;

  /// One line with every term: "v5e (torus_2d): alpha 1e-06 s per hop, link 4.5e+10 B/s, ..."
  /// or the uniform "alpha 5e-05 s, beta 5e-09 s/B (0.2 GB/s), all-to-all factor 3"; a calibrated
  /// profile lists each fit (alpha, beta, cores, measured curve: about 1,400 characters for
  /// this_machine); on a host profile followed by "; 8 virtual cores on 2 host CPUs: work x 4",
  /// with `with_compute` the measured kernel rates ("; compute per kernel: ...") and "; working
  /// sets <= 1 MiB per CPU at ... B/s". Pass with_compute = false for a model that prices
  /// collectives only (a reshard). `vtpu plan --verbose` and `vtpu reshard --verbose` print it.
  std::string describe(bool with_compute = true) const;
  /// describe() in short, at most a line: the profile's name, which
  /// collectives are calibrated and on how many cores ("calibrated all_gather, reduce_scatter on
  /// 2, 4, 8 cores; all_to_all on 8 cores"), which are priced from the links, the
  /// oversubscription ("8 virtual cores on 2 host CPUs: work x 4") and, with `with_compute` on a
  /// profile with kernel rates, "compute: measured kernel rates". Without calibrated fits (the
  /// TPU profiles, the uniform model) it is describe()'s link line. What `vtpu plan` and
  /// `vtpu reshard` print by default.
  std::string summary(bool with_compute = true) const;
  /// `line` (summary() or describe()) without its leading "cost model: " label, for a JSON field
  /// whose key already says what it is (`vtpu reshard --json`'s
  /// "cost_model" read "cost model: this_machine (calibrated ..."). Other text is returned as is.
  /// Pure.
  static std::string without_label(std::string line);

 private:
  CostModel() = default;
  /// Torus dimensions the mesh axes map to (distinct, at most the torus's dimension count).
  int torus_dims_used(const std::vector<int>& mesh_axis_positions) const;
  /// Dimensions of the profile's topology: 3 for torus_3d, 2 for torus_2d, 1 for ring, 0 else.
  int torus_rank() const;
  /// describe() without the host terms; `list_fits` false: summary()'s calibrated collectives.
  std::string describe_links(bool list_fits = true) const;
  /// "; 8 virtual cores on 2 host CPUs: work x 4" on a host profile, else "".
  std::string describe_host() const;

  HardwareProfile profile_;
  int concurrent_cores_ = 0;         // N of for_cores; 0: unset
  double step_footprint_bytes_ = 0;  // bytes per core of with_step_footprint; 0: unset
  bool uniform_ = false;
  double uniform_alpha_ = 0, uniform_beta_ = 0, uniform_factor_ = 1;
};

}  // namespace vtpu
