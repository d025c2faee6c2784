// Model files (vtpu plan MODEL, examples/models): ModelGraph::load_json_file. An accepted model
// must come back from parse(to_json().dump()), which a plan file's "model_graph" relies on, and
// `vtpu plan MODEL --mesh 2x2 --json` must plan and report it.
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_input.h"
#include "vtpu/planner/model_graph.h"
#include "vtpu/planner/plan_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vtpu::fuzz::InputFile file;
  const std::string& path = file.write(data, size);
  const auto model =
      vtpu::fuzz::accept_or_refuse([&] { return vtpu::ModelGraph::load_json_file(path); });
  if (!model) return 0;
  model->num_parameters();
  const nlohmann::json j = model->to_json();
  vtpu::fuzz::check(vtpu::ModelGraph::parse(j.dump(), "to_json").to_json() == j,
                    "parse(to_json().dump()) changed the model");
  vtpu::PlanRequest request;
  request.model_path = path;
  request.mesh = "2x2";
  const auto planned = vtpu::fuzz::accept_or_refuse([&] { return vtpu::plan_request(request); });
  if (planned && *planned) vtpu::plan_report_json((*planned)->plan, {});
  return 0;
}
