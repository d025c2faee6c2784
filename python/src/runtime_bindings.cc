// vtpu.Runtime and vtpu.Device: the virtual cores, their options and their memory statistics.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "py_common.h"
#include "vtpu/runtime/runtime_options.h"

namespace vtpu::python {
namespace {

// The Python keywords that are not RuntimeOptions' JSON keys (the issue's and JAX users' names).
const std::map<std::string, std::string>& keyword_aliases() {
  static const std::map<std::string, std::string> aliases = {{"cores", "num_cores"},
                                                             {"hbm_bytes", "hbm_bytes_per_core"}};
  return aliases;
}

RuntimeOptions options_from_python(const py::object& config, const py::kwargs& kwargs) {
  nlohmann::json j = nlohmann::json::object();
  if (!config.is_none()) {
    // The file's own keys, validated by the file loader, then overridden by the keywords.
    std::vector<std::string> keys;
    const std::string path = py::str(config);
    nlohmann::json from_file = RuntimeOptions::load_json_file(path, &keys).to_json();
    for (const std::string& key : keys) j[key] = from_file[key];
  }
  for (auto item : kwargs) {
    std::string key = py::str(item.first);
    if (auto it = keyword_aliases().find(key); it != keyword_aliases().end()) key = it->second;
    if (item.second.is_none()) continue;
    try {
      j[key] = to_json_value(item.second);
    } catch (const py::error_already_set&) {
      throw InvalidArgumentError("vtpu.Runtime: " + key + "=" + std::string(py::repr(item.second)) +
                                 " (expected a finite number, a str or a bool)");
    }
  }
  return RuntimeOptions::from_json(j, "vtpu.Runtime");
}

// The runtime joins its core threads when destroyed; a core thread may be waiting for the GIL
// (a shard_map that failed on another core), so the GIL is let go first.
std::shared_ptr<Runtime> make_runtime(RuntimeOptions options) {
  std::unique_ptr<Runtime> runtime;
  {
    py::gil_scoped_release release;
    runtime = std::make_unique<Runtime>(std::move(options));
  }
  return std::shared_ptr<Runtime>(runtime.release(), [](Runtime* r) {
    if (PyGILState_Check() != 0) {
      py::gil_scoped_release release;
      delete r;
    } else {
      delete r;
    }
  });
}

const char* kRuntimeDoc =
    R"doc(A virtual TPU pod: `cores` worker threads, each with its own HBM arena.

Runtime(cores=8, hbm_bytes="16G", allocator="bfc", *, config=None, **options)

Every key of vtpu's runtime options is a keyword (docs/PYTHON.md lists them): pad_arrays,
hbm_memory_fraction, auto_defragment, record_memory_events, link_slot_bytes, link_num_slots,
collective_timeout_ms, collective_algorithm, pin_threads, hardware_profile, ... Sizes take an
int or a string ("16G", "512M"). `config` names a JSON file of options; keywords override it.
A bad option raises vtpu.InvalidArgumentError (a ValueError) naming it.

The runtime lives as long as any mesh, sharding or array made from it; its cores stop when the
last reference goes.)doc";

void bind_device(py::module_& m) {
  py::class_<PyDevice>(m, "Device", "One virtual TPU core (jax.Device).")
      .def_property_readonly("id", [](const PyDevice& d) { return d.id; })
      .def_property_readonly("platform", [](const PyDevice&) { return "vtpu"; })
      .def_property_readonly(
          "device_kind",
          [](const PyDevice& d) { return "vtpu " + d.runtime->options().hardware_profile; },
          "The hardware profile the core models (\"vtpu v5e\").")
      .def_property_readonly("process_index", [](const PyDevice&) { return 0; })
      .def(
          "memory_stats",
          [](const PyDevice& d) {
            nlohmann::json j = d.runtime->core(d.id).hbm().memory_stats();
            return to_python(j);
          },
          "The HBM arena's statistics as a dict with jax.Device.memory_stats()'s keys "
          "(bytes_in_use, peak_bytes_in_use, bytes_limit, largest_alloc_size, num_allocs, ...).")
      .def("__repr__",
           [](const PyDevice& d) { return "VtpuDevice(id=" + std::to_string(d.id) + ")"; })
      .def("__eq__", [](const PyDevice& a,
                        const PyDevice& b) { return a.runtime == b.runtime && a.id == b.id; })
      .def("__hash__", [](const PyDevice& d) {
        return py::hash(py::make_tuple(reinterpret_cast<uintptr_t>(d.runtime.get()), d.id));
      });
}

}  // namespace

void register_runtime(py::module_& m) {
  bind_device(m);
  py::class_<Runtime, std::shared_ptr<Runtime>>(m, "Runtime", kRuntimeDoc)
      .def(py::init([](py::object cores, py::object hbm_bytes, py::object allocator,
                       py::object config, py::kwargs kwargs) {
             kwargs["cores"] = cores;
             kwargs["hbm_bytes"] = hbm_bytes;
             kwargs["allocator"] = allocator;
             return make_runtime(options_from_python(config, kwargs));
           }),
           py::arg("cores") = py::none(), py::arg("hbm_bytes") = py::none(),
           py::arg("allocator") = py::none(), py::kw_only(), py::arg("config") = py::none())
      .def_property_readonly("num_cores", &Runtime::num_cores)
      .def_property_readonly(
          "options", [](const Runtime& r) { return to_python(r.options().to_json()); },
          "Every runtime option as a dict of its JSON keys.")
      .def(
          "devices",
          [](const std::shared_ptr<Runtime>& r) {
            std::vector<PyDevice> devices;
            for (int i = 0; i < r->num_cores(); ++i) devices.push_back(PyDevice{r, i});
            return devices;
          },
          "The cores as a list of vtpu.Device, id order (jax.devices()).")
      .def(
          "save_device_memory_profile",
          [](const Runtime& r, const std::string& path) {
            py::gil_scoped_release release;
            r.save_device_memory_profile(path);
          },
          py::arg("path"),
          "Writes a gzipped pprof profile of every core's live buffers, as "
          "jax.profiler.save_device_memory_profile (view with `go tool pprof`).")
      .def(
          "save_memory_snapshot",
          [](const Runtime& r, const std::string& path) {
            py::gil_scoped_release release;
            r.save_memory_snapshot(path);
          },
          py::arg("path"),
          "Writes a snapshot of every core's arena in the JSON form of PyTorch's "
          "torch.cuda.memory._snapshot() (docs/MEMORY.md).")
      .def(
          "save_memory_event_log",
          [](const Runtime& r, const std::string& path) {
            if (!r.options().record_memory_events) {
              throw FailedPreconditionError("save_memory_event_log('" + path +
                                            "'): the runtime records no events; expected "
                                            "vtpu.Runtime(record_memory_events=True)");
            }
            py::gil_scoped_release release;
            r.save_memory_event_log(path);
          },
          py::arg("path"),
          "Writes every core's allocation events as one vtpu trace (vtpu.memory.replay_trace "
          "reads it). Needs Runtime(record_memory_events=True): FailedPreconditionError "
          "otherwise.")
      .def("__repr__", [](const Runtime& r) {
        return "vtpu.Runtime(cores=" + std::to_string(r.num_cores()) +
               ", hbm_bytes=" + std::to_string(r.options().hbm_bytes_per_core) + ", allocator='" +
               r.options().allocator + "')";
      });
}

}  // namespace vtpu::python
