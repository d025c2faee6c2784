#include "vtpu/planner/plan_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/sharding/mesh_arg.h"
#include "vtpu/common/json_fields.h"
#include "vtpu/sharding/mesh.h"
#include "vtpu/sharding/named_sharding.h"
#include "vtpu/sharding/partition_spec.h"

namespace vtpu {

namespace {

// The range of the estimate's times, seconds: 1 ps to a year of 365.25 days.
constexpr double kMinEstimateSeconds = 1e-12;
constexpr double kMaxEstimateSeconds = 31557600.0;

std::string list_text(const std::vector<std::string>& axes) {
  if (axes.empty()) return "null";
  std::string s = "[";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", '" : "'") + axes[i] + "'";
  return s + "]";
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The first mesh axis of size > 1 that none of `roles` names; "" when every one is named.
std::string axis_without_role(const std::vector<int64_t>& shape,
                              const std::vector<std::string>& names,
                              const std::vector<const std::vector<std::string>*>& roles) {
  for (size_t i = 0; i < names.size(); ++i) {
    if (shape[i] <= 1) continue;
    bool named = false;
    for (const auto* r : roles) named = named || contains(*r, names[i]);
    if (!named) return names[i];
  }
  return {};
}

/// The names a strategy with the roles of `plan` may have. First the one `vtpu plan` gives them
/// (planner/auto_planner.cc): "dp(...)", "fsdp(...)", "tp(...)" joined by "+" in that order,
/// each role's axes as listed but without axes of size 1 (the planner gives those no role), or
/// "single core" when no role is left. Then that name with the axes of size 1 kept, and, when
/// strategy.data is strategy.fsdp (FSDP whose batch axes are named twice), both without "dp".
std::vector<std::string> strategy_names_of(const TrainPlan& plan) {
  auto role = [&](const char* kind, const std::vector<std::string>& axes, bool active_only) {
    std::string names;
    for (const std::string& a : axes) {
      const auto i = static_cast<size_t>(
          std::find(plan.mesh_axes.begin(), plan.mesh_axes.end(), a) - plan.mesh_axes.begin());
      if (active_only && plan.mesh_shape[i] <= 1) continue;
      names += (names.empty() ? "" : ",") + a;
    }
    return names.empty() ? std::string() : std::string(kind) + "(" + names + ")";
  };
  const bool data_is_fsdp =
      !plan.fsdp.empty() && std::set<std::string>(plan.data.begin(), plan.data.end()) ==
                                std::set<std::string>(plan.fsdp.begin(), plan.fsdp.end());
  std::vector<std::string> out;
  for (const bool with_data : {true, false}) {
    if (!with_data && !data_is_fsdp) continue;
    for (const bool active_only : {true, false}) {
      std::string name;
      for (const std::string& part :
           {with_data ? role("dp", plan.data, active_only) : std::string(),
            role("fsdp", plan.fsdp, active_only), role("tp", plan.tensor, active_only)}) {
        if (!part.empty()) name += (name.empty() ? "" : "+") + part;
      }
      out.push_back(name.empty() ? "single core" : name);
    }
  }
  return out;
}

/// Throws `bad` naming the first key of the object `o` (called `where`) that is not in `known`.
template <typename Bad>
void refuse_unknown_keys(const nlohmann::json& o, const std::string& where,
                         const std::vector<std::string>& known, const Bad& bad) {
  for (auto it = o.begin(); it != o.end(); ++it) {
    if (!contains(known, it.key())) {
      throw bad(where + ": unknown key '" + abbreviate(it.key()) + "' (expected " + join(known) +
                ")");
    }
  }
}

/// "2x4" for the shape [2, 4].
std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

/// Throws `bad` unless the estimate `p` (from the object `e`) was made for the plan's mesh: its
/// "mesh_shape" (written by vtpu plan --emit since session 14) equals mesh.shape, or, in an older
/// file without it, its oversubscription equals max(1, cores / host_cpus) of its embedded
/// hardware profile (when that profile has host_cpus). Regression (new-user pass nu14, NU79): a
/// 2x4 plan edited to mesh 2x8 ran on 16 cores and was judged against the 2x4 estimate.
template <typename Bad>
void check_estimate_mesh(const nlohmann::json& e, const PlanEstimate& p, const TrainPlan& plan,
                         const Bad& bad) {
  const std::string mesh_text =
      shape_text(plan.mesh_shape) + " (" + std::to_string(plan.num_cores()) + " cores)";
  const std::string rerun =
      "re-run vtpu plan --mesh " + shape_text(plan.mesh_shape) + " --emit for this mesh";
  if (e.contains("mesh_shape") && !e["mesh_shape"].is_null()) {
    const nlohmann::json& m = e["mesh_shape"];
    std::vector<int64_t> shape;
    bool ok = m.is_array() && !m.empty();
    for (const auto& d : m) {
      ok = ok && d.is_number_integer() && d.get<int64_t>() >= 1 && d.get<int64_t>() <= 4096;
      if (ok) shape.push_back(d.get<int64_t>());
    }
    if (!ok) {
      throw bad("estimate.mesh_shape is " + abbreviate(m.dump()) +
                " (expected the mesh sizes the estimate was made for, e.g. [2, 4])");
    }
    if (shape != plan.mesh_shape) {
      throw bad("estimate.mesh_shape is " + shape_text(shape) + " but mesh.shape is " + mesh_text +
                " (expected the mesh the estimate was made for: " + rerun + ")");
    }
    return;
  }
  if (!p.profile || p.profile->host_cpus <= 0) return;  // nothing to compare with
  const double cpus = p.profile->host_cpus;
  const double want = std::max(1.0, static_cast<double>(plan.num_cores()) / cpus);
  if (std::abs(p.oversubscription - want) > 1e-9 * want) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "estimate.oversubscription is %g but mesh.shape %s on the estimate's profile of "
                  "%d host CPUs gives %g",
                  p.oversubscription, mesh_text.c_str(), p.profile->host_cpus, want);
    throw bad(std::string(text) + " (expected the mesh the estimate was made for: " + rerun + ")");
  }
}

