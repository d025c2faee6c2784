// numpy arrays over a core's blocks and back (shard_map_host.h).
#include <Python.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "shard_map_host.h"

namespace vtpu::python {
namespace {

// The shard_map function this thread runs, and the axis_name arguments it has used, by identity
// (Python interns literals), so that a repeated collective parses no names. The references are
// dropped by ContextScope, with the GIL held.
struct CoreState {
  ShardMapContext* context = nullptr;
  CallState* call = nullptr;  // the call's (ContextScope)
  std::vector<std::pair<py::object, AxisNames>> axes_seen;
};
thread_local CoreState t_core;
constexpr size_t kMaxAxesSeen = 16;

// Copies at least this large run without the GIL, so that other cores' Python runs meanwhile;
// below it the GIL handoff would cost more than the copy.
constexpr size_t kCopyWithoutGilBytes = size_t{64} << 10;

// Whether a core thread holds the GIL, and how many yields a core waits for it to clear before it
// blocks in CPython's own wait.
std::atomic<bool> g_core_holds_gil{false};
std::atomic<bool> g_exiting{false};  // mark_interpreter_exiting
constexpr int kGilYields = 64;

constexpr const char* kBlockCapsule = "vtpu.shard_map.block";

// The owner behind a numpy array over a block: the array's bytes stay allocated and pinned for as
// long as the capsule (the numpy array's base) lives.
struct HostBlock {
  std::shared_ptr<const ShardedArray> source;  // an input block's array, kept alive
  LocalArray owned;                            // or a collective's result
  const DeviceBuffer* buffer = nullptr;        // the block's bytes: in source or owned
  BufferPin pin;                               // declared last: unpinned before the free
};

void destroy_block(PyObject* capsule) {
  delete static_cast<HostBlock*>(PyCapsule_GetPointer(capsule, kBlockCapsule));
}

// numpy dtypes by element type, made at import by warm_up_on_import (a py::dtype("float32") per
// call costs a parse).
std::array<py::object, 16>& dtype_cache() {
  static auto* cache = new std::array<py::object, 16>();
  return *cache;
}
const py::dtype& cached_dtype(ElementType type) {
  return static_cast<const py::dtype&>(
      static_cast<const py::object&>(dtype_cache()[static_cast<size_t>(type)]));
}

py::array block_array(std::unique_ptr<HostBlock> block, ElementType dtype,
                      const std::vector<int64_t>& shape, bool writable) {
  if (block->buffer->size_bytes() == 0) {
    return py::array(cached_dtype(dtype), std::vector<py::ssize_t>(shape.begin(), shape.end()));
  }
  block->pin = block->buffer->pin();
  void* data = block->buffer->data();
  auto capsule =
      py::reinterpret_steal<py::object>(PyCapsule_New(block.get(), kBlockCapsule, &destroy_block));
  if (!capsule) throw py::error_already_set();
  block.release();  // the capsule owns it now
  // numpy's C API directly: py::array's constructor builds shape and stride vectors per call.
  auto& api = py::detail::npy_api::get();
  std::array<Py_intptr_t, 32> dims{};
  if (shape.size() > dims.size()) throw InternalError("block of rank above 32");
  std::copy(shape.begin(), shape.end(), dims.begin());
  const int flags = writable ? py::detail::npy_api::NPY_ARRAY_WRITEABLE_ : 0;
  auto a = py::reinterpret_steal<py::array>(api.PyArray_NewFromDescr_(
      api.PyArray_Type_, cached_dtype(dtype).inc_ref().ptr(), static_cast<int>(shape.size()),
      dims.data(), nullptr, data, flags | py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_, nullptr));
  if (!a) throw py::error_already_set();
  if (api.PyArray_SetBaseObject_(a.ptr(), capsule.release().ptr()) != 0) {
    throw py::error_already_set();
  }
  return a;
}

// The block behind `a` when a's bytes are exactly one block's (a view made by input_view or
// result_array, or a reshape of one), else nullptr.
const HostBlock* block_of(const py::array& a) {
  PyObject* base = py::detail::array_proxy(a.ptr())->base;
  while (base != nullptr && py::isinstance<py::array>(base)) {
    base = py::detail::array_proxy(base)->base;
  }
  if (base == nullptr || !PyCapsule_IsValid(base, kBlockCapsule)) return nullptr;
  const auto* block = static_cast<const HostBlock*>(PyCapsule_GetPointer(base, kBlockCapsule));
  const bool whole = a.data() == block->buffer->data() &&
                     static_cast<uint64_t>(a.nbytes()) == block->buffer->size_bytes() &&
                     (a.flags() & py::array::c_style) != 0;
  return whole ? block : nullptr;
}

// The vtpu element type of a numpy dtype. numpy's builtin dtypes are singletons, so the last few
// seen are remembered (the GIL guards the cache).
ElementType element_type_cached(const py::dtype& dtype, const char* what) {
  struct Seen {
    PyObject* dtype = nullptr;  // a strong reference, kept for the life of the process
    ElementType type = ElementType::kF32;
  };
  static std::array<Seen, 8> seen;
  static size_t next = 0;
  for (const Seen& s : seen) {
    if (s.dtype == dtype.ptr()) return s.type;
  }
  const ElementType type = element_type_of(dtype, what);
  Seen& slot = seen[next++ % seen.size()];
  Py_XDECREF(slot.dtype);
  slot = {dtype.inc_ref().ptr(), type};
  return type;
}

// `x` as a C-contiguous numpy array of a vtpu element type; float64 becomes float32.
py::array host_array(py::handle x, ElementType* type, const char* what) {
  py::array a;
  // The fast path takes native byte order only: a big-endian array's bytes would be read as
  // little-endian ones (contiguous_array converts it).
  if (py::isinstance<py::array>(x) &&
      py::reinterpret_borrow<py::array>(x).dtype().byteorder() != '>' &&
      py::detail::check_flags(x.ptr(), py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ |
                                           py::detail::npy_api::NPY_ARRAY_ALIGNED_)) {
    a = py::reinterpret_borrow<py::array>(x);
  } else {
    a = contiguous_array(x, what);
  }
  *type = element_type_cached(a.dtype(), what);
  if (*type == ElementType::kF64) {
    a = py::array::ensure(a.attr("astype")(cached_dtype(ElementType::kF32)), py::array::c_style);
    *type = ElementType::kF32;
  }
  return a;
}

std::vector<int64_t> shape_of(const py::array& a) {
  return std::vector<int64_t>(a.shape(), a.shape() + a.ndim());
}

LocalArray copy_to_core(ShardMapContext& ctx, const py::array& a, ElementType type,
                        const char* label) {
  LocalArray block = LocalArray::empty(ctx.core(), type, shape_of(a), label);
  const size_t nbytes = block.nbytes();
  if (nbytes == 0) return block;
  const BufferPin pin = block.buffer().pin();
  if (nbytes < kCopyWithoutGilBytes) {
    std::memcpy(block.mutable_bytes().data(), a.data(), nbytes);
  } else {
    const CoreGilRelease nogil;
    std::memcpy(block.mutable_bytes().data(), a.data(), nbytes);
  }
  return block;
}

}  // namespace

void wait_for_gil_turn() {
  for (int i = 0; i < kGilYields && g_core_holds_gil.load(std::memory_order_acquire); ++i) {
    std::this_thread::yield();
  }
}

CoreHoldsGil::CoreHoldsGil() { g_core_holds_gil.store(true, std::memory_order_release); }
CoreHoldsGil::~CoreHoldsGil() { g_core_holds_gil.store(false, std::memory_order_release); }

CoreGilRelease::CoreGilRelease() {
  g_core_holds_gil.store(false, std::memory_order_release);
  state_ = PyEval_SaveThread();
}

CoreGilRelease::~CoreGilRelease() {
  wait_for_gil_turn();
  PyEval_RestoreThread(state_);
  g_core_holds_gil.store(true, std::memory_order_release);
}

void warm_up_on_import() {
  for (ElementType type : all_element_types()) {
    dtype_cache()[static_cast<size_t>(type)] = numpy_dtype(type);
  }
}

ShardMapContext* current_context() { return t_core.context; }

ContextScope::ContextScope(ShardMapContext& ctx, CallState& call)
    : previous_(t_core.context), previous_call_(t_core.call) {
  t_core.context = &ctx;
  t_core.call = &call;
}
ContextScope::~ContextScope() {
  t_core.axes_seen.clear();
  t_core.context = previous_;
  t_core.call = previous_call_;
}

bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  const bool finalizing = Py_IsFinalizing() != 0;
#else
  const bool finalizing = _Py_IsFinalizing() != 0;
#endif
  return !g_exiting.load(std::memory_order_acquire) && !finalizing;
}

