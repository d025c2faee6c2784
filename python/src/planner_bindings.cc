// vtpu.planner: the auto-sharding planner of `vtpu plan` (planner/plan_request.h), with keyword
// options named as its flags, returning the `vtpu plan --json` document.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "py_args.h"
#include "py_common.h"
#include "vtpu/bench/calibration.h"
#include "vtpu/common/error.h"
#include "vtpu/planner/plan_request.h"
#include "vtpu/runtime/hardware_profile.h"

namespace vtpu::python {
namespace {

py::object plan(py::handle model, py::handle mesh, py::handle axes, py::handle hardware,
                py::handle hbm_bytes, py::handle batch, bool any_strategy, bool pad_arrays,
                py::handle strategy, bool check_fit) {
  PlanRequest r;
  r.model_path = str_arg(model, "model");
  r.mesh = str_arg(mesh, "mesh");
  if (!axes.is_none()) {
    const std::vector<std::string> names = names_arg(axes, "axes");
    for (const std::string& n : names) r.axes += (r.axes.empty() ? "" : ",") + n;
  }
  r.hardware = str_arg(hardware, "hardware");
  // As the command line's check: a profile name that is not built in is a bad argument (a
  // ValueError), while a missing .json file stays a NotFoundError.
  if (!(r.hardware.size() > 5 && r.hardware.ends_with(".json"))) {
    try {
      HardwareProfile::get(r.hardware);
    } catch (const NotFoundError& e) {
      throw InvalidArgumentError(std::string(e.message()));
    }
  }
  if (!hbm_bytes.is_none()) {
    r.hbm_bytes = bytes_arg(hbm_bytes, "hbm_bytes");
    // As `vtpu plan --hbm-bytes 0`: 0 is no limit to plan against; None means the profile's.
    if (r.hbm_bytes == 0) throw InvalidArgumentError("hbm_bytes=0 (expected at least 1 byte)");
  }
  if (!batch.is_none()) r.batch = int_arg(batch, "batch", 1, int64_t{1} << 40);
  r.any_strategy = any_strategy;
  r.pad_arrays = pad_arrays;
  if (!strategy.is_none()) r.strategy = str_arg(strategy, "strategy");
  nlohmann::json report;
  {
    py::gil_scoped_release release;
    const std::optional<PlannedModel> planned = plan_request(r);
    report =
        plan_report_json(planned->plan, plan_cost_model_warnings(planned->cost, planned->plan));
    if (check_fit) require_plan_fit(planned->plan, planned->constraints.runner);
  }
  return to_python(report);
}

}  // namespace

void register_planner(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "planner",
      "The auto-sharding planner of `vtpu plan`: data parallel, tensor parallel, FSDP or a "
      "combination per mesh axis, and each layer's sharding, chosen to minimise the estimated "
      "step time under the HBM limit.");
  m.def("plan", &plan, py::arg("model"), py::kw_only(), py::arg("mesh") = "2x4",
        py::arg("axes") = py::none(), py::arg("hardware") = "v5e",
        py::arg("hbm_bytes") = py::none(), py::arg("batch") = py::none(),
        py::arg("any_strategy") = false, py::arg("pad_arrays") = true,
        py::arg("strategy") = py::none(), py::arg("check_fit") = true,
        "Plans a model as `vtpu plan MODEL --json` does and returns that dict: candidates\n"
        "(one per strategy: strategy, runnable, feasible, fits, hbm_bytes_per_core,\n"
        "comm_bytes_per_core, compute/comm/step_seconds, why_lost, per-layer rows),\n"
        "hbm_limit_bytes, warnings, winner, chosen, chosen_by and plan (the plan file of the\n"
        "chosen strategy, which `vtpu train --plan` runs).\n\n"
        "model: a model file (JSON), or a shipped model's file name (\"mlp.json\").\n"
        "The keywords are the flags of `vtpu plan` with dashes as underscores:\n"
        "  mesh: the mesh shape (\"2x4\").\n"
        "  axes: \"data,model\" or a list (default data,model for 2-D, else x,y,z,w).\n"
        "  hardware: v5e (default), v4, v5p, this_machine or a profile .json.\n"
        "  hbm_bytes: the HBM limit per core, an int or \"16G\" (None: the profile's).\n"
        "  batch: the global batch (None: the model file's).\n"
        "  any_strategy: let strategies `vtpu train` cannot run win.\n"
        "  pad_arrays: HBM estimates in padded (TPU tiled) bytes, else logical.\n"
        "  strategy: pin this candidate, e.g. \"dp(data)+tp(model)\".\n"
        "check_fit=True raises, as the command fails, when nothing fits\n"
        "(vtpu.ResourceExhaustedError naming the HBM needed) or nothing can run\n"
        "(vtpu.InvalidArgumentError or FailedPreconditionError); False returns the dict\n"
        "with winner None. A bad mesh, axes, hardware or strategy name raises\n"
        "vtpu.InvalidArgumentError naming it. Runs without the GIL.");
}

}  // namespace vtpu::python
