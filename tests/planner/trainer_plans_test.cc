// What `vtpu train` runs of a plan (planner/trainer_plans.h): each trainer's models, modes and
// layouts, and the planner constraints that keep `vtpu plan` to those strategies.
#include "vtpu/planner/trainer_plans.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/planner/plan_test_support.h"
#include "vtpu/common/error.h"
#include "vtpu/planner/model_graph.h"
#include "vtpu/planner/plan_file.h"
#include "vtpu/runtime/hardware_profile.h"

namespace vtpu {
namespace {

using namespace plan_test;

TEST(TrainPlanTest, WrongModelNamesBoth) {
  const TrainPlan p = parse_train_plan(good_plan(), "p.json");
  expect_error<InvalidArgumentError>(
      [&] { require_plan_model(p, "mlp", "vtpu train mlp"); },
      {"plan file 'p.json' is for model 'transformer' (expected 'mlp' for vtpu train mlp)"});
  require_plan_model(p, "transformer", "vtpu train transformer");  // no error
}

// Regression: the trainers' --cores check names the plan's file and
// mesh (train transformer named the flattened data x tensor grid, "8x1" for dp(data,model)).
TEST(TrainPlanTest, CoresMustBeThePlansCores) {
  const TrainPlan p = parse_train_plan(good_plan(), "p.json");  // data=2 model=4
  check_plan_cores(p, std::nullopt);                            // no error
  check_plan_cores(p, 8);
  expect_error<InvalidArgumentError>(
      [&] { check_plan_cores(p, 4); },
      {"--cores 4 but plan 'p.json' has mesh data=2 model=4 (8 cores; expected --cores 8, or "
       "--cores left out)"});
}

TEST(TrainPlanTest, DataTensorLayoutFlattensTheRoles) {
  // dp(data,model) on 2x4: one data group of all 8 cores, rank = 4 d + m (P(('data', 'model'))).
  nlohmann::json j = good_plan();
  j["strategy"] = {{"name", "dp(data,model)"}, {"data", {"data", "model"}}};
  DataTensorLayout l = plan_data_tensor_layout(parse_train_plan(j, "t"), "vtpu train transformer");
  EXPECT_EQ(l.data, 8);
  EXPECT_EQ(l.tensor, 1);
  EXPECT_EQ(l.data_groups, (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  // dp(model)+tp(data): 4 data shards along 'model', 2 tensor shards along 'data'.
  j["strategy"] = {{"name", "dp(model)+tp(data)"}, {"data", "model"}, {"tensor", "data"}};
  l = plan_data_tensor_layout(parse_train_plan(j, "t"), "vtpu train transformer");
  EXPECT_EQ(l.data, 4);
  EXPECT_EQ(l.tensor, 2);
  EXPECT_EQ(l.tensor_groups, (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(l.data_groups, (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(l.tensor_rank[5], 1);
  EXPECT_EQ(l.data_rank[5], 1);
  // FSDP has no data x tensor layout; a layer sharded otherwise than the trainer does fails.
  j["strategy"] = {{"name", "fsdp(data,model)"}, {"fsdp", {"data", "model"}}};
  expect_error<UnimplementedError>(
      [&] { plan_data_tensor_layout(parse_train_plan(j, "t"), "vtpu train transformer"); },
      {"vtpu train transformer cannot run strategy 'fsdp(data,model)'", "FSDP"});
  j = good_plan();
  j["layers"] = {{{"name", "blocks.0.attn"}, {"sharding", "replicated"}}};
  expect_error<UnimplementedError>(
      [&] { plan_data_tensor_layout(parse_train_plan(j, "t"), "vtpu train transformer"); },
      {"layer 'blocks.0.attn' is 'replicated'", "shards it 'heads'"});
}

TEST(TrainPlanTest, MlpModes) {
  const std::string mesh = R"j({"axes": ["data", "model"], "shape": [2, 4]})j";
  auto mode = [&](const std::string& name, const std::string& strategy, bool allow_tensor) {
    return mlp_plan_mode(load_train_plan(write_plan(name, plan_text(mesh, strategy))),
                         allow_tensor);
  };
  EXPECT_EQ(mode("mlp_dp.json", R"j({"data": ["data", "model"]})j", false),
            MlpPlanMode::kDataParallel);
  EXPECT_EQ(mode("mlp_fsdp.json", R"j({"fsdp": ["data", "model"]})j", false), MlpPlanMode::kFsdp);
  EXPECT_EQ(mode("mlp_tp.json", R"j({"data": "data", "tensor": "model"})j", true),
            MlpPlanMode::kTensorParallel);
  EXPECT_EQ(mode("mlp_tp8.json", R"j({"tensor": ["data", "model"]})j", true),
            MlpPlanMode::kTensorParallel);
  // train fsdp runs no tensor parallelism, and points to train mlp.
  expect_error<UnimplementedError>(
      [&] {
        mode("mlp_tp2.json",
             R"j({"name": "dp(data)+tp(model)", "data": "data", "tensor": "model"})j", false);
      },
      {"train fsdp cannot run strategy 'dp(data)+tp(model)' (data: ['data'], tensor: ['model'], "
       "fsdp: null)",
       "vtpu train mlp --plan"});
  expect_error<UnimplementedError>(
      [&] {
        mode("mlp_hsdp.json",
             R"j({"name": "dp(data)+fsdp(model)", "data": "data", "fsdp": "model"})j", true);
      },
      {"hybrid sharding"});
  expect_error<UnimplementedError>(
      [&] { mode("mlp_fsdp_tp.json", R"j({"fsdp": "data", "tensor": "model"})j", true); },
      {"FSDP with tensor parallelism"});
  expect_error<InvalidArgumentError>(
      [&] { mlp_plan_mode(parse_train_plan(good_plan(), "t.json"), true); },
      {"is for model 'transformer' (expected 'mlp'"});
}

// Regression: `train mlp --estimate-from` of a tensor-parallel plan said
// "train fsdp cannot run strategy ...". The error names the command the user ran, what the flag
// takes and the command that runs the strategy.
TEST(TrainPlanTest, EstimateFromTakesDataParallelAndOneCorePlans) {
  const std::string mesh = R"j({"axes": ["data", "model"], "shape": [2, 4]})j";
  auto load = [&](const std::string& name, const std::string& m, const std::string& strategy) {
    return load_train_plan(write_plan(name, plan_text(m, strategy)));
  };
  EXPECT_NO_THROW(check_mlp_estimate_plan(
      load("est_dp.json", mesh, R"j({"name": "dp(data,model)", "data": ["data", "model"]})j")));
  // One core: any strategy is what train mlp --cores 1 runs.
  EXPECT_NO_THROW(
      check_mlp_estimate_plan(load("est_one.json", R"j({"axes": ["model"], "shape": [1]})j",
                                   R"j({"name": "tp(model)", "tensor": "model"})j")));
  const TrainPlan tp =
      load("est_tp.json", mesh,
           R"j({"name": "dp(data)+tp(model)", "data": "data", "tensor": "model"})j");
  expect_error<InvalidArgumentError>(
      [&] { check_mlp_estimate_plan(tp); },
      {"train mlp --estimate-from " + tp.path + ": --estimate-from takes a data-parallel plan",
       "or a 1-core plan; strategy 'dp(data)+tp(model)' (data: ['data'], tensor: ['model'], fsdp: "
       "null) is tensor parallel: run it with `vtpu train mlp --plan " +
           tp.path + "`"});
  try {
    check_mlp_estimate_plan(tp);
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(std::string(e.what()).find("fsdp cannot"), std::string::npos) << e.what();
  }
  const TrainPlan fsdp =
      load("est_fsdp.json", mesh, R"j({"name": "fsdp(data,model)", "fsdp": ["data", "model"]})j");
  expect_error<InvalidArgumentError>(
      [&] { check_mlp_estimate_plan(fsdp); },
      {"train mlp --estimate-from " + fsdp.path, "strategy 'fsdp(data,model)'",
       "is FSDP: run it with `vtpu train fsdp --plan " + fsdp.path + "`"});
  // A strategy no trainer runs is refused by mlp_plan_mode, under train mlp's name.
  expect_error<UnimplementedError>(
      [&] {
        check_mlp_estimate_plan(
            load("est_hsdp.json", mesh,
                 R"j({"name": "dp(data)+fsdp(model)", "data": "data", "fsdp": "model"})j"));
      },
      {"train mlp cannot run strategy 'dp(data)+fsdp(model)'", "hybrid sharding"});
  expect_error<InvalidArgumentError>(
      [&] { check_mlp_estimate_plan(parse_train_plan(good_plan(), "t.json")); },
      {"is for model 'transformer' (expected 'mlp' for vtpu train mlp"});
}

TEST(TrainPlanTest, WhatVtpuTrainRuns) {
  const std::vector<int64_t> shape = {2, 4};
  const Names axes = {"data", "model"};
  auto why = [&](const std::string& model, Names d, Names t, Names f) {
    return plan_unsupported_reason(model, shape, axes, d, t, f);
  };
  EXPECT_EQ(why("mlp", {"data", "model"}, {}, {}), "");
  EXPECT_EQ(why("mlp", {}, {"data", "model"}, {}), "");
  EXPECT_EQ(why("mlp", {"model"}, {"data"}, {}), "");
  EXPECT_EQ(why("mlp", {}, {}, {"data", "model"}), "");
  EXPECT_NE(why("mlp", {"data"}, {}, {"model"}).find("HSDP"), std::string::npos);
  EXPECT_NE(why("mlp", {}, {"model"}, {"data"}).find("FSDP with tensor"), std::string::npos);
  EXPECT_EQ(why("transformer", {"data"}, {"model"}, {}), "");
  EXPECT_NE(why("transformer", {}, {}, {"data", "model"}).find("not implemented for transformer"),
            std::string::npos);
  EXPECT_NE(why("gpt", {"data", "model"}, {}, {}).find("no vtpu train command runs model 'gpt'"),
            std::string::npos);
  EXPECT_NE(why("mlp", {"data"}, {}, {}).find("'model' would be idle"), std::string::npos);
  EXPECT_EQ(plan_unsupported_reason("mlp", {1, 1}, axes, {}, {}, {}), "");  // one core
  // Megatron's layouts.
  EXPECT_EQ(required_tensor_sharding("mlp", "fc1"), "column");
  EXPECT_EQ(required_tensor_sharding("mlp", "relu"), "sharded");
  EXPECT_EQ(required_tensor_sharding("mlp", "fc2"), "row");
  EXPECT_EQ(required_tensor_sharding("transformer", "blocks.1.attn"), "heads");
  EXPECT_EQ(required_tensor_sharding("transformer", "blocks.1.mlp.fc1"), "column");
  EXPECT_EQ(required_tensor_sharding("transformer", "blocks.1.mlp.gelu"), "sharded");
  EXPECT_EQ(required_tensor_sharding("transformer", "blocks.1.mlp.fc2"), "row");
  EXPECT_EQ(required_tensor_sharding("transformer", "head"), "replicated");
  EXPECT_EQ(required_tensor_sharding("transformer", "embed"), "replicated");
  EXPECT_EQ(required_tensor_sharding("gpt", "fc1"), "");
}

// The planner within what vtpu train runs: on every mesh the winner is runnable, and its layers
// are the trainer's. The 1x8 transformer cannot split 4 heads 8 ways, so tp(model) cannot run.
TEST(TrainPlanTest, PlannerPicksOnlyRunnableStrategies) {
  for (const char* file : {"mlp.json", "transformer.json"}) {
    const ModelGraph m = model_file(file);
    for (const auto& shape : std::vector<std::vector<int64_t>>{{1, 8}, {2, 4}, {8, 1}, {1, 2}}) {
      const Names axes = {"data", "model"};
      for (const char* hw : {"v5e", "this_machine"}) {
        const CostModel cost(HardwareProfile::get(hw));
        const AutoShardingPlan plan =
            plan_auto_sharding(m, shape, axes, cost, 0, plan_constraints(m.name, shape, axes));
        ASSERT_GE(plan.winner, 0) << file << " " << hw;
        const PlanCandidate& w = plan.candidates[static_cast<size_t>(plan.winner)];
        EXPECT_EQ(
            plan_unsupported_reason(m.name, shape, axes, w.data_axes, w.tensor_axes, w.fsdp_axes),
            "")
            << file << " " << w.name;
        if (!w.tensor_axes.empty()) {
          for (const LayerPlan& l : w.layers) {
            EXPECT_EQ(l.choice, required_tensor_sharding(m.name, l.layer))
                << file << " " << l.layer;
          }
        }
        // The emitted plan reads back and maps onto a trainer.
        const TrainPlan p = parse_train_plan(plan.to_json(), "emitted");
        if (m.name == "mlp") {
          mlp_plan_mode(p, true);
        } else {
          plan_data_tensor_layout(p, "vtpu train transformer");
        }
        for (const PlanCandidate& c : plan.candidates) {
          if (c.feasible && c.name.starts_with("fsdp") && m.name == "transformer") {
            EXPECT_NE(c.why_lost.find("cannot run: vtpu train transformer: FSDP"),
                      std::string::npos)
                << c.why_lost;
          }
        }
      }
    }
  }
  const ModelGraph t = model_file("transformer.json");
  const CostModel cost(HardwareProfile::get("v5e"));
  // Every feasible candidate, pinned (vtpu plan --strategy --any-strategy) and emitted, reads
  // back: its shardings are valid on the mesh, its strategy is the pinned one, and the plan
  // records the winner it replaced.
  for (const char* file : {"mlp.json", "transformer.json"}) {
    const ModelGraph m = model_file(file);
    AutoShardingPlan any = plan_auto_sharding(m, {2, 4}, {"data", "model"}, cost);
    const std::string winner = any.candidates[static_cast<size_t>(any.winner)].name;
    int pinned = 0;
    for (const PlanCandidate& c : any.candidates) {
      if (!c.feasible) continue;
      any.choose(c.name, /*allow_over_hbm=*/true);
      const nlohmann::json j = any.to_json();
      const TrainPlan p = parse_train_plan(j, "pinned");
      EXPECT_EQ(p.strategy_name, c.name);
      // Round trip of the roles: written as lists (null for none), read back as written.
      for (const char* role : {"data", "tensor", "fsdp"}) {
        EXPECT_TRUE(j["strategy"][role].is_null() || j["strategy"][role].is_array())
            << c.name << " " << role << ": " << j["strategy"][role];
      }
      EXPECT_EQ(p.data, c.data_axes) << c.name;
      EXPECT_EQ(p.tensor, c.tensor_axes) << c.name;
      EXPECT_EQ(p.fsdp, c.fsdp_axes) << c.name;
      EXPECT_EQ(j.contains("pinned"), c.name != winner) << c.name;
      if (c.name != winner) {
        EXPECT_EQ(j["pinned"]["winner"], winner);
      }
      ++pinned;
    }
    EXPECT_EQ(pinned, 9) << file;  // 3^2 roles on 2x4, all feasible at these batches
  }
  const AutoShardingPlan plan =
      plan_auto_sharding(t, {1, 8}, {"data", "model"}, cost, 0,
                         plan_constraints("transformer", {1, 8}, {"data", "model"}));
  bool seen = false;
  for (const PlanCandidate& c : plan.candidates) {
    if (c.name != "tp(model)") continue;
    seen = true;
    EXPECT_FALSE(c.feasible);
    EXPECT_NE(c.why_lost.find("layer 'blocks.0.attn' (attention, d_model 64, heads 4) must be "
                              "split 'heads' (vtpu train transformer runs it so), which does not "
                              "divide over 8 tensor cores"),
              std::string::npos)
        << c.why_lost;
  }
  EXPECT_TRUE(seen);
}

// Regression: `train mlp|transformer --plan` ran the trainer's default
// sizes (hidden 64; d_model 64, 2 blocks) whatever the plan was made for, checked only layer
// names, and judged the plan's estimate against the other model. An emitted plan now carries its
// model_graph; the sizes read back are the run's defaults, a contradicting flag is refused, and a
// model_graph that is not the trainer's architecture (no relu, no blocks) is refused by layer.
TEST(TrainPlanTest, PlanModelSizesAreTheRunsAndOtherArchitecturesAreRefused) {
  ModelGraph mlp = model_file("mlp.json");
  mlp.layers[0].out = mlp.layers[1].in = mlp.layers[1].out = mlp.layers[2].in = 128;
  const CostModel cost(HardwareProfile::get("v5e"));
  const Names axes = {"data", "model"};
  const nlohmann::json emitted =
      plan_auto_sharding(mlp, {1, 2}, axes, cost, 0, plan_constraints("mlp", {1, 2}, axes))
          .to_json();
  ASSERT_TRUE(emitted.contains("model_graph")) << emitted.dump();
  EXPECT_EQ(emitted["model_graph"]["layers"][0]["out"], 128);
  const TrainPlan p = parse_train_plan(emitted, "p.json");
  ASSERT_TRUE(p.model_graph.has_value());
  EXPECT_EQ(p.model_graph->num_parameters(), mlp.num_parameters());
  const std::optional<MlpPlanModel> m = mlp_plan_model(p);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->hidden, 128);
  EXPECT_EQ(m->optimizer, "sgd");
  EXPECT_EQ(plan_setting(p, "hidden", "fc1.out", "--hidden", 128, std::nullopt), 128);
  EXPECT_EQ(plan_setting(p, "hidden", "fc1.out", "--hidden", 128, 128), 128);
  expect_error<InvalidArgumentError>(
      [&] { plan_setting(p, "hidden", "fc1.out", "--hidden", 128, 64); },
      {"plan file 'p.json' is for hidden 128 (fc1.out), --hidden is 64 (expected 128, or "
       "--hidden left out)"});
  expect_error<InvalidArgumentError>(
      [&] {
        plan_setting(p, "optimizer", "model_graph.optimizer", "--optimizer", "sgd",
                     std::string("adam"));
      },
      {"is for optimizer sgd (model_graph.optimizer), --optimizer is adam"});
  // A plan without a model_graph (hand-written) keeps the trainer's sizes.
  EXPECT_FALSE(
      mlp_plan_model(parse_train_plan(nlohmann::json::parse(plan_text(
                                          R"({"axes": ["x"], "shape": [2]})", R"({"data": "x"})")),
                                      "h.json"))
          .has_value());

  // Not the MLP: relu missing, another input width, momentum, bf16.
  auto with_graph = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = emitted;
    edit(j["model_graph"]);
    return parse_train_plan(j, "p.json");
  };
  expect_error<InvalidArgumentError>(
      [&] {
        mlp_plan_model(with_graph([](nlohmann::json& g) {
          g["layers"].erase(1);
          g["layers"][1]["in"] = 128;
        }));
      },
      {"plan file 'p.json': model_graph has layers[1] 'fc2' dense 128 -> 10 (expected 'relu' "
       "elementwise dim 128), which vtpu train mlp does not run"});
  expect_error<InvalidArgumentError>(
      [&] { mlp_plan_model(with_graph([](nlohmann::json& g) { g["layers"][0]["in"] = 32; })); },
      {"layers[0] 'fc1' dense 32 -> 128 (expected 'fc1' dense 64 -> 128)"});
  expect_error<InvalidArgumentError>(
      [&] { mlp_plan_model(with_graph([](nlohmann::json& g) { g["optimizer"] = "momentum"; })); },
      {"optimizer momentum (expected sgd or adam)"});
  expect_error<InvalidArgumentError>(
      [&] { mlp_plan_model(with_graph([](nlohmann::json& g) { g["dtype"] = "bf16"; })); },
      {"dtype bf16 (expected f32)"});
  expect_error<InvalidArgumentError>(
      [&] { with_graph([](nlohmann::json& g) { g["name"] = "other"; }); },
      {"model_graph is model 'other' but model is 'mlp'"});

  // The transformer: the shipped file reads back as the trainer's defaults; a file with only
  // embed and head (newuser8's d13.json) is refused.
  const ModelGraph t = model_file("transformer.json");
  const nlohmann::json te =
      plan_auto_sharding(t, {2, 4}, axes, cost, 0, plan_constraints("transformer", {2, 4}, axes))
          .to_json();
  const std::optional<TransformerPlanModel> tm =
      transformer_plan_model(parse_train_plan(te, "t.json"));
  ASSERT_TRUE(tm.has_value());
  // The file's sizes (tests/train/trainer_plan_layout_test.cc checks they are the trainer's).
  int64_t blocks = 0;
  for (const ModelLayer& l : t.layers) {
    if (l.kind != LayerKind::kAttention) continue;
    ++blocks;
    EXPECT_EQ(tm->heads, l.heads);
  }
  EXPECT_EQ(tm->vocab, t.layers.front().vocab);
  EXPECT_EQ(tm->context, t.seq_len);
  EXPECT_EQ(tm->d_model, t.layers.front().out);
  EXPECT_EQ(tm->layers, blocks);
  for (const ModelLayer& l : t.layers) {
    if (l.name == "blocks.0.mlp.fc1") {
      EXPECT_EQ(tm->hidden, l.out);
    }
  }
  nlohmann::json small = te;
  nlohmann::json& layers = small["model_graph"]["layers"];
  layers = nlohmann::json::array({layers[0], layers[layers.size() - 1]});
  layers[0]["d_model"] = 32;
  layers[1]["in"] = 32;
  expect_error<InvalidArgumentError>(
      [&] { transformer_plan_model(parse_train_plan(small, "t.json")); },
      {"model_graph has layers[1] 'head' dense 32 -> 128 (expected 'blocks.0.ln1' layer_norm dim "
       "32), which vtpu train transformer does not run"});
}

// An mlp plan as `vtpu plan examples/models/mlp.json --mesh 2x4 --emit` writes it for `roles`,
// with `layers` (name, sharding) and parameter_shapes for hidden 64.
nlohmann::json mlp_plan(const nlohmann::json& roles,
                        const std::vector<std::pair<std::string, std::string>>& layers) {
  nlohmann::json j;
  j["format"] = "vtpu-plan";
  j["version"] = 1;
  j["model"] = "mlp";
  j["mesh"] = {{"axes", {"data", "model"}}, {"shape", {2, 4}}};
  j["strategy"] = roles;
  j["layers"] = nlohmann::json::array();
  for (const auto& [name, sharding] : layers)
    j["layers"].push_back({{"name", name}, {"sharding", sharding}});
  j["parameter_shapes"] = {
      {"fc1.w", {64, 64}}, {"fc1.b", {64}}, {"fc2.w", {64, 10}}, {"fc2.b", {10}}};
  return j;
}

const nlohmann::json kDp = {{"data", {"data", "model"}}};
const nlohmann::json kFsdp = {{"fsdp", {"data", "model"}}};
const nlohmann::json kTp = {{"data", "data"}, {"tensor", "model"}};
const std::vector<std::pair<std::string, std::string>> kReplicated = {
    {"fc1", "replicated"}, {"relu", "replicated"}, {"fc2", "replicated"}};

void check_mlp(const nlohmann::json& j, int64_t hidden = 64) {
  check_plan_layout(parse_train_plan(j, "p.json"), mlp_model_graph(hidden), "vtpu train mlp");
}

// What `vtpu plan` emits passes: every layer replicated under data parallelism and FSDP, the
// Megatron layout under tensor parallelism; and a plan without layers or parameter_shapes (a
// hand-written one) has nothing to check.
TEST(PlanLayoutTest, ThePlannersLayoutsAndPlansWithoutThemPass) {
  EXPECT_NO_THROW(check_mlp(mlp_plan(kDp, kReplicated)));
  EXPECT_NO_THROW(check_mlp(mlp_plan(kFsdp, kReplicated)));
  EXPECT_NO_THROW(
      check_mlp(mlp_plan(kTp, {{"fc1", "column"}, {"relu", "sharded"}, {"fc2", "row"}})));
  nlohmann::json bare = mlp_plan(kDp, {});
  bare.erase("layers");
  bare.erase("parameter_shapes");
  EXPECT_NO_THROW(check_mlp(bare));
  EXPECT_NO_THROW(check_mlp(bare, 128));
}

// Regression: a plan whose layers omitted, reordered or renamed the
// model's layers ran as if they were there.
TEST(PlanLayoutTest, LayersMustBeTheModelsInOrder) {
  const std::string runs = "vtpu train mlp runs the layers fc1, relu, fc2, in this order)";
  expect_error<InvalidArgumentError>(
      [&] {
        check_mlp(mlp_plan(kDp, {{"fc1", "replicated"}, {"relu", "replicated"}}));
      },
      {"plan file 'p.json': layers ends after 2 entries (expected layers[2] 'fc2': " + runs});
  expect_error<InvalidArgumentError>(
      [&] {
        check_mlp(
            mlp_plan(kDp, {{"fc2", "replicated"}, {"relu", "replicated"}, {"fc1", "replicated"}}));
      },
      {"plan file 'p.json': layers[0] is 'fc2' (expected 'fc1': " + runs});
  expect_error<InvalidArgumentError>(
      [&] {
        check_mlp(
            mlp_plan(kDp, {{"fc1", "replicated"}, {"act", "replicated"}, {"fc2", "replicated"}}));
      },
      {"plan file 'p.json': layers[1] is 'act' (expected 'relu': " + runs});
  auto four = kReplicated;
  four.emplace_back("fc2", "replicated");
  expect_error<InvalidArgumentError>(
      [&] { check_mlp(mlp_plan(kDp, four)); },
      {"layers[3] is 'fc2', after the model's last layer 'fc2' (expected 3 entries: " + runs});
  expect_error<InvalidArgumentError>([&] { check_mlp(mlp_plan(kDp, {})); },
                                     {"layers ends after 0 entries (expected layers[0] 'fc1'"});
}

// Regression: an FSDP or data-parallel plan whose layers said fc1
// 'column' and fc2 'row' (a tensor-parallel plan with its strategy edited) ran.
TEST(PlanLayoutTest, LayerShardingsMustMatchTheStrategy) {
  const std::vector<std::pair<std::string, std::string>> megatron = {
      {"fc1", "column"}, {"relu", "sharded"}, {"fc2", "row"}};
  expect_error<InvalidArgumentError>(
      [&] { check_mlp(mlp_plan(kFsdp, megatron)); },
      {"plan file 'p.json': layers[0] 'fc1' is 'column' (expected 'replicated': strategy "
       "'(unnamed)' (data: null, tensor: null, fsdp: ['data', 'model']) has no tensor axes, so "
       "vtpu train mlp splits no layer; FSDP's parameter shards are in shardings)"});
  expect_error<InvalidArgumentError>([&] { check_mlp(mlp_plan(kDp, megatron)); },
                                     {"layers[0] 'fc1' is 'column' (expected 'replicated'"});
  expect_error<InvalidArgumentError>(
      [&] {
        check_mlp(mlp_plan(kTp, {{"fc1", "column"}, {"relu", "replicated"}, {"fc2", "row"}}));
      },
      {"layers[1] 'relu' is 'replicated' (expected 'sharded': vtpu train mlp shards it so under "
       "tensor parallelism (Megatron-LM's layout))"});
}

// Regression: model_graph hidden 128 with fc1.w [64, 64] ran
// 64 -> 128 -> 10; parameter_shapes was never compared with the model.
TEST(PlanLayoutTest, ParameterShapesMustBeTheModels) {
  expect_error<InvalidArgumentError>(
      [&] { check_mlp(mlp_plan(kDp, kReplicated), 128); },
      {"plan file 'p.json': parameter_shapes['fc1.b'] is [64] (expected [128], its shape in the "
       "model vtpu train mlp runs)"});
  nlohmann::json j = mlp_plan(kDp, kReplicated);
  j["parameter_shapes"]["fc1.w"] = {64, 32};
  expect_error<InvalidArgumentError>([&] { check_mlp(j); },
                                     {"parameter_shapes['fc1.w'] is [64, 32] (expected [64, 64]"});
  j = mlp_plan(kDp, kReplicated);
  j["parameter_shapes"].erase("fc2.b");
  expect_error<InvalidArgumentError>(
      [&] { check_mlp(j); },
      {"parameter_shapes has no 'fc2.b' (expected [10], its shape in the model vtpu train mlp "
       "runs)"});
  j = mlp_plan(kDp, kReplicated);
  j["parameter_shapes"]["fc3.w"] = {10, 10};
  expect_error<InvalidArgumentError>(
      [&] { check_mlp(j); },
      {"parameter_shapes names 'fc3.w', which the model vtpu train mlp runs does not have "
       "(expected fc1.b, fc1.w, fc2.b, fc2.w)"});
  // The reader checks the form first.
  for (const nlohmann::json& bad :
       {nlohmann::json(7), nlohmann::json({{"fc1.w", "64x64"}}),
        nlohmann::json({{"fc1.w", {64, 0}}}), nlohmann::json({{"fc1.w", nlohmann::json::array()}}),
        nlohmann::json({{"fc1.w", {64.5}}})}) {
    j = mlp_plan(kDp, kReplicated);
    j["parameter_shapes"] = bad;
    expect_error<InvalidArgumentError>([&] { parse_train_plan(j, "p.json"); },
                                       {"plan file 'p.json': parameter_shapes"});
  }
}

// The trainers' models as graphs have the planner's parameter shapes: the shipped model files,
// planned, give the same parameter_shapes as model_parameter_shapes of the trainer's graph, and
// the same layer names in the same order.
TEST(PlanLayoutTest, TrainerGraphsAreTheShippedModels) {
  for (const char* file : {"mlp.json", "transformer.json"}) {
    SCOPED_TRACE(file);
    const ModelGraph shipped =
        ModelGraph::load_json_file(std::string(VTPU_SOURCE_DIR) + "/examples/models/" + file);
    const ModelGraph trainer =
        shipped.name == "mlp"
            ? mlp_model_graph(64)
            : transformer_model_graph(TransformerPlanModel{128, 64, 64, 4, 2, 256});
    ASSERT_EQ(trainer.layers.size(), shipped.layers.size());
    for (size_t i = 0; i < trainer.layers.size(); ++i) {
      EXPECT_EQ(trainer.layers[i].name, shipped.layers[i].name) << i;
    }
    EXPECT_EQ(model_parameter_shapes(trainer), model_parameter_shapes(shipped));
    const std::vector<int64_t> shape = {2, 4};
    const std::vector<std::string> axes = {"data", "model"};
    const CostModel cost(HardwareProfile::get("v5e"));
    const AutoShardingPlan plan = plan_auto_sharding(shipped, shape, axes, cost, 0,
                                                     plan_constraints(shipped.name, shape, axes));
    ASSERT_GE(plan.winner, 0);
    const nlohmann::json emitted = plan.to_json()["parameter_shapes"];
    nlohmann::json mine = nlohmann::json::object();
    for (const auto& [name, s] : model_parameter_shapes(trainer)) mine[name] = s;
    EXPECT_EQ(emitted, mine);
  }
}

}  // namespace
}  // namespace vtpu
