#include "vtpu/planner/trainer_plans.h"

#include <algorithm>
#include <map>
#include <set>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"

namespace vtpu {

namespace {

/// "'fc1' dense 64 -> 128" and so on: what a layer of a model_graph is, for messages.
/// `l` as a message shows it: "'fc1' dense 64 -> 128". `expected`: `l` is what a trainer
/// expects, derived from the model's other layers; a size it could not derive (0, e.g. the vocab
/// of a first layer that is no embedding) is shown by its name, "vocab V", not as a value the user
/// could not give ("expected 'embed' embedding vocab 0").
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
    if (layer.ends_with(".attn")) return "heads";
    if (layer.ends_with(".mlp.fc1")) return "column";
    if (layer.ends_with(".mlp.gelu")) return "sharded";
    if (layer.ends_with(".mlp.fc2")) return "row";
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
  // Regression: an FSDP plan's footer said "vtpu train mlp --plan".
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
  // Regression: a layer the model does not have ("fc9" in an mlp
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

// Regression: a tensor-parallel plan was refused with "train fsdp
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

}  // namespace vtpu