void mark_interpreter_exiting() { g_exiting.store(true, std::memory_order_release); }

namespace {

// The number of collectives each device has entered on `c` (indexed by device id).
std::vector<int64_t>& entered_on(CallState& call, const Communicator& c) {
  for (auto& [comm, counts] : call.entered) {
    if (comm == &c) return counts;
  }
  call.entered.emplace_back(&c, std::vector<int64_t>(call.departed.size()));
  return call.entered.back().second;
}

// Whether `device` has returned from f before entering collective `sequence` of `c`.
bool never_joins(CallState& call, const Communicator& c, int device, int64_t sequence) {
  const auto d = static_cast<size_t>(device);
  return call.departed[d] != 0 && entered_on(call, c)[d] <= sequence;
}

std::string desync_reason(int device, int64_t sequence, const Communicator& c) {
  std::string group;
  for (int id : c.group()) group += (group.empty() ? "" : ", ") + std::to_string(id);
  return "core " + std::to_string(device) + " returned from the shard_map function without " +
         "entering collective " + std::to_string(sequence) + " of its group {" + group +
         "} (expected every core of the group to call the same collectives)";
}

}  // namespace

Communicator& live_communicator(const BoundAxes& b) {
  Communicator& c = b.context.communicator(b.axes);
  CallState& call = *t_core.call;
  // Read after c's abort handler is registered (when c is new): a failure notified later aborts c
  // itself, and one notified earlier has set failed_core (both under the runtime's abort lock).
  const int failed = call.failed_core.load(std::memory_order_seq_cst);
  if (failed >= 0 && std::ranges::find(c.group(), failed) != c.group().end()) {
    const std::string reason = "core " + std::to_string(failed) + " of this shard_map failed";
    c.abort(reason);
    throw AbortedError("collective over " + b.axes.to_string() + " not started: " + reason);
  }
  const int device = b.context.device();
  const int64_t sequence = entered_on(call, c)[static_cast<size_t>(device)]++;
  for (size_t k = 0; call.num_departed > 0 && k < c.group().size(); ++k) {
    const int peer = c.group()[k];
    if (peer != device && never_joins(call, c, peer, sequence)) {
      const std::string reason = desync_reason(peer, sequence, c);
      if (call.desync.empty()) call.desync = reason;
      c.abort(reason);
      throw InvalidArgumentError(reason);
    }
  }
  call.waiting[static_cast<size_t>(device)] = {&c, sequence};
  return c;
}

