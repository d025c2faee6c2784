// vtpu.device_put, vtpu.device_get and vtpu.Array (jax.Array's host-facing surface): numpy in,
// blocks on the cores, numpy out.
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "py_common.h"
#include "vtpu/common/bfloat16.h"
#include "vtpu/planner/reshard_planner.h"
#include "vtpu/sharding/visualize.h"

namespace vtpu::python {
namespace {

/// One block of an array on one device (jax.Shard).
struct PyShard {
  PyDevice device;
  py::tuple index;
  int64_t replica_id = 0;
  py::array data;
};

// float32 values rounded to bf16 bit patterns (round to nearest even, as XLA converts).
py::array to_bf16_bits(const py::array& values) {
  py::array_t<float, py::array::c_style | py::array::forcecast> f(values);
  py::array_t<uint16_t> bits(std::vector<py::ssize_t>(f.shape(), f.shape() + f.ndim()));
  const float* src = f.data();
  auto* dst = bits.mutable_data();
  for (py::ssize_t i = 0; i < f.size(); ++i) dst[i] = float_to_bf16(src[i]).bits;
  return bits;
}

// bf16 bit patterns (uint16) as the float32 values they encode (exact).
py::array from_bf16_bits(const py::array& bits) {
  py::array_t<uint16_t, py::array::c_style | py::array::forcecast> b(bits);
  py::array_t<float> values(std::vector<py::ssize_t>(b.shape(), b.shape() + b.ndim()));
  const uint16_t* src = b.data();
  float* dst = values.mutable_data();
  for (py::ssize_t i = 0; i < b.size(); ++i) dst[i] = bf16_to_float(BFloat16{src[i]});
  return values;
}

bool holds_bf16_bits(const py::array& arr) {
  try {
    return element_type_of(arr.dtype(), "device_put") == ElementType::kBf16;
  } catch (const InvalidArgumentError&) {
    return false;
  }
}

// The host array device_put stores, and its element type. Values convert by value, as
// jnp.asarray(x, dtype) does; a uint16 array holds bf16 bit patterns, so it converts from the
// values they encode. Without `dtype`, float64 becomes float32 as in JAX (64-bit types need
// jax_enable_x64 there; vtpu arrays hold no f64).
std::pair<py::array, ElementType> host_array(py::handle x, py::handle dtype) {
  py::array arr = contiguous_array(x, "device_put");
  ElementType type;
  if (!dtype.is_none()) {
    type = parse_dtype_arg(dtype, "device_put");
  } else if (arr.dtype().kind() == 'f' && arr.dtype().itemsize() == 8) {
    type = ElementType::kF32;
  } else {
    type = element_type_of(arr.dtype(), "device_put");
  }
  check_sharded_array_dtype(type, "device_put");
  const bool bits = holds_bf16_bits(arr);
  if (type == ElementType::kBf16) {
    if (!bits) arr = to_bf16_bits(arr);
  } else {
    if (bits) arr = from_bf16_bits(arr);
    py::dtype want = numpy_dtype(type);
    if (!arr.dtype().equal(want)) arr = contiguous_array(arr.attr("astype")(want), "device_put");
  }
  return {arr, type};
}

PyArray device_put(py::handle x, const PySharding& sharding, py::handle dtype) {
  Runtime& runtime = *sharding.mesh->runtime;
  if (py::isinstance<PyArray>(x)) {
    const PyArray& a = x.cast<const PyArray&>();
    const ShardedArray& array = a.get();
    if (!dtype.is_none() && parse_dtype_arg(dtype, "device_put") != array.dtype()) {
      throw InvalidArgumentError(
          "device_put: dtype " + std::string(py::str(dtype)) + " differs from the array's " +
          std::string(element_type_name(array.dtype())) + "; expected no dtype for a vtpu.Array");
    }
    if (a.mesh->runtime == sharding.mesh->runtime) {
      py::gil_scoped_release release;
      auto moved = std::make_shared<ShardedArray>(reshard(runtime, array, sharding.sharding));
      return PyArray{sharding.mesh, std::move(moved)};
    }
    return device_put(gather_to_numpy(array), sharding, py::none());  // another runtime
  }
  auto [host, type] = host_array(x, dtype);
  std::vector<int64_t> shape(host.shape(), host.shape() + host.ndim());
  const auto* bytes = static_cast<const std::byte*>(host.data());
  std::span<const std::byte> data(bytes, static_cast<size_t>(host.nbytes()));
  py::gil_scoped_release release;
  auto array = std::make_shared<ShardedArray>(
      ShardedArray::device_put(runtime, type, data, std::move(shape), sharding.sharding));
  return PyArray{sharding.mesh, std::move(array)};
}

py::array block_to_numpy(const ShardedArray& array, int device) {
  std::vector<int64_t> shape = array.local_shape(device);
  py::array out(numpy_dtype(array.dtype()), std::vector<py::ssize_t>(shape.begin(), shape.end()));
  const DeviceBuffer& buffer = array.buffer(device);
  if (buffer.size_bytes() > 0) {
    BufferPin pin = buffer.pin();
    std::memcpy(out.mutable_data(), buffer.data(), buffer.size_bytes());
  }
  return out;
}

std::string array_repr(const PyArray& a) {
  if (!a.array) return "vtpu.Array(<deleted>)";
  const ShardedArray& x = *a.array;
  std::string shape;
  for (size_t i = 0; i < x.global_shape().size(); ++i) {
    shape += (i > 0 ? ", " : "") + std::to_string(x.global_shape()[i]);
  }
  if (x.global_shape().size() == 1) shape += ",";
  return "vtpu.Array(shape=(" + shape + "), dtype=" + std::string(element_type_name(x.dtype())) +
         ", sharding=" + sharding_repr(x.sharding()) + ")";
}

void bind_shard(py::module_& m) {
  py::class_<PyShard>(m, "Shard", "One device's block of a vtpu.Array (jax.Shard).")
      .def_readonly("device", &PyShard::device)
      .def_readonly("index", &PyShard::index, "The tuple of slices of the global array it holds.")
      .def_readonly("replica_id", &PyShard::replica_id)
      .def_readonly("data", &PyShard::data, "A numpy copy of the block.")
      .def("__repr__", [](const PyShard& s) {
        return "Shard(device=VtpuDevice(id=" + std::to_string(s.device.id) +
               "), index=" + std::string(py::repr(s.index)) +
               ", replica_id=" + std::to_string(s.replica_id) + ")";
      });
}

}  // namespace

void bind_array(py::module_& m) {
  bind_shard(m);
  py::class_<PyArray>(m, "Array", R"doc(An array laid out over a mesh of cores (jax.Array).

Made by vtpu.device_put or returned by a vtpu.shard_map function. np.asarray(a) gathers it.)doc")
      .def_property_readonly(
          "shape", [](const PyArray& a) { return py::tuple(py::cast(a.get().global_shape())); })
      .def_property_readonly(
          "dtype", [](const PyArray& a) { return numpy_dtype(a.get().dtype()); },
          "numpy's dtype; bf16 arrays give uint16 (bit patterns) unless "
          "ml_dtypes is installed.")
      .def_property_readonly(
          "element_type",
          [](const PyArray& a) { return std::string(element_type_name(a.get().dtype())); },
          "XLA's name of the element type: \"f32\", \"bf16\", ...")
      .def_property_readonly("ndim", [](const PyArray& a) { return a.get().global_shape().size(); })
      .def_property_readonly("itemsize",
                             [](const PyArray& a) { return element_size_bytes(a.get().dtype()); })
      .def_property_readonly(
          "is_fully_replicated",
          [](const PyArray& a) { return a.get().sharding().is_fully_replicated(); })
      .def(
          "devices",
          [](const PyArray& a) {
            py::set devices;
            for (int id : a.get().sharding().mesh().devices()) {
              devices.add(py::cast(PyDevice{a.mesh->runtime, id}));
            }
            return devices;
          },
          "The set of devices that hold a block.")
      .def_property_readonly("size", [](const PyArray& a) { return a.get().num_elements(); })
      .def_property_readonly("nbytes",
                             [](const PyArray& a) {
                               const ShardedArray& x = a.get();
                               return x.num_elements() *
                                      static_cast<int64_t>(element_size_bytes(x.dtype()));
                             })
      .def_property_readonly("sharding",
                             [](const PyArray& a) {
                               return PySharding{a.mesh, a.get().sharding()};
                             })
      .def_property_readonly(
          "addressable_shards",
          [](const PyArray& a) {
            const ShardedArray& x = a.get();
            std::vector<PyShard> shards;
            for (int id : x.sharding().mesh().devices()) {
              shards.push_back(PyShard{PyDevice{a.mesh->runtime, id},
                                       index_tuple(x.index_ranges(id)), x.sharding().replica_id(id),
                                       block_to_numpy(x, id)});
            }
            return shards;
          },
          "Every device's block, in mesh device order.")
      .def(
          "__array__",
          [](const PyArray& a, py::object dtype, py::object /*copy*/) {
            py::array out = gather_to_numpy(a.get());
            if (!dtype.is_none()) return py::array(out.attr("astype")(dtype));
            return out;
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("__len__",
           [](const PyArray& a) {
             const ShardedArray& x = a.get();
             if (x.global_shape().empty()) throw py::type_error("len() of unsized object");
             return x.global_shape()[0];
           })
      .def(
          "delete", [](PyArray& a) { a.array.reset(); }, "Frees the blocks on every core.")
      .def("is_deleted", [](const PyArray& a) { return !a.array; })
      .def(
          "block_until_ready", [](py::object self) { return self; },
          "Returns the array: vtpu arrays are ready when made.")
      .def("__repr__", &array_repr);

  m.def(
      "device_put",
      [](py::handle x, const PySharding& sharding, py::handle dtype) {
        return device_put(x, sharding, dtype);
      },
      py::arg("x"), py::arg("sharding"), py::kw_only(), py::arg("dtype") = py::none(),
      R"doc(Copies `x` onto the cores of `sharding`'s mesh (jax.device_put).

x: a numpy array or array-like (float64 is stored as float32, as JAX does without x64) or a
vtpu.Array (resharded with collectives). dtype: "f32", "bf16", np.float16, ... (float values
given with dtype="bf16" are rounded to bf16). Returns a vtpu.Array. Raises ValueError for a shape
the sharding cannot split or a dtype vtpu does not hold, MemoryError
(vtpu.ResourceExhaustedError) when a block does not fit a core's HBM.)doc");
  m.def(
      "device_get", [](const PyArray& a) { return gather_to_numpy(a.get()); }, py::arg("x"),
      "The global array as numpy (jax.device_get); the same as np.asarray(x).");
  m.def(
      "visualize_array_sharding",
      [](const PyArray& a, double scale, int min_width, int max_width) {
        return visualize_array_sharding(a.get(), VisualizeOptions{scale, min_width, max_width});
      },
      py::arg("x"), py::kw_only(), py::arg("scale") = 1.0, py::arg("min_width") = 9,
      py::arg("max_width") = 80,
      "The picture of which device holds which block of a rank-1 or rank-2 array "
      "(jax.debug.visualize_array_sharding), returned as a str.");
}

}  // namespace vtpu::python
