// The replay engine of the fragmentation stress harness (`vtpu stress`): one core's event stream
// replayed on an HbmArena of a given policy, with the metrics the harness reports.
//
// Per core and run (policy, auto_defragment), on every event:
//   - fragmentation = 1 - largest free block / total free (0 when nothing is free), read from the
//     arena after the event; its mean is over events (event-weighted), its max over events. It
//     counts the never-touched top of the arena as free, so with a working set far below the
//     capacity it reads ~0 however holey the heap is, and a buddy arena with anything allocated
//     reads >= ~0.5 (its largest block is at most half the arena);
//   - reserved fragmentation = 1 - bytes_in_use / bytes_reserved (0 when nothing is live): the
//     share of the heap's extent [0, bytes_reserved) that is free holes, PyTorch's reserved but
//     unallocated memory (memory_viz, 1 - allocated / reserved) with the heap's current extent as
//     "reserved". It does not depend on the capacity above the extent; mean and max as above;
//   - bytes_in_use = chunk bytes of live buffers; bytes_reserved = the end offset of the highest
//     live chunk (the heap's extent at that moment); peak_reserved_bytes = max over successful
//     allocations of offset + chunk bytes; peak_live_bytes = max over time of the requested bytes
//     of live buffers. reserved_over_live = peak_reserved / peak_live (1.0 is perfect);
//   - an allocation that fails is a false OOM when its rounded size <= total free bytes just before
//     (fragmentation caused it; counted by the arena before any auto-defragmentation), a true OOM
//     otherwise. The failed allocation and the later free of its id are skipped (and counted);
//   - latency: one op in `latency_sample_every` (separately for allocs and frees) is timed with
//     std::chrono::steady_clock, minus the clock's own cost (measure_clock_overhead_ns);
//     percentiles are nearest-rank (summarize_latencies);
//   - timeline: samples evenly spaced in event index: event 0, every
//     ceil(n / timeline_samples)-th event and the last, so at most timeline_samples + 1 (1001
//     for 20000 events at the default 1000);
//   - worst moment: the block map (every chunk, address order, with the label, trace id and
//     requested bytes of used ones) captured at the first event whose reserved fragmentation
//     exceeds the previous capture by more than 0.001, so the capture is within 0.001 of the
//     maximum reserved fragmentation and at most ~1000 captures are taken (chosen by reserved
//     fragmentation, not fragmentation, whose ~0 at a large capacity put the worst moment at
//     event 0; new-user pass U27);
//   - with a backed arena, every live buffer holds seeded contents and carries their 64-bit
//     checksum; all live buffers are checked after every defragmentation (explicit or automatic),
//     each buffer again when it is freed, and all at finish().
// The capacity search (find_min_capacity) replays the stream metadata-only, stopping at the first
// OOM, and bisects the capacity between the peak live bytes and an upper bound that the caller
// gives and that no tried capacity exceeds. A policy need not be monotone in capacity (a larger
// arena can split differently), so the result is the boundary the bisection found, checked to
// complete.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "vtpu/common/units.h"
#include "vtpu/memory/hbm_arena.h"
#include "vtpu/memory/heap_planner.h"
#include "vtpu/common/latency_summary.h"
#include "vtpu/memory/trace.h"

