#include "vtpu/planner/model_graph.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/json_fields.h"
#include "vtpu/common/strings.h"

namespace vtpu {

namespace {

// Parameters, and activation elements summed over the layers, a model may have: 2^50 elements of
// 8 bytes with gradients and Adam state stay far below 2^64 bytes.
constexpr double kMaxModelElements = double(int64_t{1} << 50);

// A model file's size and layer count: far above any real chain, far below what makes the
// planner's per-layer tables take gigabytes.
constexpr uintmax_t kMaxModelFileBytes = uintmax_t{16} << 20;
constexpr size_t kMaxLayers = 65536;

std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return text;
}

// Reads the model's fields through common/json_fields.h; `origin` names the file in messages.
class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw_json_error(origin_, path, what);
  }

  void check_keys(const nlohmann::json& obj, const std::string& path,
                  const std::set<std::string>& allowed) const {
    JsonObject(obj, origin_, path).allow_only(allowed);
  }

  int64_t positive(const nlohmann::json& obj, const std::string& path, const char* key) const {
    return field(obj, path, key).integer(1, int64_t{1} << 40);
  }

  int64_t optional_positive(const nlohmann::json& obj, const std::string& path, const char* key,
                            int64_t fallback) const {
    return obj.contains(key) ? positive(obj, path, key) : fallback;
  }

  std::string text(const nlohmann::json& obj, const std::string& path, const char* key,
                   const std::vector<std::string>& allowed) const {
    const JsonField f = field(obj, path, key);
    const std::string& s = allowed.empty() ? f.string() : f.name(allowed);
    if (s.empty()) f.fail_expected("a non-empty string");
    // A NUL or other control character in a name cut the printed name short and went into plan
    // files.
    for (const char ch : s) {
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
        f.fail_expected("a string without control characters");
      }
    }
    return s;
  }

  bool boolean(const nlohmann::json& obj, const std::string& path, const char* key,
               bool fallback) const {
    return obj.contains(key) ? field(obj, path, key).boolean() : fallback;
  }

  JsonField field(const nlohmann::json& obj, const std::string& path, const char* key) const {
    return JsonObject(obj, origin_, path)[key];
  }

 private:
  std::string origin_;
};

}  // namespace

std::string layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kDense:
      return "dense";
    case LayerKind::kElementwise:
      return "elementwise";
    case LayerKind::kLayerNorm:
      return "layer_norm";
    case LayerKind::kAttention:
      return "attention";
    case LayerKind::kEmbedding:
      return "embedding";
  }
  return "?";
}

int64_t ModelLayer::num_parameters() const {
  switch (kind) {
    case LayerKind::kDense:
      return in * out + (bias ? out : 0);
    case LayerKind::kElementwise:
      return 0;
    case LayerKind::kLayerNorm:
      return 2 * out;
    case LayerKind::kAttention:
      return 4 * out * out + (bias ? 4 * out : 0);
    case LayerKind::kEmbedding:
      return (vocab + positions) * out;
  }
  return 0;
}

std::map<std::string, std::vector<int64_t>> model_parameter_shapes(const ModelGraph& model) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const ModelLayer& l : model.layers) {
    const std::string& n = l.name;
    const int64_t d = l.out;
    switch (l.kind) {
      case LayerKind::kDense:
        shapes[n + ".w"] = {l.in, l.out};
        if (l.bias) shapes[n + ".b"] = {l.out};
        break;
      case LayerKind::kAttention:
        shapes[n + ".wqkv"] = {d, 3, d};
        shapes[n + ".wo"] = {d, d};
        if (l.bias) {
          shapes[n + ".bqkv"] = {3, d};
          shapes[n + ".bo"] = {d};
        }
        break;
      case LayerKind::kLayerNorm:
        shapes[n + ".gamma"] = {d};
        shapes[n + ".beta"] = {d};
        break;
      case LayerKind::kEmbedding:
        shapes[n + ".table"] = {l.vocab, d};
        if (l.positions > 0) shapes[n + ".positions"] = {l.positions, d};
        break;
      case LayerKind::kElementwise:
        break;
    }
  }
  return shapes;
}

int64_t ModelGraph::dtype_bytes() const { return dtype == "bf16" ? 2 : 4; }

