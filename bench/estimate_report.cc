#include "vtpu/bench/estimate_report.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "vtpu/bench/calibration.h"
#include "vtpu/common/error.h"
#include "vtpu/common/format_text.h"
#include "vtpu/common/host.h"
#include "vtpu/common/median.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/planner/plan_file.h"
#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/train/mlp_trainer.h"

namespace vtpu {

namespace {

std::string ratio_text(double r, bool within) {
  if (!(r > 0)) return "-";
  char b[48];
  std::snprintf(b, sizeof b, "%.2fx (%s 25%%)", r, within ? "within" : "outside");
  return b;
}

std::string busy_host_text(double r, double worst) {
  char text[192];
  std::snprintf(text, sizeof text,
                "%.2fx (not judged: a collective probed %.0fx the profile's time, more than "
                "%.0fx: the host was busy)",
                r, worst, kBusyHostProbeRatio);
  return text;
}

std::string not_judged_text(double r, const std::string& reason) {
  return format_text("%.2fx (not judged: ", r) + reason + ")";
}

bool within(double ratio) {
  return ratio > 0 && std::abs(ratio - 1.0) <= EstimateReport::kTolerance;
}

}  // namespace

void StepMeter::tick(bool last) {
  record(
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
      [] {
        timespec ts{};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
      },
      last);
}

void StepMeter::record(double wall_seconds, const std::function<double()>& read_cpu_seconds,
                       bool last) {
  wall_.push_back(wall_seconds);
  if (cpu_.empty() || last || wall_seconds - last_cpu_wall_ >= kCpuReadSeconds) {
    cpu_.emplace_back(wall_.size() - 1, read_cpu_seconds());
    last_cpu_wall_ = wall_seconds;
  }
}

std::function<void(int64_t, double)> StepMeter::wrap(std::function<void(int64_t, double)> on_log,
                                                     int64_t every, int64_t steps) {
  return [this, on_log = std::move(on_log), every, steps](int64_t step, double loss) {
    // Regression: 5 steps of 20 us took one CPU reading, so the CPU time
    // per step was 0; the last step always reads.
    tick(step == steps - 1);
    if (on_log && every > 0 && (step % every == 0 || step == steps - 1)) on_log(step, loss);
  };
}

namespace {
double median_interval(const std::vector<double>& t) {
  if (t.size() < 2) return 0.0;
  std::vector<double> d(t.size() - 1);
  for (size_t i = 1; i < t.size(); ++i) d[i - 1] = t[i] - t[i - 1];
  return median_of(std::move(d));
}
}  // namespace

double StepMeter::median_cpu_seconds() const {
  // Median CPU rate (CPU seconds per wall second) over the windows between readings, times the
  // median wall interval of the same ticks (header: the median of
  // CPU/steps per window follows the window's mean step, so a few long steps put the CPU row
  // above the median wall step).
  if (cpu_.size() < 2) return 0.0;
  std::vector<double> rate;
  for (size_t i = 1; i < cpu_.size(); ++i) {
    const double wall = wall_[cpu_[i].first] - wall_[cpu_[i - 1].first];
    if (wall > 0) rate.push_back((cpu_[i].second - cpu_[i - 1].second) / wall);
  }
  return rate.empty() ? 0.0 : median_of(std::move(rate)) * median_wall_seconds();
}
double StepMeter::median_wall_seconds() const { return median_interval(wall_); }

void record_host(MeasuredRun& run) {
  run.host_cpus = usable_cpus();
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) == 3) run.load_average = {load[0], load[1], load[2]};
}

MeasuredRun measure_run(int num_cores, int64_t steps, double median_step_ms, const StepMeter& meter,
                        const std::vector<MemoryStats>& hbm, uint64_t unmodelled_hbm_bytes,
                        std::string unmodelled_what) {
  MeasuredRun m;
  m.num_cores = num_cores;
  m.steps = steps;
  m.median_step_seconds = median_step_ms * 1e-3;
  m.cpu_seconds_per_step = meter.median_cpu_seconds();
  for (const MemoryStats& s : hbm)
    m.peak_hbm_bytes_per_core = std::max(m.peak_hbm_bytes_per_core, s.peak_bytes_in_use);
  m.unmodelled_hbm_bytes = unmodelled_hbm_bytes;
  m.unmodelled_what = std::move(unmodelled_what);
  record_host(m);
  return m;
}

