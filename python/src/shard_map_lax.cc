// vtpu._vtpu._lax: one named collective on one array (or Python scalar), for the function
// vtpu.shard_map runs; python/vtpu/lax.py maps them over pytrees and documents them.
#include <Python.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "shard_map_host.h"

namespace vtpu::python {
namespace {

// Runs `op(ctx, block, axes)` on x's block of this core, without the GIL for the copy into HBM
// and the collective, and returns the result as a numpy array that owns it.
template <typename Op>
py::object collective(py::handle x, py::handle axis_name, const char* what, Op&& op) {
  const BoundAxes bound = bind_axes(axis_name);
  const auto& [ctx, axes] = bound;
  live_communicator(bound);
  const Operand in = operand(ctx, x, what);
  LocalArray out;
  {
    const CoreGilRelease nogil;
    out = op(ctx, in.on_core(ctx), axes);
  }
  return result_array(std::move(out));
}

// psum, pmax or pmin of an array, reading it where it is: a host array is not copied into HBM
// first (the collective reads process memory in place), so only the result is a new block.
py::object reduce_array(py::handle x, py::handle axis_name, const char* what, ReduceOp op) {
  const BoundAxes bound = bind_axes(axis_name);
  const auto& [ctx, axes] = bound;
  Communicator& comm = live_communicator(bound);
  const Operand in = operand(ctx, x, what);
  LocalArray out = LocalArray::empty(ctx.core(), in.type, in.shape);
  {
    const CoreGilRelease nogil;
    const BufferPin pin = out.buffer().pin();
    comm.all_reduce_bytes(ctx.core(), in.type, in.bytes(), out.mutable_bytes(), in.shape, op);
  }
  return result_array(std::move(out));
}

// A Python int, float or bool (not a numpy scalar): the same on every device, as a constant in
// JAX, so its reductions need no communication.
bool is_python_scalar(py::handle x) {
  return PyLong_CheckExact(x.ptr()) || PyFloat_CheckExact(x.ptr()) || PyBool_Check(x.ptr());
}

// The size of `axes` in the current shard_map (NameError outside one).
int64_t bound_axis_size(py::handle axis_name) {
  const auto [ctx, axes] = bind_axes(axis_name);
  return ctx.axis_size(axes);
}

py::object psum(py::handle x, py::handle axis_name) {
  if (is_python_scalar(x)) return x * py::int_(bound_axis_size(axis_name));
  return reduce_array(x, axis_name, "psum", ReduceOp::kSum);
}

py::object pmean(py::handle x, py::handle axis_name) {
  if (is_python_scalar(x)) {
    bound_axis_size(axis_name);  // NameError outside shard_map, as for an array
    return py::float_(py::reinterpret_borrow<py::object>(x));
  }
  return collective(x, axis_name, "pmean", [](ShardMapContext& ctx, LocalArray&& a, auto& axes) {
    return ctx.pmean(a, axes);
  });
}

// pmax and pmin of a Python scalar: the scalar, which every core holds.
py::object pmax(py::handle x, py::handle axis_name) {
  if (!is_python_scalar(x)) return reduce_array(x, axis_name, "pmax", ReduceOp::kMax);
  bound_axis_size(axis_name);  // NameError outside shard_map, as for an array
  return py::reinterpret_borrow<py::object>(x);
}

py::object pmin(py::handle x, py::handle axis_name) {
  if (!is_python_scalar(x)) return reduce_array(x, axis_name, "pmin", ReduceOp::kMin);
  bound_axis_size(axis_name);
  return py::reinterpret_borrow<py::object>(x);
}

py::object all_gather(py::handle x, py::handle axis_name, int axis, bool tiled) {
  return collective(x, axis_name, "all_gather",
                    [&](ShardMapContext& ctx, LocalArray&& a, auto& axes) {
                      return ctx.all_gather(a, axes, axis, tiled);
                    });
}

py::object psum_scatter(py::handle x, py::handle axis_name, int scatter_dimension, bool tiled) {
  return collective(x, axis_name, "psum_scatter",
                    [&](ShardMapContext& ctx, LocalArray&& a, auto& axes) {
                      return ctx.psum_scatter(a, axes, scatter_dimension, tiled);
                    });
}

py::object all_to_all(py::handle x, py::handle axis_name, int split_axis, int concat_axis,
                      bool tiled) {
  return collective(x, axis_name, "all_to_all",
                    [&](ShardMapContext& ctx, LocalArray&& a, auto& axes) {
                      return ctx.all_to_all(a, axes, split_axis, concat_axis, tiled);
                    });
}

// A ppermute index: a Python int (or an object with __index__, as a numpy integer) in int range.
int perm_index(py::handle v, py::handle pair) {
  const auto bad = [&] {
    return InvalidArgumentError("ppermute perm entry " + py::repr(pair).cast<std::string>() +
                                " (expected a (source, destination) pair of int axis indices)");
  };
  if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr())) throw bad();
  auto index = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long i = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0 || i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max()) {
    throw bad();
  }
  return static_cast<int>(i);
}

