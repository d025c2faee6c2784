#include "vtpu/common/latency_summary.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

namespace vtpu {

LatencySummary summarize_latencies(std::vector<double> samples_ns) {
  LatencySummary s;
  s.samples = samples_ns.size();
  if (samples_ns.empty()) return s;
  std::sort(samples_ns.begin(), samples_ns.end());
  const double n = static_cast<double>(samples_ns.size());
  auto rank = [&](double q) {  // the ceil(q * n)-th smallest, 1-based
    const auto k = static_cast<size_t>(std::ceil(q * n - 1e-9));
    return samples_ns[std::clamp<size_t>(k, 1, samples_ns.size()) - 1];
  };
  s.median_ns = rank(0.5);
  s.p99_ns = rank(0.99);
  s.p9999_ns = rank(0.9999);
  s.max_ns = samples_ns.back();
  double sum = 0;
  for (double v : samples_ns) sum += v;
  s.mean_ns = sum / n;
  return s;
}

double measure_clock_overhead_ns(int reads) {
  std::vector<int64_t> stamps(static_cast<size_t>(std::max(reads, 2)));
  for (int64_t& t : stamps) {
    t = std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::steady_clock::now().time_since_epoch())
            .count();
  }
  std::vector<double> diffs(stamps.size() - 1);
  for (size_t i = 0; i + 1 < stamps.size(); ++i)
    diffs[i] = static_cast<double>(stamps[i + 1] - stamps[i]);
  return summarize_latencies(std::move(diffs)).median_ns;
}

void to_json(nlohmann::json& j, const LatencySummary& s) {
  j = nlohmann::json{{"samples", s.samples},   {"median_ns", s.median_ns}, {"p99_ns", s.p99_ns},
                     {"p9999_ns", s.p9999_ns}, {"max_ns", s.max_ns},       {"mean_ns", s.mean_ns}};
}

}  // namespace vtpu
