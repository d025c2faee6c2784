// What vtpu.shard_map and vtpu.lax share: the shard_map context of the core the calling thread
// runs, and numpy arrays over a core's blocks (and back).
//
// A block handed to Python is a numpy array whose base is a capsule holding the block's buffer
// (an input's ShardedArray, kept alive, or a collective's result, owned) and a BufferPin, so that
// the array stays valid for as long as Python references it, even after the function returns,
// and defragmentation never moves the bytes under it.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "py_common.h"

namespace vtpu::python {

/// The context of the shard_map function this thread is running, or nullptr outside one.
ShardMapContext* current_context();

/// What the cores of one vtpu.shard_map call share. `failed_core` is atomic (the runtime's abort
/// handlers set it); the GIL guards the rest.
struct CallState {
  CallState(uint64_t call_id, int num_cores)
      : id(call_id),
        departed(static_cast<size_t>(num_cores)),
        waiting(static_cast<size_t>(num_cores)),
        python_threads(static_cast<size_t>(num_cores)) {}
  const uint64_t id;                 // unique in the process: matches this call's failures
  std::atomic<int> failed_core{-1};  // the call's first failed core (see live_communicator)
  // Collectives entered per communicator, by device id; whether each device's f has returned;
  // the collective each device last entered (comm null: none). Together they find a core that
  // returned while a peer waits in a collective it will never join (a deadlock until the
  // timeout otherwise). Flat and indexed by device id: every collective updates them.
  std::vector<std::pair<const Communicator*, std::vector<int64_t>>> entered;
  std::vector<char> departed;
  int num_departed = 0;
  struct Waiting {
    Communicator* comm = nullptr;
    int64_t sequence = 0;
  };
  std::vector<Waiting> waiting;
  std::string desync;  // why a departed core's peers were aborted, or empty
  // Python thread ids of the cores running f now (0: none), for an asynchronous exception
  // (KeyboardInterrupt, interpreter exit).
  std::vector<unsigned long> python_threads;
};

/// Makes `ctx` the current context of this thread for its lifetime, in the call `call`.
class ContextScope {
 public:
  ContextScope(ShardMapContext& ctx, CallState& call);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  ShardMapContext* previous_;
  CallState* previous_call_;
};

/// Records that this thread's core has returned from f (GIL held): a peer waiting in a
/// collective the core never entered is aborted, and CallState::desync says why.
void core_departed(CallState& call, int device);

/// Interrupts `call` (GIL held): raises `exc` asynchronously in the cores running Python and
/// aborts the communicators cores wait in, so that the call ends soon.
void interrupt_call(CallState& call, py::handle exc, const std::string& reason);

/// The current context and the axes an axis_name argument names (valid until the next
/// bind_axes on this thread). Outside shard_map, or naming an axis the mesh lacks, raises
/// NameError "unbound axis name: <axes>", as JAX does.
struct BoundAxes {
  ShardMapContext& context;
  const AxisNames& axes;
};
BoundAxes bind_axes(py::handle axis_name);

/// The communicator of `b.axes` for the current core, made on first use, for a collective about
/// to start. When a core of this call has failed, the runtime aborts the communicators of its
/// groups that exist then; one made afterwards whose group holds the failed core would wait for
/// it until the timeout, so it is aborted here (AbortedError). A peer that has already returned
/// from f without entering this collective fails it at once (InvalidArgumentError).
Communicator& live_communicator(const BoundAxes& b);

/// Whether a core thread may take the GIL: false once the interpreter exits (the module's atexit
/// hook, or Python finalizing), when taking it would end the thread inside C++ frames.
bool python_alive();
/// From the module's atexit hook: python_alive() is false from now on.
void mark_interpreter_exiting();

/// A lax axis_name argument: a str or a tuple/list of str.
AxisNames axis_names_of(py::handle axis_name);

/// The GIL on a core thread. Handing the GIL from core to core through CPython's condition
/// variable costs a futex sleep and wake-up per hand-off, several per collective; instead, a core
/// about to take the GIL first yields its CPU (bounded) while another core holds it, so that it
/// usually finds the GIL free.
void wait_for_gil_turn();
/// Marks this core as holding the GIL for its lifetime (the GIL must be held).
class CoreHoldsGil {
 public:
  CoreHoldsGil();
  ~CoreHoldsGil();
  CoreHoldsGil(const CoreHoldsGil&) = delete;
  CoreHoldsGil& operator=(const CoreHoldsGil&) = delete;
};
/// Gives up the GIL for its lifetime on a core thread (py::gil_scoped_release, with the above).
class CoreGilRelease {
 public:
  CoreGilRelease();
  ~CoreGilRelease();
  CoreGilRelease(const CoreGilRelease&) = delete;
  CoreGilRelease& operator=(const CoreGilRelease&) = delete;

 private:
  PyThreadState* state_;
};

/// A read-only numpy view of core `device`'s block of `array` (kept alive by the view).
py::array input_view(const std::shared_ptr<const ShardedArray>& array, int device);

/// A numpy array over `block`'s bytes, owning it (writable). No copy.
py::array result_array(LocalArray&& block);

/// An operand of a collective on the current core: `x` as a C-contiguous array, and its block
/// when it is already one of this core's (an input view or an earlier result, a reshape of one).
struct Operand {
  py::array host;  // destroyed with the GIL held
  ElementType type = ElementType::kF32;
  std::vector<int64_t> shape;
  const DeviceBuffer* block = nullptr;  // pinned by x's capsule while x lives

  /// The elements: the block's, or the host array's.
  std::span<const std::byte> bytes() const;
  /// As a LocalArray on the core: a view of the block, or a copy of the host array in HBM.
  /// Needs no GIL.
  LocalArray on_core(ShardMapContext& ctx) const;
};
/// x as an Operand. numpy float64 becomes float32, as jnp.asarray does. GIL held.
Operand operand(ShardMapContext& ctx, py::handle x, const char* what);

/// An output of the shard_map function as a new block on the current core (always a copy, so
/// that the function may keep or change its arrays). Must be called with the GIL held.
LocalArray output_block(ShardMapContext& ctx, py::handle x, const char* what);

/// Makes, on the importing thread, what the cores would otherwise make lazily: the numpy dtypes,
/// and py_common's function-local statics that import Python modules. A core initialising one
/// of those would hold the C++ static-init guard while the import gives up the GIL, and a
/// second core holding the GIL and waiting on that guard would deadlock with it.
void warm_up_on_import();

void register_lax(py::module_& lax);
void register_shard_map_bench(py::module_& m);

}  // namespace vtpu::python