namespace vtpu {

/// One core's events compiled for replay: every allocation gets a dense slot, labels are
/// interned. Plain data, thread-compatible (immutable once built).
struct CoreStream {
  struct Op {
    uint64_t bytes = 0;  // alloc: requested bytes; free: 0
    double t_us = 0.0;   // the event's time
    uint32_t slot = 0;   // dense buffer index, one per alloc on this core
    uint32_t label = 0;  // index into labels (alloc)
    bool is_alloc = false;
  };
  int core = 0;
  std::vector<Op> ops;
  std::vector<std::string> labels = {""};  // labels[0] is the empty label
  std::vector<uint64_t> slot_ids;          // the trace id of each slot
  uint32_t num_slots() const { return static_cast<uint32_t>(slot_ids.size()); }
};

/// Validates `events` (validate_trace_events, InvalidArgumentError naming `name`) and splits them
/// into `num_cores` (>= 1) streams: an event of core c goes to stream c % num_cores, and buffers of
/// different trace cores that land on one stream stay distinct. oom and defragment events are
/// dropped and counted in *skipped_events (if given). Thread-safe.
std::vector<CoreStream> compile_core_streams(std::span<const TraceEvent> events, int num_cores,
                                             const std::string& name,
                                             uint64_t* skipped_events = nullptr);

/// A static heap plan for the `planned` policy from one stream: buffer k is live from its alloc
/// op to the op before its free (to the last op if never freed). Thread-safe.
std::shared_ptr<const HeapPlan> plan_for_stream(const CoreStream& stream);

/// How a CoreReplayer runs. Sizes in bytes. Plain data.
struct StressReplayOptions {
  std::string policy = "bfc";
  bool auto_defragment = true;
  bool defragment_before_growth = false;  // ArenaOptions::defragment_before_growth
  uint64_t capacity_bytes = 16 * kGiB;
  bool backing = false;                // real bytes: fill, checksum and verify every buffer
  int timeline_samples = 1000;         // 0: no timeline; else a stride, up to this + 1 samples
  uint64_t latency_sample_every = 16;  // time one op in this many; 0: no latency
  bool track_worst = true;             // capture the worst-moment block map
  bool stop_on_oom = false;            // rethrow the arena's OutOfMemoryError at the first OOM
  bool stop_at_first_oom = false;      // stop quietly at the first OOM (capacity search)
  bool concurrent = false;             // other threads call free_slot(): lock around every op
  std::shared_ptr<const HeapPlan> heap_plan;  // planned: required (plan_for_stream)
};

/// One timeline sample. Sizes in bytes.
struct StressTimelineSample {
  uint64_t event = 0;
  double t_us = 0.0;
  uint64_t bytes_in_use = 0;
  uint64_t bytes_reserved = 0;
  double fragmentation = 0.0;
};

/// 1 - bytes_in_use / bytes_reserved, 0 when bytes_reserved is 0 (the header comment). Pure.
double reserved_fragmentation_ratio(uint64_t bytes_in_use, uint64_t bytes_reserved);

/// One chunk of the worst-moment block map. Sizes in bytes.
struct StressBlock {
  uint64_t offset = 0;
  uint64_t bytes = 0;  // chunk bytes
  bool used = false;
  std::string label;             // used only
  uint64_t id = 0;               // used: the trace id
  uint64_t requested_bytes = 0;  // used: bytes asked for
};

/// The arena at its most fragmented moment.
struct StressWorstMoment {
  bool captured = false;
  uint64_t event = 0;
  double t_us = 0.0;
  double fragmentation = 0.0;           // at that event
  double reserved_fragmentation = 0.0;  // at that event: what the moment was chosen by
  uint64_t capacity_bytes = 0;
  std::vector<StressBlock> blocks;  // address order, tiling [0, capacity)
};

/// Everything measured on one core (or, from merge_core_metrics, over all cores). Plain data.
struct StressCoreMetrics {
  int core = 0;                   // -1 for a summary
  uint64_t events = 0;            // alloc and free events of the stream replayed
  uint64_t allocs = 0;            // successful allocations
  uint64_t frees = 0;             // frees done (including cross-core ones)
  uint64_t skipped_frees = 0;     // frees of buffers whose allocation failed
  uint64_t cross_core_frees = 0;  // frees done by another core's thread
  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_live_bytes = 0;
  double fragmentation_sum = 0.0;  // over events, for the mean
  uint64_t fragmentation_samples = 0;
  double fragmentation_max = 0.0;
  double reserved_fragmentation_sum = 0.0;  // over the same events as fragmentation_sum
  double reserved_fragmentation_max = 0.0;
  uint64_t false_ooms = 0;
  uint64_t true_ooms = 0;
  std::vector<float> alloc_latency_ns;  // sampled
  std::vector<float> free_latency_ns;
  double wall_seconds = 0.0;  // replay time (a summary: the longest core)
  double cpu_seconds = 0.0;   // CPU time of the replaying thread (a summary: sum over cores)
  uint64_t defragmentations = 0;
  uint64_t defrag_bytes_moved = 0;
  uint64_t defrag_time_ns = 0;
  std::optional<uint64_t> min_capacity_bytes;  // none: no search, or not found below the bound
  uint64_t capacity_search_max_bytes = 0;      // the search's upper bound; 0: no search ran
  uint64_t integrity_checks = 0;
  uint64_t integrity_failures = 0;
  std::vector<StressTimelineSample> timeline;
  StressWorstMoment worst;
  std::optional<std::string> stopped_by_oom;  // the failing request, when stopped at an OOM
  /// A summary's: the largest of the cores' own reserved_over_live (merge_core_metrics).
  std::optional<double> worst_core_reserved_over_live;