/// The non-empty "estimate" object of `plan`'s file, checked field by field; `bad` makes the
/// error (it names the file).
template <typename Bad>
PlanEstimate parse_estimate(const nlohmann::json& e, const TrainPlan& plan, const Bad& bad) {
  // A number: `absent` when missing or null; else finite, an integer when `integer`, > 0 when
  // `positive` (else >= 0), and at most `most` when set (`most_text` its text).
  auto number = [&](const char* key, bool integer, bool positive, double absent, double most = 0.0,
                    const char* most_text = "") {
    if (!e.contains(key) || e[key].is_null()) return absent;
    const nlohmann::json& v = e[key];
    const bool ok = (integer ? v.is_number_integer() : v.is_number()) &&
                    std::isfinite(v.get<double>()) &&
                    (positive ? v.get<double>() > 0 : v.get<double>() >= 0) &&
                    (most == 0.0 || v.get<double>() <= most);
    if (!ok) {
      throw bad(std::string("estimate.") + key + " is " + abbreviate(v.dump()) + " (expected " +
                (integer ? "an integer" : "a number") + (positive ? " > 0" : " >= 0") +
                (most == 0.0 ? std::string() : std::string(", at most ") + most_text) + ")");
    }
    return v.get<double>();
  };
  // Regression (adversarial pass adv8, H4): 2^64 - 1 bytes went through llround (undefined past
  // 2^63; printed 9223372036854775808), and two fields of 2^63 - 1 wrapped their sum to 0, which
  // the report took for "no estimate".
  auto bytes = [&](const char* key) {
    return static_cast<uint64_t>(std::llround(number(key, true, false, 0.0, 0x1p62, "2^62")));
  };
  // Regression (adversarial pass adv10, A8): an unknown key was ignored, so a misspelt
  // "step_second" silently dropped the estimate-vs-measured report (no step time, no report).
  static const std::set<std::string> kEstimateKeys = {"batch",
                                                      "comm_bytes_per_core",
                                                      "comm_seconds",
                                                      "compute_seconds",
                                                      "hardware",
                                                      "hardware_file",
                                                      "hardware_profile",
                                                      "hbm_bytes_per_core",
                                                      "input_bytes_per_core",
                                                      "mesh_shape",
                                                      "oversubscription",
                                                      "step_seconds",
                                                      "strategy"};
  for (auto it = e.begin(); it != e.end(); ++it) {
    if (!kEstimateKeys.contains(it.key())) {
      throw bad("unknown estimate key '" + abbreviate(it.key()) + "' (expected " +
                join(std::vector<std::string>(kEstimateKeys.begin(), kEstimateKeys.end())) + ")");
    }
  }
  PlanEstimate p;
  p.source = plan.path;
  p.strategy = plan.strategy_name;
  if (e.contains("hardware") && !e["hardware"].is_null()) {
    if (!e["hardware"].is_string()) {
      throw bad("estimate.hardware is " + e["hardware"].dump() + " (expected a profile name)");
    }
    p.hardware = e["hardware"].get<std::string>();
  }
  if (e.contains("hardware_file") && !e["hardware_file"].is_null()) {
    if (!e["hardware_file"].is_string()) {
      throw bad("estimate.hardware_file is " + abbreviate(e["hardware_file"].dump()) +
                " (expected the path vtpu plan read the profile from)");
    }
    p.hardware_file = e["hardware_file"].get<std::string>();
  }
  if (e.contains("hardware_profile") && !e["hardware_profile"].is_null()) {
    try {
      p.profile = HardwareProfile::from_json(e["hardware_profile"]);
    } catch (const Error& err) {
      throw bad(std::string("estimate.hardware_profile is not a valid hardware profile: ") +
                err.what());
    }
    if (!p.hardware.empty() && p.profile->name != p.hardware) {
      throw bad("estimate.hardware_profile is named '" + abbreviate(p.profile->name) +
                "' but estimate.hardware is '" + abbreviate(p.hardware) +
                "' (expected the same profile)");
    }
    p.hardware = p.profile->name;
  }
  // Regression (adversarial pass adv10, A9): 1e-320 s (finite, > 0) passed and the report printed
  // "infx (outside 25%)". No step takes under a picosecond or over a year (365.25 days); nor does
  // its compute or its communication, which may also be 0 (a single core communicates nothing).
  // A number `positive` as `number` checks it, then 0 (absent) or within that range.
  auto seconds = [&](const char* key, bool positive) {
    const double s = number(key, false, positive, 0.0);
    if (s != 0.0 && !(s >= kMinEstimateSeconds && s <= kMaxEstimateSeconds)) {
      throw bad(std::string("estimate.") + key + " is " + abbreviate(e[key].dump()) +
                " (expected " + (positive ? "" : "0 or ") +
                "seconds from 1e-12 to 31557600, i.e. 1 ps to a year)");
    }
    return s;
  };
  p.step_seconds = seconds("step_seconds", true);
  p.compute_seconds = seconds("compute_seconds", false);
  p.comm_seconds = seconds("comm_seconds", false);
  p.hbm_bytes_per_core = bytes("hbm_bytes_per_core");
  p.input_bytes_per_core = bytes("input_bytes_per_core");
  p.oversubscription = number("oversubscription", false, true, 1.0);
  // Regression (adversarial pass adv8, H3): a batch of 2^62 became train mlp's global batch
  // (--batch stops at 2^30) and crashed it (SIGSEGV). Bounded as vtpu plan --batch is.
  p.batch = static_cast<int64_t>(
      std::llround(number("batch", true, true, 0.0, 0x1p40, "2^40, as vtpu plan --batch")));
  check_estimate_mesh(e, p, plan, bad);
  return p;
}

