// The planner's estimate against a measured training run. Issue 6: "The planner's estimate for
// each example, against the measured time and HBM per core on this machine with the calibrated
// profile, within 25%. Print both." Every `vtpu train` command that is given a plan calls this one
// function, so the comparison reads the same everywhere (docs/PLANNER.md, "Estimate against
// measurement").
//
// What is compared (ratio = measured / estimate; "within 25%" when |ratio - 1| <= 0.25):
//   step time  estimate.step_seconds against the median over steps of core 0's wall time per step
//              (the trainers' step_seconds). Printed beside it, not judged: the process CPU time
//              per step (all threads; StepMeter: the median CPU rate over windows between readings
//              on core 0, at most one per 200 us of wall time, times the median wall interval of
//              core 0's steps, so that it is comparable with the wall row) and that divided by
//              min(cores, host CPUs): the wall time the step's CPU work would take spread evenly
//              over the CPUs the run can use, with no waiting. Other programs on the host inflate
//              the wall time but, to first order, not the CPU time, so on a loaded host the CPU
//              figure is the fairer one.
//   HBM/core   estimate.hbm_bytes_per_core + estimate.input_bytes_per_core (the planner's model
//              state, activations, FSDP transient, and the step's input batch) against the largest
//              peak_bytes_in_use over the cores minus what the model file does not describe (the
//              trainers' device-resident training set, `unmodelled_hbm_bytes`). The raw peak is
//              printed too.
//   pinning    the run's thread pinning (MeasuredRun::thread_pinning) against the profile's record
//              for the same group size (HardwareProfile::thread_pinning; thread_pinning_mismatch):
//              not judged, but a warning line and JSON thread_pinning.differs when one is pinned
//              and the other not, since pinning alone changes a 2-core hand-off about 3.5x.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "vtpu/bench/latency_probe.h"
#include "vtpu/memory/memory_stats.h"
#include "vtpu/planner/plan_file.h"
#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/runtime/thread_pinning.h"

namespace vtpu {

/// Process CPU time per step, measured on core 0 at the end of every step. Only one thread may
/// call tick() (core 0's); read the results after the run. Thread-compatible.
///
/// Reading the process CPU time (clock_gettime(CLOCK_PROCESS_CPUTIME_ID), a system call that sums
/// every thread) costs about 1.3 us on this VM, while a step of the 2-core MLP takes 13-25 us; read
/// on core 0 every step, it lengthened core 0's step, which is the one the report times, and kept
/// the other cores waiting at the next collective. So the wall time (the vDSO steady clock, tens
/// of ns) is read at every tick, and the CPU time only when at least kCpuReadSeconds of wall time
/// have passed since the last CPU reading, and at the first and the last tick (so a short run of
/// 2 or more steps still has an interval): under 1% of the run.
class StepMeter {
 public:
  /// Wall time between CPU time readings (seconds): at 1.3 us a reading, under 1%.
  static constexpr double kCpuReadSeconds = 200e-6;

  /// Records the wall time now and, when due (above) or `last` (the run's last tick), the process
  /// CPU time (CLOCK_PROCESS_CPUTIME_ID: every thread of the process).
  void tick(bool last = false);
  /// tick() with the clocks given: `wall_seconds` now, and `read_cpu_seconds` called only when a
  /// CPU reading is due or `last`. For tests.
  void record(double wall_seconds, const std::function<double()>& read_cpu_seconds,
              bool last = false);
  /// A trainer's on_log callback that ticks on every step and forwards (step, loss) to `on_log`
  /// (when set) only where the trainer would have: every `every` steps (0: never) and at the last
  /// of `steps`, where it also reads the CPU clock (tick(true)). The trainer must be run with
  /// log_every = 1 so that it calls back every step.
  /// The meter must outlive the callback.
  std::function<void(int64_t, double)> wrap(std::function<void(int64_t, double)> on_log,
                                            int64_t every, int64_t steps);
  /// CPU seconds per step, comparable with median_wall_seconds(): the median over consecutive
  /// CPU readings of the CPU rate between them (CPU time / wall time of the window: the CPUs the
  /// process kept busy, at most the host's) times median_wall_seconds() (the same ticks). So
  /// CPU / min(cores, host CPUs) cannot exceed the median wall step when cores >= host CPUs.
  /// (The median of CPU time / steps per window followed each window's mean step: on a loaded
  /// host with a few long steps it came out up to 2.2x the median wall step.) 0 with fewer than 2
  /// readings or no wall time between them.
  double median_cpu_seconds() const;
  /// Median over the intervals between consecutive ticks (seconds; 0 with fewer than 2 ticks).
  double median_wall_seconds() const;
  /// Intervals measured (ticks - 1, or 0).
  size_t intervals() const { return wall_.empty() ? 0 : wall_.size() - 1; }
  /// CPU time readings taken.
  size_t cpu_readings() const { return cpu_.size(); }

