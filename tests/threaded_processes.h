// The processes of a multi-process run as threads of one test, so that the multi-process paths of
// sharding/ and train/ (local blocks only, host exchanges, per-core figures from every process)
// run under plain ctest; tests/cli/mpirun_cli_test.cc runs the real ones under mpirun.
//
// Each simulated process makes its own Runtime over group(p): a ProcessGroup whose all_gather
// and barrier meet the other threads in memory, whose failure notices call the other runtimes'
// callbacks, and which gives every communicator a transport whose links are ring buffers shared
// by the two processes at their ends (the n-th transport of each process belongs to the n-th
// communicator of the run, as with MPI). Links between two processes claim no direct access, as
// an MPI link does not.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "vtpu/collectives/ring_buffer_link.h"
#include "vtpu/collectives/transport.h"
#include "vtpu/common/error.h"
#include "vtpu/runtime/process_group.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu::testing_util {

/// Thread-safe.
class ThreadedProcesses {
 public:
  explicit ThreadedProcesses(int count,
                             std::chrono::milliseconds timeout = std::chrono::seconds(60))
      : shared_(std::make_shared<Shared>(count, timeout)) {
    for (int p = 0; p < count; ++p) groups_.push_back(std::make_shared<Group>(shared_, p));
  }

  int count() const { return static_cast<int>(groups_.size()); }
  std::shared_ptr<ProcessGroup> group(int process) const {
    return groups_[static_cast<size_t>(process)];
  }