const ThreadPinning* profile_thread_pinning(const std::vector<ThreadPinning>& profile, int cores) {
  const ThreadPinning* best = nullptr;
  double best_distance = 0.0;
  for (const ThreadPinning& t : profile) {
    if (t.cores < 1 || cores < 1) continue;
    const double d = std::abs(std::log(static_cast<double>(t.cores) / cores));
    if (best == nullptr || d < best_distance || (d == best_distance && t.cores > best->cores)) {
      best = &t;
      best_distance = d;
    }
  }
  return best;
}

std::string thread_pinning_mismatch(const ThreadPinning& profile, const ThreadPinning& run) {
  if (profile.pinned() == run.pinned()) return "";
  return "thread pinning differs from the profile's: this run " + run.describe() +
         ", the profile's " + std::to_string(profile.cores) +
         "-core collectives were calibrated with " + profile.describe() +
         "; pinning alone changes a 2-core hand-off about 3.5x, so the estimate's collectives "
         "are priced for the other mode (run or calibrate with the same pin_threads: --config or "
         "VTPU_PIN_THREADS)";
}

EstimateReport compare_estimate(const PlanEstimate& estimate, const MeasuredRun& measured) {
  EstimateReport r;
  r.estimate = estimate;
  r.measured = measured;
  if (estimate.step_seconds > 0)
    r.step_ratio = measured.median_step_seconds / estimate.step_seconds;
  r.estimated_hbm = estimate.hbm_bytes_per_core + estimate.input_bytes_per_core;
  r.comparable_hbm = measured.peak_hbm_bytes_per_core -
                     std::min(measured.unmodelled_hbm_bytes, measured.peak_hbm_bytes_per_core);
  if (r.estimated_hbm > 0) {
    r.hbm_ratio = static_cast<double>(r.comparable_hbm) / static_cast<double>(r.estimated_hbm);
  }
  if (measured.cpu_seconds_per_step > 0 && measured.num_cores > 0 && measured.host_cpus > 0) {
    r.cpu_bound_seconds =
        measured.cpu_seconds_per_step / std::min(measured.num_cores, measured.host_cpus);
    if (estimate.step_seconds > 0) r.cpu_ratio = r.cpu_bound_seconds / estimate.step_seconds;
  }
  // Regression: a plan of `vtpu plan`'s default --hardware v5e was
  // judged against virtual cores ("5769.60x (outside 25%)"), with only "on v5e" to say why.
  if (const std::optional<HardwareProfile> profile = estimate.priced_with()) {
    r.profile_host_cpus = profile->host_cpus;
    if (const ThreadPinning* t =
            profile_thread_pinning(profile->thread_pinning, measured.num_cores)) {
      r.profile_thread_pinning = *t;
      if (measured.thread_pinning)
        r.thread_pinning_warning = thread_pinning_mismatch(*t, *measured.thread_pinning);
    }
    if (profile->host_cpus <= 0) {
      r.mark_step_not_judged("the estimate is for " + estimate.hardware +
                             ", a TPU; plan with --hardware this_machine to compare");
    }
    const std::string what =
        "the plan's profile " +
        (estimate.hardware_file.empty() ? profile->name : estimate.hardware_file);
    if (std::string w = no_calibrated_collectives_warning(*profile, what); !w.empty()) {
      r.warnings.push_back(std::move(w));
    }
  }
  if (!estimate.not_judged_reason.empty()) {
    r.mark_step_not_judged(estimate.not_judged_reason);
    r.mark_hbm_not_judged(estimate.not_judged_reason);
  }
  r.step_within = r.step_comparable && within(r.step_ratio);
  r.hbm_within = r.hbm_comparable && within(r.hbm_ratio);
  return r;
}

void mark_micro_batches_not_judged(EstimateReport& report, int64_t micro_batches) {
  if (micro_batches <= 1) return;
  const std::string k = std::to_string(micro_batches);
  report.mark_step_not_judged("the estimate is for 1 micro-batch per step; this run used " + k);
  report.mark_hbm_not_judged("the estimate is for 1 micro-batch per step; this run used " + k +
                             ", whose gradient-accumulation buffer it does not price");
}

void EstimateReport::mark_hbm_not_judged(std::string reason) {
  hbm_comparable = false;
  hbm_within = false;
  hbm_not_judged_reason = std::move(reason);
}

void EstimateReport::mark_step_not_judged(std::string reason) {
  step_comparable = false;
  step_within = false;
  step_not_judged_reason = std::move(reason);
}