/// Checks that the estimate `plan.estimate` (from the object `e`) was made for the configuration
/// the plan runs, as check_estimate_mesh does for the mesh (adversarial pass adv15, ADV23: a plan
/// hand-edited to batch 1024, or from dp to FSDP roles, ran that and was judged against the
/// original's estimate). Throws `bad` when estimate.batch is not model_graph.batch, or when
/// estimate.strategy (written by vtpu plan --emit since session 15) is not the strategy of the
/// plan's roles. Without estimate.strategy (an older or hand-written file) strategy.name, which
/// the reader already checks against the roles, names the estimate's strategy; a plan with
/// neither and a step time gets PlanEstimate::not_judged_reason (its rows are printed, not
/// judged). Fills an absent strategy.name from estimate.strategy.
template <typename Bad>
void check_estimate_configuration(const nlohmann::json& e, TrainPlan& plan, const Bad& bad) {
  PlanEstimate& p = *plan.estimate;
  if (p.batch != 0 && plan.model_graph && plan.model_graph->batch != p.batch) {
    throw bad("estimate.batch is " + std::to_string(p.batch) + " but model_graph.batch is " +
              std::to_string(plan.model_graph->batch) +
              " (expected the same: the estimate is priced for model_graph's batch; re-run vtpu "
              "plan --batch B --emit for the batch B to run)");
  }
  const std::vector<std::string> names = strategy_names_of(plan);
  const std::string roles = "(data: " + list_text(plan.data) +
                            ", tensor: " + list_text(plan.tensor) +
                            ", fsdp: " + list_text(plan.fsdp) + ")";
  if (e.contains("strategy") && !e["strategy"].is_null()) {
    if (!e["strategy"].is_string()) {
      throw bad("estimate.strategy is " + abbreviate(e["strategy"].dump()) +
                " (expected the name of the strategy the estimate was made for, e.g. \"dp(x)\")");
    }
    const std::string given = e["strategy"].get<std::string>();
    const std::string canonical = canonical_strategy_name(given);
    if (!contains(names, canonical)) {
      throw bad(
          "estimate.strategy is '" + abbreviate(given) + "' but the roles " + roles +
          " are strategy '" + names.front() +
          "' (expected the strategy the estimate was made for: re-run vtpu plan --strategy '" +
          names.front() + "' --emit for these roles)");
    }
    if (plan.strategy_name.empty()) plan.strategy_name = canonical;
    p.strategy = plan.strategy_name;
    return;
  }
  if (plan.strategy_name.empty() && p.step_seconds > 0) {
    p.not_judged_reason =
        "the plan names no strategy for its estimate (no strategy.name or estimate.strategy), so "
        "the estimate may be for other roles than the ones run, '" +
        names.front() + "'; re-run vtpu plan --strategy '" + names.front() + "' --emit";
  }
}

}  // namespace

int64_t TrainPlan::num_cores() const {
  int64_t n = 1;
  for (int64_t d : mesh_shape) n *= d;
  return n;
}

Mesh TrainPlan::mesh() const { return Mesh(mesh_shape, mesh_axes); }

std::string TrainPlan::describe_strategy() const {
  return "'" + (strategy_name.empty() ? std::string("(unnamed)") : strategy_name) +
         "' (data: " + list_text(data) + ", tensor: " + list_text(tensor) +
         ", fsdp: " + list_text(fsdp) + ")";
}

std::string TrainPlan::describe_mesh() const {
  std::string s;
  for (size_t i = 0; i < mesh_axes.size(); ++i) {
    s += (i ? " " : "") + mesh_axes[i] + "=" + std::to_string(mesh_shape[i]);
  }
  return s;
}

TrainPlan load_train_plan(const std::string& path) {
  // Far above any plan vtpu plan --emit writes for a model vtpu train runs (a few KB), and above
  // a 16 MiB model file's plan; a stream without end (/dev/zero) is cut off (adv10 A3).
  constexpr uintmax_t kMaxPlanFileBytes = uintmax_t{64} << 20;
  const std::string text = read_bounded_text_file(path, kMaxPlanFileBytes, "plan file", "64 MiB");
  nlohmann::json j;
  // A hand-edited plan with a key given twice (two "strategy" objects) took the last one
  // silently; model files and hardware profiles already rejected that (adv10 A4).
  try {
    j = parse_json_unique_keys(text, "plan file '" + path + "'");
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgumentError("plan file '" + path + "' is not valid JSON: " + e.what());
  }
  return parse_train_plan(j, path);
}