  /// Runs fn(p) for every process p on a thread of its own, joins them all, and rethrows the
  /// first error (by process index).
  void run(const std::function<void(int process)>& fn) const {
    std::vector<std::exception_ptr> errors(groups_.size());
    std::vector<std::thread> threads;
    for (int p = 0; p < count(); ++p) {
      threads.emplace_back([&, p] {
        try {
          fn(p);
        } catch (...) {
          errors[static_cast<size_t>(p)] = std::current_exception();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  }

 private:
  struct Shared {
    Shared(int count, std::chrono::milliseconds timeout)
        : count(count), timeout(timeout), contributions(static_cast<size_t>(count)) {}
    const int count;
    const std::chrono::milliseconds timeout;
    std::mutex mu;
    std::condition_variable cv;
    uint64_t generation = 0;  // GUARDED_BY(mu); completed all_gathers
    int arrived = 0;          // GUARDED_BY(mu)
    std::vector<std::vector<std::byte>> contributions, result;  // GUARDED_BY(mu)
    // Every process's failure callbacks, by id.
    std::vector<std::map<int, ProcessGroup::FailureCallback>> callbacks;  // GUARDED_BY(mu)
    int next_callback_id = 1;                                             // GUARDED_BY(mu)
    // Held while callbacks run, so that remove_failure_callback never returns during one.
    std::mutex callback_run_mu;
    // Links by (transport ordinal, source core, destination core).
    std::map<std::tuple<int, int, int>, std::shared_ptr<RingBufferLink>> links;  // GUARDED_BY(mu)
  };

  /// One end's view of a shared ring buffer.
  class SharedLink final : public Link {
   public:
    SharedLink(std::shared_ptr<RingBufferLink> link, bool direct)
        : link_(std::move(link)), direct_(direct) {}
    int src_core() const override { return link_->src_core(); }
    int dst_core() const override { return link_->dst_core(); }
    uint64_t slot_bytes() const override { return link_->slot_bytes(); }
    int num_slots() const override { return link_->num_slots(); }
    bool supports_direct_access() const override { return direct_; }
    std::byte* acquire_send_slot(Deadline d) override { return link_->acquire_send_slot(d); }
    void commit_send(const Fingerprint& f, uint64_t bytes) override {
      link_->commit_send(f, bytes);
    }
    ReceivedSlot acquire_recv_slot(Deadline d) override { return link_->acquire_recv_slot(d); }
    void release_recv() override { link_->release_recv(); }
    void abort(const std::string& reason) override { link_->abort(reason); }
    void reset() override { link_->reset(); }

   private:
    std::shared_ptr<RingBufferLink> link_;
    bool direct_;
  };

  class SharedTransport final : public Transport {
   public:
    SharedTransport(std::shared_ptr<Shared> shared, int ordinal, int cores_per_process)
        : shared_(std::move(shared)), ordinal_(ordinal), cores_per_process_(cores_per_process) {}
    std::string_view name() const override { return "threaded_processes"; }
    std::unique_ptr<Link> connect(int src, int dst, const LinkOptions& options) override {
      std::lock_guard lock(shared_->mu);
      std::shared_ptr<RingBufferLink>& link = shared_->links[{ordinal_, src, dst}];
      if (!link) link = std::make_shared<RingBufferLink>(src, dst, options);
      return std::make_unique<SharedLink>(link,
                                          src / cores_per_process_ == dst / cores_per_process_);
    }

   private:
    std::shared_ptr<Shared> shared_;
    int ordinal_;
    int cores_per_process_;
  };

  class Group final : public ProcessGroup, public TransportProvider {
   public:
    Group(std::shared_ptr<Shared> shared, int index) : shared_(std::move(shared)), index_(index) {
      std::lock_guard lock(shared_->mu);
      shared_->callbacks.resize(static_cast<size_t>(shared_->count));
    }
    int process_index() const override { return index_; }
    int process_count() const override { return shared_->count; }

    std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) override {
      std::unique_lock lock(shared_->mu);
      const uint64_t generation = shared_->generation;
      shared_->contributions[static_cast<size_t>(index_)].assign(mine.begin(), mine.end());
      if (++shared_->arrived == shared_->count) {
        shared_->result = shared_->contributions;
        shared_->arrived = 0;
        ++shared_->generation;
        shared_->cv.notify_all();
      } else if (!shared_->cv.wait_for(lock, shared_->timeout,
                                       [&] { return shared_->generation != generation; })) {
        throw DeadlineExceededError("process " + std::to_string(index_) + ": all_gather waited " +
                                    std::to_string(shared_->timeout.count()) +
                                    " ms for the other processes");
      }
      return shared_->result;
    }
    void barrier() override { all_gather({}); }

    // Every other process's runtimes hear of it: the simulated processes number their
    // callbacks in one sequence, so the id of the failing runtime is not theirs.
    void notify_failure(int /*callback_id*/, int core_id, const std::string& message) override {
      std::lock_guard run_lock(shared_->callback_run_mu);
      std::vector<FailureCallback> others;
      {
        std::lock_guard lock(shared_->mu);
        for (size_t p = 0; p < shared_->callbacks.size(); ++p) {
          if (static_cast<int>(p) == index_) continue;
          for (const auto& [id, f] : shared_->callbacks[p]) others.push_back(f);
        }
      }
      for (const FailureCallback& f : others) f(core_id, message);
    }
    int add_failure_callback(FailureCallback callback) override {
      std::lock_guard lock(shared_->mu);
      const int id = shared_->next_callback_id++;
      shared_->callbacks[static_cast<size_t>(index_)][id] = std::move(callback);
      return id;
    }
    void remove_failure_callback(int id) override {
      std::lock_guard run_lock(shared_->callback_run_mu);
      std::lock_guard lock(shared_->mu);
      shared_->callbacks[static_cast<size_t>(index_)].erase(id);
    }

    std::shared_ptr<Transport> make_transport(const Runtime& runtime,
                                              const std::vector<int>&) override {
      return std::make_shared<SharedTransport>(shared_, transports_++, runtime.local_num_cores());
    }

   private:
    std::shared_ptr<Shared> shared_;
    const int index_;
    int transports_ = 0;  // made so far; communicators are made from one host thread
  };

  std::shared_ptr<Shared> shared_;
  std::vector<std::shared_ptr<Group>> groups_;
};

}  // namespace vtpu::testing_util
