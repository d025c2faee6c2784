// vtpu._vtpu._lax: one named collective on one array (or Python scalar), for the function
// vtpu.shard_map runs; python/vtpu/lax.py maps them over pytrees and documents them.
#include <Python.h>

#include <utility>
#include <vector>

#include "shard_map_host.h"

namespace vtpu::python {
namespace {

// Runs `op(ctx, block, axes)` on x's block of this core, without the GIL for the copy into HBM
// and the collective, and returns the result as a numpy array that owns it.
template <typename Op>
py::object collective(py::handle x, py::handle axis_name, const char* what, Op&& op) {
  const auto [ctx, axes] = bind_axes(axis_name);
  Operand in = operand(ctx, x, what);
  LocalArray out;
  {
    py::gil_scoped_release nogil;
    in.fill();
    out = op(ctx, std::move(in.array), axes);
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
  return collective(x, axis_name, "psum", [](ShardMapContext& ctx, LocalArray&& a, auto& axes) {
    return ctx.psum(std::move(a), axes);
  });
}

py::object pmean(py::handle x, py::handle axis_name) {
  if (is_python_scalar(x)) {
    bound_axis_size(axis_name);
    return py::float_(py::reinterpret_borrow<py::object>(x));
  }
  return collective(x, axis_name, "pmean", [](ShardMapContext& ctx, LocalArray&& a, auto& axes) {
    return ctx.pmean(a, axes);
  });
}

py::object pmax(py::handle x, py::handle axis_name) {
  if (is_python_scalar(x)) {
    bound_axis_size(axis_name);
    return py::reinterpret_borrow<py::object>(x);
  }
  return collective(x, axis_name, "pmax", [](ShardMapContext& ctx, LocalArray&& a, auto& axes) {
    return ctx.pmax(a, axes);
  });
}

py::object pmin(py::handle x, py::handle axis_name) {
  if (is_python_scalar(x)) {
    bound_axis_size(axis_name);
    return py::reinterpret_borrow<py::object>(x);
  }
  return collective(x, axis_name, "pmin", [](ShardMapContext& ctx, LocalArray&& a, auto& axes) {
    return ctx.pmin(a, axes);
  });
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

std::vector<PermutePair> perm_of(py::handle perm) {
  std::vector<PermutePair> pairs;
  for (py::handle p : perm) {
    if (py::len(p) != 2) {
      throw InvalidArgumentError("ppermute perm entry " + py::repr(p).cast<std::string>() +
                                 " (expected a (source, destination) pair)");
    }
    pairs.emplace_back(py::cast<int>(p[py::int_(0)]), py::cast<int>(p[py::int_(1)]));
  }
  return pairs;
}

py::object ppermute(py::handle x, py::handle axis_name, py::handle perm) {
  const std::vector<PermutePair> pairs = perm_of(perm);
  return collective(x, axis_name, "ppermute",
                    [&](ShardMapContext& ctx, LocalArray&& a, auto& axes) {
                      return ctx.ppermute(std::move(a), axes, pairs);
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
