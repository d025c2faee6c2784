// Collective probe: the calibrated profile's collectives re-measured at run time, at one size,
// so that a run's estimate can be judged in the mode the host is in when the run happens
// (docs/PLANNER.md, "Estimate against measurement").
//
// Why. On this machine (a VM with 2 vCPUs) the cost of one hand-off between two virtual cores
// switches between about 0.9 us and 2.5-3.2 us per 4 KiB 2-core all-gather on a scale of minutes,
// with the same binary on an idle host; vtpu's link waits resolve at once or spinning in both
// modes (link wait statistics, docs/PLANNER.md), so the change is in the host's memory path
// between the vCPUs, not in vtpu. A profile calibrated in one mode misprices every collective of
// a run in the other by a fixed amount per call: the probe measures that amount.
//
// Method. For every calibrated fit (op, group size n) of the profile that prices the plan's
// strategy (fits_priced_by; every fit with n <= the run's cores when that cannot be told),
// `vtpu bench collectives` (bench/collective_bench.h) times `iters` calls of a `row_bytes` row
// (nccl-tests' size; median over calls of the slowest core, as the calibration does) on n fresh
// virtual cores. The difference to the profile's time for the same row (its measured curve, or
// its formula) is the fit's shift: a latency term, added to every point of the curve and to
// alpha (half of it for an all-reduce, whose alpha is per half: planner/cost_model.h), beta
// unchanged. This is the calibration's own measurement repeated at one size (the 2-core curve in
// the slow mode is the fast one plus 1.5-1.9 us at 4-16 KiB: an additive shift), in the spirit of
// NCCL's and XLA's practice of re-measuring on the machine a job runs on rather than trusting a
// table measured elsewhere.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/runtime/thread_pinning.h"

