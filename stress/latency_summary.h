// Latency samples summarised as nearest-rank percentiles (the ceil(q * n)-th smallest sample),
// and the cost of the clock read that takes them: what the stress replay (stress/stress_replay.h)
// and the allocator-policy benchmark (bench/policy_benchmark.h) report. A sample's latency is the
// difference of two steady_clock reads minus measure_clock_overhead_ns(), clamped at 0.
#pragma once

#include <cstdint>
#include <vector>

namespace vtpu {

/// Order statistics of latency samples, in nanoseconds. Plain data, thread-compatible.
struct LatencySummary {
  uint64_t samples = 0;
  double median_ns = 0;
  double p99_ns = 0;
  double p9999_ns = 0;  // 99.99th percentile
  double max_ns = 0;
  double mean_ns = 0;
};

/// Nearest-rank percentiles (the ceil(q * n)-th smallest sample) and the mean of `samples_ns`.
/// All zero for no samples. Sorts its argument.
LatencySummary summarize_latencies(std::vector<double> samples_ns);

/// The cost of one std::chrono::steady_clock::now() read plus storing it, in ns: the median
/// difference of `reads` back-to-back reads. Thread-safe.
double measure_clock_overhead_ns(int reads = 100000);

}  // namespace vtpu
