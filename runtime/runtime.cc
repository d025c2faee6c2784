#include "vtpu/runtime/runtime.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "vtpu/common/host.h"
#include "vtpu/memory/tiled_layout.h"

namespace vtpu {

namespace {

/// Completion state shared by the tasks of one SPMD launch.
struct Launch {
  std::mutex mu;
  int remaining = 0;                 // GUARDED_BY(mu)
  std::exception_ptr first_error;    // GUARDED_BY(mu)
  bool first_error_aborted = false;  // GUARDED_BY(mu)
  std::promise<void> done;
};

bool is_aborted(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const AbortedError&) {
    return true;
  } catch (...) {
    return false;
  }
}

std::string error_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

int CoreContext::core_id() const { return core_.core_id(); }
int CoreContext::num_cores() const { return runtime_.num_cores(); }
HbmArena& CoreContext::hbm() const { return core_.hbm(); }
DeviceBuffer CoreContext::allocate(uint64_t size_bytes, std::string label) const {
  return DeviceBuffer(core_.hbm_shared(), size_bytes, std::move(label));
}

namespace {

DeviceBuffer allocate_packed_arrays(const std::shared_ptr<HbmArena>& arena, bool pad,
                                    ElementType dtype, std::span<const std::vector<int64_t>> shapes,
                                    std::string label) {
  uint64_t logical = 0;
  uint64_t charged = 0;
  for (const std::vector<int64_t>& dims : shapes) {
    const ArrayBytes b = array_bytes(dtype, dims);
    const uint64_t c = pad ? b.padded_bytes : b.logical_bytes;
    // Each array fits in 64 bits (array_bytes checks); their sum may not.
    if (c > std::numeric_limits<uint64_t>::max() - charged) {
      throw InvalidArgumentError(
          "arrays packed in '" + label + "' take past 2^64 - 1 bytes at " +
          shape_to_string(dtype, dims,
                          tpu_default_layout(dtype, static_cast<int64_t>(dims.size()))) +
          " (expected a total that fits in 64 bits)");
    }
    logical += b.logical_bytes;
    charged += c;
  }
  if (logical == 0) return DeviceBuffer(arena, 0, std::move(label));
  return DeviceBuffer(arena, logical, charged, std::move(label));
}

}  // namespace

DeviceBuffer CoreContext::allocate_array(ElementType dtype, std::span<const int64_t> dims,
                                         std::string label) const {
  const std::vector<int64_t> shape(dims.begin(), dims.end());
  return allocate_arrays(dtype, std::span<const std::vector<int64_t>>(&shape, 1), std::move(label));
}

DeviceBuffer CoreContext::allocate_arrays(ElementType dtype,
                                          std::span<const std::vector<int64_t>> shapes,
                                          std::string label) const {
  return allocate_packed_arrays(core_.hbm_shared(), runtime_.options().pad_arrays, dtype, shapes,
                                std::move(label));
}

DeviceBuffer Runtime::allocate_array(int core_id, ElementType dtype, std::span<const int64_t> dims,
                                     std::string label) {
  const std::vector<int64_t> shape(dims.begin(), dims.end());
  return allocate_packed_arrays(core(core_id).hbm_shared(), options_.pad_arrays, dtype,
                                std::span<const std::vector<int64_t>>(&shape, 1), std::move(label));
}

Runtime::Runtime(RuntimeOptions options)
    : Runtime(std::move(options), std::make_shared<SingleProcessGroup>()) {}

Runtime::Runtime(RuntimeOptions options, std::shared_ptr<ProcessGroup> processes)
    : options_(std::move(options)), processes_(std::move(processes)) {
  options_.validate();
  if (!processes_) throw InvalidArgumentError("Runtime with a null ProcessGroup");
  const int count = processes_->process_count();
  if (count < 1 || options_.num_cores % count != 0) {
    throw InvalidArgumentError("num_cores " + std::to_string(options_.num_cores) +
                               " cannot be split evenly across " + std::to_string(count) +
                               " processes (expected a multiple of " + std::to_string(count) +
                               ")");
  }
  const int per_process = options_.num_cores / count;
  first_local_ = processes_->process_index() * per_process;
  profile_ = HardwareProfile::get(options_.hardware_profile);
  CoreMemoryOptions memory;
  memory.vmem_bytes =
      options_.vmem_limit_bytes ? options_.vmem_limit_bytes : profile_.scoped_vmem_limit_bytes;
  memory.smem_bytes = options_.smem_bytes ? options_.smem_bytes : profile_.smem_bytes;
  memory.accumulator_bytes =
      options_.accumulator_bytes ? options_.accumulator_bytes : profile_.accumulator_bytes;
  memory.dma.bytes_per_second = options_.dma_bytes_per_second;
  memory.dma.latency = options_.dma_latency;
  memory.dma.wait_timeout = options_.dma_timeout;
  cores_.reserve(static_cast<size_t>(per_process));
  const auto epoch = std::chrono::steady_clock::now();  // t_us = 0 of every core's event log
  for (int i = first_local_; i < first_local_ + per_process; ++i) {
    ArenaOptions a;
    a.name = "default";
    a.policy = options_.allocator;
    a.backing = options_.hbm_backing;
    a.auto_defragment = options_.auto_defragment;
    a.record_events = options_.record_memory_events;
    a.event_epoch = epoch;
#ifndef NDEBUG
    a.poison_freed = options_.hbm_backing;
#endif
    cores_.push_back(std::make_unique<VirtualCore>(
        i, options_.hbm_bytes_per_core, ArenaLimit::fraction(options_.hbm_memory_fraction), a,
        memory));
  }
  pin_core_threads();
  failure_callback_id_ = processes_->add_failure_callback(
      [this](int core, const std::string& message) { notify_remote_failure(core, message); });
}

std::vector<int> Runtime::local_core_ids() const {
  std::vector<int> ids(static_cast<size_t>(local_num_cores()));
  std::iota(ids.begin(), ids.end(), first_local_);
  return ids;
}

void Runtime::notify_remote_failure(int failed_core, const std::string& message) {
  notify_abort(failed_core,
               std::make_exception_ptr(AbortedError(
                   "process " + std::to_string(process_of(failed_core)) + ": " + message)));
}

void Runtime::pin_core_threads() {
  // Several processes share the CPUs: "auto" would pin each one's cores to the same first CPUs,
  // so placement is left to the scheduler (or to the MPI launcher's binding).
  const std::string mode =
      process_count() > 1 && options_.pin_threads == "auto" ? "off" : options_.pin_threads;
  thread_pinning_ = plan_thread_pinning(mode, local_num_cores(), usable_cpu_ids());
  for (size_t i = 0; i < thread_pinning_.cpus.size(); ++i) {
    const int cpu = thread_pinning_.cpus[i];
    if (!cores_[i]->pin_to_cpu(cpu)) {
      // The cores pinned so far stay pinned; the record says the runtime is not (uniformly).
      thread_pinning_.reason = "setting core " + std::to_string(i) + "'s thread to CPU " +
                               std::to_string(cpu) + " failed (pthread_setaffinity_np)";
      thread_pinning_.cpus.clear();
      return;
    }
  }
}

Runtime::~Runtime() {
  processes_->remove_failure_callback(failure_callback_id_);
  cores_.clear();  // each core drains its queue and joins
}

const VirtualCore& Runtime::core(int core_id) const {
  return const_cast<Runtime*>(this)->core(core_id);
}

VirtualCore& Runtime::core(int core_id) {
  if (core_id < 0 || core_id >= num_cores()) {
    throw InvalidArgumentError("core id " + std::to_string(core_id) +
                               " is out of range (expected 0.." + std::to_string(num_cores() - 1) +
                               ")");
  }
  if (!is_local(core_id)) {
    throw FailedPreconditionError(
        "core " + std::to_string(core_id) + " is hosted by process " +
        std::to_string(process_of(core_id)) + " (expected a core of this process, " +
        std::to_string(process_index()) + ": " + std::to_string(first_local_) + ".." +
        std::to_string(first_local_ + local_num_cores() - 1) + ")");
  }
  return *cores_[static_cast<size_t>(core_id - first_local_)];
}

void Runtime::check_core_ids(const std::vector<int>& core_ids) const {
  if (core_ids.empty()) throw InvalidArgumentError("run_spmd with an empty list of cores");
  std::set<int> seen;
  for (int id : core_ids) {
    if (id < 0 || id >= num_cores()) {
      throw InvalidArgumentError("core id " + std::to_string(id) +
                                 " is out of range (expected 0.." +
                                 std::to_string(num_cores() - 1) + ")");
    }
    if (!seen.insert(id).second) {
      throw InvalidArgumentError("core id " + std::to_string(id) + " is listed twice in run_spmd");
    }
  }
  for (const auto& c : cores_) {
    if (c->on_core_thread()) {
      throw FailedPreconditionError("run_spmd called from inside core " +
                                    std::to_string(c->core_id()) +
                                    "'s program; it would wait on itself");
    }
  }
}

std::future<void> Runtime::run_spmd_async(std::vector<int> core_ids, Program fn) {
  check_core_ids(core_ids);
  std::erase_if(core_ids, [this](int id) { return !is_local(id); });
  auto launch = std::make_shared<Launch>();
  launch->remaining = static_cast<int>(core_ids.size());
  std::future<void> result = launch->done.get_future();
  if (core_ids.empty()) {  // every listed core runs in another process
    launch->done.set_value();
    return result;
  }
  auto program = std::make_shared<Program>(std::move(fn));
  std::lock_guard lock(launch_mu_);
  for (int id : core_ids) {
    VirtualCore& core = *cores_[static_cast<size_t>(id - first_local_)];
    core.post([this, &core, launch, program] {
      std::exception_ptr error;
      try {
        CoreContext ctx(*this, core);
        (*program)(ctx);
      } catch (...) {
        error = std::current_exception();
      }
      bool first = false;
      if (error) {
        // The root cause wins: an Aborted error is only a consequence of another core's failure,
        // so it is replaced by the first error that is not Aborted, whichever core finishes first.
        const bool aborted = is_aborted(error);
        std::lock_guard l(launch->mu);
        if (!launch->first_error) {
          launch->first_error = error;
          launch->first_error_aborted = aborted;
          first = true;
        } else if (launch->first_error_aborted && !aborted) {
          launch->first_error = error;
          launch->first_error_aborted = false;
        }
      }
      if (first) {
        notify_abort(core.core_id(), error);
        if (!is_aborted(error)) {
          processes_->notify_failure(failure_callback_id_, core.core_id(), error_text(error));
        }
      }
      std::lock_guard l(launch->mu);
      if (--launch->remaining == 0) {
        if (launch->first_error)
          launch->done.set_exception(launch->first_error);
        else
          launch->done.set_value();
      }
    });
  }
  return result;
}

std::future<void> Runtime::run_spmd_async(Program fn) {
  return run_spmd_async(local_core_ids(), std::move(fn));
}

void Runtime::run_spmd(const std::vector<int>& core_ids, const Program& fn) {
  run_spmd_async(core_ids, fn).get();
}

void Runtime::run_spmd(const Program& fn) { run_spmd_async(fn).get(); }

DeviceBuffer Runtime::allocate(int core_id, uint64_t size_bytes, std::string label) {
  return DeviceBuffer(core(core_id).hbm_shared(), size_bytes, std::move(label));
}

int Runtime::add_abort_handler(AbortHandler handler) {
  std::lock_guard lock(abort_mu_);
  const int id = next_handler_id_++;
  abort_handlers_.emplace(id, std::move(handler));
  return id;
}

void Runtime::remove_abort_handler(int id) {
  std::lock_guard lock(abort_mu_);
  abort_handlers_.erase(id);
}

void Runtime::notify_abort(int failed_core, const std::exception_ptr& error) {
  // Handlers run under abort_mu_, so remove_abort_handler() cannot return while its handler is
  // running: an owner (a Communicator) may be destroyed right after removing itself.
  std::lock_guard lock(abort_mu_);
  for (const auto& [id, h] : abort_handlers_) {
    try {
      h(failed_core, error);
    } catch (...) {
      // A handler must not throw; one that does must not kill the core's thread or leave the
      // launch unfinished. The original error still reaches the caller.
    }
  }
}

std::vector<MemoryChunkRecord> Runtime::memory_chunk_records() const {
  std::vector<MemoryChunkRecord> all;
  for (const auto& core : cores_) {
    std::vector<MemoryChunkRecord> one = core->hbm().chunk_records();
    all.insert(all.end(), std::make_move_iterator(one.begin()), std::make_move_iterator(one.end()));
  }
  return all;
}

void Runtime::save_device_memory_profile(const std::string& path) const {
  write_pprof(path, memory_chunk_records());
}

void Runtime::save_memory_snapshot(const std::string& path) const {
  write_memory_snapshot(path, memory_chunk_records());
}

void Runtime::save_memory_event_log(const std::string& path) const {
  std::vector<TraceEvent> all;
  for (const auto& core : cores_) {
    std::vector<TraceEvent> one = core->hbm().event_log();
    all.insert(all.end(), std::make_move_iterator(one.begin()), std::make_move_iterator(one.end()));
  }
  // One timeline: each core's events are already in time order; a stable sort keeps them so.
  std::stable_sort(all.begin(), all.end(),
                   [](const TraceEvent& a, const TraceEvent& b) { return a.t_us < b.t_us; });
  nlohmann::json header = default_trace_header();
  header["source"] = "vtpu Runtime memory event log, " + std::to_string(num_cores()) +
                     " cores, policy " + options_.allocator;
  TraceWriter writer(path, header);
  for (const TraceEvent& e : all) writer.write(e);
  writer.close();
}

}  // namespace vtpu
