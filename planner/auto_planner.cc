#include "vtpu/planner/auto_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "vtpu/common/error.h"
#include "vtpu/common/format_text.h"
#include "vtpu/common/strings.h"
#include "vtpu/common/units.h"
#include "vtpu/planner/plan_file.h"
#include "vtpu/planner/strategy_planner.h"

namespace vtpu {

namespace {

/// format_bytes with the exact count where it rounds: "512 B" below 1 KiB (already exact),
/// "53.58 KiB (54864 bytes)" from 1 KiB up: for the limits and needs a user compares.
std::string format_bytes_exact(uint64_t size_bytes) {
  if (size_bytes < 1024) return format_bytes(size_bytes);
  return format_bytes(size_bytes) + " (" + std::to_string(size_bytes) + " bytes)";
}

std::string axes_list(const std::vector<std::string>& axes) { return join(axes, ","); }

}  // namespace

void check_planner_limits(const Mesh& mesh, size_t num_layers) {
  const auto active =
      static_cast<size_t>(std::ranges::count_if(mesh.shape(), [](int64_t s) { return s > 1; }));
  // Regression: the 3^k candidates were unbounded: --mesh of 12 axes
  // of 2 took 40 s and 0.9 GB, and 16 axes (65,536 devices, within vtpu plan's device bound)
  // would be 43 million candidates.
  if (active > static_cast<size_t>(kMaxPlannedAxes)) {
    throw InvalidArgumentError(abbreviate(mesh.to_string()) + " has " + std::to_string(active) +
                               " axes of size > 1, so the planner would try 3^" +
                               std::to_string(active) + " strategies (expected at most " +
                               std::to_string(kMaxPlannedAxes) +
                               " such axes; merge axes that play one role into one)");
  }
  uint64_t strategies = 1;  // 3^8 at most
  for (size_t i = 0; i < active; ++i) strategies *= 3;
  // num_layers is at most 2^16 in a model file (kMaxLayers); checked arithmetic all the same.
  uint64_t evaluations = 0;
  const bool overflow =
      __builtin_mul_overflow(strategies, static_cast<uint64_t>(num_layers), &evaluations);
  if (overflow || evaluations > kMaxPlanLayerEvaluations) {
    throw InvalidArgumentError(
        std::to_string(strategies) + (strategies == 1 ? " strategy x " : " strategies x ") +
        std::to_string(num_layers) +
        " layers = " + (overflow ? std::string("more than 2^64") : std::to_string(evaluations)) +
        " layer evaluations exceeds the planner's budget of " +
        std::to_string(kMaxPlanLayerEvaluations) + " (expected at most " +
        std::to_string(kMaxPlanLayerEvaluations / strategies) + " layers on a mesh with " +
        std::to_string(active) + (active == 1 ? " axis" : " axes") + " of size > 1" +
        (active > 0 ? ", or fewer such axes)" : ")"));
  }
}

AutoShardingPlan plan_auto_sharding(const ModelGraph& model, const std::vector<int64_t>& mesh_shape,
                                    const std::vector<std::string>& axis_names,
                                    const CostModel& mesh_cost, uint64_t hbm_limit_bytes,
                                    const PlanConstraints& constraints) {
  const Mesh mesh(mesh_shape, axis_names);  // validates
  // Every strategy keeps all of the mesh's cores busy (cost_model.h: oversubscription and cache
  // sharing on a host profile; nothing changes on a TPU profile).
  const CostModel cost = mesh_cost.for_cores(static_cast<int>(mesh.size()));
  AutoShardingPlan plan;
  plan.model = model;
  plan.mesh_shape = mesh_shape;
  plan.axis_names = axis_names;
  plan.hardware = cost.profile().name;
  plan.profile = mesh_cost.profile();
  plan.hbm_limit_bytes = hbm_limit_bytes != 0 ? hbm_limit_bytes : cost.hbm_bytes_per_core();
  // A host profile's "HBM" is the host's RAM, which the mesh's virtual cores share.
  if (hbm_limit_bytes == 0 && cost.profile().host_cpus > 0) {
    plan.host_ram_bytes = cost.hbm_bytes_per_core();
    plan.hbm_limit_bytes = plan.host_ram_bytes / static_cast<uint64_t>(mesh.size());
  }
  // a profile with "hbm_bytes": 1 gave "fits on no strategy within
  // 0 B of HBM per core", a limit that --hbm-bytes 0 refuses as a usage error.
  if (plan.hbm_limit_bytes == 0) {
    const HardwareProfile& p = mesh_cost.profile();
    throw InvalidArgumentError(
        "hardware profile '" + p.name + "': hbm_bytes " + std::to_string(p.hbm_bytes) +
        " leaves 0 bytes of HBM per core (" +
        (p.host_cpus > 0 ? "the host's RAM shared by the mesh's " + count_text(mesh.size(), "core")
                         : std::to_string(p.cores_per_chip) + " cores per chip") +
        "; expected at least 1 byte per core, or an explicit HBM limit per core: vtpu plan "
        "--hbm-bytes)");
  }
  plan.oversubscription = cost.oversubscription();
  cost.peak_flops_per_core(model.dtype);  // a dtype the profile lacks is an error up front

  check_planner_limits(mesh, model.layers.size());
  std::vector<size_t> active;  // axes of size > 1
  for (size_t a = 0; a < mesh_shape.size(); ++a)
    if (mesh_shape[a] > 1) active.push_back(a);
  size_t combos = 1;
  for (size_t i = 0; i < active.size(); ++i) combos *= 3;
  static const AxisRole kRoles[3] = {AxisRole::kData, AxisRole::kTensor, AxisRole::kFsdp};
  for (size_t code = 0; code < combos; ++code) {
    PlanCandidate c;
    c.roles.assign(mesh_shape.size(), AxisRole::kNone);
    size_t rest = code;
    for (size_t a : active) {
      c.roles[a] = kRoles[rest % 3];
      rest /= 3;
    }
    for (size_t a = 0; a < mesh_shape.size(); ++a) {
      if (c.roles[a] == AxisRole::kData) c.data_axes.push_back(axis_names[a]);
      if (c.roles[a] == AxisRole::kTensor) c.tensor_axes.push_back(axis_names[a]);
      if (c.roles[a] == AxisRole::kFsdp) c.fsdp_axes.push_back(axis_names[a]);
    }
    std::vector<std::string> parts;
    if (!c.data_axes.empty()) parts.push_back("dp(" + axes_list(c.data_axes) + ")");
    if (!c.fsdp_axes.empty()) parts.push_back("fsdp(" + axes_list(c.fsdp_axes) + ")");
    if (!c.tensor_axes.empty()) parts.push_back("tp(" + axes_list(c.tensor_axes) + ")");
    c.name = parts.empty() ? "single core" : join(parts, "+");
    planner_dp::plan_strategy(model, cost, mesh_shape, constraints, plan.hbm_limit_bytes, c);
    if (c.feasible && constraints.unsupported) {
      c.unsupported_reason = constraints.unsupported(c);
      if (!c.unsupported_reason.empty() && !constraints.runner.empty()) {
        c.unsupported_reason = constraints.runner + ": " + c.unsupported_reason;
      }
    }
    plan.candidates.push_back(std::move(c));
  }
  // Winner: fastest that fits; ties: fewer bytes sent, then less HBM.
  const auto better = [](const PlanCandidate& a, const PlanCandidate& b) {
    if (a.step_seconds != b.step_seconds) return a.step_seconds < b.step_seconds;
    if (a.comm_bytes_per_core != b.comm_bytes_per_core)
      return a.comm_bytes_per_core < b.comm_bytes_per_core;
    return a.hbm_bytes_per_core < b.hbm_bytes_per_core;
  };
  // Order: runnable and fitting, then fitting but not runnable, then not fitting, then
  // infeasible (kept in enumeration order).
  const auto rank = [](const PlanCandidate& k) {
    if (!k.feasible) return 3;
    if (!k.fits) return 2;
    return k.unsupported_reason.empty() ? 0 : 1;
  };
  std::stable_sort(plan.candidates.begin(), plan.candidates.end(),
                   [&](const PlanCandidate& a, const PlanCandidate& b) {
                     const int ra = rank(a), rb = rank(b);
                     if (ra != rb) return ra < rb;
                     if (ra == 3) return false;
                     return better(a, b);
                   });
  if (!plan.candidates.empty() && rank(plan.candidates[0]) == 0) plan.winner = 0;
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    PlanCandidate& c = plan.candidates[i];
    if (static_cast<int>(i) == plan.winner) continue;
    if (!c.feasible) {
      c.why_lost = "cannot run: " + c.infeasible_reason;
    } else if (!c.unsupported_reason.empty()) {
      c.why_lost = "cannot run: " + c.unsupported_reason;
    } else if (!c.fits) {
      c.why_lost = "exceeds HBM by " +
                   format_bytes(c.min_hbm_bytes_per_core - plan.hbm_limit_bytes) + " (needs " +
                   format_bytes(c.min_hbm_bytes_per_core) + " per core)";
    } else if (plan.winner < 0) {
      c.why_lost = "";  // not reached: a fitting, runnable candidate is the winner
    } else {
      const PlanCandidate& w = plan.candidates[static_cast<size_t>(plan.winner)];
      const double pct = 100.0 * (c.step_seconds / w.step_seconds - 1.0);
      if (pct < 0.05) {
        // What `better` decided on (identical rows were said to send
        // more bytes or use more HBM).
        c.why_lost = "ties with the winner (" +
                     std::string(c.step_seconds > w.step_seconds ? "under 0.05% slower"
                                 : c.comm_bytes_per_core > w.comm_bytes_per_core
                                     ? "same time; sends more bytes"
                                 : c.hbm_bytes_per_core > w.hbm_bytes_per_core
                                     ? "same time and bytes; uses more HBM"
                                     : "exactly: same time, bytes and HBM; the first listed wins") +
                     ")";
      } else {
        char b[64];
        std::snprintf(b, sizeof b, "%.1f%% slower than the winner", pct);
        c.why_lost = b;
      }
    }
  }
  return plan;
}

