// Replays allocation events against an allocator policy, or against a metadata-only HbmArena
// over that policy, and measures latency per sample and throughput.
//
// Method (after the usual practice of allocator papers and of Google Benchmark's manual timing):
//   1. The events are validated and compiled once: oom and defragment events are dropped (and
//      counted), and every buffer gets a dense slot, so the timed loop does no lookups of its own.
//      A policy (or arena) is created per core, each of capacity_bytes.
//   2. Events before `timed_from_event` are replayed untimed (the warm-up: the fill to L live
//      buffers of a steady-state workload).
//   3. Latency pass: the timed ops are cut into samples of ops_per_sample consecutive ops (2 for a
//      steady-state workload: one free plus the alloc that follows it; 1 for a trace: one op).
//      std::chrono::steady_clock is read once at every sample boundary; a sample's latency is the
//      difference of two consecutive reads minus the clock's own cost (the median difference of
//      back-to-back reads, measured just before), clamped at 0. Percentiles are nearest-rank.
//   4. Throughput pass: the same events again on a fresh policy, with no clock read inside the
//      timed part; ops_per_second = timed ops / wall time. It is the figure without timer cost.
//      The pass repeats (each time on a fresh policy) until the timed parts add up to
//      min_throughput_seconds (at most 1000 passes), and the median pass is reported, so that a
//      short trace is not at the mercy of one preemption.
// An alloc that fails is counted as an OOM (the arena's OutOfMemoryError is caught); the free of
// its id later is skipped and counted. Results depend on the machine and its load: compare
// policies measured side by side in one run.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vtpu/common/latency_summary.h"
#include "vtpu/common/units.h"
#include "vtpu/stress/alloc_workload.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/trace.h"

namespace vtpu {

/// Events compiled for replay (step 1 above). Immutable after construction; thread-safe.
class ReplayProgram {
 public:
  /// Validates `events` with validate_trace_events (InvalidArgumentError naming `name` and the
  /// event) and compiles them.
  explicit ReplayProgram(std::span<const TraceEvent> events, const std::string& name = "events");

  struct Op {
    uint64_t slot;   // dense buffer index, one per alloc event
    uint64_t bytes;  // alloc: requested bytes; free: 0
    uint32_t core;   // dense core index (cores in order of first appearance)
    bool is_alloc;
  };
  const std::vector<Op>& ops() const { return ops_; }
  /// Number of buffers (alloc events).
  uint64_t num_slots() const { return num_slots_; }
  /// The core ids, indexed by Op::core.
  const std::vector<int>& cores() const { return cores_; }
  /// Events in the input.
  size_t num_events() const { return num_events_; }
  /// oom and defragment events in the input, which replay skips.
  uint64_t skipped_events() const { return skipped_events_; }
  /// Index in ops() of the first op at or after input event `event_index`.
  size_t op_index_of_event(size_t event_index) const;

 private:
  std::vector<Op> ops_;
  std::vector<size_t> event_of_op_;  // input event index of every op
  std::vector<int> cores_;
  size_t num_events_ = 0;
  uint64_t num_slots_ = 0;
  uint64_t skipped_events_ = 0;
};

/// How replay_benchmark runs. Plain data, thread-compatible.
struct ReplayOptions {
  uint64_t capacity_bytes = 16 * kGiB;  // per core, bytes; default 16 GiB
  PolicyOptions policy_options;         // passed to make_allocator_policy
  bool through_arena = false;           // true: HbmArena with backing=false over the policy
  size_t timed_from_event = 0;          // input events before this index are warm-up, untimed
  int ops_per_sample = 1;               // ops per latency sample (2: a free+alloc pair); >= 1
  bool measure_latency = true;          // run the latency pass
  bool measure_throughput = true;       // run the throughput pass
  double min_throughput_seconds = 0.2;  // repeat the throughput pass until this much timed time
  int clock_overhead_reads = 100000;    // back-to-back reads for the clock overhead
};

/// What replay_benchmark measured. Plain data, thread-compatible.
struct ReplayResult {
  std::string policy;
  bool through_arena = false;
  uint64_t warmup_ops = 0;  // ops replayed untimed
  uint64_t timed_ops = 0;   // allocs + frees attempted in the timed part
  int ops_per_sample = 1;
  LatencySummary latency;          // per sample of ops_per_sample ops, ns, clock cost subtracted
  double clock_overhead_ns = 0;    // subtracted from every sample
  int throughput_passes = 0;       // throughput passes run (>= 1 when measured)
  double timed_seconds = 0;        // wall time of the timed part in the median throughput pass
  double ops_per_second = 0;       // timed_ops / timed_seconds
  uint64_t num_ooms = 0;           // failed allocs over warm-up and timed part (one pass)
  uint64_t skipped_frees = 0;      // frees of ids whose alloc failed
  uint64_t skipped_events = 0;     // oom and defragment events in the input
  uint64_t peak_bytes_in_use = 0;  // peak of the chunk bytes in use, summed over all cores
};
void to_json(nlohmann::json& j, const ReplayResult& r);

/// Replays `program` on fresh instances of the policy named `policy` (one per core of the
/// program) as described at the top of this header. Throws InvalidArgumentError for an unknown
/// policy, a capacity the policy rejects, ops_per_sample < 1 or timed_from_event past the end.
/// Thread-compatible: runs on the calling thread only.
ReplayResult replay_benchmark(std::string_view policy, const ReplayProgram& program,
                              const ReplayOptions& options);

/// make_steady_state_workload(workload), then replay_benchmark with timed_from_event = L and
/// ops_per_sample = 2, so latency is per free+alloc pair.
ReplayResult steady_state_benchmark(std::string_view policy, const SteadyStateOptions& workload,
                                    ReplayOptions options);

}  // namespace vtpu
