// Reshard execution: runs a ReshardPlan (sharding/reshard_plan.h) on a ShardedArray, one SPMD
// program per step, each collective over Communicator::for_groups of the step's replica groups.
// Every collective takes blocks padded to the step's buffer_shape (the identity of the step's
// reduction as padding) and trims its result back to the logical block, so no step leaves padding
// in an array. planner/reshard_planner.h makes the plans, and its reshard() plans and runs in one
// call.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "vtpu/runtime/runtime.h"
#include "vtpu/sharding/reshard_plan.h"
#include "vtpu/sharding/sharded_array.h"

namespace vtpu {

class Communicator;

/// What one step of execute_reshard took.
struct ReshardStepTiming {
  double wall_seconds = 0;        // host wall time of the step: communicators, program, copies
  double collective_seconds = 0;  // the slowest core's time inside the collective (0 if local)
};

/// Communicators for reshard steps, one per replica group, created on first use and reused by
/// later steps and later execute_reshard calls with the same groups (so that links are set up
/// once). Host-side; thread-compatible: one execute_reshard at a time may use a cache. After a
/// reshard failed (a collective timed out or was aborted), discard the cache. Must not outlive
/// its Runtime.
class ReshardCommunicatorCache {
 public:
  explicit ReshardCommunicatorCache(Runtime& runtime);
  ~ReshardCommunicatorCache();
  ReshardCommunicatorCache(const ReshardCommunicatorCache&) = delete;
  ReshardCommunicatorCache& operator=(const ReshardCommunicatorCache&) = delete;

  /// One communicator per group of `groups` (device ids in rank order), in the same order.
  /// Throws like Communicator::for_groups.
  const std::vector<std::unique_ptr<Communicator>>& get(
      const std::vector<std::vector<int>>& groups);

 private:
  Runtime& runtime_;
  std::map<std::vector<std::vector<int>>, std::vector<std::unique_ptr<Communicator>>> cache_;
};

/// Runs `plan` on `array` (whose shape and sharding must be the plan's; InvalidArgumentError
/// otherwise) and returns the array with the plan's target sharding, in new buffers labelled
/// "reshard/<op>"; `array` is unchanged. Collectives run over Communicator::for_groups of each
/// step's replica groups, with the runtime's communicator options, taken from `communicators`
/// when given (else from a cache local to the call); padded scratch buffers are allocated in each
/// core's HBM. Host-side call (not from inside a core's program); throws what the collectives
/// throw (DeadlineExceededError, AbortedError) and OutOfMemoryError. When `timings` is given it
/// receives one entry per step.
ShardedArray execute_reshard(Runtime& runtime, const ShardedArray& array, const ReshardPlan& plan,
                             std::vector<ReshardStepTiming>* timings = nullptr,
                             ReshardCommunicatorCache* communicators = nullptr);

}  // namespace vtpu
