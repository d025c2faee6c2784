#include "vtpu/runtime/serial_executor.h"

namespace vtpu {

SerialExecutor::SerialExecutor() : thread_([this] { run(); }) {}

SerialExecutor::~SerialExecutor() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void SerialExecutor::post(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void SerialExecutor::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    // An idle worker has nothing to time out on: it sleeps until a task or shutdown arrives.
    cv_.wait(lock, [&] { return done_ || !queue_.empty(); });
    if (queue_.empty()) return;  // done_ and drained
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      task();
    } catch (...) {
    }
    lock.lock();
  }
}

}  // namespace vtpu
