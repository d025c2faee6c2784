#include "vtpu/bench/calibration.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "vtpu/bench/collective_bench.h"
#include "vtpu/bench/kernel_bench.h"
#include "vtpu/common/error.h"
#include "vtpu/common/format_text.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/planner/cost_model.h"

namespace vtpu {

namespace {

/// The 1-minute load average (getloadavg), or -1 when the system does not give it.
double one_minute_load_average() {
  double load = 0.0;
  return getloadavg(&load, 1) == 1 ? load : -1.0;
}

LinearFit solve(std::span<const double> x, std::span<const double> t, bool with_intercept) {
  const Eigen::Index n = static_cast<Eigen::Index>(x.size());
  Eigen::MatrixXd a(n, with_intercept ? 2 : 1);
  Eigen::VectorXd rhs(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double w = 1.0 / t[static_cast<size_t>(i)];
    if (with_intercept) {
      a(i, 0) = w;
      a(i, 1) = x[static_cast<size_t>(i)] * w;
    } else {
      a(i, 0) = x[static_cast<size_t>(i)] * w;
    }
    rhs(i) = 1.0;  // t_i * w
  }
  const Eigen::VectorXd coef = a.colPivHouseholderQr().solve(rhs);
  LinearFit f;
  f.a = with_intercept ? coef(0) : 0.0;
  f.b = with_intercept ? coef(1) : coef(0);
  return f;
}

/// The collectives calibrate_this_machine fits, in order.
constexpr const char* kCalibratedOps[] = {"all_gather", "reduce_scatter", "all_reduce",
                                          "all_to_all"};

/// The sweep of `op` on `cores` cores under the calibration options `o`.
CollectiveBenchOptions bench_options(const CalibrationOptions& o, const char* op, int cores) {
  CollectiveBenchOptions bo;
  bo.cores = cores;
  bo.op = op;
  bo.min_bytes = o.min_bytes;
  bo.max_bytes = o.max_bytes;
  bo.iters = o.iters;
  bo.warmup = o.warmup;
  bo.runtime = o.runtime;
  return bo;
}

}  // namespace

LinearFit fit_alpha_beta(std::span<const double> x, std::span<const double> t) {
  // The messages name the fit, not this function, since the user ran a calibration, not a call.
  const std::string what = "alpha-beta fit t = alpha + beta * x: ";
  if (x.size() != t.size()) {
    throw InvalidArgumentError(what + std::to_string(x.size()) + " sizes but " +
                               std::to_string(t.size()) + " times (expected one time per size)");
  }
  if (x.size() < 2) {
    throw InvalidArgumentError(what + count_text(static_cast<int64_t>(x.size()), "measured size") +
                               " (expected at least 2 sizes, to fit a latency alpha and a time "
                               "per byte beta)");
  }
  for (double v : t) {
    if (!(v > 0) || !std::isfinite(v)) {
      throw InvalidArgumentError(what + "a measured time is " + format_text("%g", v) +
                                 " s (expected finite times > 0)");
    }
  }
  if (std::all_of(x.begin(), x.end(), [&](double v) { return v == x[0]; })) {
    throw InvalidArgumentError(what + "every size has x = " + format_text("%g", x[0]) +
                               " (expected at least two different sizes)");
  }
  LinearFit f = solve(x, t, true);
  if (f.a < 0) f = solve(x, t, false);
  f.points = x.size();
  for (size_t i = 0; i < x.size(); ++i) {
    f.max_relative_error = std::max(f.max_relative_error, std::abs(f.a + f.b * x[i] - t[i]) / t[i]);
  }
  return f;
}

double calibration_x(const std::string& op, double row_bytes, int n) {
  const double nd = n;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") {
    return (nd - 1) / nd * row_bytes;
  }
  if (op == "all_reduce") return 2 * (nd - 1) / nd * row_bytes;
  throw InvalidArgumentError("calibration: no cost-model formula for '" + op +
                             "' (expected all_gather, reduce_scatter, all_reduce or all_to_all)");
}

double calibration_formula_bytes(const std::string& op, double row_bytes, int n) {
  calibration_x(op, row_bytes, n);  // throws for an op without a formula
  return op == "all_to_all" ? n * row_bytes : row_bytes;
}