void core_departed(CallState& call, int device) {
  call.departed[static_cast<size_t>(device)] = 1;
  ++call.num_departed;
  call.waiting[static_cast<size_t>(device)] = {};
  for (const CallState::Waiting& w : call.waiting) {
    if (w.comm == nullptr) continue;
    const auto& group = w.comm->group();
    if (std::ranges::find(group, device) != group.end() &&
        never_joins(call, *w.comm, device, w.sequence)) {
      const std::string reason = desync_reason(device, w.sequence, *w.comm);
      if (call.desync.empty()) call.desync = reason;
      w.comm->abort(reason);
    }
  }
}

void interrupt_call(CallState& call, py::handle exc, const std::string& reason) {
  for (unsigned long thread : call.python_threads) {
    if (thread != 0) PyThreadState_SetAsyncExc(thread, exc.ptr());
  }
  for (const CallState::Waiting& w : call.waiting) {
    if (w.comm != nullptr) w.comm->abort(reason);
  }
}

namespace {
[[noreturn]] void unbound(const AxisNames& names) {
  PyErr_SetString(PyExc_NameError, ("unbound axis name: " + names.to_string()).c_str());
  throw py::error_already_set();
}
}  // namespace

BoundAxes bind_axes(py::handle axis_name) {
  if (t_core.context == nullptr) unbound(axis_names_of(axis_name));
  for (const auto& [name, axes] : t_core.axes_seen) {
    if (name.ptr() == axis_name.ptr()) return {*t_core.context, axes};
  }
  // Names made anew on every call (a tuple built at run time) take turns in the last slot.
  if (t_core.axes_seen.size() == kMaxAxesSeen) t_core.axes_seen.pop_back();
  AxisNames names = axis_names_of(axis_name);
  const auto& mesh_axes = t_core.context->mesh().axis_names();
  for (const std::string& n : names.names()) {
    if (std::ranges::find(mesh_axes, n) == mesh_axes.end()) unbound(AxisNames(n));
  }
  t_core.axes_seen.emplace_back(py::reinterpret_borrow<py::object>(axis_name), std::move(names));
  return {*t_core.context, t_core.axes_seen.back().second};
}

