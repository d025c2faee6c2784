// The fragmentation check: many seeded random workloads run against an arena held near a target
// occupancy, counting out-of-memory failures that happen although the arena's total free bytes
// cover the request ("false" OOMs, caused by fragmentation) apart from true ones.
//
// It backs the target for auto-defragmentation: with bfc and auto-defragmentation on,
// zero false OOMs over 1000 workloads at up to 95% occupancy. Run it with
// `vtpu bench fragmentation` (cli/main.cc).
//
// One workload (seed s): a metadata-only arena of `capacity_bytes` with the given policy, and
// `ops` steps with engine std::mt19937_64(s). Each step draws a size from `sizes` (capped at the
// bound), frees uniformly chosen live buffers until the live requested bytes plus the size fit
// within occupancy * capacity, then allocates it, so the arena runs close to the bound throughout.
// An allocation that fails is counted false when the rounded request <= total free bytes just
// before it (before any defragmentation), true otherwise; the workload then carries on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vtpu/stress/alloc_workload.h"

namespace vtpu {

/// Parameters of run_fragmentation_check. Sizes in bytes. Plain data.
struct FragmentationCheckOptions {
  std::string policy = "bfc";
  bool auto_defragment = true;
  uint64_t capacity_bytes = 64 * kMiB;
  double occupancy = 0.95;  // live requested bytes stay <= occupancy * capacity; in (0, 1]
  int workloads = 1000;     // seeds first_seed .. first_seed + workloads - 1; >= 1
  uint64_t first_seed = 1;
  int ops = 2000;  // steps per workload, >= 1
  SizeOptions sizes = [] {
    SizeOptions s;  // log-normal around 64 KiB, up to 1/16 of the default capacity
    s.distribution = SizeDistribution::kLogNormal;
    s.lognormal.median_bytes = 64 * kKiB;
    s.lognormal.sigma = 1.5;
    s.lognormal.min_bytes = 256;
    s.lognormal.max_bytes = 4 * kMiB;
    return s;
  }();

  /// Throws InvalidArgumentError naming the first field out of range.
  void validate() const;
};

/// Totals over all workloads.
struct FragmentationCheckResult {
  int workloads = 0;
  uint64_t allocations = 0;  // successful
  uint64_t false_ooms = 0;   // failed although rounded request <= total free
  uint64_t true_ooms = 0;    // failed and total free < rounded request
  int workloads_with_false_oom = 0;
  uint64_t defragmentations = 0;
  uint64_t bytes_moved = 0;
  uint64_t defrag_time_ns = 0;
  double max_occupancy = 0.0;  // highest live requested bytes / capacity seen
  double wall_seconds = 0.0;
};

/// Runs the workloads (in parallel, one thread per usable CPU; each workload is sequential and
/// seeded, so the counts do not depend on scheduling). Throws InvalidArgumentError for bad
/// options. Thread-safe.
FragmentationCheckResult run_fragmentation_check(const FragmentationCheckOptions& options);

}  // namespace vtpu
