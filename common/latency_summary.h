#pragma once
// Order statistics of latency samples, shared by the allocator benchmarks and the stress replay.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
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

void to_json(nlohmann::json& j, const LatencySummary& s);

}  // namespace vtpu
