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

#include "py_common.h"

namespace vtpu::python {

/// The context of the shard_map function this thread is running, or nullptr outside one.
ShardMapContext* current_context();

/// Makes `ctx` the current context of this thread for its lifetime, in a call whose cores share
/// `failed_core` (-1, or the first core that failed, as the runtime's abort handlers saw it).
class ContextScope {
 public:
  ContextScope(ShardMapContext& ctx, const std::atomic<int>& failed_core);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  ShardMapContext* previous_;
  const std::atomic<int>* previous_failed_core_;
};

/// The current context and the axes an axis_name argument names (valid until the next
/// bind_axes on this thread). Outside shard_map raises NameError "unbound axis name: <axes>", as
/// JAX does.
struct BoundAxes {
  ShardMapContext& context;
  const AxisNames& axes;
};
BoundAxes bind_axes(py::handle axis_name);

/// The communicator of `b.axes` for the current core, made on first use. When a core has failed,
/// the runtime aborts the communicators of its groups that exist then; one made afterwards whose
/// group holds the failed core would wait for it until the timeout, so it is aborted here
/// (AbortedError).
Communicator& live_communicator(const BoundAxes& b);

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