std::string canonical_strategy_name(const std::string& name) {
  // The roles: the parts between "+" at parenthesis depth 0.
  std::vector<std::string> parts(1);
  int depth = 0;
  for (char ch : name) {
    if (ch == '(') ++depth;
    if (ch == ')') --depth;
    if (ch == '+' && depth == 0) {
      parts.emplace_back();
    } else {
      parts.back() += ch;
    }
  }
  if (parts.size() < 2) return name;
  static const std::vector<std::string> kOrder = {"dp(", "fsdp(", "tp("};  // as the planner names
  std::vector<std::pair<size_t, std::string>> ranked;
  for (std::string& part : parts) {
    const auto kind = std::ranges::find_if(
        kOrder, [&](const std::string& prefix) { return part.starts_with(prefix); });
    if (kind == kOrder.end() || !part.ends_with(")")) return name;
    ranked.emplace_back(static_cast<size_t>(kind - kOrder.begin()), std::move(part));
  }
  std::ranges::sort(ranked, {}, &std::pair<size_t, std::string>::first);
  for (size_t i = 1; i < ranked.size(); ++i) {
    if (ranked[i].first == ranked[i - 1].first) return name;  // a role named twice
  }
  std::string out;
  for (const auto& [kind, part] : ranked) out += (out.empty() ? "" : "+") + part;
  return out;
}

