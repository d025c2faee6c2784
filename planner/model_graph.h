// Model graph: the layer chain the auto-sharding planner (planner/auto_planner.h) reads, loaded
// from a JSON model file (docs/PLANNER.md, "Model files"; examples/models/*.json).
//
//   {"name": "mlp", "dtype": "f32", "optimizer": "sgd", "batch": 64, "seq_len": 1,
//    "layers": [{"name": "fc1", "kind": "dense", "in": 64, "out": 64},
//               {"name": "relu", "kind": "elementwise", "dim": 64},
//               {"name": "fc2", "kind": "dense", "in": 64, "out": 10}]}
//
// A model is a chain: each layer consumes the previous layer's output, an activation of
// (batch, seq_len, features) elements (seq_len 1: (batch, features)). Layer kinds and their fields
// (sizes in elements):
//   dense | matmul  in, out [, bias = true]        y = x W + b, W (in, out)
//   elementwise     dim [, flops_per_element = 1,  y = f(x) (ReLU, GELU, residual add, ...)
//                   transcendentals_per_element = 0]
//   layer_norm      dim                            gamma, beta (dim)
//   attention       d_model, heads [, bias = true] causal self-attention: Wqkv (d, 3, d) (input,
//                                                  q/k/v, heads x head dim), Wo (d, d)
//   embedding       vocab, d_model [, positions]   table (vocab, d); optional learned positions
//                                                  (positions, d); input: token ids (first layer)
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace vtpu {

enum class LayerKind { kDense, kElementwise, kLayerNorm, kAttention, kEmbedding };

/// "dense", "elementwise", "layer_norm", "attention", "embedding".
std::string layer_kind_name(LayerKind kind);

/// One layer. Plain data.
struct ModelLayer {
  std::string name;
  LayerKind kind = LayerKind::kDense;
  int64_t in = 0;   // input features (elements): dense in; the others: dim / d_model; embedding: 0
  int64_t out = 0;  // output features: dense out; the others: dim / d_model
  int64_t vocab = 0;             // embedding rows
  int64_t positions = 0;         // embedding: learned position rows (0: none)
  int64_t heads = 0;             // attention
  bool bias = true;              // dense, attention
  double flops_per_element = 1;  // elementwise: forward FLOPs per output element
  /// elementwise: forward transcendental evaluations (tanh, exp, ...) per output element, counted
  /// apart from the FLOPs as XLA's HloCostAnalysis counts "transcendentals" (GELU's tanh: 1).
  double transcendentals_per_element = 0;

  /// Parameter elements of the layer.
  int64_t num_parameters() const;
};

/// A parsed, validated model. Plain data, thread-compatible.
struct ModelGraph {
  std::string name;
  std::string dtype = "f32";       // parameter and activation type: "f32" or "bf16"
  std::string optimizer = "adam";  // "sgd" (no state), "momentum" (1 x params), "adam" (2 x)
  int64_t batch = 0;               // global batch: sequences (or rows) per step
  int64_t seq_len = 1;             // tokens per sequence
  std::vector<ModelLayer> layers;

  /// Bytes of one element of dtype (4 or 2).
  int64_t dtype_bytes() const;
  /// Optimizer state elements per parameter element (0, 1 or 2).
  int optimizer_state_factor() const;
  int64_t num_parameters() const;

  /// Parses and validates a model file's text. `origin` (a path) prefixes every message. Throws
  /// InvalidArgumentError: for invalid JSON, with the line and column; for a bad field, with its
  /// path ("layers[2].out") and the layer's name, the value and what was expected; for an
  /// unknown key (a typo) with the keys the object allows; for a chain whose shapes do not
  /// connect ("layers[3] 'fc2': in 65 does not match the previous layer's output 64").
  static ModelGraph parse(const std::string& text, const std::string& origin = "model");
  /// Reads and parses a file. Throws NotFoundError when it cannot be read, else as parse().
  static ModelGraph load_json_file(const std::string& path);
  /// The model in the model-file format (no "description"; every optional field written), so
  /// that parse(to_json().dump()) gives this model back. A plan file carries it as "model_graph"
  /// (docs/PLANNER.md, "Plan files").
  nlohmann::json to_json() const;
};

/// The parameters of `model` with their global shapes (elements per dimension), by name: dense
/// <l>.w (in, out) and <l>.b (out) when it has a bias; attention <l>.wqkv (d, 3, d), <l>.wo
/// (d, d), and with bias <l>.bqkv (3, d), <l>.bo (d); layer_norm <l>.gamma, <l>.beta (d);
/// embedding <l>.table (vocab, d), <l>.positions (positions, d) when it has positions;
/// elementwise none (d is the layer's out). The one rule for these names and shapes: the plan's
/// "parameter_shapes" (AutoShardingPlan::to_json) and the trainers' check of a plan file against
/// their model (planner/plan_file.h, check_plan_layout) both read it.
/// Thread-safe.
std::map<std::string, std::vector<int64_t>> model_parameter_shapes(const ModelGraph& model);

}  // namespace vtpu
