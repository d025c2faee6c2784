// What the binding files of the _vtpu extension share: dtype mapping between vtpu and numpy,
// JSON <-> Python conversion, and the Python-side holders that keep a Runtime alive for as long as
// a mesh, sharding or array made from it.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vtpu/common/element_type.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/sharding/named_sharding.h"
#include "vtpu/sharding/shard_map.h"
#include "vtpu/sharding/sharded_array.h"

namespace vtpu::python {

namespace py = pybind11;

/// numpy's dtype for `type`. bf16 has no numpy dtype in Debian 12 (no ml_dtypes package): it is
/// ml_dtypes.bfloat16 when that module imports, else uint16 holding the bit patterns.
py::dtype numpy_dtype(ElementType type);
/// vtpu's element type of a numpy dtype; uint16 (and ml_dtypes.bfloat16) is bf16. Throws
/// InvalidArgumentError naming the dtype and `what` ("device_put") when vtpu has no such type.
ElementType element_type_of(const py::dtype& dtype, const char* what);
/// A dtype argument: a numpy dtype or type, or a name ("f32", "float32", "bf16", "bfloat16").
ElementType parse_dtype_arg(py::handle dtype, const char* what);
/// `obj` as a C-contiguous, aligned numpy array in native byte order (copying only when it is not
/// one already). numpy's own error propagates when it cannot make one (a ragged list: ValueError;
/// too large: MemoryError); an object or complex array is InvalidArgumentError naming `what`.
py::array contiguous_array(py::handle obj, const char* what);

/// JSON as Python objects (dict, list, str, int, float, bool, None) and back.
py::object to_python(const nlohmann::json& j);
nlohmann::json to_json_value(py::handle obj);

/// A Python-side core: the runtime it belongs to and its id.
struct PyDevice {
  std::shared_ptr<Runtime> runtime;
  int id = 0;
};

/// A mesh bound to a runtime (vtpu.sharding.Mesh); the runtime lives as long as the mesh.
struct PyMesh {
  std::shared_ptr<Runtime> runtime;
  DeviceMesh mesh;
};

/// vtpu.NamedSharding: a mesh and a spec.
struct PySharding {
  std::shared_ptr<PyMesh> mesh;
  NamedSharding sharding;
};

/// vtpu.Array: a ShardedArray and the mesh it lives on. `array` is empty after delete().
struct PyArray {
  std::shared_ptr<PyMesh> mesh;
  std::shared_ptr<ShardedArray> array;
  const ShardedArray& get() const;  // throws FailedPreconditionError after delete()
};

/// Python reprs: "PartitionSpec('x', None)", "Mesh('x': 4, 'y': 2)", "NamedSharding(mesh=...,
/// spec=...)".
std::string spec_repr(const PartitionSpec& spec);
std::string mesh_repr(const Mesh& mesh);
std::string sharding_repr(const NamedSharding& sharding);

/// A block's index ranges as the tuple of slices jax.Shard.index holds.
py::tuple index_tuple(const std::vector<IndexRange>& ranges);

/// The global array as numpy (ShardedArray::gather), without the GIL while copying.
py::array gather_to_numpy(const ShardedArray& array);

/// Makes the module's function-local statics that import Python modules (json, ml_dtypes) at
/// import time: made first on two core threads at once, one would hold the static's guard while
/// waiting for the GIL the other holds while waiting for the guard.
void warm_up_common();

void register_errors(py::module_& m);
void register_runtime(py::module_& m);
void register_sharding(py::module_& m);
void register_shard_map(py::module_& m);
void register_memory(py::module_& m);
void register_stress(py::module_& m);
void register_planner(py::module_& m);
void register_data(py::module_& m);

}  // namespace vtpu::python
