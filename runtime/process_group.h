// The processes that host one Runtime's cores. One process (the default) hosts every core; under
// `mpirun -np H` each of H processes hosts num_cores / H of them (distributed/, on MPI), as
// jax.distributed makes one set of global devices of which each process addresses its own.
//
// Core ids are global: process p hosts cores [p * K, (p + 1) * K) for K cores per process, as JAX
// numbers devices process by process. Host code runs in every process (multi-controller, as
// JAX's): each process makes the same meshes, communicators and arrays in the same order.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace vtpu {

/// Host-side exchange between the processes of a run. Every process calls each collective
/// method in the same order (from one host thread); the failure notices may come from any thread.
/// Thread-safe for one collective caller plus any number of notify_failure callers.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int process_index() const = 0;
  virtual int process_count() const = 0;
  /// Every process's `mine`, indexed by process (sizes may differ). Throws on a transport error.
  virtual std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) = 0;
  /// Returns once every process has entered it.
  virtual void barrier() = 0;
  /// Tells the other processes that core `core_id` of this process failed with `message`; their
  /// failure callbacks then run. Must not block for long and must not throw.
  virtual void notify_failure(int core_id, const std::string& message) = 0;
  /// Called (from any thread) when another process reports a failed core; each Runtime made with
  /// the group adds one that runs its abort handlers. add returns an id for remove; after remove
  /// returns, the callback is not running and will not run again.
  using FailureCallback = std::function<void(int core_id, const std::string& message)>;
  virtual int add_failure_callback(FailureCallback callback) = 0;
  virtual void remove_failure_callback(int id) = 0;
};

/// The default: this process hosts every core. all_gather returns {mine}; nothing to notify.
class SingleProcessGroup final : public ProcessGroup {
 public:
  int process_index() const override { return 0; }
  int process_count() const override { return 1; }
  std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) override {
    return {std::vector<std::byte>(mine.begin(), mine.end())};
  }
  void barrier() override {}
  void notify_failure(int, const std::string&) override {}
  int add_failure_callback(FailureCallback) override { return 0; }
  void remove_failure_callback(int) override {}
};

}  // namespace vtpu
