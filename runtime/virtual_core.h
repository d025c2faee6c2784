// A virtual TPU core: one thread running its own in-order work queue (a boost::asio::io_context)
// and owning its HBM arena.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <memory>
#include <mutex>
#include <thread>

#include "memory/hbm_arena.h"
#include "memory/hbm_device.h"
#include "runtime/serial_executor.h"

namespace vtpu {

/// Thread-safe: post() may be called from any thread; work runs on the core's thread in the order
/// posted. The destructor drains the queue, then joins the thread.
class VirtualCore {
 public:
  /// Creates the core's HBM device of `hbm_total_bytes` and its default arena (limit
  /// `default_arena_limit`, options `arena_options`; may throw InvalidArgumentError /
  /// ResourceExhaustedError), then starts the core's thread.
  VirtualCore(int core_id, uint64_t hbm_total_bytes, const ArenaLimit& default_arena_limit,
              const ArenaOptions& arena_options);
  ~VirtualCore();
  VirtualCore(const VirtualCore&) = delete;
  VirtualCore& operator=(const VirtualCore&) = delete;

  int core_id() const { return core_id_; }
  /// The default arena (what allocations without a named pool use).
  HbmArena& hbm() { return *hbm_; }
  const HbmArena& hbm() const { return *hbm_; }
  const std::shared_ptr<HbmArena>& hbm_shared() const { return hbm_; }
  /// The core's whole HBM: create further arenas (pools) here.
  HbmDevice& hbm_device() { return device_; }
  const HbmDevice& hbm_device() const { return device_; }
  boost::asio::io_context& io_context() { return io_; }

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
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::mutex comm_mu_;
  std::unique_ptr<SerialExecutor> comm_executor_;  // GUARDED_BY(comm_mu_); drained after thread_
  std::thread thread_;  // declared last: started after, and joined before, everything above
};

}  // namespace vtpu
