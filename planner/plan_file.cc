#include "vtpu/planner/plan_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "vtpu/common/error.h"
#include "vtpu/common/json_fields.h"
#include "vtpu/common/strings.h"
#include "vtpu/sharding/mesh.h"
#include "vtpu/sharding/mesh_arg.h"
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
/// "mesh_shape" (written by vtpu plan --emit) equals mesh.shape, or, in an older
/// file without it, its oversubscription equals max(1, cores / host_cpus) of its embedded
/// hardware profile (when that profile has host_cpus). Regression: a
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
  // Regression: 2^64 - 1 bytes went through llround (undefined past
  // 2^63; printed 9223372036854775808), and two fields of 2^63 - 1 wrapped their sum to 0, which
  // the report took for "no estimate".
  auto bytes = [&](const char* key) {
    return static_cast<uint64_t>(std::llround(number(key, true, false, 0.0, 0x1p62, "2^62")));
  };
  // Regression: an unknown key was ignored, so a misspelt
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
  // Regression: 1e-320 s (finite, > 0) passed and the report printed
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
  // Regression: a batch of 2^62 became train mlp's global batch
  // (--batch stops at 2^30) and crashed it (SIGSEGV). Bounded as vtpu plan --batch is.
  p.batch = static_cast<int64_t>(
      std::llround(number("batch", true, true, 0.0, 0x1p40, "2^40, as vtpu plan --batch")));
  check_estimate_mesh(e, p, plan, bad);
  return p;
}

/// Checks that the estimate `plan.estimate` (from the object `e`) was made for the configuration
/// the plan runs, as check_estimate_mesh does for the mesh (a plan
/// hand-edited to batch 1024, or from dp to FSDP roles, ran that and was judged against the
/// original's estimate). Throws `bad` when estimate.batch is not model_graph.batch, or when
/// estimate.strategy (written by vtpu plan --emit) is not the strategy of the
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
  // a 16 MiB model file's plan; a stream without end (/dev/zero) is cut off.
  constexpr uintmax_t kMaxPlanFileBytes = uintmax_t{64} << 20;
  const std::string text = read_bounded_text_file(path, kMaxPlanFileBytes, "plan file", "64 MiB");
  nlohmann::json j;
  // A hand-edited plan with a key given twice (two "strategy" objects) took the last one
  // silently; model files and hardware profiles already rejected that.
  try {
    j = parse_json_unique_keys(text, "plan file '" + path + "'");
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgumentError("plan file '" + path + "' is not valid JSON: " + e.what());
  }
  return parse_train_plan(j, path);
}

namespace {

/// Checks "format", "version" and the top-level keys.
template <typename Bad>
void check_plan_header(const nlohmann::json& j, const Bad& bad) {
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
  // A misspelt top-level key ("estimates") would be ignored silently.
  static const std::set<std::string> kPlanKeys = {
      "estimate",         "format", "layers",    "mesh",     "model",  "model_graph",
      "parameter_shapes", "pinned", "shardings", "strategy", "version"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!kPlanKeys.contains(it.key())) {
      throw bad("unknown key '" + abbreviate(it.key()) + "' (expected " +
                join(std::vector<std::string>(kPlanKeys.begin(), kPlanKeys.end())) + ")");
    }
  }
}

/// Reads "mesh" into plan.mesh_axes and plan.mesh_shape.
template <typename Bad>
void parse_plan_mesh(const nlohmann::json& j, TrainPlan& plan, const Bad& bad) {
  const nlohmann::json* mesh = j.contains("mesh") ? &j["mesh"] : nullptr;
  if (!mesh || !mesh->is_object() || !mesh->contains("axes") || !mesh->contains("shape") ||
      !(*mesh)["axes"].is_array() || !(*mesh)["shape"].is_array()) {
    throw bad("expected \"mesh\": {\"axes\": [names], \"shape\": [sizes]}");
  }
  // Unknown keys are refused here as everywhere: a typo would go unnoticed.
  refuse_unknown_keys(*mesh, "mesh", {"axes", "shape"}, bad);
  for (const auto& a : (*mesh)["axes"]) {
    if (!a.is_string() || a.get<std::string>().empty()) {
      throw bad("mesh axis " + a.dump() + " is not a name");
    }
    const std::string name = a.get<std::string>();
    // The names vtpu plan accepts, and no others.
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
    // Checked here, so that the error names the plan and its mesh: vtpu train starts one virtual
    // core per device (RuntimeOptions allows 1..1024).
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
}

/// Reads "strategy" into the plan's strategy name and roles (the mesh is read).
template <typename Bad>
void parse_plan_strategy(const nlohmann::json& j, TrainPlan& plan, const Bad& bad) {
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
  // The name is optional, but when given it must be the one `vtpu plan` gives these roles (a
  // tp(model) plan renamed "dp(model)" would run tensor parallelism under a data-parallel name),
  // with the roles in any order, as `vtpu plan --strategy` takes them; it is kept in vtpu plan's
  // order, so that it names the planner's candidate.
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
}

/// Checks that every entry of "shardings" is a PartitionSpec the plan's mesh can hold. The
/// trainers derive their layouts from the strategy, but a hand-edited "P('nope')" must not run
/// without complaint.
template <typename Bad>
void check_plan_shardings(const nlohmann::json& j, const TrainPlan& plan, const Bad& bad) {
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
}

/// Reads "layers" and "parameter_shapes".
template <typename Bad>
void parse_plan_layers(const nlohmann::json& j, TrainPlan& plan, const Bad& bad) {
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
}

}  // namespace

