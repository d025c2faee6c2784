// An independent, deliberately naive model of BFC for randomized tests: the address range as two
// ordered maps of intervals (free and in use), kept fully coalesced. It predicts exactly what
// BfcPolicy must return, because BFC's bins only speed up the same choice: among free chunks of at
// least the rounded request, the smallest, lowest offset first; split by TensorFlow's rule.
//
// Every operation is a linear scan, so the model is obviously right rather than fast.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "memory/allocator_policy.h"

namespace vtpu::testing {

class BfcReferenceModel {
 public:
  static constexpr uint64_t kGranuleBytes = 256;

  BfcReferenceModel(uint64_t capacity_bytes, uint64_t max_internal_fragmentation_bytes)
      : capacity_bytes_(capacity_bytes / kGranuleBytes * kGranuleBytes),
        max_internal_fragmentation_bytes_(max_internal_fragmentation_bytes) {
    free_.emplace(0, capacity_bytes_);
  }

  uint64_t capacity_bytes() const { return capacity_bytes_; }

  static uint64_t round_up(uint64_t size_bytes) {
    return (size_bytes + kGranuleBytes - 1) / kGranuleBytes * kGranuleBytes;
  }

  /// What allocate(size_bytes) must return, without changing the model.
  std::optional<PolicyAllocation> predict_allocate(uint64_t size_bytes) const {
    if (size_bytes > capacity_bytes_) return std::nullopt;
    const uint64_t rounded = round_up(size_bytes);
    std::optional<std::pair<uint64_t, uint64_t>> best;  // (size, offset)
    for (const auto& [offset, size] : free_) {
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

  /// Records that [offset, offset + chunk_bytes) was handed out. Fails the test if that range is
  /// not the start of a free interval (overlap with a live chunk, or outside the range).
  void take(uint64_t offset, uint64_t chunk_bytes) {
    ASSERT_LE(offset + chunk_bytes, capacity_bytes_) << "chunk past the end of the range";
    auto it = free_.find(offset);
    ASSERT_NE(it, free_.end()) << "offset " << offset << " is not the start of a free interval";
    ASSERT_LE(chunk_bytes, it->second) << "chunk at " << offset << " overlaps a live chunk";
    // Independent overlap check against the live set.
    auto next_used = used_.lower_bound(offset);
    if (next_used != used_.end()) {
      ASSERT_LE(offset + chunk_bytes, next_used->first);
    }
    if (next_used != used_.begin()) {
      auto prev_used = std::prev(next_used);
      ASSERT_LE(prev_used->first + prev_used->second, offset);
    }
    const uint64_t interval = it->second;
    free_.erase(it);
    if (chunk_bytes < interval) free_.emplace(offset + chunk_bytes, interval - chunk_bytes);
    used_.emplace(offset, chunk_bytes);
  }

  /// Records a free of the chunk at `offset`; returns its chunk bytes. Merges with neighbours.
  uint64_t give_back(uint64_t offset) {
    auto u = used_.find(offset);
    EXPECT_NE(u, used_.end());
    if (u == used_.end()) return 0;
    const uint64_t freed = u->second;
    uint64_t begin = offset;
    uint64_t size = freed;
    used_.erase(u);
    auto next = free_.lower_bound(begin);
    if (next != free_.end() && next->first == begin + size) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == begin) {
        begin = prev->first;
        size += prev->second;
        free_.erase(prev);
      }
    }
    free_.emplace(begin, size);
    return freed;
  }

  bool is_live(uint64_t offset) const { return used_.contains(offset); }
  uint64_t chunk_bytes(uint64_t offset) const { return used_.at(offset); }
  size_t num_live() const { return used_.size(); }

  uint64_t total_free_bytes() const {
    uint64_t total = 0;
    for (const auto& [offset, size] : free_) total += size;
    return total;
  }
  uint64_t largest_free_bytes() const {
    uint64_t largest = 0;
    for (const auto& [offset, size] : free_) largest = std::max(largest, size);
    return largest;
  }
  uint64_t used_bytes() const {
    uint64_t total = 0;
    for (const auto& [offset, size] : used_) total += size;
    return total;
  }

  /// Every chunk, free and in use, in address order: what walk() must report.
  std::vector<ChunkInfo> chunks() const {
    std::vector<ChunkInfo> out;
    out.reserve(free_.size() + used_.size());
    auto f = free_.begin();
    auto u = used_.begin();
    while (f != free_.end() || u != used_.end()) {  // merge of two address-ordered maps
      if (u == used_.end() || (f != free_.end() && f->first < u->first)) {
        out.push_back({f->first, f->second, false});
        ++f;
      } else {
        out.push_back({u->first, u->second, true});
        ++u;
      }
    }
    return out;
  }

 private:
  uint64_t capacity_bytes_;
  uint64_t max_internal_fragmentation_bytes_;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes; maximal (coalesced) free intervals
  std::map<uint64_t, uint64_t> used_;  // offset -> chunk bytes of live chunks
};

/// Compares a walk() with the model's chunks, entry by entry.
inline void expect_same_chunks(const std::vector<ChunkInfo>& walked,
                               const std::vector<ChunkInfo>& expected) {
  ASSERT_EQ(walked.size(), expected.size()) << "number of chunks";
  for (size_t i = 0; i < walked.size(); ++i) {
    ASSERT_EQ(walked[i].offset, expected[i].offset) << "chunk " << i;
    ASSERT_EQ(walked[i].size_bytes, expected[i].size_bytes) << "chunk " << i;
    ASSERT_EQ(walked[i].in_use, expected[i].in_use) << "chunk " << i;
  }
}

}  // namespace vtpu::testing