  double fragmentation_mean() const;
  double reserved_fragmentation_mean() const;
  /// peak_reserved / peak_live, 0 when nothing was live; a summary's is the worst core's own
  /// ratio (not the ratio of the largest peaks, which may come from different cores).
  double reserved_over_live() const;
  double events_per_second() const;  // events / wall_seconds (a summary: sum over cores)
  /// events / cpu_seconds: the replay rate with the thread's CPU time, which a machine whose
  /// cores are shared with other work does not depress (a summary: over the summed CPU time).
  double events_per_cpu_second() const;
};

/// Sums counts and takes maxima of peaks and ratios over `cores` (reserved_over_live: the worst
/// core's own ratio); latency samples are pooled;
/// events per second is the sum of the cores' rates; no timeline or block map. Thread-safe.
StressCoreMetrics merge_core_metrics(std::span<const StressCoreMetrics> cores);

/// The metrics as the `vtpu stress --json` document's summary object (docs/STRESS.md);
/// with_details adds "core", "timeline" and "worst" for a per_core entry.
nlohmann::json stress_metrics_json(const StressCoreMetrics& m, bool with_details);

/// Replays one stream on its own HbmArena. Thread-safety: run_op, begin and finish are called by
/// one thread (the owning core); free_slot may be called from any thread when
/// options.concurrent is set, in which case every operation takes the replayer's mutex (the
/// arena also takes its own), so the owner's events and other cores' frees are serialised.
class CoreReplayer {
 public:
  /// Creates the arena (metadata-only unless options.backing). Throws InvalidArgumentError for an
  /// unknown policy, a capacity the policy rejects, or `planned` without a heap plan.
  CoreReplayer(const CoreStream& stream, StressReplayOptions options);
  ~CoreReplayer();
  CoreReplayer(const CoreReplayer&) = delete;
  CoreReplayer& operator=(const CoreReplayer&) = delete;

  /// Starts the wall clock.
  void begin();
  /// Replays op `i` of the stream (ops in order). A free of a buffer whose allocation failed is
  /// skipped. Throws OutOfMemoryError at the first OOM when options.stop_on_oom.
  void run_op(size_t i);
  /// Frees slot `slot` (its own free op is not replayed by run_op; the caller skips it) from
  /// another core's thread: a cross-core free. Counted against the owning core's events.
  void free_slot(uint32_t slot);
  /// Whether the slot's allocation succeeded and it is not freed yet.
  bool is_live(uint32_t slot) const;
  /// begin(), every op, finish(). Returns false when stopped at the first OOM
  /// (stop_at_first_oom).
  bool run_all();
  /// True after an OOM with stop_at_first_oom.
  bool stopped() const { return stopped_; }
  /// Stops the clock, checks every live buffer's checksum (backed arenas), and returns the
  /// metrics.
  StressCoreMetrics finish();

  HbmArena& arena() { return *arena_; }
  const CoreStream& stream() const { return stream_; }