std::vector<std::string> AutoShardingPlan::candidate_names() const {
  std::vector<std::string> names;
  for (const PlanCandidate& c : candidates) names.push_back(c.name);
  return names;
}

void AutoShardingPlan::choose(const std::string& name, bool allow_over_hbm) {
  // Regression: 'tp(model)+dp(data)' was not a candidate because the
  // planner names it 'dp(data)+tp(model)'; the order of the roles does not matter.
  const std::string canonical = canonical_strategy_name(name);
  const auto it = std::find_if(candidates.begin(), candidates.end(),
                               [&](const PlanCandidate& c) { return c.name == canonical; });
  if (it == candidates.end()) {
    throw InvalidArgumentError("strategy '" + abbreviate(name) + "' is not a candidate of model '" +
                               model.name + "' on " +
                               abbreviate(Mesh(mesh_shape, axis_names).to_string()) +
                               " (expected one of: " + abbreviate(join(candidate_names())) + ")");
  }
  const PlanCandidate& c = *it;
  if (!c.feasible) {
    throw FailedPreconditionError("strategy '" + name + "' of model '" + model.name +
                                  "' cannot run: " + c.infeasible_reason);
  }
  if (!c.unsupported_reason.empty()) {
    throw FailedPreconditionError("strategy '" + name + "' of model '" + model.name +
                                  "' cannot run: " + c.unsupported_reason);
  }
  if (!c.fits && !allow_over_hbm) {
    throw ResourceExhaustedError(
        "strategy '" + name + "' of model '" + model.name + "' does not fit: it needs " +
        format_bytes_exact(c.min_hbm_bytes_per_core) + " of HBM per core, over the limit of " +
        format_bytes_exact(hbm_limit_bytes));
  }
  pinned = static_cast<int>(it - candidates.begin());
}