 private:
  std::vector<double> wall_;                    // wall time at each tick, seconds
  std::vector<std::pair<size_t, double>> cpu_;  // (tick index, process CPU seconds)
  double last_cpu_wall_ = 0;                    // wall time of the last CPU reading
};

/// What a run measured, and the host it ran on. Plain data.
struct MeasuredRun {
  int num_cores = 0;
  int64_t steps = 0;
  double median_step_seconds = 0.0;         // core 0's wall time per step, median
  double cpu_seconds_per_step = 0.0;        // StepMeter's median (0: not measured)
  uint64_t peak_hbm_bytes_per_core = 0;     // max over cores of peak_bytes_in_use
  uint64_t unmodelled_hbm_bytes = 0;        // part of that peak the model file does not describe
  std::string unmodelled_what;              // what it is ("training set, replicated")
  int host_cpus = 0;                        // usable CPUs (common/host.h; 0: unknown)
  std::array<double, 3> load_average = {};  // 1, 5 and 15 minutes, when the run ended
  /// Where the run's cores' threads ran (Runtime::thread_pinning; nullopt: not recorded).
  std::optional<ThreadPinning> thread_pinning;
};

/// Fills `host_cpus` (usable_cpus: the affinity mask's CPUs) and `load_average` (getloadavg).
void record_host(MeasuredRun& run);

/// A trainer's run as MeasuredRun: `num_cores`, `steps`, core 0's median step time (in ms, as the
/// trainers report it), the meter's median CPU time per step, the largest peak_bytes_in_use of
/// `hbm` (one per core), the part of it the model file does not describe, and the host
/// (record_host).
MeasuredRun measure_run(int num_cores, int64_t steps, double median_step_ms, const StepMeter& meter,
                        const std::vector<MemoryStats>& hbm, uint64_t unmodelled_hbm_bytes = 0,
                        std::string unmodelled_what = {});

/// The comparison. Plain data.
struct EstimateReport {
  PlanEstimate estimate;
  MeasuredRun measured;
  double step_ratio = 0.0;         // measured.median_step_seconds / estimate.step_seconds
  uint64_t estimated_hbm = 0;      // hbm_bytes_per_core + input_bytes_per_core
  uint64_t comparable_hbm = 0;     // peak_hbm_bytes_per_core - unmodelled_hbm_bytes
  double hbm_ratio = 0.0;          // comparable_hbm / estimated_hbm (0 when the estimate is 0)
  double cpu_bound_seconds = 0.0;  // cpu_seconds_per_step / min(cores, host CPUs) (0: unknown)
  double cpu_ratio = 0.0;          // cpu_bound_seconds / estimate.step_seconds
  bool step_within = false;        // |step_ratio - 1| <= kTolerance (false when not comparable)
  /// False when the estimate is priced with a TPU profile (no host_cpus: v4, v5e, v5p, or a
  /// plan's embedded profile without host_cpus): its step time is a TPU's, not this host's, so
  /// the step row is printed but not judged; or when the caller says so (mark_step_not_judged).
  bool step_comparable = true;
  /// Why the step row is not judged ("" while step_comparable): "the estimate is for v5e, a TPU;
  /// plan with --hardware this_machine to compare", or mark_step_not_judged's reason. Printed
  /// after the ratio, "23.93x (not judged: REASON)"; JSON step_not_judged.
  std::string step_not_judged_reason;
  /// host_cpus of the profile the estimate was priced with (0: a TPU profile or none found). When
  /// it is not measured.host_cpus, the report says the profile describes another host.
  int profile_host_cpus = 0;
  bool hbm_within = false;  // |hbm_ratio - 1| <= kTolerance (false when not comparable)
  /// False when the caller says the run's HBM is not what the estimate prices
  /// (mark_hbm_not_judged, e.g. a micro-batched run's gradient-accumulation buffer): the HBM row
  /// is printed but not judged, "1.41x (not judged: REASON)"; JSON hbm_ratio and
  /// hbm_within_25_percent null, hbm_not_judged the reason.
  bool hbm_comparable = true;
  std::string hbm_not_judged_reason;  // why ("" while hbm_comparable)
  /// What the reader must know to read the step row, each printed as "  warning: ..." after the
  /// table and in JSON "warnings" ([] when none): no_calibrated_collectives_warning
  /// (bench/calibration.h) when the estimate's host profile has no calibrated collectives,
  /// so that every hand-off was priced at the links' latency (a report 3.6x off for
  /// that reason must say so).
  std::vector<std::string> warnings;
  /// The collective probe after the run (add_collective_probe; bench/latency_probe.h): the
  /// profile's collectives re-measured at one size, and the estimate with their shifts. Empty /
  /// 0 when it did not run (no calibrated collectives in the plan's profile, or not comparable).
  std::vector<CollectiveProbe> probes;
  double probed_step_seconds = 0.0;  // the estimate with the probed collectives (0: none)
  double probed_step_ratio = 0.0;    // measured.median_step_seconds / probed_step_seconds
  bool probed_step_within = false;   // |probed_step_ratio - 1| <= kTolerance, and probe_judged
  /// Largest measured / profile time over the probes (0: none).
  double probe_worst_ratio = 0.0;
  /// probe_worst_ratio <= kBusyHostProbeRatio (bench/latency_probe.h): else the host was busy
  /// and the probed estimate is printed but not judged (JSON step_within_25_percent null).
  bool probe_judged = true;
  std::string probe_error;  // why the probe failed ("" when it ran or was not due)
  /// The fits that price the run's groups but were not probed (probe_collectives' `skipped`:
  /// more cores than the run had), each printed as
  /// "    collective probe: REASON" and listed in JSON probe.not_probed ({op, group_size,
  /// reason}).
  std::vector<SkippedCollectiveProbe> not_probed;
  /// The probe measured only the fits the plan's strategy prices (fits_priced_by), not every fit
  /// up to the run's cores (JSON probe.plan_fits_only).
  bool probed_plan_fits_only = false;
  /// The profile's pinning record for the run (profile_thread_pinning; nullopt: none, e.g. a
  /// profile calibrated before pinning was recorded, or a TPU profile).
  std::optional<ThreadPinning> profile_thread_pinning;
  /// thread_pinning_mismatch of that record and the run's ("" when they agree or one is
  /// unknown). Printed as a warning line; JSON thread_pinning.warning.
  std::string thread_pinning_warning;

