// The fragmentation stress harness behind `vtpu stress` (docs/STRESS.md): per-core allocation
// streams (seeded workloads from stress/stress_workload.h, or a trace) replayed on every core of
// a Runtime at once, once per (allocator policy, defrag mode) combination on exactly the same
// streams, with the metrics of stress/stress_replay.h, written as the `vtpu stress --json`
// document (/work's stress-report schema, docs/STRESS.md).
//
// Under load (the default), every core also runs, between its events:
//   - `collective_rounds` all-reduces of a gradient bucket (f32, bucket_bytes) over all cores,
//     spread evenly over its stream, each preceded by an Eigen matmul (matmul_dim^2 f32 by
//     matmul_dim^2), so allocation, link traffic and compute contend; every all-reduce result is
//     checked (sum of core ids + 1 over the group);
//   - cross-core frees: a free event of a buffer whose slot hashes below cross_core_free_per_mille
//     (is_cross_core_free) is not done by its own core but handed to the next core ((c + 1) mod N)
//     through that core's inbox; the next core frees it (HbmArena is thread-safe, and the owning
//     CoreReplayer's mutex serialises the free with the owner's own events and checks) at its
//     next event boundary or while it waits. The owner waits, before its event i, until every
//     free it handed off at an event < i - cross_core_free_max_lag has landed, so the delay is
//     bounded in the owner's events: with the default lag 0 every cross-core free lands before the
//     owner's next event, the owner's arena sees its stream's order exactly, and every figure but
//     the times repeats run to run, as with --load off. With a lag L > 0, timing decides where in
//     those L events a free lands, and peak live exceeds the run without cross-core frees by at
//     most the bytes of the cross-core frees among any L consecutive events of the owner.
// The capacity search (find_min_capacity) always replays metadata-only without load, from each
// core's peak live bytes up to capacity_search_limit(), the same bound for every policy (a run
// that could not start, such as a planned heap above hbm_bytes, is searched too).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "vtpu/common/units.h"
#include "vtpu/stress/stress_workload.h"

namespace vtpu {

/// When a run's arenas compact (docs/STRESS.md, "Auto-defragmentation modes").
enum class DefragMode : uint8_t {
  kOff,           // never
  kOnFailure,     // on a request that fails for fragmentation, then retry (the TPU runtime's rule)
  kBeforeGrowth,  // kOnFailure, and before a request would raise the reserved footprint when the
                  // live chunks plus the request would end lower once compacted
                  // (ArenaOptions::defragment_before_growth)
};
/// The JSON's `defragment_mode`: "off", "on_failure", "before_growth". Pure function.
const char* defrag_mode_name(DefragMode mode);
/// The command line's and the table's word: "off", "on", "growth". Pure function.
const char* defrag_mode_flag(DefragMode mode);

/// What `vtpu stress` runs. Sizes in bytes. Plain data.
struct StressOptions {
  int cores = 8;                                  // virtual cores, 1..1024
  StressWorkloadOptions workload;                 // used when trace_path is empty
  std::string trace_path;                         // replay this trace (event core c -> c % cores)
  std::vector<std::string> allocators = {"bfc"};  // bfc, tlsf, first_fit, buddy, planned
  std::vector<DefragMode> defrag_modes = {DefragMode::kOnFailure};  // one run per policy and mode
  uint64_t hbm_bytes = 16 * kGiB;                                   // arena capacity per core
  bool under_load = true;       // collectives, compute and cross-core frees
  bool backing = false;         // real bytes and checksums (slower)
  bool stop_on_oom = false;     // rethrow the first OutOfMemoryError
  bool search_capacity = true;  // find the smallest capacity with no OOM
  /// Upper bound of the capacity search, bytes, the same for every policy and core (no larger
  /// capacity is tried); 0: the default rule, max(4 x hbm_bytes, 64 GiB) (saturating at 2^64-1).
  uint64_t capacity_search_max_bytes = 0;
  int collective_rounds = 100;              // all-reduces per core per run (under load)
  uint64_t bucket_bytes = 256 * kKiB;       // all-reduce bucket, a multiple of 4
  int matmul_dim = 64;                      // square f32 matmul before every all-reduce
  uint32_t cross_core_free_per_mille = 50;  // share of frees done by the next core, 0..1000
  /// A cross-core free handed off at the owner's event i lands before the owner's event
  /// i + 1 + cross_core_free_max_lag (events; 0..1000000). 0: before the owner's next event.
  uint32_t cross_core_free_max_lag = 0;
  int timeline_samples = 1000;         // per core and run
  uint64_t latency_sample_every = 16;  // time one op in this many
  std::string command;                 // the command line, for the report
  /// For a progress bar (may be null), written by run_stress and read by any thread: which
  /// phase the work is in and how far that phase is. The phases, in order: building the event
  /// streams; planning heaps (only with `planned`; per core); then, for each run (policy,
  /// defrag mode), its replay (counted in events, updated every few thousand) followed by
  /// its capacity search (when on; counted in cores done, with the capacities tried so far). A
  /// phase's counters reach their totals only when the phase is over; the next phase starts from 0.
  struct Progress {
    enum class Phase : int { kBuildingStreams, kPlanning, kReplay, kCapacitySearch, kDone };
    std::atomic<Phase> phase{Phase::kBuildingStreams};
    std::atomic<uint64_t> run{0};    // the current run, from 1 (replay and capacity search)
    std::atomic<uint64_t> runs{0};   // runs in all
    std::atomic<uint64_t> total{0};  // this phase's units: events (replay) or cores
    std::atomic<uint64_t> done{0};   // units of this phase done so far
    std::atomic<uint64_t> search_replays{0};  // capacity search: capacities tried in this run
  }* progress = nullptr;
  /// Testing only (null: not called): called on each core's thread before each of its events in
  /// a replay, with the run's allocator, the core and the event index. An exception it throws
  /// fails that run as any error inside a replay does: run_stress records the run as failed with
  /// the error text and goes on with the others.
  std::function<void(const std::string& allocator, int core, uint64_t event)>
      before_event_for_testing;