void AutoShardingPlan::require_fit() const {
  if (winner >= 0 || pinned >= 0) return;
  const PlanCandidate* best = nullptr;  // the smallest in HBM of the runnable candidates
  const PlanCandidate* unsupported = nullptr;
  // The candidates the runner cannot run that fit (the transformer
  // under 3 MiB on 2x4 fits only with FSDP, which `vtpu train transformer` does not run), and
  // the smallest of them.
  size_t fitting_unsupported = 0;
  const PlanCandidate* smallest_unsupported = nullptr;
  for (const PlanCandidate& c : candidates) {
    if (!c.feasible) continue;
    if (!c.unsupported_reason.empty()) {
      if (unsupported == nullptr) unsupported = &c;
      if (c.fits) {
        ++fitting_unsupported;
        if (smallest_unsupported == nullptr ||
            c.min_hbm_bytes_per_core < smallest_unsupported->min_hbm_bytes_per_core) {
          smallest_unsupported = &c;
        }
      }
      continue;
    }
    if (best == nullptr || c.min_hbm_bytes_per_core < best->min_hbm_bytes_per_core) best = &c;
  }
  if (best == nullptr && unsupported != nullptr) {
    throw FailedPreconditionError("model '" + model.name +
                                  "': no strategy of the mesh can be run: " + cannot_run_summary());
  }
  if (best == nullptr) {
    throw InvalidArgumentError("model '" + model.name + "' runs on no strategy of the mesh: " +
                               (candidates.empty() ? "no candidates" : cannot_run_summary()));
  }
  throw ResourceExhaustedError(
      "model '" + model.name + "' fits on no strategy within " +
      format_bytes_exact(hbm_limit_bytes) + " of HBM per core" +
      (host_ram_bytes != 0 ? " (host RAM " + format_bytes_exact(host_ram_bytes) + " over " +
                                 count_text(Mesh(mesh_shape, axis_names).size(), "core") + ")"
                           : std::string()) +
      "; the smallest HBM per core that would fit is " +
      format_bytes_exact(best->min_hbm_bytes_per_core) + ", with " + best->name +
      (fitting_unsupported == 0
           ? std::string()
           : "; " +
                 count_text(static_cast<long long>(fitting_unsupported), "strategy", "strategies") +
                 " that cannot run would fit (smallest: " + smallest_unsupported->name + ", " +
                 format_bytes_exact(smallest_unsupported->min_hbm_bytes_per_core) +
                 "; --any-strategy plans it as a what-if)"));
}
std::string AutoShardingPlan::cannot_run_summary() const {
  // (reason, count) in table order of each reason's first candidate.
  std::vector<std::pair<std::string, size_t>> reasons;
  size_t total = 0;
  for (const PlanCandidate& c : candidates) {
    const std::string& reason = !c.feasible ? c.infeasible_reason : c.unsupported_reason;
    if (reason.empty()) continue;
    ++total;
    const auto it = std::ranges::find(reasons, reason, &std::pair<std::string, size_t>::first);
    if (it == reasons.end()) {
      reasons.emplace_back(reason, 1);
    } else {
      ++it->second;
    }
  }
  if (total == 0) return {};
  std::ranges::stable_sort(reasons, std::greater<>(), &std::pair<std::string, size_t>::second);
  std::string out =
      total == candidates.size()
          ? (total == 1 ? std::string("its one candidate cannot run: ")
                        : "none of the " + std::to_string(total) + " candidates can run: ")
          : std::to_string(total) + " of the " + std::to_string(candidates.size()) +
                " candidates cannot run: ";
  size_t listed = 0;
  for (size_t i = 0; i < reasons.size() && i < kMaxReasons; ++i) {
    out += (i > 0 ? "; " : "") + std::to_string(reasons[i].second) + " because " + reasons[i].first;
    listed += reasons[i].second;
  }
  if (reasons.size() > kMaxReasons) {
    const size_t others = reasons.size() - kMaxReasons;
    out +=
        "; " + std::to_string(total - listed) + " for " +
        (others == 1 ? std::string("another reason") : std::to_string(others) + " other reasons") +
        " (the table gives each candidate's)";
  }
  return out;
}

