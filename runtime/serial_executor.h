// A FIFO executor: one thread that runs posted tasks one at a time in the order posted. Each
// VirtualCore owns one, created lazily, as its communication worker: started collectives
// (Communicator::*_start) run there while the core's own thread computes, as a TPU's DMA engines
// move data while its cores compute.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace vtpu {

/// Thread-safe: post() from any thread. The thread sleeps on a condition variable when idle
/// (never spins). The destructor drains the queue (runs what is queued), then joins.
class SerialExecutor {
 public:
  SerialExecutor();
  ~SerialExecutor();
  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  /// Queues `task` to run after everything posted before it. `task` must not throw (an exception
  /// escaping it is swallowed so that the worker survives; wrap it to keep the error).
  void post(std::function<void()> task);
  /// True when called from the executor's own thread.
  bool on_executor_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // GUARDED_BY(mu_)
  bool done_ = false;                        // GUARDED_BY(mu_)
  std::thread thread_;                       // declared last: joined before the rest goes
};

}  // namespace vtpu
