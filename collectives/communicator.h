// A Communicator is a replica group of cores that run collectives together, with JAX's lax
// semantics. It owns the links of its ring and a sequence number per collective.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "collectives/link.h"
#include "collectives/transport.h"
#include "collectives/types.h"
#include "runtime/runtime.h"

namespace vtpu {

struct CommunicatorOptions {
  LinkOptions link;                          // slot bytes and count; default from RuntimeOptions
  std::chrono::milliseconds timeout{30000};  // every wait inside a collective; default 30 s
  std::shared_ptr<Transport> transport;      // null: InProcessTransport
  /// Options from the runtime's link_slot_bytes, link_num_slots and collective_timeout.
  static CommunicatorOptions from_runtime(const RuntimeOptions& options);
};

/// Per-core totals since creation (or the last reset_stats()).
struct CollectiveStats {
  uint64_t num_collectives = 0;
  uint64_t bytes = 0;    // bytes of the user buffers reduced (count * element bytes), summed
  double seconds = 0.0;  // wall time inside collectives
};

/// A group of cores (a replica group). Create it on the host, then call its collectives from the
/// cores' SPMD programs: every core in the group must call the same collectives, with the same
/// element type, count and op, in the same order. A mismatch (desync) fails on the receiving core
/// at once with InvalidArgumentError naming both fingerprints, never a partial sum.
///
/// Failure handling: every wait has `timeout`; DeadlineExceededError names the collective, the
/// sequence number and the cores that have not reached it. When a core of the group fails (in a
/// collective, or anywhere in a run_spmd program), the group is aborted: cores waiting inside a
/// collective wake at once with AbortedError carrying the cause, and later collectives fail with
/// AbortedError until reset(). Thread-safe: each core calls from its own thread; abort() from any
/// thread; reset() only when no collective is running. A Communicator must not outlive its
/// Runtime (it unregisters its abort handler on destruction).
class Communicator {
 public:
  /// `group` lists distinct core ids of `runtime`; rank i is group[i] and the ring runs in that
  /// order. Throws InvalidArgumentError for an empty group, repeated or out-of-range ids.
  Communicator(Runtime& runtime, std::vector<int> group);
  Communicator(Runtime& runtime, std::vector<int> group, CommunicatorOptions options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const std::vector<int>& group() const { return group_; }
  int size() const { return static_cast<int>(group_.size()); }
  /// Rank of a core in this group; throws InvalidArgumentError if it is not a member.
  int rank_of(int core_id) const;

  /// All-reduce (lax.psum / pmax / pmin; NCCL ncclAllReduce) of `send` into `recv`, both of
  /// `send.size()` elements on every core of the group. `recv` may be `send` (in place) but may
  /// not partially overlap it. Result is bit-identical on every core. Types: float, double,
  /// int32_t, int64_t. Throws InvalidArgumentError for mismatched sizes, DeadlineExceededError,
  /// AbortedError.
  template <typename T>
  void all_reduce(CoreContext& ctx, std::span<const T> send, std::span<T> recv,
                  ReduceOp op = ReduceOp::kSum) {
    if (send.size() != recv.size()) {
      throw InvalidArgumentError("all_reduce send has " + std::to_string(send.size()) +
                                 " elements but recv has " + std::to_string(recv.size()) +
                                 " (expected equal)");
    }
    all_reduce_bytes(ctx, data_type_of<T>(), send.data(), recv.data(), send.size(), op);
  }
  /// In-place form.
  template <typename T>
  void all_reduce(CoreContext& ctx, std::span<T> inout, ReduceOp op = ReduceOp::kSum) {
    all_reduce(ctx, std::span<const T>(inout), inout, op);
  }

  /// Aborts the group: waiters wake with AbortedError(reason). Idempotent; the first reason stays.
  void abort(const std::string& reason);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  /// Clears an abort, empties the links and restarts sequence numbers at 0. Host side only, when
  /// no core is inside a collective of this group.
  void reset();

  /// Totals for one member core (read after run_spmd returns).
  CollectiveStats stats(int core_id) const;
  void reset_stats();
  const CommunicatorOptions& options() const { return options_; }

 private:
  void all_reduce_bytes(CoreContext& ctx, DataType dtype, const void* send, void* recv,
                        uint64_t count, ReduceOp op);
  [[noreturn]] void rethrow_with_context(int rank, const Fingerprint& fp);
  std::string missing_cores(uint64_t sequence) const;
  std::string group_string() const;

  Runtime& runtime_;
  const std::vector<int> group_;
  CommunicatorOptions options_;
  std::vector<int> rank_of_core_;                     // core id -> rank, -1 if not a member
  std::vector<std::unique_ptr<Link>> links_;          // links_[i]: rank i -> rank i+1
  std::vector<uint64_t> sequence_;                    // per rank; written only by that rank's core
  std::unique_ptr<std::atomic<uint64_t>[]> entered_;  // per rank: collectives entered
  std::vector<CollectiveStats> stats_;                // per rank; written only by that rank's core
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mu_;
  std::string abort_reason_;  // GUARDED_BY(abort_mu_)
  int abort_handler_id_ = 0;
};

}  // namespace vtpu
