// A virtual TPU core: one thread running its own in-order work queue (a boost::asio::io_context)
// and owning its HBM arena, its on-core memories (VMEM, SMEM, accumulator; runtime/memory_space.h)
// and its DMA engine (runtime/dma_engine.h).
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "vtpu/memory/hbm_arena.h"
#include "vtpu/memory/hbm_device.h"
#include "vtpu/runtime/dma_engine.h"
#include "vtpu/runtime/memory_space.h"
#include "vtpu/runtime/serial_executor.h"

namespace vtpu {

class DeviceBuffer;

/// Capacities of a core's on-core memories and its DMA engine options. Plain data.
struct CoreMemoryOptions {
  uint64_t vmem_bytes = uint64_t{16} << 20;        // scoped VMEM, bytes; default 16 MiB
  uint64_t smem_bytes = uint64_t{1} << 20;         // SMEM, bytes; default 1 MiB
  uint64_t accumulator_bytes = uint64_t{4} << 20;  // accumulator memory, bytes; default 4 MiB
  DmaOptions dma;
};

/// Thread-safe: post() may be called from any thread; work runs on the core's thread in the order
/// posted. The destructor drains the queue, then joins the thread.
class VirtualCore {
 public:
  /// Creates the core's HBM device of `hbm_total_bytes` and its default arena (limit
  /// `default_arena_limit`, options `arena_options`; may throw InvalidArgumentError /
  /// ResourceExhaustedError), then starts the core's thread.
  /// `memory` sizes the VMEM, SMEM and accumulator arenas (bfc, backed, never defragmented so
  /// kernel pointers stay put).
  VirtualCore(int core_id, uint64_t hbm_total_bytes, const ArenaLimit& default_arena_limit,
              const ArenaOptions& arena_options, const CoreMemoryOptions& memory = {});
  ~VirtualCore();
  VirtualCore(const VirtualCore&) = delete;
  VirtualCore& operator=(const VirtualCore&) = delete;

  int core_id() const { return core_id_; }
  /// Restricts the core's thread to one CPU (Linux CPU number). Returns false when the system
  /// refuses (e.g. the CPU is outside the process's cpuset); the thread then keeps its affinity.
  /// Thread-safe.
  bool pin_to_cpu(int cpu);
  /// The default arena (what allocations without a named pool use).
  HbmArena& hbm() { return *hbm_; }
  const HbmArena& hbm() const { return *hbm_; }
  const std::shared_ptr<HbmArena>& hbm_shared() const { return hbm_; }
  /// The core's whole HBM: create further arenas (pools) here.
  HbmDevice& hbm_device() { return device_; }
  const HbmDevice& hbm_device() const { return device_; }
  boost::asio::io_context& io_context() { return io_; }

  /// The arena of an on-core memory space (kVmem, kSmem, kAccumulator); kHbm gives hbm().
  HbmArena& memory(MemorySpace space) const;
  const std::shared_ptr<HbmArena>& memory_shared(MemorySpace space) const;
  /// Allocates `size_bytes` in `space`. Throws ScratchExhaustedError (ResourceExhausted) giving the
  /// requested and available bytes, as Mosaic reports an exceeded scoped-VMEM limit.
  DeviceBuffer allocate(MemorySpace space, uint64_t size_bytes, std::string label = {}) const;
  /// memory_stats() of every memory space: keys "hbm", "vmem", "smem", "accumulator".
  std::map<std::string, MemoryStats> memory_stats_by_space() const;
  /// This core's DMA engine (its thread starts on the first copy). Thread-safe.
  DmaEngine& dma() { return dma_; }

  /// Queues `fn` to run on this core's thread after everything queued before it. `fn` must not
  /// throw (wrap it); the runtime's run_spmd does.
  template <typename F>
  void post(F&& fn) {
    boost::asio::post(io_, std::forward<F>(fn));
  }
  /// The core's communication worker (a FIFO thread, started on first use): where started
  /// collectives run, in the order started, while the core's thread goes on computing.
  /// Thread-safe.
  SerialExecutor& comm_executor();

  /// True when called from this core's own thread.
  bool on_core_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  const int core_id_;
  HbmDevice device_;
  std::shared_ptr<HbmArena> hbm_;
  std::shared_ptr<HbmArena> vmem_, smem_, accumulator_;
  DmaEngine dma_;  // destroyed after thread_: kernels on the core thread are done by then
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::mutex comm_mu_;
  std::unique_ptr<SerialExecutor> comm_executor_;  // GUARDED_BY(comm_mu_); drained after thread_
  std::thread thread_;  // declared last: started after, and joined before, everything above
};

}  // namespace vtpu
