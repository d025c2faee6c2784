#include "vtpu/planner/model_graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/temp_path.h"
#include "vtpu/common/error.h"

namespace vtpu {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::string& text) {
  try {
    ModelGraph::parse(text, "m.json");
  } catch (const InvalidArgumentError& e) {
    return e.message();
  }
  return "no error";
}

TEST(ModelGraphTest, ParsesAChainAndCountsParameters) {
  const ModelGraph m = ModelGraph::parse(R"({
    "name": "t", "optimizer": "adam", "batch": 4, "seq_len": 8,
    "layers": [
      {"name": "e", "kind": "embedding", "vocab": 10, "d_model": 8, "positions": 8},
      {"name": "ln", "kind": "layer_norm", "dim": 8},
      {"name": "a", "kind": "attention", "d_model": 8, "heads": 2},
      {"name": "f", "kind": "matmul", "in": 8, "out": 3, "bias": false},
      {"name": "g", "kind": "elementwise", "dim": 3, "flops_per_element": 4}]})");
  EXPECT_EQ(m.name, "t");
  EXPECT_EQ(m.dtype, "f32");
  EXPECT_EQ(m.optimizer_state_factor(), 2);
  ASSERT_EQ(m.layers.size(), 5u);
  EXPECT_EQ(m.layers[3].kind, LayerKind::kDense);
  // (10 + 8) * 8 + 2 * 8 + (4 * 64 + 4 * 8) + 8 * 3 = 144 + 16 + 288 + 24
  EXPECT_EQ(m.num_parameters(), 472);
}

// Hand-worked, for the chain above plus a dense with bias and an attention without: each layer's
// parameters by name with their global shapes (elements per dimension); elementwise has none.
TEST(ModelGraphTest, ParameterShapesNameEveryParameterWithItsGlobalShape) {
  const ModelGraph m = ModelGraph::parse(R"({
    "name": "t", "batch": 4, "seq_len": 8,
    "layers": [
      {"name": "e", "kind": "embedding", "vocab": 10, "d_model": 8, "positions": 8},
      {"name": "ln", "kind": "layer_norm", "dim": 8},
      {"name": "a", "kind": "attention", "d_model": 8, "heads": 2},
      {"name": "a2", "kind": "attention", "d_model": 8, "heads": 2, "bias": false},
      {"name": "d", "kind": "dense", "in": 8, "out": 5},
      {"name": "f", "kind": "matmul", "in": 5, "out": 3, "bias": false},
      {"name": "g", "kind": "elementwise", "dim": 3}]})");
  const std::map<std::string, std::vector<int64_t>> want = {
      {"e.table", {10, 8}},   {"e.positions", {8, 8}}, {"ln.gamma", {8}},  {"ln.beta", {8}},
      {"a.wqkv", {8, 3, 8}},  {"a.wo", {8, 8}},        {"a.bqkv", {3, 8}}, {"a.bo", {8}},
      {"a2.wqkv", {8, 3, 8}}, {"a2.wo", {8, 8}},       {"d.w", {8, 5}},    {"d.b", {5}},
      {"f.w", {5, 3}}};
  EXPECT_EQ(model_parameter_shapes(m), want);
  // 144 + 16 + 288 + 256 + 45 + 15 elements, as num_parameters counts them.
  EXPECT_EQ(m.num_parameters(), 764);
  ModelGraph no_positions = m;
  no_positions.layers.front().positions = 0;
  EXPECT_FALSE(model_parameter_shapes(no_positions).contains("e.positions"));
}