int ModelGraph::optimizer_state_factor() const {
  if (optimizer == "adam") return 2;
  if (optimizer == "momentum") return 1;
  return 0;
}

int64_t ModelGraph::num_parameters() const {
  int64_t n = 0;
  for (const ModelLayer& l : layers) n += l.num_parameters();
  return n;
}

ModelGraph ModelGraph::parse(const std::string& text, const std::string& origin) {
  // A key given twice in one object would silently take its last value; unknown keys are errors,
  // so a repeated one (a copy-paste slip) is too.
  const nlohmann::json j = parse_json_text(text, origin);
  const Reader r(origin);
  JsonObject(j, origin, "", "an object with \"layers\"");
  r.check_keys(j, "", {"name", "dtype", "optimizer", "batch", "seq_len", "layers", "description"});
  ModelGraph m;
  m.name = r.text(j, "", "name", {});
  m.dtype = j.contains("dtype") ? r.text(j, "", "dtype", {"f32", "bf16"}) : "f32";
  m.optimizer =
      j.contains("optimizer") ? r.text(j, "", "optimizer", {"sgd", "momentum", "adam"}) : "adam";
  m.batch = r.positive(j, "", "batch");
  m.seq_len = r.optional_positive(j, "", "seq_len", 1);
  if (const JsonField layers = r.field(j, "", "layers");
      !layers.json("a non-empty array of layers").is_array() || layers.json("").empty()) {
    layers.fail_expected("a non-empty array of layers");
  }
  if (j.at("layers").size() > kMaxLayers) {
    r.fail("layers", "has " + std::to_string(j.at("layers").size()) + " layers (expected at most " +
                         std::to_string(kMaxLayers) + ")");
  }
  std::set<std::string> names;
  int64_t prev_out = 0;
  double total_params = 0, total_activations = 0;
  for (size_t i = 0; i < j.at("layers").size(); ++i) {
    const nlohmann::json& lj = j.at("layers")[i];
    std::string path = "layers[" + std::to_string(i) + "]";
    JsonObject(lj, origin, path, "an object");
    ModelLayer l;
    l.name = r.text(lj, path, "name", {});
    path += " '" + l.name + "'";
    if (!names.insert(l.name).second) r.fail(path + ".name", "repeats an earlier layer's name");
    const std::string kind =
        r.text(lj, path, "kind",
               {"dense", "matmul", "elementwise", "layer_norm", "attention", "embedding"});
    if (kind == "dense" || kind == "matmul") {
      r.check_keys(lj, path, {"name", "kind", "in", "out", "bias"});
      l.kind = LayerKind::kDense;
      l.in = r.positive(lj, path, "in");
      l.out = r.positive(lj, path, "out");
      l.bias = r.boolean(lj, path, "bias", true);
    } else if (kind == "elementwise") {
      r.check_keys(lj, path,
                   {"name", "kind", "dim", "flops_per_element", "transcendentals_per_element"});
      l.kind = LayerKind::kElementwise;
      l.in = l.out = r.positive(lj, path, "dim");
      for (const char* key : {"flops_per_element", "transcendentals_per_element"}) {
        if (!lj.contains(key)) continue;
        (std::string(key) == "flops_per_element" ? l.flops_per_element
                                                 : l.transcendentals_per_element) =
            r.field(lj, path, key).number(0.0, 1e6);
      }
    } else if (kind == "layer_norm") {
      r.check_keys(lj, path, {"name", "kind", "dim"});
      l.kind = LayerKind::kLayerNorm;
      l.in = l.out = r.positive(lj, path, "dim");
    } else if (kind == "attention") {
      r.check_keys(lj, path, {"name", "kind", "d_model", "heads", "bias"});
      l.kind = LayerKind::kAttention;
      l.in = l.out = r.positive(lj, path, "d_model");
      l.heads = r.positive(lj, path, "heads");
      l.bias = r.boolean(lj, path, "bias", true);
      if (l.out % l.heads != 0) {
        r.fail(path + ".heads", std::to_string(l.heads) + " heads do not divide d_model " +
                                    std::to_string(l.out) + " (expected d_model % heads == 0)");
      }
    } else {
      r.check_keys(lj, path, {"name", "kind", "vocab", "d_model", "positions"});
      l.kind = LayerKind::kEmbedding;
      l.vocab = r.positive(lj, path, "vocab");
      l.out = r.positive(lj, path, "d_model");
      l.positions = lj.contains("positions") ? r.positive(lj, path, "positions") : 0;
      if (i != 0)
        r.fail(path + ".kind", "an embedding must be the first layer (it reads token ids)");
      if (l.positions != 0 && l.positions < m.seq_len) {
        r.fail(path + ".positions", std::to_string(l.positions) + " is less than seq_len " +
                                        std::to_string(m.seq_len) +
                                        " (expected one learned position per token)");
      }
    }
    if (i > 0 && l.in != prev_out) {
      r.fail(path + (l.kind == LayerKind::kDense ? ".in" : ".dim"),
             std::to_string(l.in) + " does not match the previous layer's output " +
                 std::to_string(prev_out) + " (the model is a chain)");
    }
    prev_out = l.out;
    // Regression: sizes up to 2^40 each multiplied past int64
    // (dense 2^40 x 2^40 reported 2^40 parameters, an embedding 0) and the planner's byte
    // counts saturated at 2^64. Totals are summed in double (exact far beyond 2^50).
    const double d_in = static_cast<double>(l.in), d_out = static_cast<double>(l.out);
    const double tokens = static_cast<double>(m.batch) * static_cast<double>(m.seq_len);
    double params = 0;
    switch (l.kind) {
      case LayerKind::kDense:
        params = d_in * d_out + (l.bias ? d_out : 0);
        break;
      case LayerKind::kLayerNorm:
        params = 2 * d_out;
        break;
      case LayerKind::kAttention:
        params = 4 * d_out * d_out + (l.bias ? 4 * d_out : 0);
        break;
      case LayerKind::kEmbedding:
        params = static_cast<double>(l.vocab + l.positions) * d_out;
        break;
      case LayerKind::kElementwise:
        break;
    }
    double activations = tokens * d_out;
    if (l.kind == LayerKind::kAttention) {  // scores: (batch, heads, seq, seq)
      activations += static_cast<double>(m.batch) * static_cast<double>(l.heads) *
                     static_cast<double>(m.seq_len) * static_cast<double>(m.seq_len);
    }
    total_params += params;
    total_activations += activations;
    if (total_params > kMaxModelElements || total_activations > kMaxModelElements) {
      r.fail(path, std::string("brings the model's ") +
                       (total_params > kMaxModelElements ? "parameters" : "activation elements") +
                       " to " + number_text(std::max(total_params, total_activations)) +
                       " (expected at most 2^50 of each, so that byte counts fit in 64 bits)");
    }
    m.layers.push_back(std::move(l));
  }
  return m;
}