CollectiveFit collective_fit_of(const std::string& op, const LinearFit& fit, int n) {
  CollectiveFit c;
  c.alpha_seconds = op == "all_reduce" ? fit.a / 2 : fit.a;
  c.beta_seconds_per_byte = fit.b;
  c.group_size = n;
  return c;
}

void check_fit_grows(const std::string& op, const LinearFit& fit, const CalibrationOptions& o,
                     int cores) {
  // Regression: times that fell with size (noise, or a sweep of
  // 8..16 bytes) gave a negative beta, printed as "-6.67e-05 GB/s", and the profile was rejected
  // after every sweep had run with "beta_seconds_per_byte is -0.000012 (expected ... > 0)".
  if (fit.b > 0) return;
  char text[64];
  std::snprintf(text, sizeof text, "%.3g", fit.b);
  throw InvalidArgumentError(
      "calibration: " + op + " times do not grow with size over " + format_bytes(o.min_bytes) +
      ".." + format_bytes(o.max_bytes) + " on " + std::to_string(cores) + " cores (fitted beta " +
      text +
      " s/B; expected > 0): widen the range (e.g. --max-bytes 4M), add --iters, or calibrate on a "
      "quieter machine");
}

std::string calibration_source_text(const CollectiveFit& cf, const LinearFit& fit, int iters) {
  // Regression: the text gave the sweep's --min-bytes..--max-bytes (8 B..4.00 MiB) while
  // describe() gave the curve's B (32 B..4.00 MiB for the 8-core all-gather, whose smallest sizes
  // do not split over 8 cores; 256 B..32.00 MiB for the 8-core all-to-all, B = 8 S). Both now
  // print CostModel::measured_sizes_text.
  return "fitted by `vtpu bench collectives --calibrate`: " + CostModel::measured_sizes_text(cf) +
         " on " + std::to_string(cf.group_size) +
         format_text(
             " cores, %d timed calls each (median of the slowest core), weighted least "
             "squares; max relative residual %.0f%%; the measured curve is kept and "
             "interpolated",
             iters, 100 * fit.max_relative_error);
}

std::vector<std::string> extrapolated_fit_warnings(const CostModel& cost,
                                                   const std::set<int64_t>& groups, int64_t cores,
                                                   const std::set<std::string>& ops) {
  const auto& fits = cost.profile().collectives;
  if (fits.empty()) return {};
  std::set<int64_t> calibrated;
  for (const auto& [op, list] : fits) {
    for (const CollectiveFit& f : list) calibrated.insert(f.group_size);
  }
  std::vector<std::string> out;
  for (const int64_t n : groups) {
    if (n <= 1) continue;
    std::map<int64_t, std::vector<std::string>> from;  // fit size -> ops priced from it
    for (const auto& [op, list] : fits) {
      if (!ops.empty() && !ops.contains(op)) continue;
      const CollectiveFit* f = cost.calibrated_fit(op, n);
      if (f != nullptr && f->group_size != n) from[f->group_size].push_back(op);
    }
    for (const auto& [m, priced] : from) {
      char scale[96];
      std::snprintf(scale, sizeof scale, "scaled by the oversubscription s(%lld) / s(%lld) = %g",
                    static_cast<long long>(cores), static_cast<long long>(m),
                    cost.oversubscription_at(static_cast<int>(cores)) /
                        cost.oversubscription_at(static_cast<int>(m)));
      std::set<int64_t> want = calibrated;
      want.insert(n);
      std::string sizes;
      for (int64_t w : want) sizes += (sizes.empty() ? "" : ",") + std::to_string(w);
      out.push_back(std::to_string(n) + "-core groups are priced from the " + std::to_string(m) +
                    "-core fits of " + join(priced) + " (" + scale +
                    "): the profile has no fit measured on " + std::to_string(n) +
                    " cores (calibrate with vtpu bench collectives --calibrate FILE --cores " +
                    sizes + ")");
    }
  }
  return out;
}

