// Address-ordered first fit, the classic baseline (Knuth, TAOCP vol. 1, section 2.5, Algorithm A;
// Wilson, Johnstone, Neely and Boles, "Dynamic Storage Allocation: A Survey and Critical Review",
// IWMM 1995, section 3.5).
//
// The range [0, capacity) is tiled by chunks, each free or in use. Sizes are multiples of
// kGranuleBytes (256 B, the HBM allocation granule, as in BFC). The free chunks are kept in an
// ordered map by offset:
//
//     0                                                              capacity
//     | in use 512 | free 1 KiB | in use 256 | free 4 KiB .......... |
//                   ^ free_[512] = 1024       ^ free_[1792] = ...
//
// allocate() rounds the request up to 256 B and scans the free chunks from the lowest address; the
// first one large enough is split: the request takes its start and the remainder (a multiple of
// 256 B) stays free. free() merges the chunk with both address neighbours when they are free, so
// no two free chunks are ever adjacent. A multiset of free sizes answers "largest free block" and
// rejects a request that fits nowhere without scanning.
//
// Cost: allocate is O(n) for n free chunks (the linear scan: the baseline's known weakness,
// small holes pile up at low addresses), free is O(log n). Metadata is O(n).
#pragma once

#include <cstdint>
#include <map>
#include <set>

#include "vtpu/memory/allocator_policy.h"

namespace vtpu {

/// Address-ordered first-fit policy. Thread-compatible: the owning HbmArena serialises calls.
class FirstFitPolicy final : public AllocatorPolicy {
 public:
  static constexpr uint64_t kGranuleBytes = 256;

  /// Manages [0, capacity_bytes rounded down to 256 B). Throws InvalidArgumentError when that is
  /// less than 256 B.
  explicit FirstFitPolicy(uint64_t capacity_bytes);

  std::string_view name() const override { return "first_fit"; }
  uint64_t capacity_bytes() const override { return capacity_bytes_; }
  uint64_t rounded_bytes(uint64_t size_bytes) const override;
  std::optional<PolicyAllocation> allocate(uint64_t size_bytes) override;
  uint64_t free(uint64_t offset) override;
  uint64_t largest_free_block_bytes() const override;
  uint64_t total_free_bytes() const override { return total_free_bytes_; }
  void walk(const std::function<void(const ChunkInfo&)>& fn) const override;
  void check_consistency() const override;
  // bin_stats(): none, first fit keeps no size classes (the interface's empty default).
  uint64_t placement_alignment(uint64_t) const override { return kGranuleBytes; }
  void rebuild(std::span<const ChunkInfo> in_use) override;

 private:
  void insert_free(uint64_t offset, uint64_t size_bytes);
  void remove_free(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t capacity_bytes_;
  std::map<uint64_t, uint64_t> free_;    // offset -> bytes, free chunks (maximal, coalesced)
  std::map<uint64_t, uint64_t> in_use_;  // offset -> bytes, chunks in use
  std::multiset<uint64_t> free_sizes_;   // the sizes in free_
  uint64_t total_free_bytes_ = 0;
};

}  // namespace vtpu