TrainPlan parse_train_plan(const nlohmann::json& j, const std::string& source) {
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError("plan file '" + source + "': " + what +
                                " (the format of vtpu plan --emit, docs/PLANNER.md)");
  };
  check_plan_header(j, bad);
  TrainPlan plan;
  plan.path = source;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) throw bad("model is " + j["model"].dump() + " (expected a name)");
    plan.model = j["model"].get<std::string>();
  }
  parse_plan_mesh(j, plan, bad);
  parse_plan_strategy(j, plan, bad);
  check_plan_shardings(j, plan, bad);
  parse_plan_layers(j, plan, bad);
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

// ---- writer --------------------------------------------------------------------------------

namespace {

/// A role's axes: null when none, else always a list (the reader also takes one name).
nlohmann::json axis_json(const std::vector<std::string>& axes) {
  if (axes.empty()) return nullptr;
  return axes;
}

/// The PartitionSpec text of every parameter of `plan.model` and of every layer's output
/// activation under candidate `w`, by name ("fc1.w", "fc1.out"). `batch_axes` shard the batch.
/// Throws InternalError when a parameter of model_parameter_shapes gets no spec or a spec of
/// higher rank than its shape.
nlohmann::json candidate_shardings(const AutoShardingPlan& plan, const PlanCandidate& w,
                                   const std::vector<std::string>& batch_axes,
                                   const std::map<std::string, std::vector<int64_t>>& shapes) {
  const ModelGraph& model = plan.model;
  const std::vector<std::string>& tp = w.tensor_axes;
  const std::vector<std::string>& fs = w.fsdp_axes;
  nlohmann::json shardings = nlohmann::json::object();
  const auto spec = [](std::vector<PartitionSpec::Entry> entries,
                       std::vector<std::string> unreduced = {}) {
    return PartitionSpec(std::move(entries), std::move(unreduced)).normalized().to_string();
  };
  const PartitionSpec::Entry none;
  size_t specified = 0;
  const auto param = [&](const std::string& name, std::vector<PartitionSpec::Entry> entries) {
    const auto it = shapes.find(name);
    if (it == shapes.end() || entries.size() > it->second.size()) {
      throw InternalError("plan: parameter '" + name + "' has no shape of rank >= " +
                          std::to_string(entries.size()) + " in model_parameter_shapes");
    }
    if (!shardings.contains(name)) ++specified;
    shardings[name] = spec(std::move(entries));
  };
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const ModelLayer& l = model.layers[i];
    const LayerPlan& p = w.layers[i];
    const std::string& c = p.choice;
    const std::string& n = l.name;
    switch (l.kind) {
      case LayerKind::kDense:
        if (c == "column") {
          param(n + ".w", {fs, tp});
          if (l.bias) param(n + ".b", {tp});
        } else if (c == "row") {
          param(n + ".w", {tp, fs});
          if (l.bias) param(n + ".b", {fs});
        } else {
          param(n + ".w", {fs, none});
          if (l.bias) param(n + ".b", {fs});
        }
        break;
      case LayerKind::kAttention:
        // The trainer holds wqkv as (d, 3, d) -- input, q/k/v, heads x head dim -- and splits the
        // last dimension, so every core has whole heads of Q, K and V (train/transformer_model.h);
        // P(None, 'model') over a (d, 3d) array would split the fused Q|K|V columns instead.
        if (c == "heads") {
          param(n + ".wqkv", {fs, none, tp});
          param(n + ".wo", {tp, fs});
          if (l.bias) param(n + ".bqkv", {none, tp});
        } else {
          param(n + ".wqkv", {fs, none, none});
          param(n + ".wo", {fs, none});
          if (l.bias) param(n + ".bqkv", {none, fs});
        }
        if (l.bias) param(n + ".bo", {fs});
        break;
      case LayerKind::kLayerNorm:
        param(n + ".gamma", {fs});
        param(n + ".beta", {fs});
        break;
      case LayerKind::kEmbedding:
        if (c == "vocab") {
          param(n + ".table", {tp, fs});
        } else if (c == "features") {
          param(n + ".table", {fs, tp});
        } else {
          param(n + ".table", {fs, none});
        }
        if (l.positions > 0) {
          param(n + ".positions", {fs, c == "features" ? tp : none});
        }
        break;
      case LayerKind::kElementwise:
        break;
    }
    // The activation: (batch, [seq,] features).
    std::vector<PartitionSpec::Entry> act = {batch_axes};
    if (model.seq_len > 1) act.push_back(none);
    act.push_back(p.out_state == 'S' ? tp : none);
    shardings[n + ".out"] = spec(act, p.out_state == 'P' ? tp : std::vector<std::string>{});
  }
  if (specified != shapes.size()) {
    throw InternalError("plan: " + std::to_string(shapes.size() - specified) +
                        " of the model's parameters have no spec");
  }
  return shardings;
}