  static constexpr double kTolerance = 0.25;  // issue 6: within 25%

  /// Marks the step row not judged, saying `reason`: step_comparable and step_within false, and
  /// no collective probe (call it before add_collective_probe). For a run the estimate does not
  /// price, e.g. `train mlp --estimate-from PLAN --kernels pallas` against an estimate of the
  /// Eigen kernels' rates.
  void mark_step_not_judged(std::string reason);
  /// Marks the HBM row not judged, saying `reason`: hbm_comparable and hbm_within false.
  void mark_hbm_not_judged(std::string reason);

  /// The table `vtpu train ... --plan` prints (a few lines, ending in a newline).
  std::string to_string() const;
  nlohmann::json to_json() const;
};

/// The planner prices one forward and backward pass per step
/// (`vtpu plan` has no micro-batches), so a run of `micro_batches` > 1 (K passes and K times the
/// per-pass collectives per step) has its step row printed but not judged ("the estimate is for
/// 1 micro-batch per step; this run used K"), and its HBM row too (the
/// gradient-accumulation buffer is not in the estimate, 1.41x on dp(x) over 8 cores: "the
/// estimate is for 1 micro-batch per step; this run used K, whose gradient-accumulation buffer
/// it does not price"). Nothing changes for K <= 1.
void mark_micro_batches_not_judged(EstimateReport& report, int64_t micro_batches);

/// The record of `profile` (HardwareProfile::thread_pinning) that prices a run of `cores` cores:
/// the one of that many cores, else the nearest in log n (as the cost model picks a fit; a tie
/// goes to the larger), else nullptr (no record). Pure.
const ThreadPinning* profile_thread_pinning(const std::vector<ThreadPinning>& profile, int cores);

/// The warning when a run's pinning `run` differs from the profile's record `profile` (one is
/// pinned and the other not), else "": "thread pinning differs from the profile's: this run
/// auto (not pinned: pin_threads off), the profile's 2-core collectives were calibrated with auto
/// (pinned: cores 0,1 -> CPUs 0,1); pinning alone changes a 2-core hand-off about 3.5x, so the
/// estimate's collectives are priced for the other mode (run or calibrate with the same
/// pin_threads: --config or VTPU_PIN_THREADS)". Pure.
std::string thread_pinning_mismatch(const ThreadPinning& profile, const ThreadPinning& run);

/// Compares. Pure. Thread-safe.
EstimateReport compare_estimate(const PlanEstimate& estimate, const MeasuredRun& measured);

/// Runs the collective probe (bench/latency_probe.h) for `report`'s run and fills its probe
/// fields: when the step is comparable and the plan's hardware profile (PlanEstimate::priced_with)
/// holds calibrated collectives, probes the fits the plan's strategy prices (fits_priced_by; when
/// it cannot tell, or options.only is set, every fit probe_collectives picks for
/// measured.num_cores cores, or options.only's) and re-estimates the plan's strategy with the
/// shifted profile (reestimate_step_seconds); nothing when the strategy prices no fit. Takes about
/// 0.1 s on 8 cores; call it right after the run, while the host is in the mode the run met. A
/// vtpu::Error from the probe or the re-estimate does not fail the run: its message goes to
/// probe_error (printed). Not thread-safe with other timed work.
void add_collective_probe(EstimateReport& report, const TrainPlan& plan,
                          const CollectiveProbeOptions& options = {});

}  // namespace vtpu
