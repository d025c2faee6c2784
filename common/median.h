// The median of a sample, shared by the benchmarks and trainers (step times, collective times).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace vtpu {

/// The median of `v`: its middle value after sorting, the mean of the two middle values for an
/// even count, and 0 when `v` is empty. Takes `v` by value (sorts the copy). Thread-safe (pure).
inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace vtpu
