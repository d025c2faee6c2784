// Two-Level Segregated Fit (TLSF), after M. Masmano, I. Ripoll, A. Crespo and J. Real, "TLSF: a
// New Dynamic Memory Allocator for Real-Time Systems", ECRTS 2004, and M. Conte's tlsf 3.x
// (github.com/mattconte/tlsf).
//
// The range [0, capacity) is tiled by blocks, each free or in use, linked to its address
// neighbours. Sizes are multiples of kGranuleBytes (256 B). Free blocks sit in segregated lists
// indexed by two levels:
//
//     first level fl  = the power of two of the size: sizes below 8 KiB form class 0, sizes in
//                       [2^(12+fl), 2^(13+fl)) form class fl >= 1;
//     second level sl = which of kNumSecondLevel (32) equal slices of that class (the next
//                       kSecondLevelBits (5) bits of the size; in class 0 simply size / 256).
//
//     fl_bitmap_:  ...0 1 0 1 1      bit fl set <=> sl_bitmap_[fl] != 0
//     sl_bitmap_[fl]: ...0 0 1 0     bit sl set <=> list (fl, sl) is not empty
//     free_heads_[fl][sl] -> block <-> block <-> ...  (doubly linked, newest first)
//
// free() files a block with mapping_insert (the list whose slice holds its size). allocate()
// rounds the request to 256 B, then mapping_search rounds it up to the next list boundary, so
// that every block of the list it lands in is large enough; the first non-empty list at or above
// it is found with two bit scans (std::countr_zero), and its head block is taken. The remainder
// (a multiple of 256 B, so always >= the granularity when non-zero) is split off and filed as a
// free block. free() merges the block with both physical neighbours at once when they are free,
// so no two free blocks are ever adjacent (immediate coalescing).
//
// Exact-list fallback: rounding up means that blocks in the request's own list are skipped, even
// when one of them would fit, because that list also holds smaller blocks. Conte's tlsf then
// fails although largest_free_block_bytes() >= the request. Here, only on that would-be
// out-of-memory path, allocate() scans the request's own list (mapping_insert of the rounded
// size) and takes the smallest block there that fits, lowest offset among equal sizes, as some
// TLSF variants do. So allocate() returns nullopt only when no free block fits. The scan is
// O(length of that one list) and never runs while the O(1) search succeeds.
//
// Good fit, not best fit (the paper's term): when the best-fitting free block lies in a list at or
// above the searched one, TLSF returns a block of that same list, so at most 1/32 of the size
// class away from the best fit (above 8 KiB; below, lists hold one size each and the fit is
// exact). A request of exactly a list's lower bound is searched in that list.
//
// Cost: allocate and free are O(1): a bounded number of bit scans and list operations plus one
// OffsetIndex operation (memory/offset_index.h: a flat hash from offset to block, one cache line
// per operation, since a policy keeps no bytes in which to put a block header); the exact-list
// fallback above is the one exception. A block in use keeps whether its address neighbours are
// free, so free() reads no neighbour record unless it merges. largest_free_block_bytes() is
// O(length of the highest non-empty list), bin_stats() and check_consistency() are O(n) for n
// blocks. Metadata: one 32-byte record per block (ChunkPool, 32-bit ids; the in-use flag lives in
// the low bit of the size, which is a multiple of 256), 26-51 bytes of index per block in use
// (64-byte buckets of 5 slots, at most half full), and a fixed 52 x 32 list table. Limits: offsets
// and sizes keep the full 64-bit range; at most 2^32 - 1 blocks (ChunkPool).
// Speed (README, "Benchmarks"): with 1k live buffers everything sits in L2 and a free+alloc pair
// costs about 100 ns on the shared 2-core VM this was measured on; with 100k the 7-8 MiB of
// records and index no longer fit the caches, and the pair is bound by its chain of dependent cache
// misses (the buffer's index bucket, then its record), each ~250-350 ns there
// (BM_DependentLoad in bench/micro/memory_bench.cc).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/chunk_pool.h"
#include "vtpu/memory/offset_index.h"

namespace vtpu {

/// TLSF policy. Thread-compatible: the owning HbmArena serialises calls.
class TlsfPolicy final : public AllocatorPolicy {
 public:
  static constexpr uint64_t kGranuleBytes = 256;  // as BFC: the HBM allocation granule
  static constexpr int kGranuleBits = 8;          // log2(kGranuleBytes)
  static constexpr int kSecondLevelBits = 5;
  static constexpr int kNumSecondLevel = 1 << kSecondLevelBits;             // 32 lists per class
  static constexpr int kFirstLevelShift = kSecondLevelBits + kGranuleBits;  // 13
  static constexpr uint64_t kSmallBlockBytes = uint64_t{1} << kFirstLevelShift;  // 8 KiB
  static constexpr int kNumFirstLevel = 64 - kFirstLevelShift + 1;  // 52: up to 2^64 - 256 B