nlohmann::json ModelGraph::to_json() const {
  nlohmann::json ls = nlohmann::json::array();
  for (const ModelLayer& l : layers) {
    nlohmann::json o = {{"name", l.name}, {"kind", layer_kind_name(l.kind)}};
    switch (l.kind) {
      case LayerKind::kDense:
        o["in"] = l.in;
        o["out"] = l.out;
        o["bias"] = l.bias;
        break;
      case LayerKind::kElementwise:
        o["dim"] = l.out;
        o["flops_per_element"] = l.flops_per_element;
        o["transcendentals_per_element"] = l.transcendentals_per_element;
        break;
      case LayerKind::kLayerNorm:
        o["dim"] = l.out;
        break;
      case LayerKind::kAttention:
        o["d_model"] = l.out;
        o["heads"] = l.heads;
        o["bias"] = l.bias;
        break;
      case LayerKind::kEmbedding:
        o["vocab"] = l.vocab;
        o["d_model"] = l.out;
        if (l.positions > 0) o["positions"] = l.positions;
        break;
    }
    ls.push_back(std::move(o));
  }
  return {{"name", name},   {"dtype", dtype},     {"optimizer", optimizer},
          {"batch", batch}, {"seq_len", seq_len}, {"layers", std::move(ls)}};
}

ModelGraph ModelGraph::load_json_file(const std::string& path) {
  // A 10 MB file of 200 000 layers took 370 MB and 5.6 s to plan; a model file is a few KB.
  return parse(read_bounded_text_file(path, kMaxModelFileBytes, "model file", "16 MiB"), path);
}

}  // namespace vtpu