std::string no_calibrated_collectives_warning(const HardwareProfile& profile,
                                              const std::string& what) {
  if (profile.host_cpus <= 0 || !profile.collectives.empty()) return "";
  return what + " has no calibrated collectives: they are priced as a memcpy over the links with " +
         format_seconds(profile.link_latency_seconds) +
         " latency, not this host's hand-off (calibrate with vtpu bench collectives --calibrate "
         "FILE)";
}

std::string calibration_warning(const CalibrationQuality& q) {
  std::vector<std::string> reasons;
  char text[256];
  if (q.worst_residual > kMaxTrustedResidual) {
    std::snprintf(text, sizeof text, "max relative residual %.0f%% (%s) is above %.0f%%",
                  100 * q.worst_residual, q.worst_fit.c_str(), 100 * kMaxTrustedResidual);
    reasons.push_back(text);
  }
  for (const auto& [load, when] : {std::pair{q.load_start, "start"}, {q.load_end, "end"}}) {
    if (q.host_cpus > 0 && load > q.host_cpus) {
      std::snprintf(text, sizeof text,
                    "the 1-minute load average at the %s, %.2f, is above the host's %d CPUs", when,
                    load, q.host_cpus);
      reasons.push_back(text);
    }
  }
  if (reasons.empty()) return "";
  return "vtpu: warning: this calibration is likely noisy: " + join(reasons, "; ") +
         ". Check the residuals, and recalibrate on a quiet machine before shipping the profile "
         "(docs/PLANNER.md, \"Calibrating this machine\")";
}

std::string calibration_quality_text(const CalibrationQuality& q) {
  auto load = [](double l) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", l);
    return l < 0 ? std::string("unknown") : std::string(text);
  };
  char text[256];
  std::snprintf(text, sizeof text, "%.0f%% (%s)", 100 * q.worst_residual, q.worst_fit.c_str());
  return "; load average (1 min) " + load(q.load_start) + " at the start, " + load(q.load_end) +
         " at the end, on " + count_text(q.host_cpus, "CPU") + "; worst max relative residual " +
         text;
}

std::string check_calibration_options(const CalibrationOptions& o) {
  if (o.cores.empty()) return "no group sizes (expected at least one, e.g. 2,4,8)";
  std::vector<int> sizes = o.cores;
  std::ranges::sort(sizes);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 2 || (i > 0 && sizes[i] == sizes[i - 1])) {
      return "group size " + std::to_string(sizes[i]) +
             (sizes[i] < 2 ? " is below 2" : " is repeated") +
             " (expected distinct sizes >= 2, e.g. 2,4,8)";
    }
  }
  for (const char* op : kCalibratedOps) {
    for (int cores : sizes) {
      const CollectiveBenchOptions bo = bench_options(o, op, cores);
      if (std::string problem = check_collective_bench_options(bo); !problem.empty()) {
        return problem;
      }
      const size_t n = CollectiveBenchmark(bo).sweep_shapes().size();
      if (n < 2) {
        return "--min-bytes " + std::to_string(o.min_bytes) + " .. --max-bytes " +
               std::to_string(o.max_bytes) + " gives " + op + " on " + std::to_string(cores) +
               " cores " + count_text(static_cast<int64_t>(n), "size") +
               " (sizes double from --min-bytes, and those that leave a core less than one "
               "element are skipped); the fit t = alpha + beta * x needs at least 2: widen the "
               "range, e.g. --max-bytes 4M";
      }
    }
  }
  return {};
}