TEST(ModelGraphTest, ShippedModelsMatchThePlanFormatDefaults) {
  const ModelGraph t = ModelGraph::load_json_file(std::string(VTPU_SOURCE_DIR) +
                                                  "/examples/models/transformer.json");
  EXPECT_EQ(t.name, "transformer");
  EXPECT_EQ(t.batch, 16);
  EXPECT_EQ(t.seq_len, 64);
  EXPECT_EQ(t.optimizer, "adam");
  EXPECT_EQ(t.layers.front().vocab, 128);
  EXPECT_EQ(t.layers.front().out, 64);
  int blocks = 0;
  for (const ModelLayer& l : t.layers) {
    if (l.kind == LayerKind::kAttention) {
      ++blocks;
      EXPECT_EQ(l.heads, 4);
    }
    if (l.kind == LayerKind::kDense && l.name.find("fc1") != std::string::npos) {
      EXPECT_EQ(l.out, 256);
    }
  }
  EXPECT_EQ(blocks, 2);
  const ModelGraph m =
      ModelGraph::load_json_file(std::string(VTPU_SOURCE_DIR) + "/examples/models/mlp.json");
  // train/mlp_trainer.h: 64 -> 64 -> 10, batch 64, SGD; mlp_num_parameters(64) = 4810.
  EXPECT_EQ(m.num_parameters(), 64 * 64 + 64 + 64 * 10 + 10);
  EXPECT_EQ(m.batch, 64);
  EXPECT_EQ(m.optimizer, "sgd");
}

TEST(ModelGraphTest, InvalidJsonNamesTheLine) {
  EXPECT_THAT(error_of("{\n  \"name\": \"x\",\n  \"batch\": 4,,\n}"), HasSubstr("line 3"));
}

TEST(ModelGraphTest, BadFieldsNameTheirPath) {
  const std::string head = R"({"name": "x", "batch": 4, "layers": [)";
  EXPECT_THAT(error_of(head + R"({"name": "a", "kind": "dense", "in": 4, "out": -1}]})"),
              HasSubstr("layers[0] 'a'.out: expected an integer in 1..1099511627776, got -1"));
  EXPECT_THAT(error_of(head + R"({"name": "a", "kind": "conv", "in": 4}]})"),
              HasSubstr("layers[0] 'a'.kind: expected one of"));
  EXPECT_THAT(error_of(head + R"({"name": "a", "kind": "dense", "in": 4, "out": 4, "ot": 1}]})"),
              HasSubstr("layers[0] 'a'.ot: unknown key"));
  EXPECT_THAT(error_of(head + R"({"name": "a", "kind": "dense", "in": 4}]})"),
              HasSubstr("layers[0] 'a'.out: missing"));
  EXPECT_THAT(error_of(head + R"({"name": "a", "kind": "dense", "in": 4, "out": 4},
                                  {"name": "b", "kind": "dense", "in": 5, "out": 4}]})"),
              HasSubstr("layers[1] 'b'.in: 5 does not match the previous layer's output 4"));
  EXPECT_THAT(error_of(head + R"({"name": "a", "kind": "attention", "d_model": 6, "heads": 4}]})"),
              HasSubstr("heads"));
  EXPECT_THAT(error_of(head + R"({"name": "a", "kind": "layer_norm", "dim": 4},
                                  {"name": "a", "kind": "layer_norm", "dim": 4}]})"),
              HasSubstr("repeats"));
  EXPECT_THAT(error_of(R"({"name": "x", "batch": 0, "layers": []})"),
              HasSubstr("batch: expected an integer in 1..1099511627776, got 0"));
  EXPECT_THAT(error_of(R"({"name": "x", "batch": 2, "layers": []})"), HasSubstr("layers"));
  EXPECT_THAT(error_of(R"({"name": "x", "batch": 2, "optimizer": "lamb", "layers": []})"),
              HasSubstr("optimizer"));
  EXPECT_THAT(error_of("[1, 2]"), HasSubstr("expected an object"));
  // a number beyond a double's range is nlohmann's out_of_range, not a parse_error;
  // it was an "internal error" without the file's name.
  EXPECT_THAT(error_of(R"({"name": "x", "batch": 1e400, "layers": []})"),
              HasSubstr("m.json: not valid JSON: [json.exception.out_of_range.406] number overflow "
                        "parsing '1e400'"));
}