TrainPlan parse_train_plan(const nlohmann::json& j, const std::string& source) {
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError("plan file '" + source + "': " + what +
                                " (the format of vtpu plan --emit, docs/SHARDING.md)");
  };
  if (!j.is_object()) throw bad("expected a JSON object");
  if (!j.contains("format") || j["format"] != "vtpu-plan") {
    throw bad("format is " + (j.contains("format") ? j["format"].dump() : std::string("missing")) +
              " (expected \"vtpu-plan\")");
  }
  if (!j.contains("version") || j["version"] != 1) {
    throw bad("version is " +
              (j.contains("version") ? j["version"].dump() : std::string("missing")) +
              " (expected 1)");
  }
  // adv10 A8: a misspelt top-level key ("estimates") was ignored as silently as one in estimate.
  static const std::set<std::string> kPlanKeys = {
      "estimate",         "format", "layers",    "mesh",     "model",  "model_graph",
      "parameter_shapes", "pinned", "shardings", "strategy", "version"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!kPlanKeys.contains(it.key())) {
      throw bad("unknown key '" + abbreviate(it.key()) + "' (expected " +
                join(std::vector<std::string>(kPlanKeys.begin(), kPlanKeys.end())) + ")");
    }
  }
  TrainPlan plan;
  plan.path = source;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) throw bad("model is " + j["model"].dump() + " (expected a name)");
    plan.model = j["model"].get<std::string>();
  }
  const nlohmann::json* mesh = j.contains("mesh") ? &j["mesh"] : nullptr;
  if (!mesh || !mesh->is_object() || !mesh->contains("axes") || !mesh->contains("shape") ||
      !(*mesh)["axes"].is_array() || !(*mesh)["shape"].is_array()) {
    throw bad("expected \"mesh\": {\"axes\": [names], \"shape\": [sizes]}");
  }
  // New-user pass nu14, NU88: a typo in mesh or in a layers entry went unnoticed.
  refuse_unknown_keys(*mesh, "mesh", {"axes", "shape"}, bad);
  for (const auto& a : (*mesh)["axes"]) {
    if (!a.is_string() || a.get<std::string>().empty()) {
      throw bad("mesh axis " + a.dump() + " is not a name");
    }
    const std::string name = a.get<std::string>();
    // Adversarial pass adv12, ADV7: the names vtpu plan accepts, and no others.
    if (const std::string problem = check_mesh_axis_name(plan.mesh_axes.size(), name);
        !problem.empty()) {
      throw bad("mesh " + problem);
    }
    if (contains(plan.mesh_axes, name)) throw bad("mesh axis '" + name + "' appears twice");
    plan.mesh_axes.push_back(name);
  }
  int64_t cores = 1;
  const nlohmann::json& sizes = (*mesh)["shape"];
  for (size_t i = 0; i < sizes.size(); ++i) {
    const nlohmann::json& d = sizes[i];
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > 4096) {
      throw bad("mesh size " + d.dump() + " (expected an integer 1..4096)");
    }
    plan.mesh_shape.push_back(d.get<int64_t>());
    cores *= d.get<int64_t>();  // <= 1024 * 4096 before the check: no overflow
    // Regression (adversarial pass adv7, G1): up to 4096 cores passed here, and a plan of 2048
    // failed later with "num_cores is 2048 (expected 1..1024)", naming neither the plan nor its
    // mesh. vtpu train starts one virtual core per device (RuntimeOptions allows 1..1024).
    if (cores > kMaxRunDevices) {
      throw bad("mesh " + abbreviate(mesh->dump()) + " has " +
                (i + 1 < sizes.size() ? "more than " : "") + std::to_string(cores) +
                " cores (expected at most " + std::to_string(kMaxRunDevices) +
                ": vtpu train runs one virtual core per device)");
    }
  }
  if (plan.mesh_axes.empty() || plan.mesh_axes.size() != plan.mesh_shape.size()) {
    throw bad("mesh has " + std::to_string(plan.mesh_axes.size()) + " axes and " +
              std::to_string(plan.mesh_shape.size()) +
              " sizes (expected the same number, at least 1)");
  }

  if (!j.contains("strategy") || !j["strategy"].is_object()) {
    throw bad("expected \"strategy\": {\"name\", \"data\", \"tensor\", \"fsdp\"}");
  }
  const nlohmann::json& st = j["strategy"];
  static const std::set<std::string> kKeys = {"name", "data", "tensor", "fsdp", "batch_axes"};
  for (auto it = st.begin(); it != st.end(); ++it) {
    if (!kKeys.contains(it.key())) {
      throw bad("unknown strategy key '" + it.key() +
                "' (expected name, data, tensor, fsdp, batch_axes: vtpu runs data, tensor and "
                "FSDP parallelism)");
    }
  }
  if (st.contains("name") && !st["name"].is_null()) {
    if (!st["name"].is_string()) throw bad("strategy.name is " + st["name"].dump());
    plan.strategy_name = st["name"].get<std::string>();
  }
  std::string axes_text;
  for (const std::string& m : plan.mesh_axes) axes_text += (axes_text.empty() ? "" : ", ") + m;
  auto axes_of = [&](const char* key) {
    std::vector<std::string> out;
    if (!st.contains(key) || st[key].is_null()) return out;
    const nlohmann::json& v = st[key];
    std::vector<nlohmann::json> items;
    if (v.is_array()) {
      items.assign(v.begin(), v.end());
    } else {
      items.push_back(v);
    }
    for (const auto& a : items) {
      if (!a.is_string() || !contains(plan.mesh_axes, a.get<std::string>())) {
        throw bad(std::string("strategy.") + key + " names " + a.dump() +
                  ", which is not a mesh axis (expected null, one of: " + axes_text +
                  ", or a list)");
      }
      if (contains(out, a.get<std::string>())) {
        throw bad(std::string("strategy.") + key + " names '" + a.get<std::string>() + "' twice");
      }
      out.push_back(a.get<std::string>());
    }
    return out;
  };
  plan.data = axes_of("data");
  plan.tensor = axes_of("tensor");
  plan.fsdp = axes_of("fsdp");
  for (const std::string& a : plan.tensor) {
    if (contains(plan.data, a) || contains(plan.fsdp, a)) {
      throw bad("mesh axis '" + a + "' is in strategy.tensor and in strategy." +
                (contains(plan.data, a) ? "data" : "fsdp") + " (expected one role per axis)");
    }
  }
  if (const std::string idle = axis_without_role(plan.mesh_shape, plan.mesh_axes,
                                                 {&plan.data, &plan.tensor, &plan.fsdp});
      !idle.empty()) {
    const auto i = static_cast<size_t>(
        std::find(plan.mesh_axes.begin(), plan.mesh_axes.end(), idle) - plan.mesh_axes.begin());
    throw bad("mesh axis '" + idle + "' of size " + std::to_string(plan.mesh_shape[i]) +
              " has no role in strategy " + plan.describe_strategy() +
              " (expected every mesh axis of size > 1 in data, tensor or fsdp)");
  }
  // Regression (new-user pass nu10, NU17): a tp(model) plan renamed "dp(model)" ran Megatron
  // tensor parallelism under the name dp(model). The name is optional, but when given it must be
  // the one `vtpu plan` gives these roles, with the roles in any order, as `vtpu plan
  // --strategy` takes them (new-user pass nu10, NU16); it is kept in vtpu plan's order, so that
  // it names the planner's candidate.
  if (!plan.strategy_name.empty()) {
    const std::vector<std::string> names = strategy_names_of(plan);
    if (const std::string canonical = canonical_strategy_name(plan.strategy_name);
        contains(names, canonical)) {
      plan.strategy_name = canonical;
    } else {
      throw bad("strategy.name is '" + abbreviate(plan.strategy_name) + "' but its roles (data: " +
                list_text(plan.data) + ", tensor: " + list_text(plan.tensor) +
                ", fsdp: " + list_text(plan.fsdp) + ") are strategy '" + names.front() +
                "' (expected that name, as vtpu plan writes it, or the name left out)");
    }
  }

  // Regression (adversarial pass adv7, G4): "shardings" was never read, so a hand-edited
  // "P('nope')" ran without complaint. The trainers still derive their layouts from the strategy,
  // but every PartitionSpec must be one the plan's mesh can hold (NamedSharding's checks).
  if (j.contains("shardings") && !j["shardings"].is_null()) {
    const nlohmann::json& sh = j["shardings"];
    if (!sh.is_object()) {
      throw bad("shardings is " + abbreviate(sh.dump()) +
                " (expected an object of PartitionSpecs, e.g. {\"fc1.w\": \"P(None, 'x')\"})");
    }
    const Mesh mesh = plan.mesh();
    for (auto it = sh.begin(); it != sh.end(); ++it) {
      const std::string where = "shardings['" + abbreviate(it.key()) + "']";
      if (!it.value().is_string()) {
        throw bad(where + " is " + abbreviate(it.value().dump()) +
                  " (expected a PartitionSpec string such as \"P('x', None)\")");
      }
      try {
        (void)NamedSharding(mesh, PartitionSpec::parse(it.value().get<std::string>()));
      } catch (const InvalidArgumentError& e) {
        throw bad(where + " is " + abbreviate(it.value().dump()) + ": " + e.message());
      }
    }
  }
  if (j.contains("layers") && !j["layers"].is_null()) {
    if (!j["layers"].is_array())
      throw bad("layers is " + j["layers"].dump() + " (expected a list)");
    plan.layers_given = true;
    for (size_t i = 0; i < j["layers"].size(); ++i) {
      const nlohmann::json& l = j["layers"][i];
      if (!l.is_object() || !l.contains("name") || !l["name"].is_string() ||
          !l.contains("sharding") || !l["sharding"].is_string()) {
        throw bad("layers[" + std::to_string(i) + "] is " + l.dump() +
                  " (expected {\"name\": ..., \"sharding\": ...})");
      }
      refuse_unknown_keys(l, "layers[" + std::to_string(i) + "]",
                          {"name", "sharding", "in", "out", "reshard_before"}, bad);
      plan.layers.emplace_back(l["name"].get<std::string>(), l["sharding"].get<std::string>());
    }
  }
  if (j.contains("parameter_shapes") && !j["parameter_shapes"].is_null()) {
    const nlohmann::json& ps = j["parameter_shapes"];
    if (!ps.is_object()) {
      throw bad("parameter_shapes is " + abbreviate(ps.dump()) +
                " (expected an object of shapes, e.g. {\"fc1.w\": [64, 64]})");
    }
    for (auto it = ps.begin(); it != ps.end(); ++it) {
      std::vector<int64_t> shape;
      bool ok = it.value().is_array() && !it.value().empty();
      for (const auto& d : it.value()) {
        ok = ok && d.is_number_integer() && d.get<int64_t>() >= 1 &&
             d.get<int64_t>() <= (int64_t{1} << 40);
        if (ok) shape.push_back(d.get<int64_t>());
      }
      if (!ok) {
        throw bad("parameter_shapes['" + abbreviate(it.key()) + "'] is " +
                  abbreviate(it.value().dump()) +
                  " (expected a list of dimensions, integers 1..2^40, e.g. [64, 64])");
      }
      plan.parameter_shapes[it.key()] = std::move(shape);
    }
  }
  if (j.contains("model_graph") && !j["model_graph"].is_null()) {
    plan.model_graph =
        ModelGraph::parse(j["model_graph"].dump(), "plan file '" + source + "': model_graph");
    if (!plan.model.empty() && plan.model_graph->name != plan.model) {
      throw bad("model_graph is model '" + plan.model_graph->name + "' but model is '" +
                plan.model + "' (expected the same)");
    }
  }
  if (j.contains("estimate") && !j["estimate"].is_null()) {
    const nlohmann::json& e = j["estimate"];
    if (!e.is_object()) {
      throw bad("estimate is " + e.dump() + " (expected an object, as `vtpu plan --emit` writes)");
    }
    if (!e.empty()) {
      plan.estimate = parse_estimate(e, plan, bad);
      check_estimate_configuration(e, plan, bad);
    }
  }
  return plan;
}