namespace {
// The cores of each of the plan's roles (data, tensor, FSDP): the product of its mesh axes' sizes.
std::set<int64_t> plan_group_sizes(const TrainPlan& plan) {
  std::set<int64_t> groups;
  for (const auto* role : {&plan.data, &plan.tensor, &plan.fsdp}) {
    int64_t n = 1;
    for (const std::string& a : *role) {
      const auto it = std::find(plan.mesh_axes.begin(), plan.mesh_axes.end(), a);
      if (it != plan.mesh_axes.end())
        n *= plan.mesh_shape[static_cast<size_t>(it - plan.mesh_axes.begin())];
    }
    if (n > 1) groups.insert(n);
  }
  return groups;
}
}  // namespace

void add_collective_probe(EstimateReport& report, const TrainPlan& plan,
                          const CollectiveProbeOptions& options) {
  if (!report.step_comparable) return;
  try {
    const std::optional<HardwareProfile> priced = report.estimate.priced_with();
    if (!priced || priced->host_cpus <= 0 || priced->collectives.empty()) return;
    const HardwareProfile& profile = *priced;
    // Only the fits the plan's strategy prices; all that can price a
    // group of the run when the strategy cannot be priced again.
    CollectiveProbeOptions o = options;
    if (!o.only) o.only = fits_priced_by(plan, profile);
    report.probed_plan_fits_only = o.only.has_value();
    // A run on more cores than the profile calibrated (16
    // against fits up to 8) was judged with no word that its collectives were extrapolated.
    std::set<std::string> ops;
    if (o.only) {
      for (const auto& [op, n] : *o.only) ops.insert(op);
    }
    if (!o.only || !ops.empty()) {
      const std::set<int64_t> groups = plan_group_sizes(plan);
      for (std::string& w :
           extrapolated_fit_warnings(CostModel(profile), groups, plan.num_cores(), ops)) {
        report.warnings.push_back(std::move(w));
      }
    }
    if (o.only && o.only->empty()) return;                        // the plan runs no collective
    if (o.pin_threads.empty() && report.measured.thread_pinning)  // meet the host as the run did
      o.pin_threads = report.measured.thread_pinning->mode;
    report.probes = probe_collectives(profile, report.measured.num_cores, o, &report.not_probed);
    if (report.probes.empty()) return;
    const std::optional<double> step =
        reestimate_step_seconds(plan, profile, shift_collectives(profile, report.probes));
    if (!step || !(*step > 0)) return;
    report.probed_step_seconds = *step;
    report.probed_step_ratio = report.measured.median_step_seconds / *step;
    report.probe_worst_ratio = worst_probe_ratio(report.probes);
    report.probe_judged = report.probe_worst_ratio <= kBusyHostProbeRatio;
    report.probed_step_within = report.probe_judged && within(report.probed_step_ratio);
  } catch (const Error& e) {
    // The run succeeded; a probe that cannot run (e.g. no room for its virtual cores' HBM)
    // leaves the profile's estimate alone and says why.
    report.probe_error = e.what();
  }
}

