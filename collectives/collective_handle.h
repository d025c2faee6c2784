// The handle a started collective returns (Communicator::*_start), after JAX's *_start/*_done
// pairs and NCCL's async groups: the collective runs on the core's communication worker while the
// core computes; wait() blocks until it is done and rethrows its error.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace vtpu {

namespace detail {
/// Completion state shared by a handle and the task that runs the collective. Thread-safe.
struct AsyncState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;         // GUARDED_BY(mu)
  std::exception_ptr error;  // GUARDED_BY(mu)
  /// Aborts the collective's group (set by the communicator; called when a handle is dropped
  /// unwaited while its program unwinds an exception, so that peers fail fast).
  std::function<void(const std::string& reason)> abort_group;
  void finish(std::exception_ptr e) {
    {
      std::lock_guard lock(mu);
      done = true;
      error = std::move(e);
    }
    cv.notify_all();
  }
  /// Blocks until done. The collective inside has its own timeouts (every link wait gives up at
  /// the communicator's timeout, or at once on abort), so this wait always ends.
  void wait_done() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};
}  // namespace detail

/// A started collective. Move-only. wait() blocks until the collective has finished on this
/// core and rethrows its error (DeadlineExceededError, AbortedError, InvalidArgumentError, ...);
/// the buffers passed to *_start must stay alive and untouched until then. Destroying a handle
/// that was not waited for waits (errors dropped), so buffers are never written after the handle
/// is gone; when that happens during exception unwinding, it first aborts the group so the wait
/// is short. A handle must not outlive its Communicator. Thread-compatible: one thread (the core's
/// program) uses a handle.
class CollectiveHandle {
 public:
  CollectiveHandle() = default;
  explicit CollectiveHandle(std::shared_ptr<detail::AsyncState> state) : state_(std::move(state)) {}
  CollectiveHandle(CollectiveHandle&&) noexcept = default;
  CollectiveHandle& operator=(CollectiveHandle&& other) noexcept {
    if (this != &other) {
      drop();
      state_ = std::move(other.state_);
    }
    return *this;
  }
  ~CollectiveHandle() { drop(); }

  /// True once the collective has finished (successfully or not); never blocks.
  bool ready() const {
    if (!state_) return true;
    std::lock_guard lock(state_->mu);
    return state_->done;
  }
  /// Blocks until the collective has finished, then rethrows its error if it failed. A second
  /// call (or a call on an empty handle) returns at once.
  void wait() {
    if (!state_) return;
    std::shared_ptr<detail::AsyncState> s = std::move(state_);
    s->wait_done();
    if (s->error) std::rethrow_exception(s->error);
  }
  bool valid() const { return state_ != nullptr; }

 private:
  void drop() noexcept {
    if (state_) {
      // Dropped while the program unwinds an exception: the collective may wait for peers that
      // wait for this core's failure to be known, so abort the group now rather than letting
      // everyone run into the timeout.
      if (std::uncaught_exceptions() > 0 && !ready() && state_->abort_group) {
        try {
          state_->abort_group("a core's program threw while its started collective was pending");
        } catch (...) {
        }
      }
      state_->wait_done();
      state_.reset();
    }
  }
  std::shared_ptr<detail::AsyncState> state_;
};

}  // namespace vtpu
