// vtpu.shard_map: a Python function run once per core on that core's thread (Runtime::run_spmd
// through vtpu::ShardMap). The caller gives up the GIL while the cores run; each core takes it to
// run the function and gives it up again inside every collective (shard_map_lax.cc), so the cores'
// numpy work and their collectives interleave.
#include <Python.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shard_map_host.h"

namespace vtpu::python {
namespace {

// in_specs / out_specs: one P (shared by every argument, or a prefix for every output) or a tuple
// or list of them.
struct Specs {
  py::object given;  // as passed, for the repr
  std::vector<PartitionSpec> specs;
  bool single = false;
};

PartitionSpec spec_of(py::handle p, const std::string& what) {
  if (!py::isinstance<PartitionSpec>(p)) {
    throw InvalidArgumentError(what + " " + py::repr(p).cast<std::string>() +
                               " (expected a P or a tuple of P)");
  }
  return py::cast<PartitionSpec>(p);
}

Specs specs_of(py::handle obj, const char* what) {
  Specs s;
  s.given = py::reinterpret_borrow<py::object>(obj);
  if (py::isinstance<py::tuple>(obj) || py::isinstance<py::list>(obj)) {
    size_t k = 0;
    for (py::handle p : obj) {
      s.specs.push_back(spec_of(p, std::string(what) + "[" + std::to_string(k++) + "]"));
    }
    return s;
  }
  s.specs.push_back(spec_of(obj, what));
  s.single = true;
  return s;
}

// What vtpu.shard_map(f, ...) returns: f bound to its mesh and specs. Python sees it as
// vtpu.ShardMapped, with f's __name__, __doc__ and __wrapped__ (functools.update_wrapper).
struct Mapped {
  py::object f;
  py::object mesh_object;  // the vtpu.Mesh, for device_put
  std::shared_ptr<PyMesh> mesh;
  Specs in;
  Specs out;
  bool check_vma = true;
};

// Calls in flight, for the atexit hook (the GIL guards it).
std::set<CallState*>& calls_in_flight() {
  static auto* calls = new std::set<CallState*>();
  return *calls;
}

// One call: the inputs, laid out as their in specs ask, kept alive while any view of them is.
// Python exceptions raised by f stay with the call, on the calling thread: a core thread holding
// a reference after its program ends (run_spmd's exception_ptr) would need the GIL to drop it,
// possibly after the interpreter has finalised or while the caller joins the cores with the GIL.
struct Call {
  Call(const Mapped& m, uint64_t id)
      : mapped(m),
        raised(m.mesh->mesh.devices().size()),
        state(id, m.mesh->mesh.runtime().num_cores()) {
    calls_in_flight().insert(&state);
  }
  ~Call() { calls_in_flight().erase(&state); }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  const Mapped& mapped;
  std::vector<std::shared_ptr<const ShardedArray>> inputs;
  std::vector<py::object> raised;  // by mesh slot: (type, value, traceback) of f's exception
  CallState state;
  // With a single out spec: what f returned, the first core's: 0 an array, 1 a tuple, 2 a list.
  std::atomic<int> returned{-1};
};

// What a core throws in place of f's Python exception, which Call keeps.
class RaisedInPython : public std::runtime_error {
 public:
  RaisedInPython(size_t slot, const std::string& what) : std::runtime_error(what), slot_(slot) {}
  size_t slot() const { return slot_; }

