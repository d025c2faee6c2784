#include "vtpu/stress/fragmentation_check.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/parallel_for.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/hbm_arena.h"

namespace vtpu {

void FragmentationCheckOptions::validate() const {
  auto bad = [](const std::string& what) { throw InvalidArgumentError(what); };
  if (!(occupancy > 0.0 && occupancy <= 1.0)) {
    std::ostringstream os;
    os << "fragmentation check occupancy " << occupancy << " is out of range (expected (0, 1])";
    bad(os.str());
  }
  if (workloads < 1)
    bad("fragmentation check workloads is " + std::to_string(workloads) + " (expected >= 1)");
  if (ops < 1) bad("fragmentation check ops is " + std::to_string(ops) + " (expected >= 1)");
  const auto& known = known_allocator_policies();
  if (std::find(known.begin(), known.end(), policy) == known.end())
    bad("fragmentation check policy '" + policy +
        "' (expected one of bfc, tlsf, first_fit, buddy)");
  sizes.validate();
}

namespace {

FragmentationCheckResult run_one(const FragmentationCheckOptions& o, uint64_t seed,
                                 const SizeSampler& sampler) {
  ArenaOptions a;
  a.capacity_bytes = o.capacity_bytes;
  a.policy = o.policy;
  a.backing = false;
  a.auto_defragment = o.auto_defragment;
  HbmArena arena(a);
  const auto limit =
      static_cast<uint64_t>(o.occupancy * static_cast<double>(arena.capacity_bytes()));
  std::mt19937_64 rng(seed);
  std::vector<std::pair<BufferId, uint64_t>> live;  // id, requested bytes
  uint64_t live_bytes = 0;
  FragmentationCheckResult r;
  r.workloads = 1;
  for (int step = 0; step < o.ops; ++step) {
    const uint64_t size = std::min(sampler.sample(rng), limit);
    // Free uniformly chosen live buffers until the request fits under the occupancy bound, so
    // the arena runs close to the bound for the whole workload.
    while (!live.empty() && live_bytes + size > limit) {
      const size_t i = uniform_uint64(rng, 0, live.size() - 1);
      arena.free(live[i].first);
      live_bytes -= live[i].second;
      live[i] = live.back();
      live.pop_back();
    }
    const MemoryStats before = arena.memory_stats();
    try {
      live.emplace_back(arena.allocate(size), size);
      live_bytes += size;
      ++r.allocations;
      r.max_occupancy = std::max(r.max_occupancy, static_cast<double>(live_bytes) /
                                                      static_cast<double>(arena.capacity_bytes()));
    } catch (const OutOfMemoryError& e) {
      if (e.report().rounded_bytes <= before.total_free_bytes) {
        ++r.false_ooms;
      } else {
        ++r.true_ooms;
      }
    }
  }
  const MemoryStats s = arena.memory_stats();
  r.defragmentations = s.num_defragmentations;
  r.bytes_moved = s.defrag_bytes_moved;
  r.defrag_time_ns = s.defrag_time_ns;
  r.workloads_with_false_oom = r.false_ooms > 0 ? 1 : 0;
  return r;
}

FragmentationCheckResult combine(FragmentationCheckResult a, const FragmentationCheckResult& b) {
  a.workloads += b.workloads;
  a.allocations += b.allocations;
  a.false_ooms += b.false_ooms;
  a.true_ooms += b.true_ooms;
  a.workloads_with_false_oom += b.workloads_with_false_oom;
  a.defragmentations += b.defragmentations;
  a.bytes_moved += b.bytes_moved;
  a.defrag_time_ns += b.defrag_time_ns;
  a.max_occupancy = std::max(a.max_occupancy, b.max_occupancy);
  return a;
}

}  // namespace

FragmentationCheckResult run_fragmentation_check(const FragmentationCheckOptions& options) {
  options.validate();
  const SizeSampler sampler(options.sizes);
  const auto start = std::chrono::steady_clock::now();
  // One result per workload, summed after the join (common/parallel_for.h: plain threads, so
  // ThreadSanitizer sees the workers' writes ordered before the sum).
  std::vector<FragmentationCheckResult> results(static_cast<size_t>(options.workloads));
  parallel_for_index(results.size(), [&](size_t w) {
    results[w] = run_one(options, options.first_seed + w, sampler);
  });
  FragmentationCheckResult total;
  for (const FragmentationCheckResult& r : results) total = combine(total, r);
  total.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return total;
}

}  // namespace vtpu