namespace {

/// "'fc1' dense 64 -> 128" and so on: what a layer of a model_graph is, for messages.
/// `l` as a message shows it: "'fc1' dense 64 -> 128". `expected`: `l` is what a trainer
/// expects, derived from the model's other layers; a size it could not derive (0, e.g. the vocab
/// of a first layer that is no embedding) is shown by its name, "vocab V", not as a value the user
/// could not give (adversarial pass adv12, ADV9: "expected 'embed' embedding vocab 0").
std::string layer_text(const ModelLayer& l, bool expected = false) {
  const auto size = [expected](int64_t v, const char* name) {
    return expected && v <= 0 ? std::string(name) : std::to_string(v);
  };
  std::string s = "'" + abbreviate(l.name) + "' " + layer_kind_name(l.kind);
  switch (l.kind) {
    case LayerKind::kDense:
      return s + " " + size(l.in, "IN") + " -> " + size(l.out, "OUT") +
             (l.bias ? "" : " without bias");
    case LayerKind::kElementwise:
    case LayerKind::kLayerNorm:
      return s + " dim " + size(l.out, "D");
    case LayerKind::kAttention:
      return s + " d_model " + size(l.out, "D") + ", heads " + size(l.heads, "H") +
             (l.bias ? "" : " without bias");
    case LayerKind::kEmbedding:
      return s + " vocab " + size(l.vocab, "V") + ", d_model " + size(l.out, "D") + ", positions " +
             size(l.positions, "S");
  }
  return s;
}

ModelLayer expected_layer(const std::string& name, LayerKind kind, int64_t in, int64_t out) {
  ModelLayer l;
  l.name = name;
  l.kind = kind;
  l.in = in;
  l.out = out;
  return l;
}

/// Throws unless `g` has exactly the layers `want` (names, kinds and sizes; elementwise FLOP
/// counts are the planner's business) and `dtype` f32. `where` begins the message ("plan file
/// 'p.json': model_graph"); `trainer` and `layout` describe the trainer's architecture in it.
void require_architecture(const ModelGraph& g, const std::string& where,
                          const std::vector<ModelLayer>& want, const std::string& trainer,
                          const std::string& layout) {
  auto fail = [&](const std::string& what) {
    throw InvalidArgumentError(where + " " + what + ", which " + trainer +
                               " does not run (its model: " + layout + ")");
  };
  if (g.dtype != "f32") fail("has dtype " + g.dtype + " (expected f32)");
  for (size_t i = 0; i < std::max(want.size(), g.layers.size()); ++i) {
    if (i >= g.layers.size()) {
      fail("ends after " + std::to_string(g.layers.size()) + " layers (expected layers[" +
           std::to_string(i) + "] " + layer_text(want[i], /*expected=*/true) + ")");
    }
    if (i >= want.size()) {
      fail("has layers[" + std::to_string(i) + "] " + layer_text(g.layers[i]) +
           " after the last (" + want.back().name + ")");
    }
    const ModelLayer& a = g.layers[i];
    const ModelLayer& b = want[i];
    if (a.name != b.name || a.kind != b.kind || a.in != b.in || a.out != b.out ||
        a.bias != b.bias || a.heads != b.heads || a.vocab != b.vocab ||
        a.positions != b.positions) {
      fail("has layers[" + std::to_string(i) + "] " + layer_text(a) + " (expected " +
           layer_text(b, /*expected=*/true) + ")");
    }
  }
}

/// The layers of the digits MLP with `h` hidden units (mlp_model_graph).
std::vector<ModelLayer> mlp_layers(int64_t h) {
  return {expected_layer("fc1", LayerKind::kDense, 64, h),
          expected_layer("relu", LayerKind::kElementwise, h, h),
          expected_layer("fc2", LayerKind::kDense, h, 10)};
}

/// The layers of the transformer of sizes `m` (transformer_model_graph), every bias field at its
/// model-file default (true).
std::vector<ModelLayer> transformer_layers(const TransformerPlanModel& m) {
  const int64_t d = m.d_model, f = m.hidden;
  std::vector<ModelLayer> want;
  ModelLayer embed = expected_layer("embed", LayerKind::kEmbedding, 0, d);
  embed.vocab = m.vocab;
  embed.positions = m.context;
  want.push_back(embed);
  for (int64_t i = 0; i < m.layers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    want.push_back(expected_layer(b + "ln1", LayerKind::kLayerNorm, d, d));
    ModelLayer attn = expected_layer(b + "attn", LayerKind::kAttention, d, d);
    attn.heads = m.heads;
    want.push_back(attn);
    want.push_back(expected_layer(b + "ln2", LayerKind::kLayerNorm, d, d));
    want.push_back(expected_layer(b + "mlp.fc1", LayerKind::kDense, d, f));
    want.push_back(expected_layer(b + "mlp.gelu", LayerKind::kElementwise, f, f));
    want.push_back(expected_layer(b + "mlp.fc2", LayerKind::kDense, f, d));
  }
  want.push_back(expected_layer("ln_f", LayerKind::kLayerNorm, d, d));
  want.push_back(expected_layer("head", LayerKind::kDense, d, m.vocab));
  return want;
}

/// The sizes of `g`, an "mlp" model, as mlp_plan_model; `where` begins the messages.
MlpPlanModel mlp_model(const ModelGraph& g, const std::string& where) {
  const int64_t h = !g.layers.empty() ? g.layers[0].out : 0;
  const std::string layout =
      "fc1 dense 64 -> H, relu elementwise H, fc2 dense H -> 10, f32, sgd or adam";
  require_architecture(g, where, mlp_layers(h), "vtpu train mlp", layout);
  if (g.seq_len != 1 || (g.optimizer != "sgd" && g.optimizer != "adam")) {
    throw InvalidArgumentError(where + " has " +
                               (g.seq_len != 1
                                    ? "seq_len " + std::to_string(g.seq_len) + " (expected 1)"
                                    : "optimizer " + g.optimizer + " (expected sgd or adam)") +
                               ", which vtpu train mlp does not run (its model: " + layout + ")");
  }
  return MlpPlanModel{h, g.optimizer};
}

/// The sizes of `g`, a "transformer" model, as transformer_plan_model; `where` begins the
/// messages.
TransformerPlanModel transformer_model(const ModelGraph& g, const std::string& where) {
  const std::vector<ModelLayer>& ls = g.layers;
  TransformerPlanModel m;
  m.vocab = ls[0].vocab;  // parse() leaves no model without layers
  m.d_model = ls[0].out;
  m.context = g.seq_len;
  m.layers = ls.size() >= 3 ? static_cast<int64_t>(ls.size() - 3) / 6 : 0;
  if (m.layers < 1) m.layers = 1;
  m.heads = ls.size() > 2 ? ls[2].heads : 0;
  m.hidden = ls.size() > 4 ? ls[4].out : 0;
  std::vector<ModelLayer> want = transformer_layers(m);
  // An embedding has no bias field, and layer norms and elementwise layers carry bias = true by
  // default; compare like with like.
  for (size_t i = 0; i < want.size() && i < ls.size(); ++i) {
    if (want[i].kind != LayerKind::kDense && want[i].kind != LayerKind::kAttention) {
      want[i].bias = ls[i].bias;
    }
  }
  const std::string layout =
      "embed, then per block ln1, attn, ln2, mlp.fc1, mlp.gelu, mlp.fc2, then ln_f, head; "
      "f32, adam";
  require_architecture(g, where, want, "vtpu train transformer", layout);
  if (g.optimizer != "adam") {
    throw InvalidArgumentError(where + " has optimizer " + g.optimizer +
                               " (expected adam: vtpu train transformer runs Adam)");
  }
  return m;
}

std::string model_graph_where(const TrainPlan& plan) {
  return "plan file '" + plan.path + "': model_graph";
}

}  // namespace

