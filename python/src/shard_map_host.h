// What vtpu.shard_map and vtpu.lax share: the shard_map context of the core the calling thread
// runs, and numpy arrays over a core's blocks (and back).
//
// A block handed to Python is a numpy array whose base is a capsule holding the block's buffer
// (an input's ShardedArray, kept alive, or a collective's result, owned) and a BufferPin, so that
// the array stays valid for as long as Python references it, even after the function returns,
// and defragmentation never moves the bytes under it.
#pragma once

#include <memory>

#include "py_common.h"

namespace vtpu::python {

/// The context of the shard_map function this thread is running, or nullptr outside one.
ShardMapContext* current_context();

/// Makes `ctx` the current context of this thread for its lifetime.
class ContextScope {
 public:
  explicit ContextScope(ShardMapContext& ctx);
  ~ContextScope();
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  ShardMapContext* previous_;
};

/// The current context and the axes an axis_name argument names (valid until the next
/// bind_axes on this thread). Outside shard_map raises NameError "unbound axis name: <axes>", as
/// JAX does.
struct BoundAxes {
  ShardMapContext& context;
  const AxisNames& axes;
};
BoundAxes bind_axes(py::handle axis_name);

/// A lax axis_name argument: a str or a tuple/list of str.
AxisNames axis_names_of(py::handle axis_name);

/// A read-only numpy view of core `device`'s block of `array` (kept alive by the view).
py::array input_view(const std::shared_ptr<const ShardedArray>& array, int device);

/// A numpy array over `block`'s bytes, owning it (writable). No copy.
py::array result_array(LocalArray&& block);

/// An operand of a collective on the current core: a view of `x`'s block when `x` is already a
/// block on this core (an input view or an earlier result), else a new block in the core's HBM
/// that fill() copies `x` into, without the GIL, just before the collective.
struct Operand {
  LocalArray array;
  py::array host;  // x as a C-contiguous array; destroyed with the GIL held
  bool copy_pending = false;
  /// Copies `host` into `array` if still pending. Call without the GIL.
  void fill();
};
/// x as an Operand. numpy float64 becomes float32, as jnp.asarray does. GIL held.
Operand operand(ShardMapContext& ctx, py::handle x, const char* what);

/// An output of the shard_map function as a new block on the current core (always a copy, so
/// that the function may keep or change its arrays). Must be called with the GIL held.
LocalArray output_block(ShardMapContext& ctx, py::handle x, const char* what);

void register_lax(py::module_& lax);
void register_shard_map_bench(py::module_& m);

}  // namespace vtpu::python
