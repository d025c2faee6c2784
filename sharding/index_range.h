// IndexRange: a half-open range of indices along one array dimension.
#pragma once

#include <cstdint>

namespace vtpu {

/// [start, stop) along one dimension, in elements; empty when stop == start. Plain data,
/// thread-compatible.
struct IndexRange {
  int64_t start = 0;
  int64_t stop = 0;
  int64_t size() const { return stop - start; }
  friend bool operator==(const IndexRange&, const IndexRange&) = default;
};

}  // namespace vtpu
