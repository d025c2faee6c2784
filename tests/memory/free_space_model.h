// An independent, deliberately naive model of an address range for randomized policy tests: two
// ordered maps of intervals, the free ones kept maximal (coalesced) and the ones in use. It knows
// nothing of lists, bitmaps or trees; every query is a scan, so the model is obviously right
// rather than fast.
//
// How free space is cut into free chunks depends on the policy, so the model is built for one:
// - kCoalesced (first_fit, tlsf): each maximal free interval is one free chunk.
// - kBuddy: free space is cut top-down from the roots (one power-of-two root per set bit of the
//   capacity, highest first): a node that holds no chunk in use is one free block, a node equal to
//   a chunk in use is that chunk, any other node is split into its two halves. That is the only
//   layout a binary buddy system with immediate merging can be in for a given set of chunks.
//
// It predicts exactly what first fit (lowest-addressed interval that fits) and buddy (smallest
// sufficient free block, lowest address) must return.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <vector>

#include "vtpu/memory/allocator_policy.h"

namespace vtpu::testing {

enum class FreeChunks { kCoalesced, kBuddy };

class FreeSpaceModel {
 public:
  static constexpr uint64_t kGranuleBytes = 256;

  FreeSpaceModel(uint64_t capacity_bytes, FreeChunks free_chunks)
      : capacity_bytes_(capacity_bytes / kGranuleBytes * kGranuleBytes), free_chunks_(free_chunks) {
    free_.emplace(0, capacity_bytes_);
  }

  uint64_t capacity_bytes() const { return capacity_bytes_; }
  /// Maximal free intervals, offset -> bytes.
  const std::map<uint64_t, uint64_t>& free_intervals() const { return free_; }

  /// `size_bytes` (<= capacity) rounded up to the 256-byte granule.
  static uint64_t round_up(uint64_t size_bytes) {
    return (size_bytes + kGranuleBytes - 1) / kGranuleBytes * kGranuleBytes;
  }

  /// What first fit must return for `size_bytes`: the lowest-addressed free interval of at least
  /// the rounded size, split to exactly that size.
  std::optional<PolicyAllocation> predict_first_fit(uint64_t size_bytes) const {
    if (size_bytes > capacity_bytes_) return std::nullopt;
    const uint64_t rounded = round_up(size_bytes);
    for (const auto& [offset, size] : free_) {
      if (size >= rounded) return PolicyAllocation{offset, rounded};
    }
    return std::nullopt;
  }

  /// What a binary buddy system must return for `size_bytes`: the smallest free block of at least
  /// the next power of two >= max(size, 256), lowest offset first, split down to that power.
  std::optional<PolicyAllocation> predict_buddy(uint64_t size_bytes) const {
    if (size_bytes > capacity_bytes_ || size_bytes > (uint64_t{1} << 63)) return std::nullopt;
    uint64_t block = kGranuleBytes;
    while (block < size_bytes) block *= 2;
    std::optional<ChunkInfo> best;
    for_each_buddy_block([&](const ChunkInfo& c) {
      if (c.in_use || c.size_bytes < block) return;
      if (!best || c.size_bytes < best->size_bytes ||
          (c.size_bytes == best->size_bytes && c.offset < best->offset)) {
        best = c;
      }
    });
    if (!best) return std::nullopt;
    return PolicyAllocation{best->offset, block};
  }

  /// Records that [offset, offset + chunk_bytes) was handed out. Fails the test unless that range
  /// lies inside one free interval.
  void take(uint64_t offset, uint64_t chunk_bytes) {
    ASSERT_GT(chunk_bytes, 0u);
    ASSERT_LE(chunk_bytes, capacity_bytes_);
    ASSERT_LE(offset, capacity_bytes_ - chunk_bytes) << "chunk past the end of the range";
    auto it = free_.upper_bound(offset);
    ASSERT_NE(it, free_.begin()) << "offset " << offset << " is not free";
    --it;
    const uint64_t begin = it->first, size = it->second;
    ASSERT_LE(offset + chunk_bytes, begin + size)
        << "chunk [" << offset << ", " << offset + chunk_bytes << ") overlaps a live chunk";
    free_.erase(it);
    if (offset > begin) free_.emplace(begin, offset - begin);
    if (offset + chunk_bytes < begin + size) {
      free_.emplace(offset + chunk_bytes, begin + size - offset - chunk_bytes);
    }
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
  uint64_t used_bytes() const {
    uint64_t total = 0;
    for (const auto& [offset, size] : used_) total += size;
    return total;
  }
  /// The largest free chunk, as the policy cuts free space.
  uint64_t largest_free_block_bytes() const {
    uint64_t largest = 0;
    for (const ChunkInfo& c : chunks()) {
      if (!c.in_use) largest = std::max(largest, c.size_bytes);
    }
    return largest;
  }

  /// Every chunk, free and in use, in address order: what walk() must report.
  std::vector<ChunkInfo> chunks() const {
    std::vector<ChunkInfo> out;
    if (free_chunks_ == FreeChunks::kBuddy) {
      for_each_buddy_block([&](const ChunkInfo& c) { out.push_back(c); });
      return out;
    }
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
  // Calls `fn` for every buddy block, free and in use, in address order (see the file comment).
  void for_each_buddy_block(const std::function<void(const ChunkInfo&)>& fn) const {
    uint64_t root = 0;
    for (int bit = 63; bit >= 8; --bit) {
      const uint64_t size = uint64_t{1} << bit;
      if ((capacity_bytes_ & size) == 0) continue;
      visit_buddy_node(root, size, fn);
      root += size;
    }
  }
  void visit_buddy_node(uint64_t offset, uint64_t size,
                        const std::function<void(const ChunkInfo&)>& fn) const {
    auto u = used_.lower_bound(offset);
    if (u != used_.end() && u->first == offset && u->second == size) {
      fn({offset, size, true});
      return;
    }
    bool holds_used = u != used_.end() && u->first < offset + size;
    if (u != used_.begin()) {
      auto before = std::prev(u);
      holds_used = holds_used || before->first + before->second > offset;
    }
    if (!holds_used) {
      fn({offset, size, false});
      return;
    }
    if (size == kGranuleBytes) {
      ADD_FAILURE() << "a chunk in use overlaps [" << offset << ", " << offset + size
                    << ") without being a buddy block";
      return;
    }
    visit_buddy_node(offset, size / 2, fn);
    visit_buddy_node(offset + size / 2, size / 2, fn);
  }

  uint64_t capacity_bytes_;
  FreeChunks free_chunks_;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes; maximal (coalesced) free intervals
  std::map<uint64_t, uint64_t> used_;  // offset -> chunk bytes of live chunks
};

/// Compares a walk() with the expected chunks, entry by entry.
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
