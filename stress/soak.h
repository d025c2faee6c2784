// The soak test behind `vtpu stress soak` (scripts/soak.sh): every core churns allocations in its
// own backed arena, held near a target occupancy so that fragmentation keeps triggering automatic
// defragmentation, while all cores all-reduce a gradient bucket that lives in those arenas, for a
// given wall time. Nothing may be lost or changed on the way:
//
//   round:  ops_per_round churn steps, each: apply the inbox (cross-core frees), free random live
//           buffers until the next size fits under occupancy x capacity, allocate it, fill it
//           with seeded bytes and keep its checksum;
//           the bucket: allocated in the arena, pinned, filled with core + 1, all-reduced in
//           place and checked (every element n (n + 1) / 2), unpinned and freed;
//           the stop vote: a one-element max all-reduce of "my deadline passed", so every core
//           runs the same number of rounds.
//   after an allocation that compacted the arena (its compaction count moved): every live buffer
//           of that core is looked up again (a buffer the arena no longer knows, or knows with
//           another size, is lost) and its checksum compared (a mismatch counts once per buffer).
//   a free: the buffer's checksum is compared first; a share of the frees (cross_core_per_mille)
//           is handed to the next core, which pins the buffer, checks it, unpins and frees it
//           while its owner keeps allocating and compacting around it.
//   the end: inboxes drained, then every live buffer checked and each arena's live count compared
//           with the buffers its core tracks (a difference counts as lost).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "vtpu/common/units.h"
#include "vtpu/stress/alloc_workload.h"

namespace vtpu {

/// What run_soak runs. Sizes in bytes. Plain data.
struct SoakOptions {
  int cores = 8;                   // virtual cores, 1..1024
  double seconds = 10.0;           // wall time, > 0; the last round ends after it
  std::string policy = "bfc";      // allocator policy (one that can relocate: not planned)
  uint64_t hbm_bytes = 16 * kMiB;  // backed arena per core
  double occupancy = 0.9;          // live churn bytes <= occupancy x (capacity - bucket); (0, 1]
  bool defragment_before_growth = false;  // ArenaOptions::defragment_before_growth
  uint64_t seed = 1;                      // churn sizes and choices; core c uses mix64(seed + c)
  int ops_per_round = 64;                 // churn steps between two all-reduces, >= 1
  uint64_t bucket_bytes = 64 * kKiB;      // all-reduce bucket, a multiple of 4, >= 4
  uint32_t cross_core_per_mille = 50;     // share of frees handed to the next core, 0..1000
  SizeOptions sizes = [] {
    SizeOptions s;  // log-normal around 16 KiB, up to 1 MiB
    s.distribution = SizeDistribution::kLogNormal;
    s.lognormal.median_bytes = 16 * kKiB;
    s.lognormal.sigma = 1.5;
    s.lognormal.min_bytes = 64;
    s.lognormal.max_bytes = 1 * kMiB;
    return s;
  }();
  /// Testing only: when core 0 has seen this many compactions (from 1; 0: never), one byte of one
  /// of its live buffers is flipped before the check that follows, as a compaction that copied
  /// wrongly would leave it.
  uint64_t corrupt_at_compaction_for_testing = 0;

  /// Throws InvalidArgumentError naming the first field out of range.
  void validate() const;
};

/// One core's counters (or their sum over cores).
struct SoakCounters {
  uint64_t allocations = 0;         // successful churn allocations
  uint64_t frees = 0;               // churn frees, own and cross-core
  uint64_t cross_core_frees = 0;    // frees of this core's buffers done by the next core
  uint64_t ooms = 0;                // churn allocations that failed even after compaction
  uint64_t fragmentation_ooms = 0;  // arena's failures with total free >= the request
  uint64_t compactions = 0;         // arena compactions (all automatic)
  uint64_t buffers_moved = 0;
  uint64_t bytes_moved = 0;
  uint64_t checksum_checks = 0;
  uint64_t checksum_mismatches = 0;  // buffers whose contents changed (each counted once)
  uint64_t lost_buffers = 0;         // tracked buffers the arena lost, or untracked live ones
  uint64_t all_reduces = 0;          // bucket all-reduces (the stop votes not counted)
  uint64_t all_reduce_failures = 0;  // results with a wrong element
  uint64_t peak_live_buffers = 0;    // most churn buffers live at once
  SoakCounters& operator+=(const SoakCounters& o);
};

/// What run_soak found.
struct SoakResult {
  uint64_t rounds = 0;
  double seconds = 0.0;  // wall time of the run
  SoakCounters total;    // summed over cores (peak_live_buffers: the largest)
  std::vector<SoakCounters> cores;
};

/// Runs the soak (see the model above) on a Runtime of options.cores cores. Throws
/// InvalidArgumentError for bad options, and what a collective throws (DeadlineExceededError,
/// AbortedError) or InternalError when a bucket cannot be placed. Thread-safe.
SoakResult run_soak(const SoakOptions& options);

/// The `vtpu stress soak --json` document: the options, the totals and per_core.
nlohmann::json soak_json(const SoakOptions& options, const SoakResult& result);

/// 1 when a checksum mismatched, a buffer was lost or an all-reduce was wrong; else 0.
int soak_exit_code(const SoakResult& result);

/// A few lines for the terminal: the run and its totals.
std::string format_soak_summary(const SoakOptions& options, const SoakResult& result);

}  // namespace vtpu
