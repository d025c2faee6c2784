#include "vtpu/bench/latency_probe.h"

#include <algorithm>
#include <map>
#include <string>

#include "vtpu/bench/calibration.h"
#include "vtpu/bench/collective_bench.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/common/error.h"
#include "vtpu/planner/auto_planner.h"
#include "vtpu/planner/cost_model.h"
#include "vtpu/planner/plan_file.h"

namespace vtpu {

double profile_row_seconds(const std::string& op, const CollectiveFit& fit, uint64_t row_bytes) {
  const double s = static_cast<double>(row_bytes);
  const int n = fit.group_size;
  const double x = calibration_x(op, s, n);  // throws for an unknown op
  const double b = calibration_formula_bytes(op, s, n);
  if (!fit.measured.empty() && b >= fit.measured.front().first && b <= fit.measured.back().first) {
    return CostModel::measured_seconds(fit, b, 1.0);  // inside the curve: no beta term used
  }
  const double a = op == "all_reduce" ? 2 * fit.alpha_seconds : fit.alpha_seconds;
  return a + fit.beta_seconds_per_byte * x;
}

std::vector<CollectiveProbe> probe_collectives(const HardwareProfile& profile, int max_cores,
                                               const CollectiveProbeOptions& options,
                                               std::vector<SkippedCollectiveProbe>* skipped) {
  std::vector<CollectiveProbe> probes;
  const CostModel cost(profile);
  for (const auto& [op, fits] : profile.collectives) {
    // The fits that can price a group of the run: every size up to max_cores, and the one the
    // cost model picks for a group of max_cores (the nearest in log n: a 3-core group is priced
    // with a 4-core fit, a 6- or 7-core one with an 8-core fit).
    const CollectiveFit* largest = max_cores >= 2 ? cost.calibrated_fit(op, max_cores) : nullptr;
    const int cap = std::max(max_cores, largest != nullptr ? largest->group_size : 0);
    for (const CollectiveFit& fit : fits) {
      if (fit.group_size < 2 || fit.group_size > cap) continue;
      if (options.only && !options.only->contains({op, fit.group_size})) continue;
      const std::string fit_name = op + " " + std::to_string(fit.group_size) + "-core fit";
      // Never more virtual cores than the run had: the probe would time an oversubscribed host.
      if (fit.group_size > max_cores) {
        if (skipped != nullptr) {
          skipped->push_back(
              {op, fit.group_size,
               fit_name + " not probed: probing it would start " + std::to_string(fit.group_size) +
                   " virtual cores, more than the run's " + std::to_string(max_cores) +
                   " (the run's groups are priced from the profile's fit as calibrated, not "
                   "re-measured)"});
        }
        continue;
      }
      CollectiveBenchOptions bo;
      bo.cores = fit.group_size;
      bo.op = op;
      bo.min_bytes = bo.max_bytes = options.row_bytes;
      bo.iters = options.iters;
      bo.warmup = options.warmup;
      bo.measure_bound = false;
      if (!options.pin_threads.empty()) bo.runtime.pin_threads = options.pin_threads;
      if (const std::string problem = check_collective_bench_options(bo); !problem.empty()) {
        throw InvalidArgumentError("collective probe of the " + fit_name + ": " + problem);
      }
      CollectiveBenchmark bench(bo);
      CollectiveProbe p;
      p.op = op;
      p.group_size = fit.group_size;
      p.row_bytes = options.row_bytes;
      p.profile_seconds = profile_row_seconds(op, fit, options.row_bytes);
      p.thread_pinning = bench.thread_pinning();
      bench.run([&](const CollectiveBenchRow& r) {
        if (r.wrong != 0) {
          throw InternalError("collective probe: " + op + " on " + std::to_string(fit.group_size) +
                              " cores gave " + std::to_string(r.wrong) +
                              " wrong elements (see vtpu bench collectives --op " + op + ")");
        }
        p.row_bytes = r.shape.bytes;
        p.measured_seconds = r.time_us * 1e-6;
      });
      if (p.measured_seconds > 0) probes.push_back(std::move(p));
    }
  }
  return probes;
}

double worst_probe_ratio(const std::vector<CollectiveProbe>& probes) {
  double worst = 0.0;
  for (const CollectiveProbe& p : probes) {
    if (p.profile_seconds > 0) worst = std::max(worst, p.measured_seconds / p.profile_seconds);
  }
  return worst;
}

HardwareProfile shift_collectives(const HardwareProfile& profile,
                                  const std::vector<CollectiveProbe>& probes) {
  constexpr double kFloor = 1e-9;  // a time must stay > 0 (HardwareProfile::validate)
  HardwareProfile shifted = profile;
  for (const CollectiveProbe& p : probes) {
    const auto it = shifted.collectives.find(p.op);
    if (it == shifted.collectives.end()) continue;
    for (CollectiveFit& fit : it->second) {
      if (fit.group_size != p.group_size) continue;
      const double d = p.shift_seconds();
      for (auto& point : fit.measured) point.second = std::max(kFloor, point.second + d);
      fit.alpha_seconds = std::max(0.0, fit.alpha_seconds + (p.op == "all_reduce" ? d / 2 : d));
    }
  }
  shifted.validate();
  return shifted;
}

namespace {
// The planner's constraints that price the plan as it runs: the trainer's (plan_constraints, as
// `vtpu plan --emit` planned it), with each layer the plan file lists pinned to its sharding
// there. Regression (a recalibrated profile): pricing without constraints let
// the search give tp(x) on 8 cores replicated layers and no collective (79.5 us against the
// plan's 87.1 us with column, row and the final all-reduce), so no fit moved it and the probe
// never ran.
PlanConstraints pricing_constraints(const TrainPlan& plan) {
  PlanConstraints c = plan_constraints(plan.model, plan.mesh_shape, plan.mesh_axes);
  if (plan.layers.empty()) return c;
  std::map<std::string, std::string> planned(plan.layers.begin(), plan.layers.end());
  c.tensor_sharding = [planned = std::move(planned), model = plan.model](const ModelLayer& l) {
    const auto it = planned.find(l.name);
    return it != planned.end() ? it->second : required_tensor_sharding(model, l.name);
  };
  return c;
}

std::optional<double> strategy_step_seconds(const TrainPlan& plan, const HardwareProfile& hw) {
  const AutoShardingPlan priced =
      plan_auto_sharding(*plan.model_graph, plan.mesh_shape, plan.mesh_axes, CostModel(hw), 0,
                         pricing_constraints(plan));
  for (const PlanCandidate& k : priced.candidates) {
    if (k.name == plan.strategy_name && k.feasible) return k.step_seconds;
  }
  return std::nullopt;
}
}  // namespace

std::optional<std::set<CollectiveFitId>> fits_priced_by(const TrainPlan& plan,
                                                        const HardwareProfile& profile) {
  if (!plan.model_graph || plan.strategy_name.empty()) return std::nullopt;
  const std::optional<double> base = strategy_step_seconds(plan, profile);
  if (!base) return std::nullopt;
  constexpr double kNudgeSeconds = 1e-3;  // far above any rounding of the step's sum
  std::set<CollectiveFitId> used;
  for (const auto& [op, fits] : profile.collectives) {
    for (const CollectiveFit& fit : fits) {
      CollectiveProbe nudge;  // as if a probe had measured the fit 1 ms slower
      nudge.op = op;
      nudge.group_size = fit.group_size;
      nudge.measured_seconds = kNudgeSeconds;
      const std::optional<double> moved =
          strategy_step_seconds(plan, shift_collectives(profile, {nudge}));
      if (!moved || *moved != *base) used.insert({op, fit.group_size});
    }
  }
  return used;
}

std::optional<double> reestimate_step_seconds(const TrainPlan& plan, const HardwareProfile& profile,
                                              const HardwareProfile& shifted) {
  if (!plan.estimate || !(plan.estimate->step_seconds > 0) || !plan.model_graph ||
      plan.strategy_name.empty()) {
    return std::nullopt;
  }
  const std::optional<double> before = strategy_step_seconds(plan, profile);
  const std::optional<double> after = strategy_step_seconds(plan, shifted);
  if (!before || !after) return std::nullopt;
  return plan.estimate->step_seconds + (*after - *before);
}

}  // namespace vtpu