std::string EstimateReport::to_string() const {
  const PlanEstimate& e = estimate;
  const MeasuredRun& m = measured;
  std::string out;
  char line[512];
  const std::string hardware = (e.hardware.empty() ? std::string("?") : e.hardware) +
                               (e.hardware_file.empty() ? "" : " from " + e.hardware_file);
  out += "planner estimate vs measured (plan " + e.source + ": " +
         (e.strategy.empty() ? std::string("?") : e.strategy) + " on " + hardware + "; " +
         count_text(m.num_cores, "core") + ", " + count_text(m.steps, "step") + "):\n";
  std::snprintf(line, sizeof line, "  %-34s %14s %14s  %s\n", "", "estimate", "measured",
                "measured/estimate");
  out += line;
  std::snprintf(line, sizeof line, "  %-34s %14s %14s  %s\n", "step time (median wall, core 0)",
                format_seconds(e.step_seconds).c_str(),
                format_seconds(m.median_step_seconds).c_str(),
                (step_comparable ? ratio_text(step_ratio, step_within)
                                 : not_judged_text(step_ratio, step_not_judged_reason))
                    .c_str());
  out += line;
  if (probed_step_seconds > 0) {
    std::snprintf(line, sizeof line, "  %-34s %14s %14s  %s\n", "  with collectives probed now",
                  format_seconds(probed_step_seconds).c_str(),
                  format_seconds(m.median_step_seconds).c_str(),
                  probe_judged ? ratio_text(probed_step_ratio, probed_step_within).c_str()
                               : busy_host_text(probed_step_ratio, probe_worst_ratio).c_str());
    out += line;
  }
  if (!probes.empty()) {
    std::snprintf(line, sizeof line,
                  "    collective probe after the run (%s%s rows, median of the slowest core; "
                  "now / profile):\n",
                  probed_plan_fits_only ? "the fits the plan prices, " : "",
                  format_bytes(probes.front().row_bytes).c_str());
    out += line;
    std::string op;
    for (const CollectiveProbe& p : probes) {
      if (p.op != op) {
        if (!op.empty()) out += "\n";
        op = p.op;
        std::snprintf(line, sizeof line, "      %-15s", op.c_str());
        out += line;
      }
      std::snprintf(line, sizeof line, "  %d cores %s / %s", p.group_size,
                    format_seconds(p.measured_seconds).c_str(),
                    format_seconds(p.profile_seconds).c_str());
      out += line;
    }
    out += "\n";
  }
  for (const SkippedCollectiveProbe& s : not_probed)
    out += "    collective probe: " + s.reason + "\n";
  if (!probe_error.empty()) out += "    collective probe not run: " + probe_error + "\n";
  if (m.cpu_seconds_per_step > 0) {
    const int used = m.host_cpus > 0 ? std::min(m.num_cores, m.host_cpus) : 0;
    std::snprintf(line, sizeof line, "  %-34s %14s %14s\n", "process CPU time per step", "",
                  format_seconds(m.cpu_seconds_per_step).c_str());
    out += line;
    if (used > 0) {
      char name[64];
      std::snprintf(name, sizeof name, "  CPU time / %d CPU%s (no waiting)", used,
                    used == 1 ? "" : "s");
      std::snprintf(line, sizeof line, "  %-34s %14s %14s  %.2fx (not judged)\n", name,
                    format_seconds(e.step_seconds).c_str(),
                    format_seconds(cpu_bound_seconds).c_str(), cpu_ratio);
      out += line;
    }
  }
  std::snprintf(line, sizeof line, "  %-34s %14llu %14llu  %s\n", "HBM per core (bytes)",
                static_cast<unsigned long long>(estimated_hbm),
                static_cast<unsigned long long>(comparable_hbm),
                (hbm_comparable ? ratio_text(hbm_ratio, hbm_within)
                                : not_judged_text(hbm_ratio, hbm_not_judged_reason))
                    .c_str());
  out += line;
  std::snprintf(line, sizeof line,
                "    estimate = (model state + activations + transient) %llu + input batch %llu; "
                "measured = peak_bytes_in_use %llu (largest over cores)",
                static_cast<unsigned long long>(e.hbm_bytes_per_core),
                static_cast<unsigned long long>(e.input_bytes_per_core),
                static_cast<unsigned long long>(m.peak_hbm_bytes_per_core));
  out += line;
  if (m.unmodelled_hbm_bytes > 0) {
    std::snprintf(line, sizeof line, " - %s %llu (not in the model file)",
                  m.unmodelled_what.empty() ? "unmodelled" : m.unmodelled_what.c_str(),
                  static_cast<unsigned long long>(m.unmodelled_hbm_bytes));
    out += line;
  }
  out += "\n";
  std::snprintf(line, sizeof line,
                "  host: %s, load average %.2f %.2f %.2f at the end of the run (the "
                "estimate assumes an otherwise idle host; plan oversubscription x %.3g)\n",
                count_text(m.host_cpus, "CPU").c_str(), m.load_average[0], m.load_average[1],
                m.load_average[2], e.oversubscription);
  out += line;
  if (profile_host_cpus > 0 && m.host_cpus > 0 && profile_host_cpus != m.host_cpus) {
    std::snprintf(line, sizeof line,
                  "  the profile was measured on a host with %d CPUs and this run had %d: its "
                  "estimate is for that host (calibrate this one with vtpu bench collectives "
                  "--calibrate)\n",
                  profile_host_cpus, m.host_cpus);
    out += line;
  }
  if (m.thread_pinning) out += "  threads: pin_threads " + m.thread_pinning->describe() + "\n";
  if (!thread_pinning_warning.empty()) out += "  warning: " + thread_pinning_warning + "\n";
  for (const std::string& w : warnings) out += "  warning: " + w + "\n";
  return out;
}

