// The Runtime: N virtual cores, each a thread with an HBM arena, and SPMD program launch.
#pragma once

#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "vtpu/runtime/core_context.h"
#include "vtpu/runtime/device_buffer.h"
#include "vtpu/runtime/hardware_profile.h"
#include "vtpu/runtime/process_group.h"
#include "vtpu/runtime/runtime_options.h"
#include "vtpu/runtime/thread_pinning.h"
#include "vtpu/runtime/virtual_core.h"

namespace vtpu {

/// Owns the virtual cores. Thread-safe: any host thread may launch programs; programs are queued
/// on every core in one global order, so two programs never interleave differently on two cores.
/// Do not call run_spmd from inside a core's program (it would wait on itself): that throws
/// FailedPreconditionError.
class Runtime {
 public:
  using Program = std::function<void(CoreContext&)>;
  /// Called (on the failing core's thread) when a program throws on `failed_core`, before the
  /// other cores finish, so that collectives can wake their waiters with Aborted. Must not throw
  /// (an exception from a handler is swallowed), must not block, and must not call
  /// add_abort_handler / remove_abort_handler (handlers run under the registry's lock).
  using AbortHandler = std::function<void(int failed_core, const std::exception_ptr& error)>;

  /// Validates the options, loads the hardware profile and starts options.num_cores cores. Throws
  /// InvalidArgumentError, NotFoundError (an unknown hardware profile) or ResourceExhaustedError.
  explicit Runtime(RuntimeOptions options);
  /// One of the processes of a distributed run (runtime/process_group.h): options.num_cores is the
  /// global count, which `processes` must divide; this process hosts its share, the cores
  /// [process_index * K, (process_index + 1) * K) for K = num_cores / process_count.
  /// InvalidArgumentError when the count does not divide.
  Runtime(RuntimeOptions options, std::shared_ptr<ProcessGroup> processes);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  /// Every core of the run, in every process (JAX's jax.device_count()).
  int num_cores() const { return options_.num_cores; }
  /// The processes and this one's place among them (JAX's process_index and process_count).
  ProcessGroup& process_group() const { return *processes_; }
  int process_index() const { return processes_->process_index(); }
  int process_count() const { return processes_->process_count(); }
  /// Cores this process hosts (jax.local_device_count()), the first one's id, and whether a
  /// core is hosted here; process_of(id) is the process hosting core `id`.
  int local_num_cores() const { return static_cast<int>(cores_.size()); }
  int first_local_core() const { return first_local_; }
  bool is_local(int core_id) const {
    return core_id >= first_local_ && core_id < first_local_ + local_num_cores();
  }
  int process_of(int core_id) const { return core_id / local_num_cores(); }
  std::vector<int> local_core_ids() const;
  const RuntimeOptions& options() const { return options_; }
  /// The profile named by options().hardware_profile (loaded once, at construction).
  const HardwareProfile& hardware_profile() const { return profile_; }
  /// Where the cores' threads run: options().pin_threads as applied at construction
  /// (runtime/thread_pinning.h), e.g. "auto (pinned: cores 0,1 -> CPUs 0,1)".
  const ThreadPinning& thread_pinning() const { return thread_pinning_; }
  /// Throws InvalidArgumentError for an id outside [0, num_cores), FailedPreconditionError for a
  /// core of another process.
  VirtualCore& core(int core_id);
  const VirtualCore& core(int core_id) const;

  /// Runs `fn` on every local core (or on the local ones of `core_ids`; each process runs its
  /// own), waits for all of them, then rethrows the first
  /// error any core threw (preferring a root cause over the Aborted errors it caused). When a core
  /// throws, abort handlers run at once so that cores blocked in collectives fail fast instead of
  /// waiting for their timeouts. The runtime does not own `fn` beyond the call.
  void run_spmd(const Program& fn);
  void run_spmd(const std::vector<int>& core_ids, const Program& fn);
  /// Asynchronous form: returns at once; the future holds the first error.
  std::future<void> run_spmd_async(Program fn);
  std::future<void> run_spmd_async(std::vector<int> core_ids, Program fn);

  /// Allocates from the host side (e.g. to scatter data). Throws like CoreContext::allocate.
  DeviceBuffer allocate(int core_id, uint64_t size_bytes, std::string label = {});
  /// Host-side CoreContext::allocate_array on core `core_id`.
  DeviceBuffer allocate_array(int core_id, ElementType dtype, std::span<const int64_t> dims,
                              std::string label = {});

  /// Runs the abort handlers for core `failed_core` of another process that failed with
  /// `message` (an AbortedError naming that process), as if a local program had thrown. Called
  /// by the ProcessGroup's failure callback; thread-safe.
  void notify_remote_failure(int failed_core, const std::string& message);

  /// The chunks of every local core's default arena, the lowest id first (see HbmArena::chunk_records).
  std::vector<MemoryChunkRecord> memory_chunk_records() const;
  /// Writes a gzipped pprof profile of the live buffers of every core, as
  /// jax.profiler.save_device_memory_profile does (see memory/memory_profile.h). Throws as
  /// write_pprof(). Thread-safe; buffers allocated or freed meanwhile may or may not appear.
  void save_device_memory_profile(const std::string& path) const;
  /// Writes the JSON chunk snapshot of every core (memory_snapshot_json). Throws as
  /// write_memory_snapshot().
  void save_memory_snapshot(const std::string& path) const;
  /// Writes every core's arena event log as one trace (memory/trace.h), events ordered by time.
  /// Empty (header only) unless RuntimeOptions::record_memory_events. Throws as TraceWriter.
  void save_memory_event_log(const std::string& path) const;

  /// Registers a handler; returns an id for remove_abort_handler. Thread-safe. After
  /// remove_abort_handler returns, the handler is not running and will not run again.
  int add_abort_handler(AbortHandler handler);
  void remove_abort_handler(int id);

 private:
  // Applies RuntimeOptions::pin_threads to the cores' threads (constructor only).
  void pin_core_threads();
  void notify_abort(int failed_core, const std::exception_ptr& error);
  void check_core_ids(const std::vector<int>& core_ids) const;

  RuntimeOptions options_;
  std::shared_ptr<ProcessGroup> processes_;
  int first_local_ = 0;
  int failure_callback_id_ = 0;
  HardwareProfile profile_;
  ThreadPinning thread_pinning_;
  std::vector<std::unique_ptr<VirtualCore>> cores_;
  std::mutex launch_mu_;  // orders program launches across cores
  std::mutex abort_mu_;
  std::map<int, AbortHandler> abort_handlers_;  // GUARDED_BY(abort_mu_)
  int next_handler_id_ = 1;                     // GUARDED_BY(abort_mu_)
};

}  // namespace vtpu