 private:
  enum class SlotState : uint8_t { kPending, kLive, kFailed, kFreed };
  void alloc_locked(const CoreStream::Op& op, size_t i);
  void free_locked(uint32_t slot, size_t event_index, double t_us, bool cross);
  void after_event_locked(size_t event_index, double t_us, const ArenaFreeSpace& after,
                          bool own_op);
  void verify_all_locked();
  bool verify_locked(uint32_t slot);
  // Rebuilds ends_ from the arena's chunk records (after a compaction moved every chunk).
  void rebuild_ends_locked();
  // Drops freed slots from the top of ends_ (and compacts it when most entries are freed), then
  // sets extent_ to the top end.
  void update_extent_locked();
  void capture_worst_locked(size_t event_index, double t_us, double fragmentation,
                            double reserved_fragmentation);

  const CoreStream& stream_;
  StressReplayOptions options_;
  std::unique_ptr<HbmArena> arena_;
  mutable std::mutex mu_;              // taken around every operation when options_.concurrent
  std::vector<SlotState> state_;       // per slot
  std::vector<BufferId> buffer_;       // per slot: the arena's id while live
  std::vector<uint64_t> requested_;    // per slot: requested bytes
  std::vector<uint32_t> slot_label_;   // per slot: index into stream_.labels
  std::vector<uint64_t> checksum_;     // per slot (backed arenas)
  std::vector<uint32_t> live_slots_;   // backed arenas: the live slots, unordered
  std::vector<uint32_t> live_index_;   // backed arenas: position of a slot in live_slots_
  std::vector<uint32_t> slot_of_seq_;  // arena allocation sequence number - 1 -> slot
  uint64_t live_requested_bytes_ = 0;
  uint64_t seen_fragmentation_ooms_ = 0;
  uint64_t seen_defragmentations_ = 0;
  uint64_t timeline_stride_ = 1;
  uint64_t until_sample_ = 1;  // events until the next timeline sample
  uint64_t alloc_counter_ = 0;
  size_t last_op_ = 0;  // index of the latest op run_op replayed
  uint64_t free_counter_ = 0;
  double clock_overhead_ns_ = 0.0;
  double captured_fragmentation_ = -1.0;  // reserved fragmentation of the last capture
  // The heap's extent: the end of the highest live chunk (0 when nothing is live), the top of
  // ends_, a max-heap of (chunk end, slot) with lazy deletion: an allocation pushes its entry, a
  // free leaves it until it reaches the top, so each event costs O(log n) amortized and only a
  // compaction re-reads the arena.
  uint64_t extent_ = 0;
  std::vector<std::pair<uint64_t, uint32_t>> ends_;
  bool stopped_ = false;
  std::chrono::steady_clock::time_point start_;
  double start_cpu_seconds_ = 0.0;
  StressCoreMetrics m_;
};

/// The step of find_min_capacity's tries: every capacity it tries, and so every answer but the
/// bound itself and a planned heap, is a multiple of it (a page).
inline constexpr uint64_t kCapacitySearchGranuleBytes = 4 * kKiB;

/// The smallest capacity (bytes) at which `stream` replays with no OOM under `base`'s policy and
/// auto_defragment setting, metadata-only, to within max(4 KiB, 0.1%) of the boundary the
/// bisection finds (see the header comment). The same rule for every policy: capacities are
/// multiples of kCapacitySearchGranuleBytes (but the bound), tried from the stream's peak live
/// bytes rounded up, doubling, and never above `max_capacity_bytes`, so
/// a result is always <= max_capacity_bytes; std::nullopt ("not found below max_capacity_bytes")
/// when the replay at max_capacity_bytes fails, or without any replay when the peak live bytes
/// alone exceed it. A capacity the policy rejects (below its minimum, or below a planned heap)
/// counts as a failure. For `planned` (with base.heap_plan) the plan's heap bytes are the exact
/// answer and are tried first: returned when the replay there completes. Every capacity tried adds
/// 1 to *replays when given (a progress counter, may be read by another thread). Thread-safe.
std::optional<uint64_t> find_min_capacity(const CoreStream& stream, const StressReplayOptions& base,
                                          uint64_t max_capacity_bytes,
                                          std::atomic<uint64_t>* replays = nullptr);

}  // namespace vtpu
