// One core's replay of its stream in one run of `vtpu stress` (stress/stress_harness.h): the
// events in stream order, and under load, between them, `collective_rounds` load rounds (an Eigen
// matmul, then an all-reduce of a gradient bucket over all cores whose result is checked) spread
// evenly over the stream, and cross-core frees handed to the next core (stress/cross_core_frees.h).
//
//   for event i:   load rounds due before i   (round k sits before event floor(k * total / rounds))
//                  apply the inbox, wait for own old hand-offs      (cross-core frees)
//                  hand the free to the next core, or replay the event
//   after:         the remaining rounds; flush own hand-offs; meet every core at a final gate
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "vtpu/collectives/communicator.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/stress/cross_core_frees.h"
#include "vtpu/stress/stress_harness.h"
#include "vtpu/stress/stress_replay.h"

namespace vtpu {

/// The load's totals over every core and run. Thread-safe.
struct LoadCounters {
  std::atomic<uint64_t> all_reduces{0};
  std::atomic<uint64_t> all_reduce_failures{0};
  std::atomic<uint64_t> matmuls{0};
};

/// The communicator of the load's all-reduces: every core of `runtime`.
std::unique_ptr<Communicator> make_load_communicator(Runtime& runtime);

/// Replays `stream` on the calling core through `replayer` (see the model above) and returns the
/// replayer's metrics. `comm` carries the load's all-reduces (may be null without load);
/// `frees` is null unless cross-core frees are on, and then every core of the run must call.
/// Throws what the replay, the all-reduces or the cross-core waits throw.
StressCoreMetrics replay_core(CoreContext& ctx, const StressOptions& options,
                              const std::string& policy, const CoreStream& stream,
                              CoreReplayer& replayer, Communicator* comm, CrossCoreFrees* frees,
                              LoadCounters& load);

}  // namespace vtpu
