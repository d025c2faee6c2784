// The one plan reader of `vtpu train ... --plan` (planner/plan_file.h): what it reads, the clear
// errors for bad files, what each trainer can run, and the planner constraints that keep
// `vtpu plan` to those strategies.
#include "vtpu/planner/plan_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/train/transformer_model.h"
#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/planner/model_graph.h"
#include "tests/temp_path.h"

namespace vtpu {
namespace {

using Groups = std::vector<std::vector<int>>;
using Names = std::vector<std::string>;

std::string write_plan(const std::string& name, const std::string& text) {
  const std::string path = test_temp_path(name);
  std::ofstream(path) << text;
  return path;
}

std::string plan_text(const std::string& mesh, const std::string& strategy) {
  return R"j({"format": "vtpu-plan", "version": 1, "model": "mlp", "mesh": )j" + mesh +
         R"j(, "strategy": )j" + strategy + "}";
}

nlohmann::json good_plan() {
  nlohmann::json j;
  j["format"] = "vtpu-plan";
  j["version"] = 1;
  j["model"] = "transformer";
  j["mesh"] = {{"axes", {"data", "model"}}, {"shape", {2, 4}}};
  j["strategy"] = {
      {"name", "dp(data)+tp(model)"}, {"data", "data"}, {"tensor", "model"}, {"fsdp", nullptr}};
  j["estimate"] = {{"step_seconds", 0.01}, {"hbm_bytes_per_core", 1234}, {"batch", 16}};
  return j;
}

template <typename E, typename F>
void expect_error(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    FAIL() << "no error";
  } catch (const E& e) {
    for (const std::string& n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "expected '" << n << "' in: " << e.what();
    }
  }
}

TEST(TrainPlanTest, ReadsMeshStrategyLayersAndEstimate) {
  nlohmann::json j = good_plan();
  j["layers"] = {{{"name", "embed"}, {"sharding", "replicated"}},
                 {{"name", "blocks.0.attn"}, {"sharding", "heads"}}};
  const TrainPlan p = parse_train_plan(j, "t.json");
  EXPECT_EQ(p.path, "t.json");
  EXPECT_EQ(p.model, "transformer");
  EXPECT_EQ(p.num_cores(), 8);
  EXPECT_EQ(p.data, Names{"data"});
  EXPECT_EQ(p.tensor, Names{"model"});
  EXPECT_TRUE(p.fsdp.empty());
  ASSERT_TRUE(p.estimate.has_value());
  EXPECT_EQ(p.estimate->step_seconds, 0.01);
  EXPECT_EQ(p.estimate->hbm_bytes_per_core, 1234u);
  EXPECT_EQ(p.estimate->batch, 16);
  EXPECT_EQ(p.estimated_batch(), 16);
  EXPECT_EQ(p.estimate->source, "t.json");
  EXPECT_EQ(p.estimate->strategy, "dp(data)+tp(model)");
  ASSERT_EQ(p.layers.size(), 2u);
  EXPECT_EQ(p.layers[1].second, "heads");
  EXPECT_EQ(p.describe_mesh(), "data=2 model=4");
  EXPECT_EQ(p.describe_strategy(),
            "'dp(data)+tp(model)' (data: ['data'], tensor: ['model'], fsdp: null)");
  // A one-axis list is that axis; a list of two is both; a size-1 axis may go unnamed.
  j = good_plan();
  j["mesh"] = {{"axes", {"x", "y", "z"}}, {"shape", {2, 4, 1}}};
  j["strategy"] = {{"name", "dp(x,y)"}, {"data", {"x", "y"}}, {"tensor", nullptr}};
  const TrainPlan two = parse_train_plan(j, "t");
  EXPECT_EQ(two.data, (Names{"x", "y"}));
  EXPECT_EQ(two.num_cores(), 8);
}

TEST(TrainPlanTest, LoadsFromAFile) {
  const TrainPlan p = load_train_plan(write_plan(
      "train_plan_ok.json", plan_text(R"j({"axes": ["data"], "shape": [4]})j",
                                      R"j({"name": "fsdp(data)", "data": "data", "tensor": null,
                                          "fsdp": ["data"]})j")));
  EXPECT_EQ(p.model, "mlp");
  EXPECT_EQ(p.fsdp, Names{"data"});
  EXPECT_EQ(mlp_plan_mode(p), MlpPlanMode::kFsdp);
  expect_error<InvalidArgumentError>(
      [] { load_train_plan(write_plan("train_plan_broken.json", "{\"format\": ")); },
      {"train_plan_broken.json", "is not valid JSON"});
  expect_error<NotFoundError>([] { load_train_plan("/nonexistent/plan.json"); },
                              {"cannot open plan file '/nonexistent/plan.json'"});
}

TEST(TrainPlanTest, BadPlansNameTheFieldAndWhatWasExpected) {
  auto bad = [](const std::vector<std::string>& needles, auto edit) {
    nlohmann::json j = good_plan();
    edit(j);
    expect_error<InvalidArgumentError>([&] { parse_train_plan(j, "p.json"); }, needles);
  };
  bad({"plan file 'p.json'", "format is \"other\" (expected \"vtpu-plan\")"},
      [](auto& j) { j["format"] = "other"; });
  bad({"version is 2 (expected 1)"}, [](auto& j) { j["version"] = 2; });
  bad({"model is 3 (expected a name)"}, [](auto& j) { j["model"] = 3; });
  bad({"expected \"mesh\""}, [](auto& j) { j.erase("mesh"); });
  bad({"mesh axis 'a' appears twice"}, [](auto& j) {
    j["mesh"] = {{"axes", {"a", "a"}}, {"shape", {2, 2}}};
  });
  // Adversarial pass adv12, ADV7: the axis names vtpu plan accepts (identifiers), and no others.
  bad({"plan file 'p.json'",
       "mesh axis 1 name <a)> is not an identifier (expected "
       "[A-Za-z_][A-Za-z0-9_]*"},
      [](auto& j) {
        j["mesh"] = {{"axes", {"a", "a)"}}, {"shape", {2, 2}}};
      });
  bad({"mesh has 1 axes and 2 sizes"}, [](auto& j) {
    j["mesh"] = {{"axes", {"a"}}, {"shape", {2, 2}}};
  });
  // New-user pass nu14, NU88: mesh and layers[] entries took unknown keys silently.
  bad({"plan file 'p.json': mesh: unknown key 'foo' (expected axes, shape)"},
      [](auto& j) { j["mesh"]["foo"] = 1; });
  bad({"layers[1]: unknown key 'shardng' (expected name, sharding, in, out, reshard_before)"},
      [](auto& j) {
        j["layers"] = {{{"name", "embed"}, {"sharding", "replicated"}, {"in", "R"}},
                       {{"name", "fc"}, {"sharding", "column"}, {"shardng", "row"}}};
      });
  bad({"mesh size 0 (expected an integer 1..4096)"}, [](auto& j) { j["mesh"]["shape"] = {2, 0}; });
  bad({"expected \"strategy\""}, [](auto& j) { j["strategy"] = 3; });
  // An unknown strategy: a role vtpu does not have.
  bad({"unknown strategy key 'pipeline'", "expected name, data, tensor, fsdp, batch_axes"},
      [](auto& j) { j["strategy"]["pipeline"] = "data"; });
  // Axes not in the mesh.
  bad({"strategy.tensor names \"y\", which is not a mesh axis", "data, model"},
      [](auto& j) { j["strategy"]["tensor"] = "y"; });
  bad({"strategy.data names 3"}, [](auto& j) { j["strategy"]["data"] = {3}; });
  bad({"strategy.data names 'data' twice"}, [](auto& j) {
    j["strategy"]["data"] = {"data", "data"};
  });
  bad({"mesh axis 'data' is in strategy.tensor and in strategy.data"},
      [](auto& j) { j["strategy"]["tensor"] = "data"; });
  // The mesh and the strategy disagree: an axis would be idle.
  bad({"mesh axis 'data' of size 2 has no role", "'dp(data)+tp(model)'"},
      [](auto& j) { j["strategy"]["data"] = nullptr; });
  // Regression (new-user pass nu10, NU17): a name that is not the roles' ran tp(model) as
  // "dp(model)". Names as vtpu plan writes them pass (with or without size-1 axes, and FSDP whose
  // data axes are its fsdp axes); no name passes (describe_strategy says "(unnamed)").
  bad({"strategy.name is 'dp(model)' but its roles (data: ['data'], tensor: ['model'], fsdp: "
       "null) are strategy 'dp(data)+tp(model)' (expected that name, as vtpu plan writes it, or "
       "the name left out)"},
      [](auto& j) { j["strategy"]["name"] = "dp(model)"; });
  // The roles in another order name the same strategy (nu10 NU16: vtpu plan --strategy takes
  // them so); the name is kept in vtpu plan's order. Roles swapped between axes do not.
  {
    nlohmann::json j = good_plan();
    j["strategy"]["name"] = "tp(model)+dp(data)";
    EXPECT_EQ(parse_train_plan(j, "p.json").strategy_name, "dp(data)+tp(model)");
  }
  bad({"strategy.name is 'tp(data)+dp(model)' but its roles (data: ['data'], tensor: ['model'], "
       "fsdp: null) are strategy 'dp(data)+tp(model)'"},
      [](auto& j) { j["strategy"]["name"] = "tp(data)+dp(model)"; });
  bad({"strategy.name is 'single core' but its roles", "are strategy 'dp(data)+tp(model)'"},
      [](auto& j) { j["strategy"]["name"] = "single core"; });
  for (const auto& [shape, strategy] : std::vector<std::pair<nlohmann::json, nlohmann::json>>{
           {{1, 8}, {{"name", "tp(model)"}, {"data", "data"}, {"tensor", "model"}}},
           {{1, 8}, {{"name", "dp(data)+tp(model)"}, {"data", "data"}, {"tensor", "model"}}},
           {{2, 4}, {{"name", "fsdp(data,model)"}, {"fsdp", {"data", "model"}}}},
           {{2, 4},
            {{"name", "fsdp(data,model)"},
             {"data", {"data", "model"}},
             {"fsdp", {"data", "model"}}}},
           {{2, 4}, {{"name", "dp(model,data)"}, {"data", {"model", "data"}}}},
           {{1, 1}, {{"name", "single core"}}},
           {{2, 4}, {{"data", {"data", "model"}}}}}) {
    nlohmann::json j = good_plan();
    j["mesh"]["shape"] = shape;
    j["strategy"] = strategy;
    EXPECT_NO_THROW(parse_train_plan(j, "p.json")) << strategy;
  }
  bad({"layers[0]"}, [](auto& j) { j["layers"] = {{{"name", "x"}}}; });
  bad({"estimate.step_seconds is \"fast\""},
      [](auto& j) { j["estimate"]["step_seconds"] = "fast"; });
  bad({"estimate.batch is 0"}, [](auto& j) { j["estimate"]["batch"] = 0; });
  // Regression (adversarial pass adv10, A9): a denormal step time of 1e-320 s passed and the
  // report printed "infx (outside 25%)". Accepted: 1e-12 s .. 365.25 days = 31557600 s.
  for (const double s : {1e-320, 9.9e-13, 31557601.0, 1e300}) {
    nlohmann::json j = good_plan();
    j["estimate"]["step_seconds"] = s;
    expect_error<InvalidArgumentError>(
        [&] { parse_train_plan(j, "p.json"); },
        {"plan file 'p.json'", "estimate.step_seconds is " + j["estimate"]["step_seconds"].dump() +
                                   " (expected seconds from 1e-12 to 31557600, i.e. 1 ps to a "
                                   "year)"});
  }
  for (const double s : {1e-12, 31557600.0}) {
    nlohmann::json j = good_plan();
    j["estimate"]["step_seconds"] = s;
    EXPECT_EQ(parse_train_plan(j, "p.json").estimate->step_seconds, s);
  }
  // compute_seconds and comm_seconds had only the lower bound (>= 0): 1e300 s of compute was read.
  // Their range is step_seconds' and 0 (a single core's comm).
  for (const char* key : {"compute_seconds", "comm_seconds"}) {
    for (const double s : {31557601.0, 1e300, 9.9e-13, 1e-320}) {
      nlohmann::json j = good_plan();
      j["estimate"][key] = s;
      expect_error<InvalidArgumentError>(
          [&] { parse_train_plan(j, "p.json"); },
          {"plan file 'p.json'", std::string("estimate.") + key + " is " +
                                     j["estimate"][key].dump() +
                                     " (expected 0 or seconds from 1e-12 to 31557600, i.e. 1 ps "
                                     "to a year)"});
    }
    for (const double s : {0.0, 1e-12, 31557600.0}) {
      nlohmann::json j = good_plan();
      j["estimate"][key] = s;
      const PlanEstimate e = *parse_train_plan(j, "p.json").estimate;
      EXPECT_EQ(std::string(key) == "compute_seconds" ? e.compute_seconds : e.comm_seconds, s);
    }
    nlohmann::json negative = good_plan();
    negative["estimate"][key] = -1;
    expect_error<InvalidArgumentError>(
        [&] { parse_train_plan(negative, "p.json"); },
        {std::string("estimate.") + key + " is -1 (expected a number >= 0)"});
  }
  bad({"estimate.step_seconds is 1e-320 (expected seconds from 1e-12"},
      [](auto& j) { j["estimate"]["step_seconds"] = 1e-320; });
  bad({"unknown key 'estimates' (expected estimate, format, layers, mesh, model, model_graph, "
       "parameter_shapes, pinned, shardings, strategy, version)"},
      [](auto& j) {
        j["estimates"] = {{"step_seconds", 0.01}};
      });
  // adv10 A8: a misspelt key dropped the step time (and with it the report) silently.
  bad({"unknown estimate key 'step_second' (expected batch, comm_bytes_per_core, comm_seconds, "
       "compute_seconds, hardware, hardware_file, hardware_profile, hbm_bytes_per_core, "
       "input_bytes_per_core, mesh_shape, oversubscription, "
       "step_seconds, strategy)"},
      [](auto& j) {
        j["estimate"].erase("step_seconds");
        j["estimate"]["step_second"] = 0.01;
      });
  // Adversarial pass adv8. H3: a batch of 2^62 reached train mlp and crashed it; H4: 2^64 - 1
  // bytes overflowed llround, and two fields of 2^63 - 1 wrapped their sum to 0.
  bad({"estimate.batch is 1099511627777 (expected an integer > 0, at most 2^40"},
      [](auto& j) { j["estimate"]["batch"] = (int64_t{1} << 40) + 1; });
  bad({"estimate.hbm_bytes_per_core is 18446744073709551615 (expected an integer >= 0, at most "
       "2^62)"},
      [](auto& j) { j["estimate"]["hbm_bytes_per_core"] = ~uint64_t{0}; });
  bad({"estimate.input_bytes_per_core is 9223372036854775807"},
      [](auto& j) { j["estimate"]["input_bytes_per_core"] = std::numeric_limits<int64_t>::max(); });
  nlohmann::json most = good_plan();
  most["estimate"]["batch"] = int64_t{1} << 40;
  most["estimate"]["hbm_bytes_per_core"] = uint64_t{1} << 62;
  most["estimate"]["input_bytes_per_core"] = uint64_t{1} << 62;
  const TrainPlan p = parse_train_plan(most, "p.json");
  EXPECT_EQ(p.estimate->batch, int64_t{1} << 40);
  EXPECT_EQ(p.estimate->hbm_bytes_per_core + p.estimate->input_bytes_per_core, uint64_t{1} << 63);
}

// Adversarial pass adv7. G1: a plan of 2048 cores passed (the bound was 4096) and vtpu train then
// failed with "num_cores is 2048 (expected 1..1024)", naming neither the plan nor its mesh. G3: a
// layer the model does not have ("fc9") was reported as "is 'row', but the trainer shards it
// 'sharded'", as if the mlp had it.
TEST(TrainPlanTest, MeshBeyondTheRuntimeAndUnknownLayersAreRejected) {
  nlohmann::json j = good_plan();
  j["mesh"]["shape"] = {2, 1024};
  expect_error<InvalidArgumentError>(
      [&] { parse_train_plan(j, "p.json"); },
      {"plan file 'p.json'", "has 2048 cores (expected at most 1024: vtpu train runs one"});
  j["mesh"]["shape"] = {4096, 4096};
  expect_error<InvalidArgumentError>([&] { parse_train_plan(j, "p.json"); },
                                     {"has more than 4096 cores (expected at most 1024"});
  j["mesh"]["shape"] = {2, 512};
  EXPECT_EQ(parse_train_plan(j, "p.json").mesh_shape, (std::vector<int64_t>{2, 512}));

  nlohmann::json t = good_plan();
  t["layers"] = {{{"name", "blocks.0.attn"}, {"sharding", "heads"}},
                 {{"name", "blocks.12.mlp.fc2"}, {"sharding", "row"}},
                 {{"name", "head"}, {"sharding", "replicated"}}};
  EXPECT_NO_THROW(plan_data_tensor_layout(parse_train_plan(t, "t.json"), "train transformer"));
  for (const char* name : {"blocks.0.mlp", "blocks.x.attn", "blocks..attn", "fc1", "lm_head"}) {
    t["layers"] = {{{"name", name}, {"sharding", "replicated"}}};
    expect_error<InvalidArgumentError>(
        [&] { plan_data_tensor_layout(parse_train_plan(t, "t.json"), "train transformer"); },
        {"plan file 't.json' names layer '" + std::string(name) +
         "', which model 'transformer' does not have"});
  }
  nlohmann::json m = good_plan();
  m["model"] = "mlp";
  m["layers"] = {{{"name", "fc1"}, {"sharding", "column"}}, {{"name", "fc9"}, {"sharding", "row"}}};
  expect_error<InvalidArgumentError>(
      [&] { plan_data_tensor_layout(parse_train_plan(m, "m.json"), "train mlp"); },
      {"names layer 'fc9', which model 'mlp' does not have (expected fc1, relu, fc2)"});
}

// Adversarial pass adv8, G4: a plan's shardings were never read, so "P('nope')" ran. Each entry
// must now be a PartitionSpec the plan's mesh (data=2, model=4) can hold.
TEST(TrainPlanTest, ShardingsAreCheckedAgainstThePlansMesh) {
  nlohmann::json j = good_plan();
  j["shardings"] = {{"fc1.w", "P(None, 'model')"},
                    {"fc1.out", "P('data', unreduced={'model'})"},
                    {"embed.out", "P(('data', 'model'))"},
                    {"ln.gamma", "P()"}};
  EXPECT_NO_THROW(parse_train_plan(j, "p.json"));
  const std::vector<std::pair<nlohmann::json, std::string>> bad = {
      {"P('nope')", "names axis 'nope' in entry 0, which Mesh("},
      {"P('data', 'data')", "uses mesh axis 'data' twice (in entries 0 and 1)"},
      {"P(('model', 'model'))", "uses mesh axis 'model' twice"},
      {"P('data', unreduced={'data'})", "uses mesh axis 'data' twice"},
      {"P('data'", "P('data'"},
      {"x", "'x'"},
      {7, "is 7 (expected a PartitionSpec string"},
      {nullptr, "is null (expected a PartitionSpec string"}};
  for (const auto& [value, needle] : bad) {
    SCOPED_TRACE(value.dump());
    j["shardings"] = {{"fc1.w", "P()"}, {"fc2.w", value}};
    expect_error<InvalidArgumentError>(
        [&] { parse_train_plan(j, "p.json"); },
        {"plan file 'p.json': shardings['fc2.w'] is " + value.dump(), needle});
  }
  j["shardings"] = nlohmann::json::array({"P()"});
  expect_error<InvalidArgumentError>([&] { parse_train_plan(j, "p.json"); },
                                     {"shardings is [\"P()\"] (expected an object"});
}

TEST(TrainPlanTest, WrongModelNamesBoth) {
  const TrainPlan p = parse_train_plan(good_plan(), "p.json");
  expect_error<InvalidArgumentError>(
      [&] { require_plan_model(p, "mlp", "vtpu train mlp"); },
      {"plan file 'p.json' is for model 'transformer' (expected 'mlp' for vtpu train mlp)"});
  require_plan_model(p, "transformer", "vtpu train transformer");  // no error
}

// Regression (new-user pass nu10, NU6): the trainers' --cores check names the plan's file and
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

// Regression (new-user pass nu8, N13): `train mlp --estimate-from` of a tensor-parallel plan said
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

ModelGraph model_file(const std::string& name) {
  return ModelGraph::load_json_file(std::string(VTPU_SOURCE_DIR) + "/examples/models/" + name);
}

// Regression (new-user pass nu8, N10): a one-axis role was written as a string ("data": "x"),
// where docs/SHARDING.md shows lists and a reader written from it iterates the characters. The
// planner writes lists; plan files written before (a string) still read the same.
TEST(TrainPlanTest, EmittedOneAxisRolesAreListsAndStringsStillRead) {
  const ModelGraph m = model_file("mlp.json");
  const CostModel cost(HardwareProfile::get("v5e"));
  const Names axes = {"data", "model"};
  AutoShardingPlan plan =
      plan_auto_sharding(m, {2, 4}, axes, cost, 0, plan_constraints("mlp", {2, 4}, axes));
  plan.choose("dp(data)+tp(model)");
  nlohmann::json j = plan.to_json();
  EXPECT_EQ(j["strategy"]["data"], nlohmann::json::array({"data"}));
  EXPECT_EQ(j["strategy"]["tensor"], nlohmann::json::array({"model"}));
  EXPECT_TRUE(j["strategy"]["fsdp"].is_null());
  EXPECT_EQ(j["strategy"]["batch_axes"], nlohmann::json::array({"data"}));
  const TrainPlan listed = parse_train_plan(j, "listed.json");
  EXPECT_EQ(listed.data, Names{"data"});
  EXPECT_EQ(listed.tensor, Names{"model"});
  EXPECT_TRUE(listed.fsdp.empty());
  j["strategy"]["data"] = "data";
  j["strategy"]["tensor"] = "model";
  const TrainPlan old = parse_train_plan(j, "old.json");
  EXPECT_EQ(old.data, listed.data);
  EXPECT_EQ(old.tensor, listed.tensor);
  EXPECT_EQ(mlp_plan_mode(old, true), MlpPlanMode::kTensorParallel);
}

// New-user pass nu14, NU79: a 2x4 plan edited to mesh 2x8 ran on 16 cores and was judged against
// the 2x4 estimate. vtpu plan --emit records the estimate's mesh; an older file without it is
// checked by its oversubscription, max(1, cores / host_cpus) of the embedded profile.
TEST(TrainPlanTest, TheEstimateMustBeForThePlansMesh) {
  const ModelGraph m = model_file("mlp.json");
  HardwareProfile profile = HardwareProfile::get("this_machine");
  profile.host_cpus = 2;  // s(8) = 4, s(16) = 8, whatever this host has
  const CostModel cost(profile);
  const Names axes = {"data", "model"};
  AutoShardingPlan plan =
      plan_auto_sharding(m, {2, 4}, axes, cost, 0, plan_constraints("mlp", {2, 4}, axes));
  plan.choose("dp(data)+tp(model)");
  const nlohmann::json emitted = plan.to_json();
  EXPECT_EQ(emitted["estimate"]["mesh_shape"], nlohmann::json::array({2, 4}));
  EXPECT_EQ(emitted["estimate"]["oversubscription"], 4.0);
  EXPECT_EQ(parse_train_plan(emitted, "p.json").mesh_shape, (std::vector<int64_t>{2, 4}));
  nlohmann::json edited = emitted;
  edited["mesh"]["shape"] = {2, 8};
  expect_error<InvalidArgumentError>(
      [&] { parse_train_plan(edited, "m28.json"); },
      {"plan file 'm28.json': estimate.mesh_shape is 2x4 but mesh.shape is 2x8 (16 cores) "
       "(expected the mesh the estimate was made for: re-run vtpu plan --mesh 2x8 --emit for this "
       "mesh)"});
  // A file written before mesh_shape: the oversubscription gives the edit away (4 is 8 / 2, not
  // 16 / 2); on the mesh it was made for it passes.
  nlohmann::json old = emitted;
  old["estimate"].erase("mesh_shape");
  EXPECT_EQ(parse_train_plan(old, "old.json").estimate->oversubscription, 4.0);
  old["mesh"]["shape"] = {2, 8};
  expect_error<InvalidArgumentError>(
      [&] { parse_train_plan(old, "old.json"); },
      {"estimate.oversubscription is 4 but mesh.shape 2x8 (16 cores) on the estimate's profile of "
       "2 host CPUs gives 8 (expected the mesh the estimate was made for"});
  // 2x2 on 2 CPUs gives s = 2, 4 cores: also refused; a profile without host_cpus cannot tell.
  old["mesh"]["shape"] = {2, 2};
  expect_error<InvalidArgumentError>([&] { parse_train_plan(old, "old.json"); },
                                     {"is 4 but mesh.shape 2x2 (4 cores)", "gives 2"});
  old["estimate"]["hardware_profile"].erase("host_cpus");
  EXPECT_NO_THROW(parse_train_plan(old, "old.json"));
  nlohmann::json bad = emitted;
  bad["estimate"]["mesh_shape"] = {2, 0};
  expect_error<InvalidArgumentError>(
      [&] { parse_train_plan(bad, "p.json"); },
      {"estimate.mesh_shape is [2,0] (expected the mesh sizes the estimate was made for"});
}

// Adversarial pass adv15, ADV23: a dp(x) plan edited to estimate.batch 1024 trained batch 1024
// against the batch-64 estimate, and one whose roles were edited to FSDP (strategy.name
// removed) ran FSDP against dp's estimate. As for a mesh edit, the reader refuses a plan whose
// estimate is for another batch or strategy; a plan that names no strategy for its estimate at
// all is read, but its rows are not judged.
TEST(TrainPlanTest, TheEstimateMustBeForThePlansBatchAndStrategy) {
  const ModelGraph m = model_file("mlp.json");  // batch 64
  ASSERT_EQ(m.batch, 64);
  const CostModel cost(HardwareProfile::get("this_machine"));
  AutoShardingPlan plan =
      plan_auto_sharding(m, {2}, {"x"}, cost, 0, plan_constraints("mlp", {2}, {"x"}));
  plan.choose("dp(x)");
  const nlohmann::json emitted = plan.to_json();
  EXPECT_EQ(emitted["estimate"]["strategy"], "dp(x)");
  EXPECT_EQ(emitted["estimate"]["batch"], 64);
  const TrainPlan read = parse_train_plan(emitted, "p2.json");
  EXPECT_EQ(read.estimate->strategy, "dp(x)");
  EXPECT_TRUE(read.estimate->not_judged_reason.empty());
  // (a) The batch.
  nlohmann::json batch = emitted;
  batch["estimate"]["batch"] = 1024;
  expect_error<InvalidArgumentError>(
      [&] { parse_train_plan(batch, "p2_b1024.json"); },
      {"plan file 'p2_b1024.json': estimate.batch is 1024 but model_graph.batch is 64 (expected "
       "the same: the estimate is priced for model_graph's batch; re-run vtpu plan --batch B "
       "--emit for the batch B to run)"});
  batch["model_graph"]["batch"] = 1024;  // both edited: the same batch, read
  EXPECT_EQ(parse_train_plan(batch, "b.json").estimated_batch(), 1024);
  // (b) The roles edited to FSDP, the name removed: estimate.strategy gives it away.
  nlohmann::json roles = emitted;
  roles["strategy"]["data"] = nullptr;
  roles["strategy"]["fsdp"] = {"x"};
  roles["strategy"].erase("name");
  expect_error<InvalidArgumentError>(
      [&] { parse_train_plan(roles, "e.json"); },
      {"plan file 'e.json': estimate.strategy is 'dp(x)' but the roles (data: null, tensor: null, "
       "fsdp: ['x']) are strategy 'fsdp(x)' (expected the strategy the estimate was made for: "
       "re-run vtpu plan --strategy 'fsdp(x)' --emit for these roles)"});
  // With the name kept, the existing check of the name against the roles refuses it first.
  nlohmann::json named = roles;
  named["strategy"]["name"] = "dp(x)";
  expect_error<InvalidArgumentError>([&] { parse_train_plan(named, "e.json"); },
                                     {"strategy.name is 'dp(x)' but its roles"});
  // The name left out of an unedited plan: estimate.strategy names it.
  nlohmann::json unnamed = emitted;
  unnamed["strategy"].erase("name");
  const TrainPlan from_estimate = parse_train_plan(unnamed, "u.json");
  EXPECT_EQ(from_estimate.strategy_name, "dp(x)");
  EXPECT_EQ(from_estimate.estimate->strategy, "dp(x)");
  EXPECT_TRUE(from_estimate.estimate->not_judged_reason.empty());
  nlohmann::json bad = emitted;
  bad["estimate"]["strategy"] = 7;
  expect_error<InvalidArgumentError>([&] { parse_train_plan(bad, "p.json"); },
                                     {"estimate.strategy is 7 (expected the name of the strategy"});
  // An older file (no estimate.strategy) whose name was removed: nothing says what the estimate
  // is for; read, but neither row is judged, with the reason.
  nlohmann::json old = roles;
  old["estimate"].erase("strategy");
  const TrainPlan older = parse_train_plan(old, "old.json");
  const std::string reason =
      "the plan names no strategy for its estimate (no strategy.name or estimate.strategy), so "
      "the estimate may be for other roles than the ones run, 'fsdp(x)'; re-run vtpu plan "
      "--strategy 'fsdp(x)' --emit";
  EXPECT_EQ(older.estimate->not_judged_reason, reason);
  MeasuredRun run;
  run.num_cores = 2;
  run.steps = 3;
  run.median_step_seconds = older.estimate->step_seconds;
  run.peak_hbm_bytes_per_core = older.estimate->hbm_bytes_per_core;
  const EstimateReport r = compare_estimate(*older.estimate, run);
  EXPECT_FALSE(r.step_comparable);
  EXPECT_FALSE(r.hbm_comparable);
  EXPECT_EQ(r.step_not_judged_reason, reason);
  EXPECT_EQ(r.hbm_not_judged_reason, reason);
  EXPECT_TRUE(r.to_json()["hbm_within_25_percent"].is_null());
  // With the name (an older file as vtpu plan wrote it) it is judged.
  nlohmann::json old_named = emitted;
  old_named["estimate"].erase("strategy");
  const TrainPlan judged = parse_train_plan(old_named, "old.json");
  EXPECT_TRUE(judged.estimate->not_judged_reason.empty());
  EXPECT_TRUE(compare_estimate(*judged.estimate, run).step_comparable);
}

// Issue 6 adversarial pass, F17: examples/models/transformer.json, "the default vtpu train
// transformer model", left out the LM head's bias that the trainer has (120,576 parameters
// against the trainer's 120,704). The file now counts the trainer's parameters exactly.
TEST(TrainPlanTest, ShippedTransformerFileCountsTheTrainersParameters) {
  const ModelGraph t = model_file("transformer.json");
  const TransformerLayout layout(TransformerConfig{}, 1);
  EXPECT_EQ(t.num_parameters(), layout.size());
  EXPECT_EQ(t.num_parameters(), 120704);
  EXPECT_TRUE(t.layers.back().bias) << t.layers.back().name;
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
  // back: its shardings are valid on the mesh (G4), its strategy is the pinned one, and the plan
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
      // Round trip of the roles (nu8 N10): written as lists (null for none), read back as written.
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

// Regression (new-user pass nu8, N1): `train mlp|transformer --plan` ran the trainer's default
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
  const TransformerConfig d;
  EXPECT_EQ(tm->vocab, d.vocab);
  EXPECT_EQ(tm->context, d.context);
  EXPECT_EQ(tm->d_model, d.d_model);
  EXPECT_EQ(tm->heads, d.heads);
  EXPECT_EQ(tm->layers, d.layers);
  EXPECT_EQ(tm->hidden, d.hidden);
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

// Regression (new-user pass nu8, N17): the emitted plan gave attention's wqkv as P(None, 'model')
// on a (d, 3d) array, a contiguous split of the fused Q|K|V columns, where the trainer holds
// (d, 3, d) with P(None, None, 'model') (whole heads of Q, K and V per core). Every attention and
// MLP parameter of a tensor-parallel plan now has the trainer's shape and spec, as the trainer's
// own layout (TransformerLayout) gives them.
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

namespace vtpu {
namespace {

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

// Regression (adversarial pass adv12, ADV3): a plan whose layers omitted, reordered or renamed the
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

// Regression (adversarial pass adv12, ADV3): an FSDP or data-parallel plan whose layers said fc1
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

// Regression (adversarial pass adv12, ADV3): model_graph hidden 128 with fc1.w [64, 64] ran
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
