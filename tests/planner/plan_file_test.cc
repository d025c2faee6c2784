// The plan-file module (planner/plan_file.h): what the reader reads, the errors for bad files,
// and that what the writer emits reads back field for field.
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

#include "tests/planner/plan_test_support.h"
#include "vtpu/common/error.h"
#include "vtpu/planner/model_graph.h"
#include "vtpu/planner/trainer_plans.h"
#include "vtpu/runtime/hardware_profile.h"

namespace vtpu {
namespace {

using namespace plan_test;

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
  // the axis names vtpu plan accepts (identifiers), and no others.
  bad({"plan file 'p.json'",
       "mesh axis 1 name <a)> is not an identifier (expected "
       "[A-Za-z_][A-Za-z0-9_]*"},
      [](auto& j) {
        j["mesh"] = {{"axes", {"a", "a)"}}, {"shape", {2, 2}}};
      });
  bad({"mesh has 1 axes and 2 sizes"}, [](auto& j) {
    j["mesh"] = {{"axes", {"a"}}, {"shape", {2, 2}}};
  });
  // mesh and layers[] entries took unknown keys silently.
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
  // Regression: a name that is not the roles' ran tp(model) as
  // "dp(model)". Names as vtpu plan writes them pass (with or without size-1 axes, and FSDP whose
  // data axes are its fsdp axes); no name passes (describe_strategy says "(unnamed)").
  bad({"strategy.name is 'dp(model)' but its roles (data: ['data'], tensor: ['model'], fsdp: "
       "null) are strategy 'dp(data)+tp(model)' (expected that name, as vtpu plan writes it, or "
       "the name left out)"},
      [](auto& j) { j["strategy"]["name"] = "dp(model)"; });
  // The roles in another order name the same strategy (vtpu plan --strategy takes
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
  // Regression: a denormal step time of 1e-320 s passed and the
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
  // a misspelt key dropped the step time (and with it the report) silently.
  bad({"unknown estimate key 'step_second' (expected batch, comm_bytes_per_core, comm_seconds, "
       "compute_seconds, hardware, hardware_file, hardware_profile, hbm_bytes_per_core, "
       "input_bytes_per_core, mesh_shape, oversubscription, "
       "step_seconds, strategy)"},
      [](auto& j) {
        j["estimate"].erase("step_seconds");
        j["estimate"]["step_second"] = 0.01;
      });
  // A batch of 2^62 reached train mlp and crashed it; 2^64 - 1
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

// A plan of 2048 cores passed (the bound was 4096) and vtpu train then failed naming neither the
// plan nor its mesh; a layer the model does not have ("fc9") was reported as "is 'row', but the
// trainer shards it 'sharded'", as if the mlp had it.
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

// a plan's shardings were never read, so "P('nope')" ran. Each entry
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

// Regression: a one-axis role was written as a string ("data": "x"),
// where docs/PLANNER.md shows lists and a reader written from it iterates the characters. The
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

// a 2x4 plan edited to mesh 2x8 ran on 16 cores and was judged against
// the 2x4 estimate. vtpu plan --emit records the estimate's mesh; an older file without it is
// checked by its oversubscription, max(1, cores / host_cpus) of the embedded profile.
TEST(TrainPlanTest, TheEstimateMustBeForThePlansMesh) {
  const ModelGraph m = model_file("mlp.json");
  HardwareProfile profile = HardwareProfile::load_json_file(std::string(VTPU_SOURCE_DIR) +
                                                            "/tests/data/fixed_profile.json");
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

// a dp(x) plan edited to estimate.batch 1024 trained batch 1024
// against the batch-64 estimate, and one whose roles were edited to FSDP (strategy.name
// removed) ran FSDP against dp's estimate. As for a mesh edit, the reader refuses a plan whose
// estimate is for another batch or strategy; a plan that names no strategy for its estimate at
// all is read, but its rows are not judged.
TEST(TrainPlanTest, TheEstimateMustBeForThePlansBatchAndStrategy) {
  const ModelGraph m = model_file("mlp.json");  // batch 64
  ASSERT_EQ(m.batch, 64);
  const CostModel cost(HardwareProfile::load_json_file(std::string(VTPU_SOURCE_DIR) +
                                                       "/tests/data/fixed_profile.json"));
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
  // With the name (an older file as vtpu plan wrote it) it is judged.
  nlohmann::json old_named = emitted;
  old_named["estimate"].erase("strategy");
  const TrainPlan judged = parse_train_plan(old_named, "old.json");
  EXPECT_TRUE(judged.estimate->not_judged_reason.empty());
}

// What the writer emits, the reader reads back field for field: every runnable candidate of the
// mlp and the transformer, written to a file and loaded.
TEST(PlanFileRoundTrip, EveryFieldReadsBackAsWritten) {
  struct Case {
    const char* file;
    const char* model;
    std::vector<int64_t> shape;
  };
  const Names axes = {"data", "model"};
  int checked = 0;
  for (const Case& k :
       {Case{"mlp.json", "mlp", {2, 4}}, Case{"transformer.json", "transformer", {2, 2}}}) {
    const ModelGraph m = model_file(k.file);
    const AutoShardingPlan planned =
        plan_auto_sharding(m, k.shape, axes,
                           CostModel(HardwareProfile::load_json_file(
                               std::string(VTPU_SOURCE_DIR) + "/tests/data/fixed_profile.json")),
                           0, plan_constraints(k.model, k.shape, axes));
    for (const PlanCandidate& c : planned.candidates) {
      if (!c.feasible || !c.fits || !c.unsupported_reason.empty()) continue;
      SCOPED_TRACE(std::string(k.file) + " " + c.name);
      AutoShardingPlan plan = planned;
      plan.choose(c.name);
      const std::string path = write_plan("roundtrip.json", emit_train_plan(plan).dump(2));
      const TrainPlan read = load_train_plan(path);
      EXPECT_EQ(read.path, path);
      EXPECT_EQ(read.model, m.name);
      EXPECT_EQ(read.mesh_axes, axes);
      EXPECT_EQ(read.mesh_shape, k.shape);
      EXPECT_EQ(read.strategy_name, c.name);
      EXPECT_EQ(read.data, c.data_axes);
      EXPECT_EQ(read.tensor, c.tensor_axes);
      EXPECT_EQ(read.fsdp, c.fsdp_axes);
      EXPECT_TRUE(read.layers_given);
      ASSERT_EQ(read.layers.size(), c.layers.size());
      for (size_t i = 0; i < c.layers.size(); ++i) {
        EXPECT_EQ(read.layers[i].first, c.layers[i].layer);
        EXPECT_EQ(read.layers[i].second, c.layers[i].choice);
      }
      EXPECT_EQ(read.parameter_shapes, model_parameter_shapes(m));
      ASSERT_TRUE(read.model_graph.has_value());
      EXPECT_EQ(read.model_graph->to_json(), m.to_json());
      ASSERT_TRUE(read.estimate.has_value());
      const PlanEstimate& e = *read.estimate;
      EXPECT_EQ(e.source, path);
      EXPECT_EQ(e.strategy, c.name);
      EXPECT_EQ(e.hardware, plan.hardware);
      EXPECT_EQ(e.step_seconds, c.step_seconds);
      EXPECT_EQ(e.compute_seconds, c.compute_seconds);
      EXPECT_EQ(e.comm_seconds, c.comm_seconds);
      EXPECT_EQ(e.hbm_bytes_per_core, c.hbm_bytes_per_core);
      EXPECT_EQ(e.input_bytes_per_core, c.input_bytes_per_core);
      EXPECT_EQ(e.oversubscription, plan.oversubscription);
      EXPECT_EQ(e.batch, m.batch);
      EXPECT_EQ(e.not_judged_reason, "");
      ASSERT_TRUE(e.profile.has_value());
      EXPECT_EQ(e.profile->to_json(), plan.profile.to_json());
      EXPECT_EQ(e.hardware_file, plan.profile.source_path);
      ++checked;
    }
  }
  EXPECT_GE(checked, 4);  // dp, fsdp and tp of the mlp, and the transformer's
}
}  // namespace
}  // namespace vtpu
