// Shared by the sharding tests: the reference slice of a row-major array, written independently
// of sharding/block_copy.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "vtpu/sharding/index_range.h"

namespace vtpu::testing {

/// Walks every element of the row-major global array `host` of `shape` and keeps those inside
/// `ranges` (one [start, stop) per dimension), in order: the block, row-major.
template <typename T>
std::vector<T> naive_block(const std::vector<T>& host, const std::vector<int64_t>& shape,
                           const std::vector<IndexRange>& ranges) {
  std::vector<T> out;
  for (size_t flat = 0; flat < host.size(); ++flat) {
    size_t rest = flat;
    bool inside = true;
    for (size_t d = shape.size(); d-- > 0;) {
      const int64_t i = static_cast<int64_t>(rest % static_cast<size_t>(shape[d]));
      rest /= static_cast<size_t>(shape[d]);
      inside = inside && ranges[d].start <= i && i < ranges[d].stop;
    }
    if (inside) out.push_back(host[flat]);
  }
  return out;
}

}  // namespace vtpu::testing
