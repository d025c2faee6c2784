// The planner's plan files against the trainers' own layouts (train/transformer_model.h): the
// shipped transformer model file counts the trainer's parameters, and a tensor-parallel plan
// gives every parameter the trainer's shape and spec.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/planner/plan_test_support.h"
#include "vtpu/planner/auto_planner.h"
#include "vtpu/planner/model_graph.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/sharding/partition_spec.h"
#include "vtpu/train/transformer_model.h"

namespace vtpu {
namespace {

using namespace plan_test;

// Regression: examples/models/transformer.json left out the LM head's bias that the trainer has.
TEST(TrainPlanTest, ShippedTransformerFileCountsTheTrainersParameters) {
  const ModelGraph t = model_file("transformer.json");
  const TransformerLayout layout(TransformerConfig{}, 1);
  EXPECT_EQ(t.num_parameters(), layout.size());
  EXPECT_EQ(t.num_parameters(), 120704);
  EXPECT_TRUE(t.layers.back().bias) << t.layers.back().name;
}

// Regression: the emitted plan split attention's fused Q|K|V columns (P(None, 'model') on a
// (d, 3d) array), where the trainer holds (d, 3, d) with whole heads per core. Every attention and
// MLP parameter of a tensor-parallel plan has the trainer's shape and spec, as the trainer's own
// layout (TransformerLayout) gives them.
TEST(TrainPlanTest, EmittedShardingsAreTheTrainersLayout) {
  const ModelGraph t = model_file("transformer.json");
  const CostModel cost(HardwareProfile::get("v5e"));
  const Names axes = {"data", "model"};
  const std::vector<int64_t> shape = {1, 2};
  PlanConstraints only_tp = plan_constraints("transformer", shape, axes);
  const auto runs = only_tp.unsupported;
  only_tp.unsupported = [runs](const PlanCandidate& k) {
    return k.tensor_axes.empty() ? std::string("not tensor parallel") : runs(k);
  };
  const AutoShardingPlan plan = plan_auto_sharding(t, shape, axes, cost, 0, only_tp);
  ASSERT_GE(plan.winner, 0);
  const nlohmann::json j = plan.to_json();
  ASSERT_EQ(j["strategy"]["name"], "tp(model)") << j["strategy"];
  // The plan's parameter names for the trainer's (train/transformer_model.cc).
  const std::vector<std::pair<std::string, std::string>> names = {
      {"attn.wqkv", "attn.wqkv"}, {"attn.bqkv", "attn.bqkv"}, {"attn.wo", "attn.wo"},
      {"mlp.w1", "mlp.fc1.w"},    {"mlp.b1", "mlp.fc1.b"},    {"mlp.w2", "mlp.fc2.w"}};
  const TransformerLayout layout(TransformerConfig{}, 2);
  int checked = 0;
  for (const TransformerParam& p : layout.params()) {
    for (const auto& [trainer, planned] : names) {
      const std::string prefix = p.name.substr(0, p.name.find('.', 7) + 1);  // "blocks.<i>."
      if (!p.name.starts_with("blocks.") || p.name != prefix + trainer) continue;
      const std::string key = prefix + planned;
      SCOPED_TRACE(p.name + " -> " + key);
      ASSERT_TRUE(j["shardings"].contains(key));
      EXPECT_EQ(j["parameter_shapes"][key], nlohmann::json(p.global_shape));
      EXPECT_EQ(PartitionSpec::parse(j["shardings"][key].get<std::string>()).normalized(),
                p.spec.normalized());
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6 * 2);  // 6 parameters in each of the 2 blocks
  EXPECT_EQ(j["shardings"]["blocks.0.attn.wqkv"], "P(None, None, 'model')");
  EXPECT_EQ(j["parameter_shapes"]["blocks.0.attn.wqkv"], nlohmann::json({64, 3, 64}));
}

}  // namespace
}  // namespace vtpu
