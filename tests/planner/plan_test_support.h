// Helpers shared by the plan-file and trainer-plan tests.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/temp_path.h"
#include "vtpu/planner/model_graph.h"

namespace vtpu::plan_test {

using Groups = std::vector<std::vector<int>>;
using Names = std::vector<std::string>;

inline std::string write_plan(const std::string& name, const std::string& text) {
  const std::string path = test_temp_path(name);
  std::ofstream(path) << text;
  return path;
}

inline std::string plan_text(const std::string& mesh, const std::string& strategy) {
  return R"j({"format": "vtpu-plan", "version": 1, "model": "mlp", "mesh": )j" + mesh +
         R"j(, "strategy": )j" + strategy + "}";
}

inline nlohmann::json good_plan() {
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

inline ModelGraph model_file(const std::string& name) {
  return ModelGraph::load_json_file(std::string(VTPU_SOURCE_DIR) + "/examples/models/" + name);
}

}  // namespace vtpu::plan_test