std::optional<MlpPlanModel> mlp_plan_model(const TrainPlan& plan) {
  // Another model is refused by name (require_plan_model), not by layer.
  if (!plan.model_graph || plan.model_graph->name != "mlp") return std::nullopt;
  return mlp_model(*plan.model_graph, model_graph_where(plan));
}

std::optional<TransformerPlanModel> transformer_plan_model(const TrainPlan& plan) {
  if (!plan.model_graph || plan.model_graph->name != "transformer") return std::nullopt;
  return transformer_model(*plan.model_graph, model_graph_where(plan));
}

void require_trainer_architecture(const ModelGraph& model, const std::string& where) {
  if (model.name == "mlp") (void)mlp_model(model, where);
  if (model.name == "transformer") (void)transformer_model(model, where);
}

ModelGraph mlp_model_graph(int64_t hidden) {
  ModelGraph g;
  g.name = "mlp";
  g.layers = mlp_layers(hidden);
  return g;
}

ModelGraph transformer_model_graph(const TransformerPlanModel& m) {
  ModelGraph g;
  g.name = "transformer";
  g.seq_len = m.context;
  g.layers = transformer_layers(m);
  return g;
}

void check_plan_layout(const TrainPlan& plan, const ModelGraph& model, const std::string& command) {
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError("plan file '" + plan.path + "': " + what);
  };
  if (plan.layers_given) {
    std::vector<std::string> names;
    for (const ModelLayer& l : model.layers) names.push_back(l.name);
    const std::string runs = command + " runs the layers " + join(names) + ", in this order";
    const size_t n = model.layers.size();
    for (size_t i = 0; i < std::max(n, plan.layers.size()); ++i) {
      const std::string at = "layers[" + std::to_string(i) + "]";
      if (i >= plan.layers.size()) {
        throw bad("layers ends after " + std::to_string(plan.layers.size()) +
                  " entries (expected " + at + " '" + names[i] + "': " + runs + ")");
      }
      const auto& [name, sharding] = plan.layers[i];
      if (i >= n) {
        throw bad(at + " is '" + abbreviate(name) + "', after the model's last layer '" +
                  names.back() + "' (expected " + std::to_string(n) + " entries: " + runs + ")");
      }
      if (name != names[i]) {
        throw bad(at + " is '" + abbreviate(name) + "' (expected '" + names[i] + "': " + runs +
                  ")");
      }
      const bool tensor = !plan.tensor.empty();
      const std::string want = tensor ? required_tensor_sharding(model.name, name) : "replicated";
      if (!want.empty() && sharding != want) {
        throw bad(
            at + " '" + name + "' is '" + abbreviate(sharding) + "' (expected '" + want + "': " +
            (tensor ? command + " shards it so under tensor parallelism (Megatron-LM's layout)"
                    : "strategy " + plan.describe_strategy() + " has no tensor axes, so " +
                          command + " splits no layer; FSDP's parameter shards are in shardings") +
            ")");
      }
    }
  }
  if (plan.parameter_shapes.empty()) return;
  auto shape_text = [](const std::vector<int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
  };
  const std::map<std::string, std::vector<int64_t>> want = model_parameter_shapes(model);
  std::vector<std::string> keys;
  for (const auto& [name, shape] : want) keys.push_back(name);
  for (const auto& [name, shape] : want) {
    const auto it = plan.parameter_shapes.find(name);
    if (it == plan.parameter_shapes.end()) {
      throw bad("parameter_shapes has no '" + name + "' (expected " + shape_text(shape) +
                ", its shape in the model " + command + " runs)");
    }
    if (it->second != shape) {
      throw bad("parameter_shapes['" + name + "'] is " + shape_text(it->second) + " (expected " +
                shape_text(shape) + ", its shape in the model " + command + " runs)");
    }
  }
  for (const auto& [name, shape] : plan.parameter_shapes) {
    if (!want.contains(name)) {
      throw bad("parameter_shapes names '" + abbreviate(name) + "', which the model " + command +
                " runs does not have (expected " + join(keys) + ")");
    }
  }
}