 private:
  size_t slot_;
};

// Python's AbortedError: a core released because another failed; turned back into the C++ error
// so that run_spmd reports the other core's error (the root cause) instead.
py::object& aborted_error_class() {
  static auto* cls = new py::object();
  return *cls;
}

std::string type_name(py::handle x) {
  return py::str(py::type::handle_of(x).attr("__name__")).cast<std::string>();
}

// f's result, when it cannot be an array: numpy would make an object array of it.
void check_not_container(py::handle x) {
  if (x.is_none() || PyDict_Check(x.ptr()) || PyAnySet_Check(x.ptr()) || PyUnicode_Check(x.ptr()) ||
      PyBytes_Check(x.ptr()) || PyIter_Check(x.ptr())) {
    throw InvalidArgumentError("shard_map fn returned a " + type_name(x) +
                               " (expected an array, or a tuple of arrays, one per out spec)");
  }
}

std::vector<LocalArray> outputs_of(ShardMapContext& ctx, Call& call, py::handle result) {
  std::vector<LocalArray> out;
  const bool sequence = py::isinstance<py::tuple>(result) || py::isinstance<py::list>(result);
  if (call.mapped.out.single) {
    // A single P is a prefix for every output, as in JAX: a tuple result gives a tuple.
    const int kind = !sequence ? 0 : py::isinstance<py::tuple>(result) ? 1 : 2;
    int first = -1;
    if (!call.returned.compare_exchange_strong(first, kind) && first != kind) {
      throw InvalidArgumentError("shard_map fn returned a " + type_name(result) + " on device " +
                                 std::to_string(ctx.device()) +
                                 " and another type on another (expected the same on every core)");
    }
  } else if (!sequence) {
    check_not_container(result);
    throw InvalidArgumentError(
        "shard_map fn returned a " + type_name(result) + " (expected a tuple of " +
        std::to_string(call.mapped.out.specs.size()) + " arrays, one per out spec)");
  }
  if (!sequence) {
    check_not_container(result);
    out.push_back(output_block(ctx, result, "shard_map output"));
    return out;
  }
  for (py::handle r : result) {
    check_not_container(r);
    out.push_back(output_block(ctx, r, "shard_map output"));
  }
  return out;
}

// The call whose function has just thrown on this core thread, for FailureWatch (0: none).
thread_local uint64_t t_failing_call = 0;

// Sets t_failing_call when the scope is left by an exception.
class FailsAs {
 public:
  explicit FailsAs(uint64_t id) : id_(id), exceptions_(std::uncaught_exceptions()) {
    t_failing_call = 0;
  }
  ~FailsAs() {
    if (std::uncaught_exceptions() > exceptions_) t_failing_call = id_;
  }
  FailsAs(const FailsAs&) = delete;
  FailsAs& operator=(const FailsAs&) = delete;

 private:
  uint64_t id_;
  int exceptions_;
};

// Registers this core thread's Python thread id with the call while it runs f.
class PythonThread {
 public:
  PythonThread(CallState& call, int device) : call_(call), device_(device) {
    call.python_threads[static_cast<size_t>(device)] = PyThread_get_thread_ident();
  }
  ~PythonThread() { call_.python_threads[static_cast<size_t>(device_)] = 0; }
  PythonThread(const PythonThread&) = delete;
  PythonThread& operator=(const PythonThread&) = delete;

 private:
  CallState& call_;
  int device_;
};

// The ShardMapFn: runs f on this core with the GIL held.
std::vector<LocalArray> run_core(Call& call, ShardMapContext& ctx,
                                 std::span<const LocalArray> blocks) {
  const FailsAs fails(call.state.id);
  // Once the interpreter exits, taking the GIL would end this thread inside C++ frames.
  if (!python_alive())
    throw AbortedError("shard_map fn not run: the Python interpreter is exiting");
  wait_for_gil_turn();
  py::gil_scoped_acquire gil;
  const CoreHoldsGil holds;
  const PythonThread registered(call.state, ctx.device());
  try {
    const ContextScope scope(ctx, call.state);
    py::tuple args(blocks.size());
    for (size_t k = 0; k < blocks.size(); ++k) {
      const ShardedArray& input = *call.inputs[k];
      if (&blocks[k].buffer() != &input.buffer(ctx.device())) {
        throw InternalError("shard_map input " + std::to_string(k) + " was resharded by ShardMap");
      }
      args[k] = input_view(call.inputs[k], ctx.device());
    }
    py::object result = call.mapped.f(*args);
    core_departed(call.state, ctx.device());
    return outputs_of(ctx, call, result);
  } catch (py::error_already_set& e) {
    if (e.matches(aborted_error_class())) {
      throw AbortedError(py::str(e.value()).cast<std::string>());
    }
    const auto slot = static_cast<size_t>(ctx.mesh().flat_index_of(ctx.device()));
    call.raised[slot] =
        py::make_tuple(e.type(), e.value(), e.trace() ? e.trace() : py::object(py::none()));
    throw RaisedInPython(slot, e.what());
  }
}

// Records the call's first failed core for live_communicator, from the runtime's abort
// notification (under the same lock as the communicators' own abort handlers). Only this call's
// failures count: the notification runs on the failing core's thread, right after its function
// threw, and FailsAs has marked which call that was.
class FailureWatch {
 public:
  FailureWatch(Runtime& runtime, CallState& call)
      : runtime_(runtime),
        id_(runtime.add_abort_handler([&call](int core, const std::exception_ptr&) {
          if (t_failing_call != call.id) return;
          int none = -1;
          call.failed_core.compare_exchange_strong(none, core, std::memory_order_seq_cst);
        })) {}
  ~FailureWatch() { runtime_.remove_abort_handler(id_); }
  FailureWatch(const FailureWatch&) = delete;
  FailureWatch& operator=(const FailureWatch&) = delete;