nlohmann::json EstimateReport::to_json() const {
  const PlanEstimate& e = estimate;
  const MeasuredRun& m = measured;
  nlohmann::json probe = nullptr;
  nlohmann::json skipped = nlohmann::json::array();
  for (const SkippedCollectiveProbe& s : not_probed) {
    skipped.push_back({{"op", s.op}, {"group_size", s.group_size}, {"reason", s.reason}});
  }
  if (!probes.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const CollectiveProbe& p : probes) {
      rows.push_back({{"op", p.op},
                      {"group_size", p.group_size},
                      {"row_bytes", p.row_bytes},
                      {"profile_seconds", p.profile_seconds},
                      {"measured_seconds", p.measured_seconds},
                      {"thread_pinning", p.thread_pinning.to_json()}});
    }
    probe = {{"rows", rows},
             {"step_seconds", probed_step_seconds > 0 ? nlohmann::json(probed_step_seconds)
                                                      : nlohmann::json(nullptr)},
             {"step_ratio", probed_step_ratio},
             {"step_within_25_percent",
              probe_judged ? nlohmann::json(probed_step_within) : nlohmann::json(nullptr)},
             {"judged", probe_judged},
             {"plan_fits_only", probed_plan_fits_only},
             {"worst_ratio", probe_worst_ratio},
             {"not_probed", skipped}};
  } else if (!probe_error.empty() || !not_probed.empty()) {
    // No rows: why (the error, the fits not probed); no step_seconds, no verdict.
    probe = {{"rows", nlohmann::json::array()}, {"not_probed", skipped}};
    if (!probe_error.empty()) probe["error"] = probe_error;
  }
  return {{"plan", e.source},
          {"strategy", e.strategy},
          {"hardware", e.hardware},
          {"profile_host_cpus",
           profile_host_cpus > 0 ? nlohmann::json(profile_host_cpus) : nlohmann::json(nullptr)},
          {"hardware_file",
           e.hardware_file.empty() ? nlohmann::json(nullptr) : nlohmann::json(e.hardware_file)},
          {"estimate",
           {{"step_seconds", e.step_seconds},
            {"compute_seconds", e.compute_seconds},
            {"comm_seconds", e.comm_seconds},
            {"hbm_bytes_per_core", e.hbm_bytes_per_core},
            {"input_bytes_per_core", e.input_bytes_per_core},
            {"oversubscription", e.oversubscription}}},
          {"measured",
           {{"num_cores", m.num_cores},
            {"steps", m.steps},
            {"median_step_seconds", m.median_step_seconds},
            {"cpu_seconds_per_step", m.cpu_seconds_per_step},
            {"peak_hbm_bytes_per_core", m.peak_hbm_bytes_per_core},
            {"unmodelled_hbm_bytes", m.unmodelled_hbm_bytes},
            {"unmodelled_what", m.unmodelled_what},
            {"host_cpus", m.host_cpus},
            {"load_average", m.load_average}}},
          // Regression: a TPU estimate, not judged on this host, had a
          // ratio and a false verdict; both are null when the step is not comparable.
          {"step_ratio", step_comparable ? nlohmann::json(step_ratio) : nlohmann::json(nullptr)},
          {"step_within_25_percent",
           step_comparable ? nlohmann::json(step_within) : nlohmann::json(nullptr)},
          {"step_comparable", step_comparable},
          {"step_not_judged",
           step_comparable ? nlohmann::json(nullptr) : nlohmann::json(step_not_judged_reason)},
          {"estimated_hbm_bytes_per_core", estimated_hbm},
          {"comparable_hbm_bytes_per_core", comparable_hbm},
          // As the step row's: null ratio and verdict when not judged.
          {"hbm_ratio", hbm_comparable ? nlohmann::json(hbm_ratio) : nlohmann::json(nullptr)},
          {"hbm_within_25_percent",
           hbm_comparable ? nlohmann::json(hbm_within) : nlohmann::json(nullptr)},
          {"hbm_comparable", hbm_comparable},
          {"hbm_not_judged",
           hbm_comparable ? nlohmann::json(nullptr) : nlohmann::json(hbm_not_judged_reason)},
          {"cpu_bound_seconds", cpu_bound_seconds},
          {"cpu_ratio", cpu_ratio},
          {"probe", probe},
          {"warnings", warnings},
          {"thread_pinning",
           {{"run", m.thread_pinning ? m.thread_pinning->to_json() : nlohmann::json(nullptr)},
            {"profile",
             profile_thread_pinning ? profile_thread_pinning->to_json() : nlohmann::json(nullptr)},
            {"differs", !thread_pinning_warning.empty()},
            {"warning", thread_pinning_warning.empty() ? nlohmann::json(nullptr)
                                                       : nlohmann::json(thread_pinning_warning)}}}};
}

}  // namespace vtpu
