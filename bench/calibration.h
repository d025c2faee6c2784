// Calibration of a hardware profile from measurements on this machine, behind
// `vtpu bench collectives --calibrate OUT.json` (docs/PLANNER.md).
//
// Method. For each of all_gather, reduce_scatter, all_reduce and all_to_all and each group size
// N of the options (default 2, 4 and 8: one fit per collective and size, which the cost model
// picks by the replica group's size), the collectives benchmark (bench/collective_bench.h)
// sweeps doubling sizes on N cores; each row gives a
// size S (nccl-tests' size) and a time t (median over calls of the slowest core). The row is put
// in the cost model's form t = a + b x (planner/cost_model.h, B the whole array over the group):
//   all_gather, reduce_scatter  B = S                x = (n-1)/n S     alpha = a,   beta = b
//   all_reduce                  B = S                x = 2 (n-1)/n S   alpha = a/2, beta = b
//   all_to_all                  B = n S (S per core) x = (n-1)/n^2 B   alpha = a,   beta = b (c =
//   1)
// and a, b are fitted by least squares on the relative residuals (each row weighted by 1/t), so
// that the 8-byte rows, where alpha dominates, count as much as the 64 MiB rows: minimise
// sum_i ((a + b x_i - t_i) / t_i)^2, solved with Eigen's column-pivoting Householder QR. A
// negative a (latency below resolution) is clamped to 0 and b refitted through the origin. The
// rows themselves are kept too, as the fit's measured curve (CollectiveFit::measured: (B, t) per
// row, B as in the table above), which the cost model interpolates inside the swept range. The
// peak f32 FLOP/s (single-threaded Eigen GEMM) and HBM bandwidth (memcpy) come from
// measure_this_machine (`vtpu bench hardware`, bench/kernel_bench.h).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "vtpu/planner/auto_planner.h"
#include "vtpu/planner/cost_model.h"
#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/runtime/runtime_options.h"