int64_t plan_setting(const TrainPlan& plan, const std::string& what, const std::string& field,
                     const std::string& flag, int64_t planned, std::optional<int64_t> given) {
  if (!given || *given == planned) return planned;
  throw InvalidArgumentError("plan file '" + plan.path + "' is for " + what + " " +
                             std::to_string(planned) + " (" + field + "), " + flag + " is " +
                             std::to_string(*given) + " (expected " + std::to_string(planned) +
                             ", or " + flag + " left out)");
}

std::string plan_setting(const TrainPlan& plan, const std::string& what, const std::string& field,
                         const std::string& flag, const std::string& planned,
                         std::optional<std::string> given) {
  if (!given || *given == planned) return planned;
  throw InvalidArgumentError("plan file '" + plan.path + "' is for " + what + " " + planned + " (" +
                             field + "), " + flag + " is " + *given + " (expected " + planned +
                             ", or " + flag + " left out)");
}

void check_plan_cores(const TrainPlan& plan, std::optional<int> cores) {
  if (!cores || *cores == plan.num_cores()) return;
  const std::string n = std::to_string(plan.num_cores());
  throw InvalidArgumentError("--cores " + std::to_string(*cores) + " but plan '" + plan.path +
                             "' has mesh " + plan.describe_mesh() + " (" +
                             count_text(plan.num_cores(), "core") + "; expected --cores " + n +
                             ", or --cores left out)");
}

void require_plan_model(const TrainPlan& plan, const std::string& model,
                        const std::string& command) {
  if (!plan.model.empty() && plan.model != model) {
    throw InvalidArgumentError("plan file '" + plan.path + "' is for model '" + plan.model +
                               "' (expected '" + model + "' for " + command + ")");
  }
}

std::string plan_unsupported_reason(const std::string& model,
                                    const std::vector<int64_t>& mesh_shape,
                                    const std::vector<std::string>& axis_names,
                                    const std::vector<std::string>& data,
                                    const std::vector<std::string>& tensor,
                                    const std::vector<std::string>& fsdp) {
  if (model != "mlp" && model != "transformer") {
    return "no vtpu train command runs model '" + model + "' (expected mlp or transformer)";
  }
  if (data.empty() && tensor.empty() && fsdp.empty()) {
    bool all_one = true;
    for (int64_t s : mesh_shape) all_one = all_one && s == 1;
    if (!all_one) return "it sets none of data, tensor and fsdp";
    return {};  // one core
  }
  if (!fsdp.empty()) {
    if (model == "transformer") {
      return "FSDP is not implemented for transformer (vtpu train transformer runs data and "
             "tensor parallelism; vtpu train mlp and vtpu train fsdp run FSDP on the digits MLP)";
    }
    if (!tensor.empty()) {
      return "FSDP with tensor parallelism is not implemented for the digits MLP (expected "
             "strategy.fsdp alone, or data and tensor parallelism)";
    }
    if (!axis_without_role(mesh_shape, axis_names, {&fsdp}).empty()) {
      return "FSDP over part of the mesh (hybrid sharding, HSDP) is not implemented (expected "
             "strategy.fsdp to name every mesh axis of size > 1)";
    }
    if (!data.empty() && std::set<std::string>(data.begin(), data.end()) !=
                             std::set<std::string>(fsdp.begin(), fsdp.end())) {
      return "data parallelism over other axes than FSDP is not implemented (expected "
             "strategy.data null or the same axes as strategy.fsdp)";
    }
    return {};
  }
  if (const std::string idle = axis_without_role(mesh_shape, axis_names, {&data, &tensor});
      !idle.empty()) {
    return "mesh axis '" + idle +
           "' would be idle (expected every mesh axis of size > 1 in "
           "data or tensor)";
  }
  return {};
}

std::string required_tensor_sharding(const std::string& model, const std::string& layer) {
  if (model == "mlp") {
    // train/mlp_tp_trainer.h: Megatron's MLP, column then row.
    if (layer == "fc1") return "column";
    if (layer == "fc2") return "row";
    return "sharded";  // the ReLU between them works on the hidden shard
  }
  if (model == "transformer") {
    // train/transformer_model.h: attention heads and the MLP hidden units are split.
    if (ends_with(layer, ".attn")) return "heads";
    if (ends_with(layer, ".mlp.fc1")) return "column";
    if (ends_with(layer, ".mlp.gelu")) return "sharded";
    if (ends_with(layer, ".mlp.fc2")) return "row";
    return "replicated";
  }
  return {};
}

PlanConstraints plan_constraints(const std::string& model, const std::vector<int64_t>& mesh_shape,
                                 const std::vector<std::string>& axis_names) {
  PlanConstraints c;
  if (model != "mlp" && model != "transformer") return c;
  c.runner = model == "mlp" ? "vtpu train mlp" : "vtpu train transformer";
  c.unsupported = [model, mesh_shape, axis_names](const PlanCandidate& k) {
    return plan_unsupported_reason(model, mesh_shape, axis_names, k.data_axes, k.tensor_axes,
                                   k.fsdp_axes);
  };
  c.tensor_sharding = [model](const ModelLayer& l) {
    return required_tensor_sharding(model, l.name);
  };
  return c;
}