  /// Throws InvalidArgumentError naming the first bad field (by its `vtpu stress` option where it
  /// has one: --hbm-bytes, --bucket-bytes, --capacity-search-max, --events).
  void validate() const;
  /// The capacity search's upper bound in bytes: capacity_search_max_bytes, or the default rule.
  uint64_t capacity_search_limit() const;
};

/// Host memory (RAM of this process, not HBM) a run_stress call needs at its peak, by consumer,
/// in bytes (docs/STRESS.md, "Host memory"). Estimated from the sizes of the types that hold the
/// data plus measured per-entry costs of the JSON report; tests check each figure against the
/// heap bytes really allocated (glibc mallinfo2) within a factor. Plain data.
struct StressHostMemory {
  uint64_t stream_build = 0;  // generated: every core's TraceEvents and compiled ops at once
  uint64_t streams = 0;       // the compiled streams (ops, trace ids, labels), kept for the call
  uint64_t plans = 0;         // planned: every core's heap plan and its planning (in parallel)
  uint64_t replay = 0;   // one run's replayers and arenas on all cores (or its capacity search)
  uint64_t reports = 0;  // every run's JSON: per-core timelines, worst-moment maps, summaries
  uint64_t backing = 0;  // --backing: the arenas' touched pages, at least each core's peak live
  /// The largest of: building the streams; the streams, plans, one run and the reports so far
  /// plus the backing, which coexist while the last run replays.
  uint64_t peak_bytes() const;
  /// "streams 1.00 GiB, replay 2.00 GiB, ..." (the consumers above 0).
  std::string breakdown() const;
};

/// The estimate for `o` with `events_per_core` events per core, and what is known only once the
/// streams exist (0 before): `live_buffers_per_core`, the most buffers live at once on one core,
/// and `peak_live_bytes_all_cores`, the sum over cores of each core's peak live bytes (--backing).
/// Before the streams exist it therefore counts what the events alone need (a lower bound for
/// the arenas and maps). Pure function.
StressHostMemory estimate_stress_host_memory(const StressOptions& o, uint64_t events_per_core,
                                             uint64_t live_buffers_per_core = 0,
                                             uint64_t peak_live_bytes_all_cores = 0);

/// One line for a progress bar, from a snapshot of `p`: the phase (and run), a 20-character bar
/// and the percentage of that phase, and its counts, e.g.
/// "run 2/4 replay [########............] 42% 1234567/2939393 events" or
/// "run 2/4 capacity search [#####...............] 25% 2/8 cores, 37 capacities tried". 100% shows
/// only when the named phase is complete. Thread-safe.
std::string format_stress_progress(const StressOptions::Progress& p);

/// Whether the free of `slot` (a CoreStream slot) on core `core` is handed to the next core under
/// load: a fixed hash of (core, slot) below `per_mille` of 1000, so every policy sees the same
/// cross-core frees. Pure function.
bool is_cross_core_free(int core, uint32_t slot, uint32_t per_mille);

/// Runs every (allocator, defrag mode) combination and returns the report document. Throws
/// InvalidArgumentError for bad options or a bad trace, NotFoundError for a missing trace, and,
/// with stop_on_oom, the first OutOfMemoryError (its report() is the full out-of-memory report).
/// Any other error inside one run (e.g. InternalError or std::bad_alloc from a replay, or from its
/// capacity search) does not lose the other runs: that run gets `"failed": true` and `error` (the
/// error's text, prefixed by the phase) in the document, zero figures if its replay failed, and
/// the next run starts on a fresh communicator.
nlohmann::json run_stress(const StressOptions& options);

/// The exit status of `vtpu stress` for a report: 1 when a run failed (`failed`) or could not
/// start (an `error` without `failed`, e.g. a planned heap above --hbm-bytes: the run has no
/// figures), a buffer checksum failed or an all-reduce result was wrong, else 0. OOMs counted in
/// a run that completed are results, not failures.
int stress_exit_code(const nlohmann::json& report);

/// The terminal tables of a report: one line per run (summary over cores), then latencies.
std::string format_stress_table(const nlohmann::json& report);

}  // namespace vtpu
