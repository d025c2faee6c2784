#include "py_common.h"

#include <cstring>
#include <string>
#include <type_traits>

#include "vtpu/common/error.h"

namespace vtpu::python {
namespace {

// ml_dtypes.bfloat16 when the module imports (pip), else None; looked up once.
py::object ml_dtypes_bfloat16() {
  static py::object* cached = [] {
    auto* obj = new py::object(py::none());
    try {
      *obj = py::dtype::from_args(py::module_::import("ml_dtypes").attr("bfloat16"));
    } catch (const py::error_already_set&) {
      PyErr_Clear();
    }
    return obj;
  }();
  return *cached;
}

}  // namespace

py::dtype numpy_dtype(ElementType type) {
  switch (type) {
    case ElementType::kPred:
      return py::dtype("bool");
    case ElementType::kS8:
      return py::dtype("int8");
    case ElementType::kU8:
      return py::dtype("uint8");
    case ElementType::kS16:
      return py::dtype("int16");
    case ElementType::kU16:
      return py::dtype("uint16");
    case ElementType::kF16:
      return py::dtype("float16");
    case ElementType::kBf16: {
      py::object bf16 = ml_dtypes_bfloat16();
      return bf16.is_none() ? py::dtype("uint16") : py::reinterpret_borrow<py::dtype>(bf16);
    }
    case ElementType::kS32:
      return py::dtype("int32");
    case ElementType::kU32:
      return py::dtype("uint32");
    case ElementType::kF32:
      return py::dtype("float32");
    case ElementType::kS64:
      return py::dtype("int64");
    case ElementType::kU64:
      return py::dtype("uint64");
    case ElementType::kF64:
      return py::dtype("float64");
  }
  throw InternalError("numpy_dtype: unknown element type");
}

ElementType element_type_of(const py::dtype& dtype, const char* what) {
  py::object bf16 = ml_dtypes_bfloat16();
  if (!bf16.is_none() && dtype.equal(bf16)) return ElementType::kBf16;
  const char kind = dtype.kind();
  const auto size = dtype.itemsize();
  if (kind == 'f' && size == 4) return ElementType::kF32;
  if (kind == 'f' && size == 2) return ElementType::kF16;
  if (kind == 'f' && size == 8) return ElementType::kF64;
  if (kind == 'i' && size == 4) return ElementType::kS32;
  if (kind == 'i' && size == 8) return ElementType::kS64;
  if (kind == 'u' && size == 2) return ElementType::kBf16;  // bf16 bit patterns
  throw InvalidArgumentError(std::string(what) + ": numpy dtype " +
                             std::string(py::str(static_cast<const py::handle&>(dtype))) +
                             " has no vtpu type; expected float32, float16, bfloat16 (uint16 bit "
                             "patterns), int32, int64 or float64");
}

ElementType parse_dtype_arg(py::handle dtype, const char* what) {
  if (py::isinstance<py::str>(dtype)) {
    std::string name = dtype.cast<std::string>();
    if (name == "bfloat16") return ElementType::kBf16;
    try {
      return parse_element_type(name);
    } catch (const InvalidArgumentError&) {
      // Not an XLA name: try numpy's ("float32", "int64").
    }
  }
  py::dtype d;
  try {
    d = py::dtype::from_args(py::reinterpret_borrow<py::object>(dtype));
  } catch (const py::error_already_set&) {
    PyErr_Clear();
    throw InvalidArgumentError(std::string(what) + ": dtype " +
                               py::repr(dtype).cast<std::string>() +
                               " is neither a numpy dtype nor an XLA type name (f32, bf16, ...)");
  }
  return element_type_of(d, what);
}

py::array contiguous_array(py::handle obj, const char* what) {
  // asarray(order="C"), not ascontiguousarray: that one makes a 0-d array (a numpy scalar) 1-d,
  // and JAX keeps the shape ().
  static py::object* asarray = new py::object(py::module_::import("numpy").attr("asarray"));
  auto a = py::reinterpret_borrow<py::array>((*asarray)(obj, py::arg("order") = "C"));
  const char kind = a.dtype().kind();
  if (kind == 'O' || kind == 'c' || kind == 'U' || kind == 'S' || kind == 'M' || kind == 'm') {
    throw InvalidArgumentError(std::string(what) + ": a " +
                               std::string(py::str(py::type::of(obj).attr("__name__"))) +
                               " of numpy dtype " + std::string(py::str(a.dtype())) +
                               " is not an array of real numbers; expected a numeric array");
  }
  if (!a.dtype().attr("isnative").cast<bool>()) {
    a = py::reinterpret_borrow<py::array>(
        (*asarray)(a.attr("astype")(a.dtype().attr("newbyteorder")("=")), py::arg("order") = "C"));
  }
  return a;
}

py::object to_python(const nlohmann::json& j) {
  static py::object* loads = new py::object(py::module_::import("json").attr("loads"));
  return (*loads)(j.dump());
}

nlohmann::json to_json_value(py::handle obj) {
  static py::object* dumps = new py::object(py::module_::import("json").attr("dumps"));
  // allow_nan=False: nlohmann::json has no NaN or infinity literals (json.dumps raises ValueError).
  std::string text = (*dumps)(obj, py::arg("allow_nan") = false).cast<std::string>();
  return nlohmann::json::parse(text);
}

void warm_up_common() {
  (void)numpy_dtype(ElementType::kBf16);
  (void)contiguous_array(py::int_(0), "import");
  (void)to_python(nlohmann::json());
  (void)to_json_value(py::none());
}

const ShardedArray& PyArray::get() const {
  if (!array) throw FailedPreconditionError("the array has been deleted");
  return *array;
}

std::string spec_repr(const PartitionSpec& spec) {
  return "PartitionSpec" + spec.to_string().substr(1);  // "P(...)" -> "PartitionSpec(...)"
}

std::string mesh_repr(const Mesh& mesh) {
  std::string s = "Mesh(";
  for (int i = 0; i < mesh.num_axes(); ++i) {
    if (i > 0) s += ", ";
    s += "'" + mesh.axis_names()[i] + "': " + std::to_string(mesh.shape()[i]);
  }
  return s + ")";
}

std::string sharding_repr(const NamedSharding& sharding) {
  return "NamedSharding(mesh=" + mesh_repr(sharding.mesh()) +
         ", spec=" + spec_repr(sharding.spec()) + ")";
}

py::tuple index_tuple(const std::vector<IndexRange>& ranges) {
  py::tuple index(ranges.size());
  for (size_t d = 0; d < ranges.size(); ++d) {
    index[d] = py::slice(py::int_(ranges[d].start), py::int_(ranges[d].stop), py::none());
  }
  return index;
}

py::array gather_to_numpy(const ShardedArray& array) {
  const std::vector<int64_t>& shape = array.global_shape();
  py::array out(numpy_dtype(array.dtype()), std::vector<py::ssize_t>(shape.begin(), shape.end()));
  auto* dst = static_cast<std::byte*>(out.mutable_data());
  const auto nbytes = static_cast<size_t>(out.nbytes());
  {
    py::gil_scoped_release release;
    visit_data_type(array.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, double>) {
        check_sharded_array_dtype(array.dtype(), "gather");  // throws: no f64 arrays
      } else {
        std::vector<T> values = array.gather<T>();
        if (nbytes > 0) std::memcpy(dst, values.data(), nbytes);  // data() may be null if empty
      }
    });
  }
  return out;
}

}  // namespace vtpu::python