std::string AutoShardingPlan::to_string() const {
  // Every line is built whole (format_text): a fixed char[640] cut a long "why it lost" reason,
  // model name or profile path.
  std::string out;
  std::string mesh = "Mesh(";
  for (size_t a = 0; a < mesh_shape.size(); ++a)
    mesh += (a ? ", " : "") + axis_names[a] + "=" + std::to_string(mesh_shape[a]);
  mesh += ")";
  out += format_text(
      "vtpu plan: model '%s' (%lld parameters, %s, %s, batch %lld x seq %lld) on %s, "
      "hardware %s, HBM limit %s per core",
      model.name.c_str(), static_cast<long long>(model.num_parameters()), model.dtype.c_str(),
      model.optimizer.c_str(), static_cast<long long>(model.batch),
      static_cast<long long>(model.seq_len), mesh.c_str(),
      (hardware + (profile.source_path.empty() ? "" : " from " + profile.source_path)).c_str(),
      format_bytes(hbm_limit_bytes).c_str());
  if (host_ram_bytes != 0) {
    const int64_t n = Mesh(mesh_shape, axis_names).size();
    out += " (host RAM " + format_bytes(host_ram_bytes) + " shared by " +
           count_text(n, "virtual core") +
           (host_ram_bytes % static_cast<uint64_t>(n) != 0 ? ", rounded down to whole bytes" : "") +
           ")";
  }
  out += "\n";
  if (oversubscription != 1.0) {
    out += format_text(
        "host: %s share the host's CPUs: per-core work x %.3g "
        "(docs/PLANNER.md, \"Estimate against measurement\")\n",
        count_text(Mesh(mesh_shape, axis_names).size(), "virtual core").c_str(), oversubscription);
  }
  // Regression: a name longer than the column (dp(f,g,h)+fsdp(a)+
  // tp(b,c,d,e) on 8 axes) pushed its row right; the column is as wide as the longest name.
  int name_width = 26;
  for (const PlanCandidate& c : candidates) {
    name_width = std::max(name_width, static_cast<int>(c.name.size()));
  }
  out += format_text("%-*s %12s %14s %12s %12s %12s  %s\n", name_width, "strategy", "HBM/core",
                     "comm B/core", "compute", "comm", "step", "result");
  for (size_t i = 0; i < candidates.size(); ++i) {
    const PlanCandidate& c = candidates[i];
    if (!c.feasible) {
      out += format_text("%-*s %12s %14s %12s %12s %12s  %s", name_width, c.name.c_str(), "-", "-",
                         "-", "-", "-", c.why_lost.c_str());
    } else {
      out += format_text(
          "%-*s %12s %14.0f %12s %12s %12s  %s", name_width, c.name.c_str(),
          format_bytes(c.arena_bytes_per_core()).c_str(), c.comm_bytes_per_core,
          format_seconds(c.compute_seconds).c_str(), format_seconds(c.comm_seconds).c_str(),
          format_seconds(c.step_seconds).c_str(), result_text(static_cast<int>(i)).c_str());
    }
    if (c.feasible && c.tensor_splits_nothing) {
      out += " (tp splits no layer: its axes repeat the compute)";
    }
    out += "\n";
  }
  if (chosen() < 0) {
    // "no strategy fits" when nothing could run at all.
    const bool some_runs = std::ranges::any_of(candidates, [](const PlanCandidate& c) {
      return c.feasible && c.unsupported_reason.empty();
    });
    return out + (some_runs ? "no strategy fits the HBM limit of " + format_bytes(hbm_limit_bytes) +
                                  " per core\n"
                            : std::string("no strategy can run (every candidate is marked \"cannot "
                                          "run\")\n"));
  }
  const PlanCandidate& w = candidates[static_cast<size_t>(chosen())];
  std::string who = "winner " + w.name;
  if (pinned >= 0 && pinned != winner) {
    who = "chosen " + w.name + " (--strategy; the winner is " +
          (winner >= 0 ? candidates[static_cast<size_t>(winner)].name : std::string("none")) + ")";
  } else if (pinned >= 0) {
    who += " (chosen by --strategy too)";
  }
  out += format_text(
      "%s: HBM per core %s = parameters+gradients+optimizer %s + activations %s "
      "+ FSDP transient %s + input batch %s\n",
      who.c_str(), format_bytes(w.arena_bytes_per_core()).c_str(),
      format_bytes(w.param_bytes_per_core).c_str(),
      format_bytes(w.activation_bytes_per_core).c_str(),
      format_bytes(w.transient_bytes_per_core).c_str(),
      format_bytes(w.input_bytes_per_core).c_str());
  out += format_text("%-22s %-11s %-6s %-16s %12s %12s %14s\n", "layer", "sharding", "in->out",
                     "reshard before", "compute", "comm", "comm B/core");
  for (const LayerPlan& l : w.layers) {
    out += format_text("%-22s %-11s %c->%c   %-16s %12s %12s %14.0f\n", l.layer.c_str(),
                       l.choice.c_str(), l.in_state, l.out_state,
                       l.reshard_in.empty() ? "-" : l.reshard_in.c_str(),
                       format_seconds(l.compute_seconds).c_str(),
                       format_seconds(l.comm_seconds).c_str(), l.comm_bytes_per_core);
  }
  // The communication after the last layer (PlanCandidate::after_layers): no layer, no compute.
  for (const LayerPlan& l : w.after_layers) {
    const std::string in_out =
        l.in_state == '-' ? "-" : std::string{l.in_state, '-', '>', l.out_state};
    out +=
        format_text("%-22s %-11s %-6s %-16s %12s %12s %14.0f\n", l.layer.c_str(), l.choice.c_str(),
                    in_out.c_str(), l.reshard_in.empty() ? "-" : l.reshard_in.c_str(), "-",
                    format_seconds(l.comm_seconds).c_str(), l.comm_bytes_per_core);
  }
  return out;
}

std::string AutoShardingPlan::result_text(int i) const {
  const PlanCandidate& c = candidates[static_cast<size_t>(i)];
  if (i == winner) return i == pinned ? "WINNER, CHOSEN (--strategy)" : "WINNER";
  if (i == pinned) return "CHOSEN (--strategy); " + c.why_lost;
  return c.why_lost;
}
nlohmann::json AutoShardingPlan::to_json() const { return emit_train_plan(*this); }

}  // namespace vtpu