TEST(ModelGraphTest, MissingFileIsNotFound) {
  EXPECT_THROW(ModelGraph::load_json_file("/nonexistent/model.json"), NotFoundError);
}

// Every size may be up to 2^40, and their products overflowed int64 (a dense 2^40 x 2^40 counted
// 2^40 parameters, an embedding of 2^40 x 2^40 counted 0). A directory was "not valid JSON", a NUL
// in a name cut the printed name short, and repeated keys took the last value silently.
TEST(ModelGraphTest, RejectsOverflowingSizesDirectoriesControlCharactersAndRepeatedKeys) {
  const std::string head = R"({"name": "x", "batch": 1, "layers": [)";
  EXPECT_THAT(error_of(head + R"({"name": "a", "kind": "dense", "in": 4, "out": 1099511627777}]})"),
              HasSubstr("'a'.out: expected an integer in 1..1099511627776, got 1099511627777"));
  EXPECT_THAT(
      error_of(head +
               R"({"name": "fc", "kind": "dense", "in": 1099511627776, "out": 1099511627776}]})"),
      HasSubstr(
          "layers[0] 'fc': brings the model's parameters to 1.209e+24 (expected at most 2^50"));
  EXPECT_THAT(error_of(head + R"({"name": "e", "kind": "embedding", "vocab": 1099511627776,
                                  "d_model": 1099511627776}]})"),
              HasSubstr("'e': brings the model's parameters to"));
  EXPECT_THAT(
      error_of(head + R"({"name": "a", "kind": "attention", "d_model": 8589934592, "heads": 1}]})"),
      HasSubstr("'a': brings the model's parameters to 2.951e+20"));
  // Activations: 2^30 tokens x 2^21 features = 2^51 elements.
  EXPECT_THAT(error_of(R"({"name": "x", "batch": 1073741824, "layers": [
                          {"name": "r", "kind": "elementwise", "dim": 2097152}]})"),
              HasSubstr("'r': brings the model's activation elements to 2.252e+15"));
  // Exactly 2^50 parameters is still a model (dense 2^25 x 2^25 without bias).
  const ModelGraph big = ModelGraph::parse(
      head +
      R"({"name": "fc", "kind": "dense", "in": 33554432, "out": 33554432, "bias": false}]})");
  EXPECT_EQ(big.num_parameters(), int64_t{1} << 50);

  EXPECT_THAT(error_of(R"({"name": "m\u0001", "batch": 1, "layers": []})"),
              HasSubstr("name: expected a string without control characters, got \"m\\u0001\""));
  EXPECT_THAT(error_of(R"({"name": "x", "batch": 1, "batch": 2, "layers": []})"),
              HasSubstr("m.json: repeats the key 'batch' in one object"));
  EXPECT_THAT(error_of(head + R"({"name": "a", "kind": "layer_norm", "dim": 4, "dim": 8}]})"),
              HasSubstr("repeats the key 'dim'"));
  // At most 65536 layers, and a file of at most 16 MiB.
  std::string many = head;
  for (int i = 0; i <= 65536; ++i) {
    many += (i ? "," : "") + std::string(R"({"name": "r)") + std::to_string(i) +
            R"(", "kind": "elementwise", "dim": 4})";
  }
  EXPECT_THAT(error_of(many + "]}"),
              HasSubstr("layers: has 65537 layers (expected at most 65536)"));
  const std::string big_path = test_temp_path("vtpu_big_model.json");
  std::ofstream(big_path) << many << "]}" << std::string(16 << 20, ' ');
  try {
    ModelGraph::load_json_file(big_path);
    ADD_FAILURE() << "a file above 16 MiB was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.message(), HasSubstr("bytes (expected at most 16777216, 16 MiB)"));
  }
  std::filesystem::remove(big_path);
  try {
    ModelGraph::load_json_file(std::string(VTPU_SOURCE_DIR) + "/examples/models");
    ADD_FAILURE() << "a directory was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.message(), HasSubstr("is a directory"));
  }
}

}  // namespace
}  // namespace vtpu
