#include "examples/train_plan.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"

namespace vtpu::examples {

namespace {

std::string list_text(const std::vector<std::string>& axes) {
  if (axes.empty()) return "null";
  std::string s = "[";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", '" : "'") + axes[i] + "'";
  return s + "]";
}

}  // namespace

int64_t TrainPlan::num_cores() const {
  int64_t n = 1;
  for (int64_t d : mesh_shape) n *= d;
  return n;
}

std::string TrainPlan::describe_strategy() const {
  return "'" + (strategy_name.empty() ? std::string("(unnamed)") : strategy_name) +
         "' (data: " + list_text(data) + ", tensor: " + list_text(tensor) +
         ", fsdp: " + list_text(fsdp) + ")";
}

TrainPlan load_train_plan(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw NotFoundError("cannot open plan file '" + path + "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgumentError("plan file '" + path + "' is not JSON: " + e.what());
  }
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError("plan file '" + path + "': " + what);
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
  TrainPlan plan;
  plan.path = path;
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) throw bad("model is " + j["model"].dump() + " (expected a name)");
    plan.model = j["model"].get<std::string>();
  }
  const nlohmann::json* mesh = j.contains("mesh") ? &j["mesh"] : nullptr;
  if (!mesh || !mesh->is_object() || !mesh->contains("axes") || !mesh->contains("shape") ||
      !(*mesh)["axes"].is_array() || !(*mesh)["shape"].is_array()) {
    throw bad("expected \"mesh\": {\"axes\": [names], \"shape\": [sizes]}");
  }
  for (const auto& a : (*mesh)["axes"]) {
    if (!a.is_string() || a.get<std::string>().empty()) {
      throw bad("mesh axis " + a.dump() + " is not a name");
    }
    const std::string name = a.get<std::string>();
    if (std::find(plan.mesh_axes.begin(), plan.mesh_axes.end(), name) != plan.mesh_axes.end()) {
      throw bad("mesh axis '" + name + "' appears twice");
    }
    plan.mesh_axes.push_back(name);
  }
  for (const auto& d : (*mesh)["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > 4096) {
      throw bad("mesh size " + d.dump() + " (expected an integer 1..4096)");
    }
    plan.mesh_shape.push_back(d.get<int64_t>());
  }
  if (plan.mesh_axes.empty() || plan.mesh_axes.size() != plan.mesh_shape.size()) {
    throw bad("mesh has " + std::to_string(plan.mesh_axes.size()) + " axes and " +
              std::to_string(plan.mesh_shape.size()) +
              " sizes (expected the same number, at least 1)");
  }
  if (plan.num_cores() > 4096) {
    throw bad("mesh has " + std::to_string(plan.num_cores()) + " cores (expected at most 4096)");
  }
  if (!j.contains("strategy") || !j["strategy"].is_object()) {
    throw bad("expected \"strategy\": {\"name\", \"data\", \"tensor\", \"fsdp\"}");
  }
  const nlohmann::json& st = j["strategy"];
  if (st.contains("name") && st["name"].is_string()) {
    plan.strategy_name = st["name"].get<std::string>();
  }
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
      if (!a.is_string() || std::find(plan.mesh_axes.begin(), plan.mesh_axes.end(),
                                      a.get<std::string>()) == plan.mesh_axes.end()) {
        std::string axes;
        for (const std::string& m : plan.mesh_axes) axes += (axes.empty() ? "" : ", ") + m;
        throw bad(std::string("strategy.") + key + " names " + a.dump() +
                  ", which is not a mesh axis (expected null, one of: " + axes + ", or a list)");
      }
      out.push_back(a.get<std::string>());
    }
    return out;
  };
  plan.data = axes_of("data");
  plan.tensor = axes_of("tensor");
  plan.fsdp = axes_of("fsdp");
  return plan;
}

MlpPlanMode mlp_plan_mode(const TrainPlan& plan) {
  if (!plan.model.empty() && plan.model != "mlp") {
    throw InvalidArgumentError("plan file '" + plan.path + "' is for model '" + plan.model +
                               "' (expected 'mlp', the digits MLP of train mlp / train fsdp)");
  }
  // The mesh axes that split anything (size > 1); size-1 axes may be named or not.
  std::set<std::string> needed;
  for (size_t i = 0; i < plan.mesh_axes.size(); ++i) {
    if (plan.mesh_shape[i] > 1) needed.insert(plan.mesh_axes[i]);
  }
  auto covers = [&](const std::vector<std::string>& axes) {
    std::set<std::string> got(axes.begin(), axes.end());
    for (const std::string& a : needed) {
      if (!got.contains(a)) return false;
    }
    return true;
  };
  const std::string why_prefix = "train fsdp cannot run strategy " + plan.describe_strategy() +
                                 " of plan '" + plan.path + "': ";
  if (!plan.tensor.empty()) {
    throw UnimplementedError(why_prefix +
                             "it uses tensor parallelism, which the digits MLP trainer does not "
                             "implement (expected strategy.fsdp, or strategy.data alone)");
  }
  if (!plan.fsdp.empty()) {
    if (!covers(plan.fsdp)) {
      throw UnimplementedError(why_prefix +
                               "FSDP over part of the mesh (hybrid sharding, HSDP) is not "
                               "implemented (expected strategy.fsdp to name every mesh axis of "
                               "size > 1)");
    }
    if (!plan.data.empty() && std::set<std::string>(plan.data.begin(), plan.data.end()) !=
                                  std::set<std::string>(plan.fsdp.begin(), plan.fsdp.end())) {
      throw UnimplementedError(why_prefix +
                               "data parallelism over other axes than FSDP is not implemented "
                               "(expected strategy.data null or the same axes as strategy.fsdp)");
    }
    return MlpPlanMode::kFsdp;
  }
  if (!plan.data.empty()) {
    if (!covers(plan.data)) {
      throw UnimplementedError(why_prefix +
                               "data parallelism over part of the mesh leaves the other axes "
                               "idle (expected strategy.data to name every mesh axis of size > "
                               "1)");
    }
    return MlpPlanMode::kDataParallel;
  }
  throw UnimplementedError(why_prefix +
                           "it sets none of data, tensor and fsdp (expected strategy.fsdp, or "
                           "strategy.data alone)");
}

}  // namespace vtpu::examples
