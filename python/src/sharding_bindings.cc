// vtpu.PartitionSpec (P), vtpu.Mesh / make_mesh, vtpu.NamedSharding, vtpu.device_put and
// vtpu.Array: jax.sharding's names over sharding/.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "py_common.h"

namespace vtpu::python {
namespace {

using namespace pybind11::literals;

std::vector<std::string> names_of(py::handle axis_names, const char* what);

PartitionSpec::Entry entry_of(py::handle e) {
  if (e.is_none()) return {};
  if (py::isinstance<py::str>(e)) return {e.cast<std::string>()};
  if (py::isinstance<py::tuple>(e) || py::isinstance<py::list>(e)) {
    PartitionSpec::Entry names;
    for (py::handle name : e) {
      if (!py::isinstance<py::str>(name)) {
        throw InvalidArgumentError("PartitionSpec: axis name " + std::string(py::repr(name)) +
                                   " is not a str");
      }
      names.push_back(name.cast<std::string>());
    }
    return names;
  }
  throw InvalidArgumentError("PartitionSpec: entry " + std::string(py::repr(e)) +
                             " is not None, a mesh axis name or a tuple of names");
}

py::object entry_to_python(const PartitionSpec::Entry& e) {
  if (e.empty()) return py::none();
  if (e.size() == 1) return py::str(e[0]);
  return py::tuple(py::cast(e));
}

void bind_partition_spec(py::module_& m) {
  py::class_<PartitionSpec>(
      m, "PartitionSpec",
      R"doc(How each dimension of an array is split over mesh axes (jax.sharding.PartitionSpec).

P(*entries, unreduced=(), reduce_op="sum"): one entry per dimension, None (not split), an axis
name ("x") or a tuple of names (("x", "y"), x major). Dimensions past the last entry are not
split; P() replicates. `unreduced` names axes over which the array is a pending reduction with
`reduce_op` ("sum", "max", "min", "prod").)doc")
      .def(py::init([](py::args entries, py::object unreduced, const std::string& reduce_op) {
             std::vector<PartitionSpec::Entry> list;
             for (py::handle e : entries) list.push_back(entry_of(e));
             std::vector<std::string> partial = names_of(unreduced, "PartitionSpec unreduced");
             if (partial.empty() && reduce_op == "sum") return PartitionSpec(std::move(list));
             return PartitionSpec(std::move(list), std::move(partial), parse_reduce_op(reduce_op));
           }),
           py::kw_only(), py::arg("unreduced") = py::tuple(), py::arg("reduce_op") = "sum")
      .def("__len__", &PartitionSpec::size)
      .def("__getitem__",
           [](const PartitionSpec& s, py::ssize_t i) {
             const auto n = static_cast<py::ssize_t>(s.size());
             if (i < 0) i += n;
             if (i < 0 || i >= n) throw py::index_error("PartitionSpec index out of range");
             return entry_to_python(s.entry(static_cast<size_t>(i)));
           })
      .def_property_readonly(
          "unreduced", [](const PartitionSpec& s) { return py::tuple(py::cast(s.unreduced())); })
      .def_property_readonly(
          "reduce_op",
          [](const PartitionSpec& s) { return std::string(reduce_op_name(s.reduce_op())); })
      .def("__eq__", [](const PartitionSpec& a, const PartitionSpec& b) { return a == b; })
      .def("__hash__", [](const PartitionSpec& s) { return py::hash(py::str(s.to_string())); })
      .def("__repr__", &spec_repr);
  m.attr("P") = m.attr("PartitionSpec");
}

std::shared_ptr<PyMesh> mesh_from_devices(py::handle devices, std::vector<int64_t> shape,
                                          std::vector<std::string> names) {
  std::vector<int> ids;
  std::shared_ptr<Runtime> runtime;
  for (py::handle d : devices) {
    if (!py::isinstance<PyDevice>(d)) {
      throw InvalidArgumentError("Mesh: device " + std::string(py::repr(d)) + " of type " +
                                 std::string(py::str(py::type::of(d).attr("__name__"))) +
                                 " is not a vtpu.Device; expected runtime.devices()");
    }
    auto& device = d.cast<const PyDevice&>();
    if (runtime && device.runtime != runtime) {
      throw InvalidArgumentError("Mesh: device " + std::to_string(device.id) +
                                 " belongs to another vtpu.Runtime; a mesh spans one runtime");
    }
    runtime = device.runtime;
    ids.push_back(device.id);
  }
  if (!runtime) throw InvalidArgumentError("Mesh: no devices; expected at least one vtpu.Device");
  Mesh mesh(std::move(shape), std::move(names), std::move(ids));
  return std::make_shared<PyMesh>(PyMesh{runtime, DeviceMesh(*runtime, std::move(mesh))});
}

// A str or a sequence of str: the mesh axis names (or unreduced axes) `what` takes.
std::vector<std::string> names_of(py::handle axis_names, const char* what) {
  if (py::isinstance<py::str>(axis_names)) return {axis_names.cast<std::string>()};
  if (!py::isinstance<py::sequence>(axis_names)) {
    throw InvalidArgumentError(std::string(what) + ": " + std::string(py::repr(axis_names)) +
                               " is not a str or a tuple of str");
  }
  std::vector<std::string> names;
  for (py::handle name : axis_names) {
    if (!py::isinstance<py::str>(name)) {
      throw InvalidArgumentError(std::string(what) + ": axis name " + std::string(py::repr(name)) +
                                 " is not a str");
    }
    names.push_back(name.cast<std::string>());
  }
  return names;
}

const PyMesh& mesh_arg(const std::shared_ptr<PyMesh>& mesh, const char* what) {
  if (!mesh) throw py::type_error(std::string(what) + ": mesh is None; expected a vtpu.Mesh");
  return *mesh;
}

py::object mesh_devices_array(const PyMesh& m) {
  py::list flat;
  for (int id : m.mesh.devices()) flat.append(py::cast(PyDevice{m.runtime, id}));
  py::module_ np = py::module_::import("numpy");
  py::object arr = np.attr("empty")(flat.size(), "dtype"_a = "object");
  for (size_t i = 0; i < flat.size(); ++i) arr[py::int_(i)] = flat[i];
  return arr.attr("reshape")(py::tuple(py::cast(m.mesh.shape())));
}

void bind_mesh(py::module_& m) {
  py::class_<PyMesh, std::shared_ptr<PyMesh>>(
      m, "Mesh", R"doc(Named axes over the cores of one runtime (jax.sharding.Mesh).

Mesh(devices, axis_names): `devices` is a nested list or numpy object array of vtpu.Device whose
shape is the mesh's; `axis_names` a tuple of names, one per dimension.)doc")
      .def(py::init([](py::object devices, py::object axis_names) {
             py::module_ np = py::module_::import("numpy");
             py::object arr = np.attr("asarray")(devices, "dtype"_a = "object");
             auto shape = arr.attr("shape").cast<std::vector<int64_t>>();
             return mesh_from_devices(arr.attr("ravel")(), std::move(shape),
                                      names_of(axis_names, "Mesh"));
           }),
           py::arg("devices"), py::arg("axis_names"))
      .def_property_readonly(
          "axis_names", [](const PyMesh& p) { return py::tuple(py::cast(p.mesh.axis_names())); })
      .def_property_readonly(
          "shape",
          [](const PyMesh& p) {
            py::dict shape;
            for (int i = 0; i < p.mesh.num_axes(); ++i) {
              shape[py::str(p.mesh.axis_names()[i])] = p.mesh.shape()[i];
            }
            return shape;
          },
          "Axis name -> size, in axis order.")
      .def_property_readonly("axis_sizes",
                             [](const PyMesh& p) { return py::tuple(py::cast(p.mesh.shape())); })
      .def_property_readonly("size", [](const PyMesh& p) { return p.mesh.size(); })
      .def_property_readonly("devices", &mesh_devices_array,
                             "numpy object array of vtpu.Device with the mesh's shape.")
      .def_property_readonly("device_ids",
                             [](const PyMesh& p) {
                               py::array_t<int> ids(static_cast<py::ssize_t>(p.mesh.size()));
                               std::memcpy(ids.mutable_data(), p.mesh.devices().data(),
                                           p.mesh.devices().size() * sizeof(int));
                               return ids.attr("reshape")(py::tuple(py::cast(p.mesh.shape())));
                             })
      .def_property_readonly("runtime", [](const PyMesh& p) { return p.runtime; })
      .def("__eq__",
           [](const PyMesh& a, const PyMesh& b) {
             return a.runtime == b.runtime && static_cast<const Mesh&>(a.mesh) == b.mesh;
           })
      .def("__hash__", [](const PyMesh& p) { return py::hash(py::str(mesh_repr(p.mesh))); })
      .def("__repr__", [](const PyMesh& p) { return mesh_repr(p.mesh); });

  m.def(
      "make_mesh",
      [](std::vector<int64_t> axis_shapes, py::object axis_names, py::object devices,
         std::shared_ptr<Runtime> runtime) {
        std::vector<std::string> names = names_of(axis_names, "Mesh");
        if (!devices.is_none()) {
          int64_t n = 1;
          for (int64_t s : axis_shapes) {
            if (s < 0 || __builtin_mul_overflow(n, s, &n)) {
              throw InvalidArgumentError("make_mesh: axis_shapes " +
                                         std::string(py::repr(py::cast(axis_shapes))) +
                                         " (expected sizes >= 1 whose product fits int64)");
            }
          }
          if (static_cast<int64_t>(py::len(devices)) != n) {
            throw InvalidArgumentError("make_mesh: " + std::to_string(py::len(devices)) +
                                       " devices for a mesh of " + std::to_string(n) +
                                       "; expected as many devices as the product of axis_shapes");
          }
          return mesh_from_devices(devices, std::move(axis_shapes), std::move(names));
        }
        if (!runtime) {
          throw InvalidArgumentError(
              "make_mesh: neither devices= nor runtime= given; expected devices=runtime.devices()");
        }
        DeviceMesh mesh = make_mesh(*runtime, std::move(axis_shapes), std::move(names));
        return std::make_shared<PyMesh>(PyMesh{runtime, std::move(mesh)});
      },
      py::arg("axis_shapes"), py::arg("axis_names"), py::kw_only(), py::arg("devices") = py::none(),
      py::arg("runtime") = nullptr,
      R"doc(A mesh of `axis_shapes` named `axis_names` (jax.make_mesh).

make_mesh((2, 4), ("data", "model"), devices=rt.devices()) lays the devices out row-major;
len(devices) must equal the product of the shapes. make_mesh(shape, names, runtime=rt) takes
the runtime's first cores.)doc");
}

void bind_named_sharding(py::module_& m) {
  py::class_<PySharding>(m, "NamedSharding",
                         R"doc(A mesh and a PartitionSpec (jax.sharding.NamedSharding).

Uneven shapes are padded as GSPMD pads them: the trailing shards are short or empty.)doc")
      .def(py::init([](std::shared_ptr<PyMesh> mesh, const PartitionSpec& spec) {
             return PySharding{mesh, NamedSharding(mesh_arg(mesh, "NamedSharding").mesh, spec)};
           }),
           py::arg("mesh"), py::arg("spec"))
      .def_property_readonly("mesh", [](const PySharding& s) { return s.mesh; })
      .def_property_readonly("spec", [](const PySharding& s) { return s.sharding.spec(); })
      .def_property_readonly("num_devices",
                             [](const PySharding& s) { return s.sharding.mesh().size(); })
      .def_property_readonly("is_fully_replicated",
                             [](const PySharding& s) { return s.sharding.is_fully_replicated(); })
      .def(
          "shard_shape",
          [](const PySharding& s, std::vector<int64_t> shape) {
            return py::tuple(py::cast(s.sharding.shard_shape(shape)));
          },
          py::arg("global_shape"), "The largest block's shape (ceil division per dimension).")
      .def(
          "devices_indices_map",
          [](const PySharding& s, std::vector<int64_t> shape) {
            s.sharding.check_shape(shape);
            py::dict map;
            for (int id : s.sharding.mesh().devices()) {
              map[py::cast(PyDevice{s.mesh->runtime, id})] =
                  index_tuple(s.sharding.index_ranges(id, shape));
            }
            return map;
          },
          py::arg("global_shape"), "Device -> the tuple of slices of the global array it holds.")
      .def("__eq__",
           [](const PySharding& a, const PySharding& b) {
             return a.mesh->runtime == b.mesh->runtime && a.sharding == b.sharding;
           })
      .def("__hash__",
           [](const PySharding& s) { return py::hash(py::str(sharding_repr(s.sharding))); })
      .def("__repr__", [](const PySharding& s) { return sharding_repr(s.sharding); });
}

}  // namespace

void bind_array(py::module_& m);

void register_sharding(py::module_& m) {
  bind_partition_spec(m);
  bind_mesh(m);
  bind_named_sharding(m);
  bind_array(m);
}

}  // namespace vtpu::python