namespace vtpu {

/// A fitted t = a + b x. Plain data.
struct LinearFit {
  double a = 0;                   // intercept, seconds
  double b = 0;                   // slope, seconds per unit of x
  double max_relative_error = 0;  // max_i |a + b x_i - t_i| / t_i
  size_t points = 0;
};

/// Fits t = a + b x minimising the sum of squared relative residuals (weights 1/t_i), a >= 0.
/// Throws InvalidArgumentError, worded for the user ("alpha-beta fit t = alpha + beta * x: 1
/// measured size (expected at least 2 ...)"), when x and t differ in length, there are fewer than
/// 2 points, a t_i is not > 0, or all x_i are equal.
LinearFit fit_alpha_beta(std::span<const double> x, std::span<const double> t);

/// The x of the fit for a benchmark row of `op` with size `row_bytes` on n cores, as the header's
/// table gives it; throws InvalidArgumentError for another op.
double calibration_x(const std::string& op, double row_bytes, int n);

/// The cost model's B (planner/cost_model.h) of a benchmark row of `op` with size `row_bytes`
/// on n cores: row_bytes, or n * row_bytes for all_to_all (S per core). Throws like
/// calibration_x. calibrate_this_machine stores each row as (B, time) in CollectiveFit::measured.
double calibration_formula_bytes(const std::string& op, double row_bytes, int n);

/// The fit of `op` turned into the cost model's alpha and beta (all_reduce halves a).
CollectiveFit collective_fit_of(const std::string& op, const LinearFit& fit, int n);

struct CalibrationOptions {
  std::vector<int> cores = {2, 4, 8};      // group sizes of the sweeps (distinct, >= 2)
  uint64_t min_bytes = 8;                  // first size of each sweep, bytes
  uint64_t max_bytes = uint64_t{4} << 20;  // last size of each sweep, bytes
  int iters = 30;                          // timed calls per size
  int warmup = 3;                          // untimed calls per size
  /// The benchmarks' Runtime options (--config: pin_threads, collective_timeout, ...); num_cores
  /// and the links are the benchmark's.
  RuntimeOptions runtime;
};

/// Usage check of `o` before anything is measured (range errors found
/// only after the sweeps cost 9-23 s of measuring). Returns "" when fine,
/// else a message naming the options and values: no group sizes, or one below 2 or repeated;
/// for each collective and group size what check_collective_bench_options refuses (--min-bytes
/// above --max-bytes, a --max-bytes that gives no core a whole element, buffers beyond 3/4 of
/// the machine's memory); and a sweep with fewer than 2 sizes, which no alpha-beta fit can use
/// ("--min-bytes 8 .. --max-bytes 8 gives all_gather on 2 cores 1 size (sizes double from
/// --min-bytes, and those that leave a core less than one element are skipped); the fit t =
/// alpha + beta * x needs at least 2: widen the range, e.g. --max-bytes 4M"). Thread-safe.
std::string check_calibration_options(const CalibrationOptions& o);

/// The `sources` text calibrate_this_machine writes for the fit `cf` (its measured curve set) of
/// one collective on `cf.group_size` cores, fitted as `fit` with `iters` timed calls per size:
/// "fitted by `vtpu bench collectives --calibrate`: 18 sizes 32 B..4.00 MiB on 8 cores, 30 timed
/// calls each ...". The sizes are CostModel::measured_sizes_text(cf), the B of the cost model's
/// formula (n S for an all-to-all), as `vtpu plan --verbose` prints the same curve: the sweep's
/// --min-bytes, --max-bytes are not its range (a size the group cannot split is skipped).
/// Thread-safe (pure).
std::string calibration_source_text(const CollectiveFit& cf, const LinearFit& fit, int iters);

/// The check calibrate_this_machine applies to each fit: throws InvalidArgumentError naming `op`,
/// the fitted beta, the sweep's range of `o` and the group size `cores` when fit.b is not > 0.
void check_fit_grows(const std::string& op, const LinearFit& fit, const CalibrationOptions& o,
                     int cores);

/// How far a calibration can be trusted: its worst fit and the host's load around it. Plain data.
struct CalibrationQuality {
  double worst_residual = 0.0;  // largest LinearFit::max_relative_error over the fits (0.98: 98%)
  std::string worst_fit;        // that fit, e.g. "all_reduce on 2 cores" (empty: no fit yet)
  double load_start = -1.0;     // 1-minute load average before the first measurement (-1: unknown)
  double load_end = -1.0;       // 1-minute load average after the last one (-1: unknown)
  int host_cpus = 0;            // online CPUs (0: unknown)
};

/// A fit whose max relative residual is above this (50%) makes calibration_warning warn.
inline constexpr double kMaxTrustedResidual = 0.5;

/// The warning `vtpu bench collectives --calibrate` prints (to stderr) for `q`, or "" when none
/// is due: it warns when q.worst_residual > kMaxTrustedResidual, or a known load average (start
/// or end) is above a known q.host_cpus (other programs then compete with the benchmark's
/// threads, which wait for descheduled peers). The text names each reason with its numbers.
/// Thread-safe (pure).
std::string calibration_warning(const CalibrationQuality& q);

/// One warning per group size in `groups` (cores, each > 1) that a calibrated collective of
/// `cost`'s profile prices from a fit measured on another core count (CostModel::calibrated_fit:
/// the nearest in log n), restricted to the collectives in `ops` (empty: every calibrated one),
/// e.g. "8-core groups are priced from the 2-core fits of all_gather, all_reduce (scaled by the
/// oversubscription s(8) / s(2) = 4): the profile has no fit measured on 8 cores (calibrate with
/// vtpu bench collectives --calibrate FILE --cores 2,8)"; `cores` is the mesh's. `vtpu plan`
/// prints them for its table's strategies and the trainers' estimate
/// report for the plan it ran (a 16-core run judged against 8-core fits must say so). None on an
/// uncalibrated profile. Thread-safe (pure).
std::vector<std::string> extrapolated_fit_warnings(const CostModel& cost,
                                                   const std::set<int64_t>& groups, int64_t cores,
                                                   const std::set<std::string>& ops = {});

/// What the cost model cannot price as well as `plan`'s figures suggest, as `vtpu plan` prints it:
/// no_calibrated_collectives_warning for `cost`'s profile, then extrapolated_fit_warnings for the
/// group sizes of the plan's feasible strategies (the product of a role's mesh axes, > 1 core) on
/// its mesh. Thread-safe (pure).
std::vector<std::string> plan_cost_model_warnings(const CostModel& cost,
                                                  const AutoShardingPlan& plan);

/// The warning for a host profile (host_cpus > 0) without calibrated collectives, as `vtpu bench
/// hardware --out` writes one: "<what> has no calibrated collectives: they are priced as a memcpy
/// over the links with <link latency> latency, not this host's hand-off (calibrate with vtpu
/// bench collectives --calibrate FILE)"; "" for a TPU profile or a calibrated one. `what` names
/// the profile (its file, or its name). `vtpu plan` prints it and the trainers' estimate report
/// repeats it. Thread-safe (pure).
std::string no_calibrated_collectives_warning(const HardwareProfile& profile,
                                              const std::string& what);

/// The text calibrate_this_machine appends to the profile's description: the load averages at
/// the start and end, the host's CPUs and the worst fit's residual, e.g. "; load average (1 min)
/// 1.50 at the start, 1.75 at the end, on 2 CPUs; worst max relative residual 12% (all_gather on
/// 2 cores)". Thread-safe (pure).
std::string calibration_quality_text(const CalibrationQuality& q);

/// Measures this machine (measure_this_machine) and fits the four collectives on every group
/// size of options.cores; returns a validated profile named "this_machine" whose `collectives`
/// hold one fit per collective and size, whose sources say how each figure was measured
/// ("collectives.all_reduce" for a single size, "collectives.all_reduce.8" per size otherwise),
/// whose thread_pinning holds each group size's pinning (runtime/thread_pinning.h: as the
/// benchmarks' Runtimes applied options.runtime.pin_threads; `log` gets one line each),
/// and whose description ends with calibration_quality_text. `log` receives one line per fit;
/// `quality`, when given, receives the worst fit and the load averages (getloadavg) read before
/// the first and after the last measurement. Throws InvalidArgumentError "calibration: " +
/// check_calibration_options' message before measuring, what the benchmark throws, and
/// InvalidArgumentError naming the collective when its fitted beta is not > 0 (its times did not
/// grow with size: too narrow a range or too noisy).
HardwareProfile calibrate_this_machine(const CalibrationOptions& options,
                                       const std::function<void(const std::string&)>& log = {},
                                       CalibrationQuality* quality = nullptr);

}  // namespace vtpu
