// Binary buddy system, after K. C. Knowlton, "A Fast Storage Allocator", CACM 8(10), 1965, and
// Knuth, TAOCP vol. 1, section 2.5 (Algorithms R and S).
//
// Every block has a power-of-two size of at least kMinBlockBytes (256 B) and sits at an offset
// that is a multiple of its size. A block of order k is 256 * 2^k bytes; its buddy is the block
// of the same order at offset ^ size, and the two halves of their parent at offset & ~size:
//
//     order 3  |               2 KiB               |
//     order 2  |      1 KiB       |      1 KiB     |
//     order 1  | 512 | 512 (buddy)|                |
//
// A capacity that is not a power of two is covered by the maximal aligned power-of-two blocks,
// one per set bit of the capacity from the highest (1280 B: 1 KiB at 0, 256 B at 1024). They are
// the roots: a block merges with its buddy only while the parent lies inside [0, capacity), so
// roots never merge with each other.
//
// allocate() rounds the request up to a power of two >= 256 B (order k), takes the lowest-address
// free block of the smallest order >= k that has one (a bit scan over the non-empty orders), and
// splits it, keeping the lower half and freeing the upper half, until it has order k. free()
// merges the block with its buddy while the buddy is free and whole (same order), then files the
// result. The choice is deterministic, so a reference model can predict every offset. The free
// blocks are then always exactly the maximal aligned power-of-two blocks that hold no chunk in use.
//
// Cost: allocate and free are O(log n) per order split or merged (ordered sets), at most
// kNumOrders of each. Internal fragmentation: up to half of each block (the power-of-two
// rounding). Metadata is O(n) for n blocks.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>

#include "vtpu/memory/allocator_policy.h"

namespace vtpu {

/// Binary buddy policy. Thread-compatible: the owning HbmArena serialises calls.
class BuddyPolicy final : public AllocatorPolicy {
 public:
  static constexpr uint64_t kMinBlockBytes = 256;        // order 0, the HBM allocation granule
  static constexpr int kMinBlockBits = 8;                // log2(kMinBlockBytes)
  static constexpr int kNumOrders = 64 - kMinBlockBits;  // 56: orders 0..55, 256 B .. 2^63 B
  static constexpr uint64_t kMaxBlockBytes = kMinBlockBytes << (kNumOrders - 1);  // 2^63

  /// Manages [0, capacity_bytes rounded down to 256 B). Throws InvalidArgumentError when that is
  /// less than 256 B.
  explicit BuddyPolicy(uint64_t capacity_bytes);

  std::string_view name() const override { return "buddy"; }
  uint64_t capacity_bytes() const override { return capacity_bytes_; }
  /// The power of two >= max(size_bytes, 256). Sizes above 2^63 have no power of two in 64 bits
  /// and saturate to UINT64_MAX, which fits no range.
  uint64_t rounded_bytes(uint64_t size_bytes) const override;
  std::optional<PolicyAllocation> allocate(uint64_t size_bytes) override;
  uint64_t free(uint64_t offset) override;
  uint64_t largest_free_block_bytes() const override;
  uint64_t total_free_bytes() const override { return total_free_bytes_; }
  void walk(const std::function<void(const ChunkInfo&)>& fn) const override;
  void check_consistency() const override;
  /// One entry per order, order 0 first, up to the largest root.
  std::vector<BinStats> bin_stats() const override;
  /// A block sits at a multiple of its own size.
  uint64_t placement_alignment(uint64_t chunk_bytes) const override { return chunk_bytes; }
  void rebuild(std::span<const ChunkInfo> in_use) override;

  /// Block bytes of order `order`: 256 * 2^order.
  static uint64_t block_bytes(int order) { return kMinBlockBytes << order; }

 private:
  struct Block {
    int order = 0;
    bool in_use = false;
  };

  /// Order of a block of `block_bytes` (a power of two >= 256).
  static int order_of(uint64_t block_bytes);
  /// Whether the parent of the block of `order` at `offset` lies inside the range.
  bool has_parent(uint64_t offset, int order) const;
  void insert_free(uint64_t offset, int order);
  void remove_free(uint64_t offset, int order);
  /// Files [begin, end) as free: its maximal aligned power-of-two blocks, lowest first.
  void insert_free_range(uint64_t begin, uint64_t end);

  uint64_t capacity_bytes_;
  std::map<uint64_t, Block> blocks_;                   // offset -> block, every block
  std::array<std::set<uint64_t>, kNumOrders> free_{};  // offsets of free blocks, per order
  uint64_t nonempty_orders_ = 0;                       // bit k set <=> free_[k] not empty
  uint64_t total_free_bytes_ = 0;
};

}  // namespace vtpu
