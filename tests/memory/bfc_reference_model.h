// An independent, deliberately naive model of BFC for randomized tests: the interval model of
// free_space_model.h (maximal free intervals and chunks in use) plus BFC's choice. It predicts
// exactly what BfcPolicy must return, because BFC's bins only speed up the same choice: among free
// chunks of at least the rounded request, the smallest, lowest offset first; split by TensorFlow's
// rule.
//
// Every operation is a linear scan, so the model is obviously right rather than fast.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "vtpu/memory/allocator_policy.h"
#include "tests/memory/free_space_model.h"

namespace vtpu::testing {

class BfcReferenceModel : public FreeSpaceModel {
 public:
  BfcReferenceModel(uint64_t capacity_bytes, uint64_t max_internal_fragmentation_bytes)
      : FreeSpaceModel(capacity_bytes, FreeChunks::kCoalesced),
        max_internal_fragmentation_bytes_(max_internal_fragmentation_bytes) {}

  /// What allocate(size_bytes) must return, without changing the model.
  std::optional<PolicyAllocation> predict_allocate(uint64_t size_bytes) const {
    if (size_bytes > capacity_bytes()) return std::nullopt;
    const uint64_t rounded = round_up(size_bytes);
    std::optional<std::pair<uint64_t, uint64_t>> best;  // (size, offset)
    for (const auto& [offset, size] : free_intervals()) {
      if (size < rounded) continue;
      if (!best || size < best->first || (size == best->first && offset < best->second)) {
        best = std::make_pair(size, offset);
      }
    }
    if (!best) return std::nullopt;
    const uint64_t chunk_size = best->first;
    const bool split =
        chunk_size >= 2 * rounded || chunk_size - rounded >= max_internal_fragmentation_bytes_;
    return PolicyAllocation{best->second, split ? rounded : chunk_size};
  }

  /// Records that [offset, offset + chunk_bytes) was handed out. BFC always hands out the start
  /// of a free chunk: fails the test otherwise, or if the chunk overlaps a live one.
  void take(uint64_t offset, uint64_t chunk_bytes) {
    ASSERT_TRUE(free_intervals().contains(offset))
        << "offset " << offset << " is not the start of a free interval";
    FreeSpaceModel::take(offset, chunk_bytes);
  }

  uint64_t largest_free_bytes() const { return largest_free_block_bytes(); }

 private:
  uint64_t max_internal_fragmentation_bytes_;
};

}  // namespace vtpu::testing