/// The "estimate" of candidate `w`: what a run is compared with.
nlohmann::json candidate_estimate(const AutoShardingPlan& plan, const PlanCandidate& w) {
  nlohmann::json e = {
      {"step_seconds", w.step_seconds},
      {"compute_seconds", w.compute_seconds},
      {"comm_seconds", w.comm_seconds},
      {"hbm_bytes_per_core", w.hbm_bytes_per_core},
      {"input_bytes_per_core", w.input_bytes_per_core},
      {"oversubscription", plan.oversubscription},
      {"mesh_shape", plan.mesh_shape},  // the mesh it was priced for; the trainers check it
      {"comm_bytes_per_core", static_cast<uint64_t>(std::llround(w.comm_bytes_per_core))},
      {"hardware", plan.hardware},
      {"strategy", w.name},  // the strategy it was priced for; the trainers check the roles
      {"batch", plan.model.batch}};
  // The profile itself, so the run is compared with what the plan was priced with (an edited or
  // recalibrated profile file keeps the shipped name); "hardware_file" says where it was read.
  if (!plan.profile.name.empty()) e["hardware_profile"] = plan.profile.to_json();
  if (!plan.profile.source_path.empty()) e["hardware_file"] = plan.profile.source_path;
  return e;
}

}  // namespace

nlohmann::json emit_train_plan(const AutoShardingPlan& plan) {
  if (plan.chosen() < 0) {
    throw FailedPreconditionError("no plan to emit: model '" + plan.model.name +
                                  "' fits on no strategy");
  }
  const PlanCandidate& w = plan.candidates[static_cast<size_t>(plan.chosen())];
  std::vector<std::string> batch_axes;  // data and fsdp axes, mesh order
  for (size_t a = 0; a < plan.axis_names.size(); ++a) {
    if (w.roles[a] == AxisRole::kData || w.roles[a] == AxisRole::kFsdp)
      batch_axes.push_back(plan.axis_names[a]);
  }
  // Every parameter's global shape beside its spec, so that the spec can be applied as written
  // (jax.sharding.NamedSharding(mesh, spec) on an array of that shape): the model's parameters
  // (model_parameter_shapes, the rule the trainers check a plan file with).
  const std::map<std::string, std::vector<int64_t>> shapes = model_parameter_shapes(plan.model);
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerPlan& l : w.layers) {
    layers.push_back({{"name", l.layer},
                      {"sharding", l.choice},
                      {"in", std::string(1, l.in_state)},
                      {"out", std::string(1, l.out_state)},
                      {"reshard_before", l.reshard_in.empty() ? nlohmann::json(nullptr)
                                                              : nlohmann::json(l.reshard_in)}});
  }
  nlohmann::json j;
  j["format"] = "vtpu-plan";
  j["version"] = 1;
  j["model"] = plan.model.name;
  j["mesh"] = {{"axes", plan.axis_names}, {"shape", plan.mesh_shape}};
  j["strategy"] = {{"name", w.name},
                   {"data", axis_json(w.data_axes)},
                   {"tensor", axis_json(w.tensor_axes)},
                   {"fsdp", axis_json(w.fsdp_axes)},
                   {"batch_axes", batch_axes}};
  j["shardings"] = candidate_shardings(plan, w, batch_axes, shapes);
  j["parameter_shapes"] = shapes;
  j["estimate"] = candidate_estimate(plan, w);
  j["layers"] = layers;
  if (plan.pinned >= 0 && plan.pinned != plan.winner) {
    j["pinned"] = {
        {"winner", plan.winner >= 0
                       ? nlohmann::json(plan.candidates[static_cast<size_t>(plan.winner)].name)
                       : nlohmann::json(nullptr)},
        {"why_lost", w.why_lost}};
  }
  j["model_graph"] = plan.model.to_json();  // the sizes the plan is for (trainers take them)
  return j;
}

}  // namespace vtpu