std::string plan_run_command(const std::string& model, const PlanCandidate& k) {
  if (model == "transformer") return "vtpu train transformer";
  if (model != "mlp") return {};
  // Regression (session 12 review): an FSDP plan's footer said "vtpu train mlp --plan".
  return k.fsdp_axes.empty() ? "vtpu train mlp" : "vtpu train fsdp";
}

namespace {

// Layer names of the models vtpu train runs (train/mlp_trainer.h, transformer_model.h):
// mlp fc1, relu, fc2; transformer embed, blocks.<i>.{ln1, attn, ln2, mlp.fc1, mlp.gelu,
// mlp.fc2}, ln_f, head. True for every name of another model (nothing to check it against).
bool is_model_layer(const std::string& model, const std::string& layer) {
  if (model == "mlp") return layer == "fc1" || layer == "relu" || layer == "fc2";
  if (model != "transformer") return true;
  if (layer == "embed" || layer == "ln_f" || layer == "head") return true;
  if (!layer.starts_with("blocks.")) return false;
  size_t i = 7;
  while (i < layer.size() && layer[i] >= '0' && layer[i] <= '9') ++i;
  if (i == 7 || i >= layer.size() || layer[i] != '.') return false;
  const std::string part = layer.substr(i + 1);
  for (const char* p : {"ln1", "attn", "ln2", "mlp.fc1", "mlp.gelu", "mlp.fc2"})
    if (part == p) return true;
  return false;
}

}  // namespace

DataTensorLayout plan_data_tensor_layout(const TrainPlan& plan, const std::string& command) {
  // Regression (adversarial pass adv7, G3): a layer the model does not have ("fc9" in an mlp
  // plan) was reported as "is 'row', but the trainer shards it 'sharded'", as if it existed.
  for (const auto& [layer, sharding] : plan.layers) {
    if (!is_model_layer(plan.model, layer)) {
      throw InvalidArgumentError(
          "plan file '" + plan.path + "' names layer '" + abbreviate(layer) + "', which model '" +
          plan.model + "' does not have (expected " +
          (plan.model == "mlp" ? std::string("fc1, relu, fc2")
                               : std::string("embed, blocks.<i>.ln1/attn/ln2/mlp.fc1/mlp.gelu/"
                                             "mlp.fc2, ln_f, head")) +
          ")");
    }
  }
  if (!plan.fsdp.empty()) {
    throw UnimplementedError(command + " cannot run strategy " + plan.describe_strategy() +
                             " of plan '" + plan.path +
                             "': it uses FSDP (expected data and tensor roles only)");
  }
  if (!plan.tensor.empty()) {
    for (const auto& [layer, sharding] : plan.layers) {
      const std::string want = required_tensor_sharding(plan.model, layer);
      if (!want.empty() && sharding != want) {
        throw UnimplementedError(command + " cannot run plan '" + plan.path + "': layer '" + layer +
                                 "' is '" + sharding + "', but the trainer shards it '" + want +
                                 "' under tensor parallelism (Megatron-LM's layout)");
      }
    }
  }
  return DataTensorLayout::from_mesh(plan.mesh(), plan.data, plan.tensor);
}

MlpPlanMode mlp_plan_mode(const TrainPlan& plan, bool allow_tensor) {
  require_plan_model(plan, "mlp", allow_tensor ? "vtpu train mlp" : "vtpu train fsdp");
  const std::string command = allow_tensor ? "train mlp" : "train fsdp";
  const std::string why_prefix = command + " cannot run strategy " + plan.describe_strategy() +
                                 " of plan '" + plan.path + "': ";
  const std::string why = plan_unsupported_reason("mlp", plan.mesh_shape, plan.mesh_axes, plan.data,
                                                  plan.tensor, plan.fsdp);
  if (!why.empty()) throw UnimplementedError(why_prefix + why);
  if (!plan.fsdp.empty()) return MlpPlanMode::kFsdp;
  if (!plan.tensor.empty()) {
    if (!allow_tensor) {
      throw UnimplementedError(why_prefix +
                               "it uses tensor parallelism, which train fsdp does not run (run "
                               "it with vtpu train mlp --plan)");
    }
    return MlpPlanMode::kTensorParallel;
  }
  return MlpPlanMode::kDataParallel;
}

// Regression (new-user pass nu8, N13): a tensor-parallel plan was refused with "train fsdp
// cannot run strategy ...", though the user ran `train mlp --estimate-from`.
void check_mlp_estimate_plan(const TrainPlan& plan) {
  // One core splits nothing: any strategy of a 1-core mesh is what train mlp --cores 1 runs.
  if (plan.num_cores() <= 1) {
    require_plan_model(plan, "mlp", "vtpu train mlp --estimate-from");
    return;
  }
  const MlpPlanMode mode = mlp_plan_mode(plan, /*allow_tensor=*/true);
  if (mode == MlpPlanMode::kDataParallel) return;
  const bool tensor = mode == MlpPlanMode::kTensorParallel;
  throw InvalidArgumentError(
      "train mlp --estimate-from " + plan.path +
      ": --estimate-from takes a data-parallel plan (every mesh axis of size > 1 in data) or a "
      "1-core plan; strategy " +
      plan.describe_strategy() + " is " + (tensor ? "tensor parallel" : "FSDP") +
      ": run it with `vtpu train " + (tensor ? "mlp" : "fsdp") + " --plan " + plan.path +
      "`, which ends with the same estimate report");
}

void PlanEstimate::check_batch(int64_t run_batch) const {
  if (batch != 0 && batch != run_batch) {
    throw InvalidArgumentError(
        "plan file '" + source + "' estimates a global batch of " + std::to_string(batch) +
        " but the run uses " + std::to_string(run_batch) +
        " (expected the same; re-plan with `vtpu plan --batch " + std::to_string(run_batch) + "`)");
  }
}

std::optional<HardwareProfile> PlanEstimate::priced_with() const {
  if (profile) return profile;
  const std::vector<std::string> shipped = HardwareProfile::builtin_names();
  if (std::find(shipped.begin(), shipped.end(), hardware) == shipped.end()) return std::nullopt;
  return HardwareProfile::get(hardware);
}

std::optional<PlanEstimate> comparable_estimate(const TrainPlan& plan, int64_t batch) {
  if (!plan.estimate || !(plan.estimate->step_seconds > 0)) return std::nullopt;
  plan.estimate->check_batch(batch);
  return plan.estimate;
}

}  // namespace vtpu