AxisNames axis_names_of(py::handle axis_name) {
  if (py::isinstance<py::str>(axis_name)) return AxisNames(axis_name.cast<std::string>());
  if (py::isinstance<py::tuple>(axis_name) || py::isinstance<py::list>(axis_name)) {
    std::vector<std::string> names;
    for (py::handle n : axis_name) {
      if (!py::isinstance<py::str>(n)) break;
      names.push_back(n.cast<std::string>());
    }
    if (names.size() == py::len(axis_name) && !names.empty()) return AxisNames(std::move(names));
  }
  throw InvalidArgumentError("axis_name " + py::repr(axis_name).cast<std::string>() +
                             " (expected a mesh axis name or a tuple of them)");
}

py::array input_view(const std::shared_ptr<const ShardedArray>& array, int device) {
  auto block = std::make_unique<HostBlock>();
  block->source = array;
  block->buffer = &array->buffer(device);
  return block_array(std::move(block), array->dtype(), array->local_shape(device), false);
}

py::array result_array(LocalArray&& result) {
  const ElementType dtype = result.dtype();
  const std::vector<int64_t> shape = result.shape();
  auto block = std::make_unique<HostBlock>();
  block->owned = std::move(result);
  block->buffer = &block->owned.buffer();
  return block_array(std::move(block), dtype, shape, true);
}

Operand operand(ShardMapContext& ctx, py::handle x, const char* what) {
  Operand op;
  op.host = host_array(x, &op.type, what);
  op.shape = shape_of(op.host);
  const HostBlock* block = block_of(op.host);
  if (block != nullptr && block->buffer->core_id() == ctx.device()) op.block = block->buffer;
  return op;
}

std::span<const std::byte> Operand::bytes() const {
  if (block != nullptr) return {block->data(), block->size_bytes()};
  return {static_cast<const std::byte*>(host.data()), static_cast<size_t>(host.nbytes())};
}

LocalArray Operand::on_core(ShardMapContext& ctx) const {
  if (block != nullptr) return LocalArray::view(type, shape, *block);
  LocalArray a = LocalArray::empty(ctx.core(), type, shape, "shard_map/arg");
  if (a.nbytes() > 0) {
    const BufferPin pin = a.buffer().pin();
    std::memcpy(a.mutable_bytes().data(), host.data(), a.nbytes());
  }
  return a;
}

LocalArray output_block(ShardMapContext& ctx, py::handle x, const char* what) {
  ElementType type;
  py::array a = host_array(x, &type, what);
  return copy_to_core(ctx, a, type, "shard_map/out");
}

}  // namespace vtpu::python