std::vector<PermutePair> perm_of(py::handle perm) {
  if (!py::isinstance<py::iterable>(perm) || py::isinstance<py::str>(perm)) {
    throw InvalidArgumentError("ppermute perm " + py::repr(perm).cast<std::string>() +
                               " (expected a sequence of (source, destination) pairs)");
  }
  std::vector<PermutePair> pairs;
  for (py::handle p : perm) {
    if (!py::isinstance<py::sequence>(p) || py::isinstance<py::str>(p) || py::len(p) != 2) {
      throw InvalidArgumentError("ppermute perm entry " + py::repr(p).cast<std::string>() +
                                 " (expected a (source, destination) pair)");
    }
    const py::sequence pair = py::reinterpret_borrow<py::sequence>(p);
    pairs.emplace_back(perm_index(pair[0], p), perm_index(pair[1], p));
  }
  return pairs;
}

py::object ppermute(py::handle x, py::handle axis_name, py::handle perm) {
  const std::vector<PermutePair> pairs = perm_of(perm);
  return collective(x, axis_name, "ppermute",
                    [&](ShardMapContext& ctx, LocalArray&& a, auto& axes) {
                      return ctx.ppermute(std::move(a), axes, pairs);  // in place for a copy
                    });
}

int64_t axis_index(py::handle axis_name) {
  const auto [ctx, axes] = bind_axes(axis_name);
  return ctx.axis_index(axes);
}

}  // namespace

void register_lax(py::module_& lax) {
  lax.doc() = "One named collective on one array; vtpu.lax wraps these for pytrees.";
  lax.def("psum", &psum, py::arg("x"), py::arg("axis_name"));
  lax.def("pmean", &pmean, py::arg("x"), py::arg("axis_name"));
  lax.def("pmax", &pmax, py::arg("x"), py::arg("axis_name"));
  lax.def("pmin", &pmin, py::arg("x"), py::arg("axis_name"));
  lax.def("all_gather", &all_gather, py::arg("x"), py::arg("axis_name"), py::arg("axis"),
          py::arg("tiled"));
  lax.def("psum_scatter", &psum_scatter, py::arg("x"), py::arg("axis_name"),
          py::arg("scatter_dimension"), py::arg("tiled"));
  lax.def("all_to_all", &all_to_all, py::arg("x"), py::arg("axis_name"), py::arg("split_axis"),
          py::arg("concat_axis"), py::arg("tiled"));
  lax.def("ppermute", &ppermute, py::arg("x"), py::arg("axis_name"), py::arg("perm"));
  lax.def("axis_index", &axis_index, py::arg("axis_name"));
  lax.def("axis_size", &bound_axis_size, py::arg("axis_name"));
}

}  // namespace vtpu::python