 private:
  Runtime& runtime_;
  int id_;
};

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

// Calls on meshes that share cores run one at a time: a failing program aborts the communicators
// of every group holding its failed core, which would fail a concurrent call on another mesh
// over those cores. Each call locks its cores' mutexes in core order (so calls cannot deadlock),
// before the mesh's own lock; a call starting after a failure resets its mesh's communicators.
class CoreLocks {
 public:
  explicit CoreLocks(const DeviceMesh& mesh) {
    std::mutex* mutexes = core_mutexes(mesh.runtime());
    std::vector<int> cores = mesh.devices();
    std::ranges::sort(cores);
    for (int core : cores) locks_.emplace_back(mutexes[core]);
  }

 private:
  struct CoreMutexes {
    int num_cores = 0;
    std::unique_ptr<std::mutex[]> mutexes;
  };
  // Keyed by address: a runtime made where a destroyed one was (no call can hold the dead one's
  // mutexes) gets a table of its own size, never the old one's.
  static std::mutex* core_mutexes(const Runtime& runtime) {
    static auto* table = new std::map<const Runtime*, CoreMutexes>();
    static auto* table_mu = new std::mutex();
    const std::lock_guard lock(*table_mu);
    CoreMutexes& entry = (*table)[&runtime];
    if (entry.num_cores != runtime.num_cores()) {
      entry.num_cores = runtime.num_cores();
      entry.mutexes = std::make_unique<std::mutex[]>(static_cast<size_t>(entry.num_cores));
    }
    return entry.mutexes.get();
  }

