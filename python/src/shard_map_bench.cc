// vtpu._vtpu._bench_psum_cpp: the C++ side of bench/python/psum_overhead.py, the same shard_map
// and psum loop as the benchmark's Python function, with a C++ function instead.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "shard_map_host.h"

namespace vtpu::python {
namespace {

// Seconds per psum: one shard_map call on `mesh` whose function makes an f32 block of `nbytes`
// on its core and psums it over `axis_name` `iters` times, timed whole and divided by `iters`.
// Throws InternalError when a result is wrong.
double bench_psum_cpp(const std::shared_ptr<PyMesh>& mesh, int64_t nbytes, int iters,
                      const std::string& axis_name) {
  if (!mesh) throw py::type_error("_bench_psum_cpp: mesh is None (expected a vtpu.Mesh)");
  if (nbytes < 4 || iters < 1) {
    throw InvalidArgumentError("_bench_psum_cpp nbytes " + std::to_string(nbytes) + ", iters " +
                               std::to_string(iters) + " (expected >= 4 and >= 1)");
  }
  const int64_t n = nbytes / 4;
  ShardMap f(mesh->mesh, {}, {}, [&](ShardMapContext& ctx, std::span<const LocalArray>) {
    LocalArray x = LocalArray::empty(ctx.core(), ElementType::kF32, {n});
    std::ranges::fill(x.data<float>(), 1.0f);
    LocalArray out;
    for (int k = 0; k < iters; ++k) out = ctx.psum(x, axis_name);
    const auto want = static_cast<float>(ctx.axis_size(axis_name));
    if (!std::ranges::all_of(std::as_const(out).data<float>(),
                             [&](float v) { return v == want; })) {
      throw InternalError("_bench_psum_cpp: wrong psum result");
    }
    return std::vector<LocalArray>{};
  });
  py::gil_scoped_release nogil;
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
}

}  // namespace

void register_shard_map_bench(py::module_& m) {
  m.def("_bench_psum_cpp", &bench_psum_cpp, py::arg("mesh"), py::arg("nbytes"), py::arg("iters"),
        py::arg("axis_name"),
        "Seconds per psum of `nbytes` of f32 over `axis_name`, from a C++ shard_map function "
        "(bench/python/psum_overhead.py compares it with the same loop in Python).");
}

}  // namespace vtpu::python