  /// A segregated list: first-level class and second-level slice.
  struct ListIndex {
    int fl = 0;
    int sl = 0;
    bool operator==(const ListIndex&) const = default;
  };

  /// Manages [0, capacity_bytes rounded down to 256 B). Throws InvalidArgumentError when that is
  /// less than 256 B.
  explicit TlsfPolicy(uint64_t capacity_bytes);

  std::string_view name() const override { return "tlsf"; }
  uint64_t capacity_bytes() const override { return capacity_bytes_; }
  uint64_t rounded_bytes(uint64_t size_bytes) const override;
  std::optional<PolicyAllocation> allocate(uint64_t size_bytes) override;
  uint64_t free(uint64_t offset) override;
  uint64_t largest_free_block_bytes() const override;
  uint64_t total_free_bytes() const override { return total_free_bytes_; }
  void walk(const std::function<void(const ChunkInfo&)>& fn) const override;
  void check_consistency() const override;
  /// Per first-level class (class 0 first), up to the class that holds the capacity.
  std::vector<BinStats> bin_stats() const override;
  uint64_t placement_alignment(uint64_t) const override { return kGranuleBytes; }
  void rebuild(std::span<const ChunkInfo> in_use) override;

  /// The list a free block of `size_bytes` (> 0) is filed in (Conte's mapping_insert).
  static ListIndex mapping_insert(uint64_t size_bytes);
  /// The first list whose blocks are all >= `size_bytes` (a positive multiple of 256):
  /// `size_bytes` rounded up to the next list boundary, then mapping_insert (Conte's
  /// mapping_search). nullopt when that boundary is 2^64 or more (no list can hold the request).
  static std::optional<ListIndex> mapping_search(uint64_t size_bytes);
  /// Smallest and largest chunk size of first-level class `fl` (multiples of 256).
  static uint64_t class_min_bytes(int fl);
  static uint64_t class_max_bytes(int fl);

 private:
  struct Block;
  using BlockId = ChunkPool<Block>::Id;
  static constexpr BlockId kNoBlock = ChunkPool<Block>::kNoId;

  // A 32-byte record, aligned so that it never straddles two cache lines.
  struct alignas(32) Block : ChunkExtent {
    BlockId prev_phys = kNoBlock;  // address neighbours
    BlockId next_phys = kNoBlock;
    // A free block keeps its list neighbours here. A block in use needs no list links, and keeps
    // instead whether its address neighbours are free (1) or not (0): free() reads these rather
    // than the neighbours' records, which at 100k live buffers are cache misses and mostly in
    // use, and the neighbours' flags are set with plain stores, which do not wait for a miss.
    union {
      BlockId prev_free = kNoBlock;
      uint32_t prev_phys_is_free;
    };
    union {
      BlockId next_free = kNoBlock;
      uint32_t next_phys_is_free;
    };
  };
  static_assert(sizeof(Block) == 32);

  BlockId new_block(uint64_t offset, uint64_t size_bytes) {
    Block b;
    b.offset = offset;
    b.size_and_flag = size_bytes;
    return blocks_.add(b);
  }
  void insert_free(BlockId id);
  void remove_free(BlockId id);
  /// Head of the first non-empty list at or after `index`, kNoBlock if none (the two bit scans).
  BlockId find_suitable(ListIndex index) const;
  /// The exact-list fallback (see the top of this file): the smallest block of at least
  /// `rounded_bytes` in the list mapping_insert(rounded_bytes), lowest offset first; kNoBlock if
  /// none. Out of line: it runs only where allocate() would otherwise fail.
  BlockId find_in_own_list(uint64_t rounded_bytes) const;
  /// Makes `next` (a free block) disappear into its physical predecessor `id`.
  void absorb_next(BlockId id, BlockId next);
  /// Forgets every block: no blocks, empty lists (the start of the constructor and rebuild()).
  void reset();

  uint64_t capacity_bytes_;
  ChunkPool<Block> blocks_{"TLSF"};
  uint64_t fl_bitmap_ = 0;
  std::array<uint32_t, kNumFirstLevel> sl_bitmap_{};
  std::array<std::array<BlockId, kNumSecondLevel>, kNumFirstLevel> free_heads_;
  OffsetIndex in_use_;  // offset -> block, blocks in use only
  uint64_t total_free_bytes_ = 0;
  BlockId head_ = kNoBlock;  // the block at offset 0
};

}  // namespace vtpu