  std::vector<std::unique_lock<std::mutex>> locks_;
};

bool on_main_thread() {
  static const unsigned long main_thread = PyThread_get_thread_ident();  // set at import
  return PyThread_get_thread_ident() == main_thread;
}

// Runs `run` (the cores) with the GIL released. On the main thread, where Python handles
// signals, the wait wakes every few milliseconds to run the signal handlers: a KeyboardInterrupt
// (or a handler's exception) interrupts the call, waits for its cores and is raised.
std::vector<ShardedArray> run_releasing_gil(CallState& state,
                                            const std::function<std::vector<ShardedArray>()>& run) {
  if (!on_main_thread()) {
    py::gil_scoped_release nogil;
    return run();
  }
  auto done = std::async(std::launch::async, run);
  bool interrupted = false;
  std::optional<py::error_already_set> pending;
  for (;;) {
    {
      py::gil_scoped_release nogil;
      if (done.wait_for(std::chrono::milliseconds(20)) == std::future_status::ready) break;
    }
    if (!interrupted && PyErr_CheckSignals() != 0) {
      pending.emplace();  // fetches the handler's exception
      interrupted = true;
      interrupt_call(state, pending->type(), "shard_map interrupted by the caller");
    } else if (interrupted) {
      interrupt_call(state, pending->type(), "shard_map interrupted by the caller");
    }
  }
  if (pending) {
    try {
      done.get();
    } catch (...) {  // the cores' errors are the interrupt's consequence
    }
    pending->restore();
    throw py::error_already_set();
  }
  return done.get();
}

uint64_t next_call_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

py::object call_mapped(const Mapped& m, const py::args& args) {
  if (current_context() != nullptr) {
    throw FailedPreconditionError(
        "vtpu.shard_map called from inside a shard_map function (expected a call from the host)");
  }
  if (!python_alive()) throw AbortedError("shard_map not run: the Python interpreter is exiting");
  std::vector<PartitionSpec> in_specs = m.in.specs;
  if (m.in.single) in_specs.assign(args.size(), m.in.specs[0]);
  if (args.size() != in_specs.size()) {
    throw InvalidArgumentError("shard_map got " + std::to_string(args.size()) +
                               " inputs (expected " + std::to_string(in_specs.size()) +
                               ", one per in spec)");
  }
  Call call(m, next_call_id());
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
      ShardMapOptions{.check_vma = m.check_vma, .out_spec_prefix = m.out.single});
  std::vector<ShardedArray> outputs;
  try {
    const FailureWatch watch(m.mesh->mesh.runtime(), call.state);
    outputs = run_releasing_gil(call.state, [&] {
      const CoreLocks locks(m.mesh->mesh);
      return mapped(std::span<const ShardedArray* const>(inputs));
    });
  } catch (const RaisedInPython& e) {
    const py::tuple raised = call.raised[e.slot()];
    py::object type = raised[0], value = raised[1], trace = raised[2];
    PyErr_Restore(type.release().ptr(), value.release().ptr(),
                  trace.is_none() ? nullptr : trace.release().ptr());
    throw py::error_already_set();
  } catch (const Error&) {
    // The peers of a core that returned early were aborted; the cause is the desync.
    if (!call.state.desync.empty()) throw InvalidArgumentError(call.state.desync);
    throw;
  }
  py::tuple result(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    result[i] = py::cast(PyArray{m.mesh, std::make_shared<ShardedArray>(std::move(outputs[i]))});
  }
  if (!m.out.single) return result;
  const int returned = call.returned.load();
  if (returned == 1) return result;
  if (returned == 2) return py::list(result);
  return result[0];
}

Mapped mapped_of(py::object mesh, const py::object& in_specs, const py::object& out_specs,
                 bool check_vma) {
  if (!py::isinstance<PyMesh>(mesh)) {
    throw py::type_error("shard_map mesh " + py::repr(mesh).cast<std::string>() +
                         " (expected a vtpu.Mesh)");
  }
  Mapped m;
  m.mesh = py::cast<std::shared_ptr<PyMesh>>(mesh);
  m.mesh_object = std::move(mesh);
  m.in = specs_of(in_specs, "in_specs");
  m.out = specs_of(out_specs, "out_specs");
  m.check_vma = check_vma;
  for (size_t k = 0; k < m.in.specs.size(); ++k) {
    if (!m.in.specs[k].unreduced().empty()) {
      throw InvalidArgumentError("in_specs " + spec_repr(m.in.specs[k]) +
                                 " is unreduced (expected an in spec without unreduced axes: "
                                 "shard_map's inputs are whole arrays)");
    }
  }
  // ShardMap checks the specs against the mesh (an unknown or repeated axis) now, not at the call.
  (void)ShardMap(m.mesh->mesh, m.in.specs, m.out.specs, ShardMapFn{});
  return m;
}

// f bound to `m` as a vtpu.ShardMapped carrying f's name and doc, as functools.wraps does.
py::object bind(Mapped m, py::object f) {
  if (!PyCallable_Check(f.ptr())) {
    throw py::type_error("shard_map f " + py::repr(f).cast<std::string>() +
                         " (expected a callable)");
  }
  m.f = f;
  py::object mapped = py::cast(std::make_shared<Mapped>(std::move(m)));
  py::module_::import("functools").attr("update_wrapper")(mapped, f);
  return mapped;
}

py::object shard_map(py::object f, py::object mesh, const py::object& in_specs,
                     const py::object& out_specs, bool check_vma) {
  Mapped m = mapped_of(std::move(mesh), in_specs, out_specs, check_vma);
  if (f.is_none()) {
    // @vtpu.shard_map(mesh=..., in_specs=..., out_specs=...): a decorator.
    return py::cpp_function([m](py::object g) { return bind(m, std::move(g)); },
                            py::name("shard_map_decorator"));
  }
  return bind(std::move(m), std::move(f));
}

std::string mapped_repr(const Mapped& m) {
  return "shard_map(" + py::repr(m.f).cast<std::string>() + ", mesh=" + mesh_repr(m.mesh->mesh) +
         ", in_specs=" + py::repr(m.in.given).cast<std::string>() +
         ", out_specs=" + py::repr(m.out.given).cast<std::string>() + ")";
}

// At interpreter exit (atexit, before Python finalizes): calls still running on daemon threads are
// interrupted and waited for, a bounded time, while Python can still run their cores' cleanup; a
// core taking the GIL once Python finalizes would be ended by CPython inside C++ frames.
void at_exit() {
  mark_interpreter_exiting();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!calls_in_flight().empty() && std::chrono::steady_clock::now() < deadline) {
    for (CallState* c : calls_in_flight()) {
      interrupt_call(*c, aborted_error_class(), "the Python interpreter is exiting");
    }
    py::gil_scoped_release nogil;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
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
  mesh: a ``vtpu.Mesh``. Calls on meshes that share cores run one at a time.
  in_specs: a ``P`` for every input, or a tuple of ``P`` (one per input). An
    input whose sharding differs is resharded (through the host); a numpy
    input is ``device_put`` to ``NamedSharding(mesh, spec)``.
  out_specs: a ``P`` or a tuple of ``P`` (one per output). A single ``P`` is a
    prefix, as in JAX: it lays out every output of an ``f`` returning a tuple
    (or list), and the call returns a tuple (or list). A mesh axis an out spec
    leaves out promises the output is equal along it.
  check_vma: if True (default), the outputs promised equal along an axis are
    compared byte for byte and a difference raises ``ValueError``
    (``vtpu.InvalidArgumentError``). JAX checks this statically; vtpu checks
    the values. If False, index 0 along that axis supplies the block.

Returns:
  A callable (``vtpu.ShardMapped``, with ``f``'s ``__name__``, ``__doc__`` and
  ``__wrapped__``) taking one ``vtpu.Array`` (or numpy array) per in spec and
  returning one ``vtpu.Array``, or a tuple of them, per ``out_specs``. Without
  ``f``, a decorator: ``@vtpu.shard_map(mesh=..., in_specs=..., out_specs=...)``.

Errors: an exception raised by ``f`` on one core reaches the caller as that
exception (the first core's); the other cores, blocked in collectives, are
released at once, and the runtime and mesh can be used again. A collective
deadline (``collective_timeout_ms``) raises ``TimeoutError``
(``vtpu.DeadlineExceededError``); cores that disagree on a collective's dtype
or shape raise ``ValueError``, as does a core returning while its peers wait
in a collective it never called (at once, naming it). Ctrl-C interrupts the
call (``KeyboardInterrupt``, raised in the cores still running ``f`` too).

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
  warm_up_on_import();
  (void)on_main_thread();  // the importing thread is the main thread
  py::class_<Mapped, std::shared_ptr<Mapped>>(m, "ShardMapped", py::dynamic_attr(),
                                              "A function mapped by vtpu.shard_map.")
      .def("__call__",
           [](const Mapped& self, const py::args& args) { return call_mapped(self, args); })
      .def("__repr__", &mapped_repr);
  py::module_::import("atexit").attr("register")(py::cpp_function(&at_exit));
  m.def("shard_map", &shard_map, py::arg("f") = py::none(), py::kw_only(), py::arg("mesh"),
        py::arg("in_specs"), py::arg("out_specs"), py::arg("check_vma") = true, kShardMapDoc);
  py::module_ lax = m.def_submodule("_lax");
  register_lax(lax);
  register_shard_map_bench(m);
}

}  // namespace vtpu::python
