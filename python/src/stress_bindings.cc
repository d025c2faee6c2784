// vtpu.stress: the fragmentation stress harness of `vtpu stress` (stress/stress_harness.h), with
// keyword options named as its flags (dashes -> underscores), returning the `--json` document.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "py_args.h"
#include "py_common.h"
#include "vtpu/common/error.h"
#include "vtpu/stress/alloc_workload.h"
#include "vtpu/stress/stress_flags.h"
#include "vtpu/stress/stress_harness.h"
#include "vtpu/stress/stress_html_output.h"

namespace vtpu::python {
namespace {

// The keyword arguments of run(), in signature order. An option left at None was not given: it
// takes `vtpu stress`'s default, and a run that would not use it does not refuse it.
constexpr const char* kArgs[] = {
    "cores",
    "workload",
    "trace",
    "allocators",
    "auto_defragment",
    "hbm_bytes",
    "seed",
    "events",
    "layers",
    "activation_bytes",
    "weight_bytes",
    "live",
    "max_requests",
    "kv_block_bytes",
    "max_blocks",
    "load",
    "collective_rounds",
    "bucket_bytes",
    "cross_core_frees",
    "cross_core_free_lag",
    "backing",
    "stop_on_oom",
    "capacity_search",
    "capacity_search_max",
};

// "max_requests" -> "--max-requests", the flag check_stress_options_apply names.
std::string flag_of(std::string_view arg) {
  std::string flag = "--" + std::string(arg);
  for (char& ch : flag) ch = ch == '_' ? '-' : ch;
  return flag;
}

// Sets the fields of `o` from the arguments that were given (not None).
void apply_workload_args(const py::dict& a, StressOptions& o) {
  StressWorkloadOptions& w = o.workload;
  const auto given = [&](const char* k) { return !a[k].is_none(); };
  if (given("workload")) w.name = str_arg(a["workload"], "workload");
  if (given("seed")) w.seed = uint64_arg(a["seed"], "seed");
  const auto max_events = static_cast<int64_t>(kMaxWorkloadEvents);
  if (given("events")) w.events_per_core = int_arg(a["events"], "events", 1, max_events);
  if (given("layers")) w.layers = static_cast<int>(int_arg(a["layers"], "layers", 1, 100000));
  if (given("activation_bytes"))
    w.activation_bytes = bytes_arg(a["activation_bytes"], "activation_bytes");
  if (given("weight_bytes")) w.weight_bytes = bytes_arg(a["weight_bytes"], "weight_bytes");
  if (given("live")) w.live_buffers = int_arg(a["live"], "live", 1, max_events);
  if (given("max_requests"))
    w.max_requests = static_cast<int>(int_arg(a["max_requests"], "max_requests", 1, 1000000));
  if (given("kv_block_bytes")) w.kv_block_bytes = bytes_arg(a["kv_block_bytes"], "kv_block_bytes");
  if (given("max_blocks"))
    w.max_blocks = static_cast<int>(int_arg(a["max_blocks"], "max_blocks", 4, 1000000));
}

StressOptions stress_options(const py::dict& a) {
  StressOptions o;
  const auto given = [&](const char* k) { return !a[k].is_none(); };
  o.cores = static_cast<int>(int_arg(a["cores"], "cores", 1, 1024));
  if (given("trace")) o.trace_path = str_arg(a["trace"], "trace");
  o.allocators = names_arg(a["allocators"], "allocators");
  const std::vector<std::string> modes = names_arg(a["auto_defragment"], "auto_defragment");
  std::string joined;
  for (const std::string& m : modes) joined += (joined.empty() ? "" : ",") + m;
  o.defrag_modes = parse_defrag_modes(joined);
  o.hbm_bytes = bytes_arg(a["hbm_bytes"], "hbm_bytes");
  apply_workload_args(a, o);
  o.under_load = on_off_arg(a["load"], "load");
  if (given("collective_rounds"))
    o.collective_rounds =
        static_cast<int>(int_arg(a["collective_rounds"], "collective_rounds", 0, 10000000));
  if (given("bucket_bytes")) o.bucket_bytes = bytes_arg(a["bucket_bytes"], "bucket_bytes");
  if (given("cross_core_frees"))
    o.cross_core_free_per_mille =
        static_cast<uint32_t>(int_arg(a["cross_core_frees"], "cross_core_frees", 0, 1000));
  if (given("cross_core_free_lag"))
    o.cross_core_free_max_lag =
        static_cast<uint32_t>(int_arg(a["cross_core_free_lag"], "cross_core_free_lag", 0, 1000000));
  o.backing = on_off_arg(a["backing"], "backing");
  o.stop_on_oom = on_off_arg(a["stop_on_oom"], "stop_on_oom");
  o.search_capacity = on_off_arg(a["capacity_search"], "capacity_search");
  if (given("capacity_search_max"))
    o.capacity_search_max_bytes = bytes_arg(a["capacity_search_max"], "capacity_search_max");
  check_stress_options_apply(o, [&](std::string_view flag) {
    for (const char* k : kArgs) {
      if (flag_of(k) == flag) return given(k);
    }
    return false;
  });
  // The report's "command": the call as written, with the arguments given.
  o.command = "vtpu.stress.run(";
  bool first = true;
  for (const char* k : kArgs) {
    if (!given(k)) continue;
    o.command += (first ? "" : ", ") + std::string(k) + "=" + std::string(py::repr(a[k]));
    first = false;
  }
  o.command += ")";
  o.validate();
  return o;
}

const char kRunDoc[] =
    "run(*, cores=8, workload=None, trace=None, allocators='bfc', auto_defragment='both',\n"
    "    hbm_bytes='16G', seed=None, events=None, layers=None, activation_bytes=None,\n"
    "    weight_bytes=None, live=None, max_requests=None, kv_block_bytes=None,\n"
    "    max_blocks=None, load='on', collective_rounds=None, bucket_bytes=None,\n"
    "    cross_core_frees=None, cross_core_free_lag=None, backing=False, stop_on_oom=False,\n"
    "    capacity_search='on', capacity_search_max=None) -> dict\n\n"
    "Runs the fragmentation stress harness as `vtpu stress` does and returns the dict that\n"
    "`vtpu stress ... --json FILE` writes: one run per (allocator policy, auto-defragment\n"
    "mode) on the same per-core event streams, each with a summary over cores\n"
    "(peak_live_bytes, peak_reserved_bytes, reserved_over_live, fragmentation_mean/max,\n"
    "false_ooms, true_ooms, min_capacity_bytes, latencies, ...) and per-core figures.\n\n"
    "Every keyword is a `vtpu stress` flag with dashes as underscores; None takes the\n"
    "flag's default:\n"
    "  cores: virtual cores (8).\n"
    "  workload: training_step (default), variable_batch, uniform, lognormal, bimodal,\n"
    "      kv_cache; or trace: a vtpu trace file to replay (event core c on c % cores).\n"
    "  allocators: \"bfc\", \"bfc,tlsf\" or a list; bfc, tlsf, first_fit, buddy, planned.\n"
    "  auto_defragment: \"both\" (= on,off), on, growth, off, or a list of them.\n"
    "  hbm_bytes: arena capacity per core, \"16G\" or an int.\n"
    "  seed (1), events (100000 per core), layers, activation_bytes, weight_bytes, live,\n"
    "      max_requests, kv_block_bytes, max_blocks: the generated workload.\n"
    "  load: \"on\"/\"off\" or a bool: all-reduces, matmuls and cross-core frees\n"
    "      alongside; collective_rounds, bucket_bytes, cross_core_frees (per mille),\n"
    "      cross_core_free_lag tune it.\n"
    "  backing: real bytes, checksummed. stop_on_oom: raise vtpu.ResourceExhaustedError\n"
    "      with the report at the first OOM.\n"
    "  capacity_search: \"on\"/\"off\"; capacity_search_max bounds it.\n\n"
    "An option the run would not use (live with workload=\"training_step\", a generator\n"
    "option with trace, ...) or an unknown one raises vtpu.InvalidArgumentError, as the\n"
    "command line refuses it. With load off every figure but the times repeats run to\n"
    "run. Runs without the GIL.";

}  // namespace

void register_stress(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "stress",
      "The fragmentation stress harness of `vtpu stress`: allocator policies compared side by "
      "side on the same per-core allocation streams, under collective and compute load.");
  // kRunDoc's first line is the signature: the function takes **kwargs so that an unknown
  // option is refused by name, and pybind11's own line would read "run(**kwargs)".
  // The signature with defaults: every argument keyword-only (as the flags), None = not given.
  py::dict defaults;
  for (const char* k : kArgs) defaults[k] = py::none();
  defaults["cores"] = 8;
  defaults["allocators"] = "bfc";
  defaults["auto_defragment"] = "both";
  defaults["hbm_bytes"] = "16G";
  defaults["load"] = "on";
  defaults["backing"] = false;
  defaults["stop_on_oom"] = false;
  defaults["capacity_search"] = "on";
  py::options options;
  options.disable_function_signatures();
  m.def(
      "run",
      [defaults](const py::kwargs& kwargs) {
        py::dict a = defaults.attr("copy")();
        for (auto item : kwargs) {
          const std::string key = item.first.cast<std::string>();
          if (!defaults.contains(key)) {
            throw InvalidArgumentError("vtpu.stress.run: unknown option " + key +
                                       " (expected a `vtpu stress` flag with dashes as "
                                       "underscores, e.g. hbm_bytes)");
          }
          a[item.first] = item.second;
        }
        const StressOptions o = stress_options(a);
        nlohmann::json report;
        {
          py::gil_scoped_release release;
          report = run_stress(o);
        }
        return to_python(report);
      },
      kRunDoc);
  options.enable_function_signatures();
  m.def(
      "exit_code", [](py::handle report) { return stress_exit_code(to_json_value(report)); },
      py::arg("report"),
      "The exit status `vtpu stress` would give `report` (a run() dict converted back): 1 "
      "when a run failed or could not start, a checksum failed or an all-reduce was wrong, "
      "else 0.");
  m.def(
      "write_html",
      [](py::handle report, py::handle path) {
        write_stress_html(to_json_value(report), str_arg(path, "path"));
      },
      py::arg("report"), py::arg("path"),
      "Writes run()'s report as the self-contained HTML page of `vtpu stress --html`.");
}

}  // namespace vtpu::python