HardwareProfile calibrate_this_machine(const CalibrationOptions& o,
                                       const std::function<void(const std::string&)>& log,
                                       CalibrationQuality* quality) {
  if (const std::string problem = check_calibration_options(o); !problem.empty()) {
    throw InvalidArgumentError("calibration: " + problem);
  }
  std::vector<int> sizes = o.cores;
  std::ranges::sort(sizes);
  std::string size_list;
  for (int n : sizes) size_list += (size_list.empty() ? "" : ",") + std::to_string(n);
  CalibrationQuality q;
  q.load_start = one_minute_load_average();
  HardwareProfile p = measure_this_machine();
  q.host_cpus = p.host_cpus;
  char line[512];
  for (const char* op : kCalibratedOps) {
    for (int cores : sizes) {
      CollectiveBenchmark bench(bench_options(o, op, cores));  // checked above
      std::vector<double> xs, ts;
      std::vector<std::pair<double, double>> curve;  // (B, seconds), the cost model's B
      uint64_t wrong = 0;
      bench.run([&](const CollectiveBenchRow& r) {
        const double row_bytes = static_cast<double>(r.shape.bytes);
        xs.push_back(calibration_x(op, row_bytes, cores));
        ts.push_back(r.time_us * 1e-6);
        curve.emplace_back(calibration_formula_bytes(op, row_bytes, cores), ts.back());
        wrong += r.wrong;
      });
      if (wrong != 0) {
        throw InternalError(std::string("calibration: ") + op + " gave " + std::to_string(wrong) +
                            " wrong elements on " + std::to_string(cores) +
                            " cores (see vtpu bench collectives --op " + op + ")");
      }
      const LinearFit fit = fit_alpha_beta(xs, ts);
      check_fit_grows(op, fit, o, cores);
      CollectiveFit cf = collective_fit_of(op, fit, cores);
      cf.measured = std::move(curve);
      p.collectives[op].push_back(cf);
      // Pinning changes a 2-core hand-off about 3.5x: the profile says
      // how its fits were measured, once per group size (every op's Runtime pins alike).
      if (std::ranges::find(p.thread_pinning, cores, &ThreadPinning::cores) ==
          p.thread_pinning.end()) {
        p.thread_pinning.push_back(bench.thread_pinning());
        if (log)
          log("threads on " + std::to_string(cores) + " cores: pin_threads " +
              bench.thread_pinning().describe());
      }
      if (q.worst_fit.empty() || fit.max_relative_error > q.worst_residual) {
        q.worst_residual = fit.max_relative_error;
        q.worst_fit = std::string(op) + " on " + std::to_string(cores) + " cores";
      }
      const std::string key =
          std::string("collectives.") + op + (sizes.size() > 1 ? "." + std::to_string(cores) : "");
      p.sources[key] = calibration_source_text(cf, fit, o.iters);
      if (log) {
        std::snprintf(line, sizeof line,
                      "%-15s %2d cores  alpha %9.3g s  beta %9.3g s/B (%.3g GB/s)  %zu sizes, max "
                      "relative residual %.0f%%",
                      op, cores, cf.alpha_seconds, cf.beta_seconds_per_byte,
                      1e-9 / cf.beta_seconds_per_byte, fit.points, 100 * fit.max_relative_error);
        log(line);
      }
    }
  }
  q.load_end = one_minute_load_average();
  // Regression: a calibration under load average ~10 wrote fits with
  // 97-98% residuals and no word of warning; the description now records the load and the worst
  // fit, and the command warns (calibration_warning).
  p.description += "; collectives calibrated by `vtpu bench collectives --calibrate` on " +
                   size_list + " cores" + calibration_quality_text(q);
  if (quality != nullptr) *quality = q;
  p.validate();
  return p;
}

std::vector<std::string> plan_cost_model_warnings(const CostModel& cost,
                                                  const AutoShardingPlan& plan) {
  std::vector<std::string> warnings;
  const HardwareProfile& profile = cost.profile();
  if (std::string w = no_calibrated_collectives_warning(
          profile, profile.source_path.empty() ? profile.name : profile.source_path);
      !w.empty()) {
    warnings.push_back(std::move(w));
  }
  // The group sizes of the table's feasible strategies, as the product of each role's axes.
  const std::vector<int64_t>& shape = plan.mesh_shape;
  const std::vector<std::string>& axes = plan.axis_names;
  std::set<int64_t> groups;
  int64_t cores = 1;
  for (int64_t n : shape) cores *= n;
  for (const PlanCandidate& k : plan.candidates) {
    if (!k.feasible) continue;
    for (const auto* role : {&k.data_axes, &k.tensor_axes, &k.fsdp_axes}) {
      int64_t n = 1;
      for (const std::string& a : *role) {
        n *= shape[static_cast<size_t>(std::find(axes.begin(), axes.end(), a) - axes.begin())];
      }
      if (n > 1) groups.insert(n);
    }
  }
  for (std::string& w : extrapolated_fit_warnings(cost, groups, cores)) {
    warnings.push_back(std::move(w));
  }
  return warnings;
}

}  // namespace vtpu
