// vtpu.shard_map: a Python function run once per core on that core's thread (Runtime::run_spmd
// through vtpu::ShardMap). The caller gives up the GIL while the cores run; each core takes it to
// run the function and gives it up again inside every collective (shard_map_lax.cc), so the cores'
// numpy work and their collectives interleave.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shard_map_host.h"

namespace vtpu::python {
namespace {

// in_specs / out_specs: one P (shared by every argument, or naming the single output) or a tuple
// or list of them.
struct Specs {
  std::vector<PartitionSpec> specs;
  bool single = false;
};

Specs specs_of(py::handle obj, const char* what) {
  Specs s;
  if (py::isinstance<py::tuple>(obj) || py::isinstance<py::list>(obj)) {
    for (py::handle p : obj) s.specs.push_back(py::cast<PartitionSpec>(p));
    return s;
  }
  try {
    s.specs.push_back(py::cast<PartitionSpec>(obj));
  } catch (const py::cast_error&) {
    throw InvalidArgumentError(std::string(what) + " " + py::repr(obj).cast<std::string>() +
                               " (expected a P or a tuple of P)");
  }
  s.single = true;
  return s;
}

// What vtpu.shard_map(f, ...) returns: f bound to its mesh and specs.
struct Mapped {
  py::object f;
  py::object mesh_object;  // the vtpu.Mesh, for device_put
  std::shared_ptr<PyMesh> mesh;
  Specs in;
  Specs out;
  bool check_vma = true;
};

// One call: the inputs, laid out as their in specs ask, kept alive while any view of them is.
struct Call {
  const Mapped& mapped;
  std::vector<std::shared_ptr<const ShardedArray>> inputs;
};

// Python's AbortedError: a core released because another failed; turned back into the C++ error
// so that run_spmd reports the other core's error (the root cause) instead.
py::object& aborted_error_class() {
  static auto* cls = new py::object();
  return *cls;
}

std::vector<LocalArray> outputs_of(ShardMapContext& ctx, const Call& call, py::handle result) {
  std::vector<LocalArray> out;
  if (call.mapped.out.single) {
    out.push_back(output_block(ctx, result, "shard_map output"));
  } else if (py::isinstance<py::tuple>(result) || py::isinstance<py::list>(result)) {
    for (py::handle r : result) out.push_back(output_block(ctx, r, "shard_map output"));
  } else {
    throw InvalidArgumentError(
        "shard_map fn returned " + py::str(py::type::handle_of(result)).cast<std::string>() +
        " (expected a tuple of " + std::to_string(call.mapped.out.specs.size()) +
        " arrays, one per out spec)");
  }
  return out;
}

// The ShardMapFn: runs f on this core with the GIL held.
std::vector<LocalArray> run_core(const Call& call, ShardMapContext& ctx,
                                 std::span<const LocalArray> blocks) {
  py::gil_scoped_acquire gil;
  try {
    const ContextScope scope(ctx);
    py::tuple args(blocks.size());
    for (size_t k = 0; k < blocks.size(); ++k) {
      const ShardedArray& input = *call.inputs[k];
      if (&blocks[k].buffer() != &input.buffer(ctx.device())) {
        throw InternalError("shard_map input " + std::to_string(k) + " was resharded by ShardMap");
      }
      args[k] = input_view(call.inputs[k], ctx.device());
    }
    py::object result = call.mapped.f(*args);
    return outputs_of(ctx, call, result);
  } catch (py::error_already_set& e) {
    if (e.matches(aborted_error_class())) {
      throw AbortedError(py::str(e.value()).cast<std::string>());
    }
    throw;
  }
}

// `arg` as an array laid out as NamedSharding(mesh, spec): a vtpu.Array already so laid out is
// used as is; anything else goes through vtpu.device_put (an Array through the host).
std::shared_ptr<const ShardedArray> input_of(const Mapped& m, py::handle arg,
                                             const PartitionSpec& spec) {
  py::module_ vtpu = py::module_::import("vtpu._vtpu");
  py::object host = py::reinterpret_borrow<py::object>(arg);
  if (py::isinstance<PyArray>(arg)) {
    const PyArray& a = py::cast<const PyArray&>(arg);
    const NamedSharding& have = a.get().sharding();
    if (have.mesh() == m.mesh->mesh && have.spec().normalized() == spec.normalized() &&
        !have.is_partial()) {
      return a.array;
    }
    host = gather_to_numpy(a.get());
  }
  py::object sharding = vtpu.attr("NamedSharding")(m.mesh_object, py::cast(spec));
  return py::cast<const PyArray&>(vtpu.attr("device_put")(host, sharding)).array;
}

py::object call_mapped(const Mapped& m, const py::args& args) {
  if (current_context() != nullptr) {
    throw FailedPreconditionError(
        "vtpu.shard_map called from inside a shard_map function (expected a call from the host)");
  }
  std::vector<PartitionSpec> in_specs = m.in.specs;
  if (m.in.single) in_specs.assign(args.size(), m.in.specs[0]);
  if (args.size() != in_specs.size()) {
    throw InvalidArgumentError("shard_map got " + std::to_string(args.size()) +
                               " inputs (expected " + std::to_string(in_specs.size()) +
                               ", one per in spec)");
  }
  Call call{m, {}};
  std::vector<const ShardedArray*> inputs;
  for (size_t k = 0; k < args.size(); ++k) {
    call.inputs.push_back(input_of(m, args[k], in_specs[k]));
    inputs.push_back(call.inputs.back().get());
  }
  ShardMap mapped(
      m.mesh->mesh, std::move(in_specs), m.out.specs,
      [&call](ShardMapContext& ctx, std::span<const LocalArray> blocks) {
        return run_core(call, ctx, blocks);
      },
      ShardMapOptions{.check_vma = m.check_vma});
  std::vector<ShardedArray> outputs;
  {
    py::gil_scoped_release nogil;
    outputs = mapped(std::span<const ShardedArray* const>(inputs));
  }
  py::tuple result(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    result[i] = py::cast(PyArray{m.mesh, std::make_shared<ShardedArray>(std::move(outputs[i]))});
  }
  if (m.out.single) return result[0];
  return result;
}

py::object shard_map(py::object f, py::object mesh, py::handle in_specs, py::handle out_specs,
                     bool check_vma) {
  auto m = std::make_shared<Mapped>();
  m->f = std::move(f);
  m->mesh = py::cast<std::shared_ptr<PyMesh>>(mesh);
  m->mesh_object = std::move(mesh);
  m->in = specs_of(in_specs, "in_specs");
  m->out = specs_of(out_specs, "out_specs");
  m->check_vma = check_vma;
  // ShardMap checks the specs against the mesh (an unknown or repeated axis) now, not at the call.
  (void)ShardMap(m->mesh->mesh, m->in.specs, m->out.specs, ShardMapFn{});
  return py::cpp_function(
      [m](const py::args& args) { return call_mapped(*m, args); }, py::name("shard_map_fn"),
      py::doc("The mapped function: call it with one array per in spec (vtpu.Array or numpy)."));
}

constexpr const char* kShardMapDoc =
    R"doc(Map a function over shards of data on a mesh, as jax.shard_map.

Each core of ``mesh`` runs ``f`` once, on its own thread, with its blocks of the
inputs; inside, ``vtpu.lax`` collectives (``psum(x, "data")`` ...) communicate
across the mesh axes by name. The per-core results are assembled into global
arrays by ``out_specs``.

Args:
  f: callable run once per core. It receives one read-only numpy array per
    input (that core's block, zero-copy) and returns one array-like, or a tuple
    of them when ``out_specs`` is a tuple. float64 results become float32 (vtpu
    has no f64 arrays, as JAX without x64). Outputs are copied into the core's
    HBM, so ``f`` may keep or modify its arrays. The input views stay valid for
    as long as Python references them (the block stays allocated and pinned).
  mesh: a ``vtpu.Mesh``. Calls on one mesh run one at a time.
  in_specs: a ``P`` for every input, or a tuple of ``P`` (one per input). An
    input whose sharding differs is resharded (through the host); a numpy
    input is ``device_put`` to ``NamedSharding(mesh, spec)``.
  out_specs: a ``P`` (``f`` returns one array) or a tuple of ``P``. A mesh axis
    an out spec leaves out promises the output is equal along it.
  check_vma: if True (default), the outputs promised equal along an axis are
    compared byte for byte and a difference raises ``ValueError``
    (``vtpu.InvalidArgumentError``). JAX checks this statically; vtpu checks
    the values. If False, index 0 along that axis supplies the block.

Returns:
  A callable taking one ``vtpu.Array`` (or numpy array) per in spec and
  returning one ``vtpu.Array``, or a tuple of them, per ``out_specs``.

Errors: an exception raised by ``f`` on one core reaches the caller as that
exception (the first core's); the other cores, blocked in collectives, are
released at once, and the runtime and mesh can be used again. A collective
deadline (``collective_timeout_ms``) raises ``TimeoutError``
(``vtpu.DeadlineExceededError``); cores that disagree on a collective's dtype
or shape raise ``ValueError``.

Example:
  >>> mesh = vtpu.make_mesh((2, 4), ("data", "model"), devices=rt.devices())
  >>> f = vtpu.shard_map(lambda b: vtpu.lax.psum(b, "data"), mesh=mesh,
  ...                    in_specs=vtpu.P("data", "model"),
  ...                    out_specs=vtpu.P(None, "model"))
  >>> np.asarray(f(np.ones((8, 16), np.float32)))[0, 0]
  2.0

The GIL is released while the cores run and inside every collective; the
cores take turns holding it to run ``f``'s Python code.
)doc";

}  // namespace

void register_shard_map(py::module_& m) {
  aborted_error_class() = m.attr("AbortedError");
  m.def("shard_map", &shard_map, py::arg("f"), py::kw_only(), py::arg("mesh"), py::arg("in_specs"),
        py::arg("out_specs"), py::arg("check_vma") = true, kShardMapDoc);
  py::module_ lax = m.def_submodule("_lax");
  register_lax(lax);
  register_shard_map_bench(m);
}

}  // namespace vtpu::python