namespace vtpu {

struct TrainPlan;

/// One fit of the profile, re-measured. Plain data.
struct CollectiveProbe {
  std::string op;               // "all_gather", "reduce_scatter", "all_reduce", "all_to_all"
  int group_size = 0;           // n, the fit's group size (cores)
  uint64_t row_bytes = 0;       // the benchmark row's size S, bytes (nccl-tests' "size")
  double profile_seconds = 0;   // the profile's time for that row (curve or formula), seconds
  double measured_seconds = 0;  // the median time measured now, seconds
  /// Where the probe's cores' threads ran (runtime/thread_pinning.h): pinning changes a 2-core
  /// hand-off about 3.5x, so a probe and a profile fit compare only under the same pinning.
  ThreadPinning thread_pinning;
  /// measured - profile: the shift applied to the fit, seconds (negative when faster now).
  double shift_seconds() const { return measured_seconds - profile_seconds; }
};

/// A probe that measured more than this many times the profile's time says the host is busy (other
/// work, not a different hand-off speed: this VM's slow hand-off is about 3.3x): the estimate
/// with such probes is printed but not judged, or a busy host's whole slowdown would be absorbed
/// into the estimate and called "within 25%" (a run at 5942x the
/// profile's estimate was judged 0.81x).
inline constexpr double kBusyHostProbeRatio = 10.0;

/// The largest measured_seconds / profile_seconds over `probes` (those with a profile time > 0);
/// 0 when there is none. Thread-safe.
double worst_probe_ratio(const std::vector<CollectiveProbe>& probes);

/// A fit of a profile: (op, group size).
using CollectiveFitId = std::pair<std::string, int>;

struct CollectiveProbeOptions {
  uint64_t row_bytes = 4096;  // S of each probe row, bytes (4 KiB: every curve's range holds it)
  int iters = 200;            // timed calls per fit
  int warmup = 20;            // untimed calls per fit
  /// Probe only these fits (fits_priced_by: those the plan's strategy prices); nullopt: every
  /// fit that can price a group of the run (probe_collectives).
  std::optional<std::set<CollectiveFitId>> only;
  /// pin_threads of the probe's Runtimes ("auto", "on", "off"; empty: RuntimeOptions' default,
  /// VTPU_PIN_THREADS or auto). add_collective_probe passes the run's, so that the probe meets
  /// the host as the run did.
  std::string pin_threads;
};

/// The profile's time, seconds, for a `vtpu bench collectives` row of `op` with size `row_bytes`
/// on `fit.group_size` cores: its measured curve at the row's B (CostModel::measured_seconds) when
/// the curve covers it, else the formula alpha + beta x (2 alpha for an all-reduce) with x as
/// bench/calibration.h converts rows. Throws InvalidArgumentError for an unknown op.
double profile_row_seconds(const std::string& op, const CollectiveFit& fit, uint64_t row_bytes);

/// A fit that prices a group of the run but was not probed, and why. Plain data.
struct SkippedCollectiveProbe {
  std::string op;      // the fit's collective ("all_reduce")
  int group_size = 0;  // the fit's group size (cores)
  /// Why, a sentence naming the fit: "all_reduce 1024-core fit not probed: probing it would
  /// start 1024 virtual cores, more than the run's 8 (the run's groups are priced from the
  /// profile's fit as calibrated, not re-measured)".
  std::string reason;
};

/// Probes every fit of `profile.collectives` whose group size is <= max_cores (header), in the
/// profile's order, keeping only options.only's fits when it is set; empty when there is none (a
/// TPU profile, an uncalibrated one, max_cores < 2). A fit above max_cores that prices a group
/// of the run (options.only's, or without it the one CostModel::calibrated_fit picks for a group
/// of max_cores: a 3-core run's groups are priced with a 4-core fit) is not probed: the probe
/// never starts more virtual cores than the run had (an 8-core
/// run whose profile had only a 1024-core all-reduce fit started a 1024-core probe, 47 s and
/// 922 MB on this 2-CPU host). Each such fit is appended to `*skipped` (when not null) with the
/// reason. Runs benchmarks on fresh virtual cores (not thread-safe with other work timing the
/// host). Throws what the benchmark throws, InvalidArgumentError naming the fit when the
/// benchmark refuses its options, and InternalError when a probe's result is wrong.
std::vector<CollectiveProbe> probe_collectives(
    const HardwareProfile& profile, int max_cores, const CollectiveProbeOptions& options = {},
    std::vector<SkippedCollectiveProbe>* skipped = nullptr);

/// `profile` with each probed fit shifted by its probe's shift_seconds (header): every measured
/// point's time + shift and alpha + shift (+ shift / 2 for all_reduce), each clamped to >= 1 ns
/// (alpha to >= 0). Fits without a probe are unchanged. Validated (throws what
/// HardwareProfile::validate throws). Pure.
HardwareProfile shift_collectives(const HardwareProfile& profile,
                                  const std::vector<CollectiveProbe>& probes);

/// The fits of `profile` that price the plan's strategy (a dp(x) plan
/// on 8 cores, which runs only 8-core all-reduces, was probed on all four ops on 2, 4 and 8
/// cores): a fit counts when moving it alone (every measured point and alpha + 1 ms, as
/// shift_collectives moves a probed fit) changes the step time of the plan's strategy priced by
/// plan_auto_sharding on the plan's model_graph and mesh, as reestimate_step_seconds prices it.
/// So a fit is listed exactly when its probe could move the probed estimate. Empty for a plan
/// without collectives (1 core) or a profile without calibrated fits; nullopt when the strategy
/// cannot be priced again (no model_graph or strategy name, or the strategy is not among the
/// candidates): then every fit may matter. Prices the plan 1 + (number of fits) times (about
/// 1 ms each for the digits MLP). Throws what plan_auto_sharding throws. Thread-safe.
std::optional<std::set<CollectiveFitId>> fits_priced_by(const TrainPlan& plan,
                                                        const HardwareProfile& profile);

/// The plan's step-time estimate moved by what `shifted` changes: the plan's
/// estimate->step_seconds + (step time of the plan's strategy priced with `shifted` - priced
/// with `profile`), both by plan_auto_sharding on the plan's model_graph and mesh with the
/// profile's HBM limit. nullopt when the plan lacks an estimate, a model_graph or a strategy
/// name, or its strategy is not among the candidates. Throws what plan_auto_sharding throws.
std::optional<double> reestimate_step_seconds(const TrainPlan& plan, const HardwareProfile& profile,
                                              const HardwareProfile& shifted);

}  // namespace vtpu
