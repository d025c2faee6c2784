// Best-fit with coalescing (BFC), after TensorFlow's tsl/framework/bfc_allocator.h.
//
// The range [0, capacity) is tiled by chunks, each either free or in use, linked to its address
// neighbours:
//
//     0                                                              capacity
//     | in use 512 | free 1 KiB | in use 256 | free 4 KiB .......... |
//
// Sizes are multiples of kMinAllocationBytes (256 B). TensorFlow files free chunks in kNumBins
// (21) bins, bin b holding sizes in [256 * 2^b, 256 * 2^(b+1)) and the last bin everything larger,
// each bin ordered by (size, offset), so that the first chunk >= the request in the first bin that
// has one is the best fit, lowest address first. A found chunk is split when it is at least twice
// the request or the remainder is at least max_internal_fragmentation_bytes; otherwise the whole
// chunk is handed out and the rest is internal fragmentation (TensorFlow's rule; TensorFlow's
// threshold is 128 MiB, ours defaults to min(128 MiB, capacity / 128), see PolicyOptions). Free
// merges the chunk with both neighbours at once when they are free, so no two free chunks are ever
// adjacent.
//
// The choice is exactly TensorFlow's (the smallest free chunk >= the rounded request, the lowest
// offset among chunks of that size), but the free chunks are indexed differently, so that finding
// it costs O(1) for the common sizes instead of a walk down a red-black tree:
//
//     small chunks (<= kMaxSmallChunkBytes, 1 MiB): one exact size class per 256 B, 4096 classes
//       class_words_:        bit w set <=> class_bits_[w] != 0            (one 64-bit word)
//       class_bits_[w]:      bit i set <=> class 64w + i is not empty     (64 words)
//       class c's heap:      binary min-heap by offset of the free chunks of 256 * (c + 1) bytes;
//                            its top in class_tops_[c] (16 B each, one flat array), the rest in
//                            class_rest_[c], touched only when the class holds two or more
//     large chunks (> 1 MiB): one std::set ordered by (size, offset), as TensorFlow's bins
//
// allocate(r) finds the first non-empty class >= r with two bit scans; its heap's top is the
// lowest-offset chunk of the smallest size >= r among small chunks, and any large chunk is bigger.
// Only when no small chunk fits does it take lower_bound(r) in the large set. bin_stats() adds the
// classes up into TensorFlow's 21 bins. Why heaps: a class may hold many chunks of one size
// (activations of one shape), and a heap keeps removal of any one O(log k) for k chunks of the
// class, with each chunk's heap position in its record. In steady state BFC keeps few free chunks
// (measured: 43 to 268 at 1k to 100k live buffers), so nearly every non-empty class holds exactly
// one, and the flat array of tops makes that case one load. Why not exact classes all the way:
// above 1 MiB the classes would outnumber the chunks; there the tree costs O(log n) of the few
// large chunks.
//
// Cost: allocate and free are O(1) plus O(log k) heap steps for small chunks, O(log n_large) for
// large ones. Free finds its chunk through OffsetIndex, a flat hash with one cache line per
// operation (memory/offset_index.h), and each chunk keeps whether its address neighbours are free,
// so free() reads no neighbour record unless it merges. largest_free_block_bytes() is O(1),
// bin_stats() O(4096 + n_large), check_consistency() O(n). Metadata: one 32-byte record per chunk
// (ChunkPool: 32-bit ids, the in-use flag in the size's low bit), 16 bytes per further free chunk
// of a class, a std::set node per free large chunk (one spare node is kept, so splitting or
// merging a large chunk, which takes one out and puts one back, costs no malloc or free: +6-9%
// replay speed on training_step and kv_cache, whose activations and KV buffers are large), 26-51
// bytes of index per chunk in use (64-byte buckets of 5 slots, at most half full), and a fixed
// 4096-class table (~160 KiB). Limits: offsets and sizes keep the full 64-bit range; at most 2^32 -
// 1 chunks (ChunkPool). Speed (README, "Benchmarks"): with 1k live buffers everything sits in L2
// and a free+alloc pair costs about 70-100 ns on the shared 2-core VM this was measured on; with
// 100k the 7 MiB of records and index no longer fit the caches, and the pair is bound by its chain
// of dependent cache misses (the buffer's index bucket, then its record), each ~250-350 ns there
// (BM_DependentLoad in bench/micro/memory_bench.cc).
#pragma once

#include <array>
#include <cstdint>
#include <set>
#include <vector>

#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/chunk_pool.h"
#include "vtpu/memory/offset_index.h"

namespace vtpu {

/// BFC policy. Thread-compatible: the owning HbmArena serialises calls.
class BfcPolicy final : public AllocatorPolicy {
 public:
  static constexpr uint64_t kMinAllocationBytes = 256;  // granularity, as in TensorFlow
  static constexpr int kNumBins = 21;                   // 256 B .. 256 MiB and above
  static constexpr int kNumSmallClasses = 4096;         // exact classes of 256 B .. 1 MiB
  static constexpr uint64_t kMaxSmallChunkBytes = kNumSmallClasses * kMinAllocationBytes;

  /// Manages [0, capacity_bytes rounded down to 256 B). Throws InvalidArgumentError when that is
  /// less than 256 B.
  explicit BfcPolicy(uint64_t capacity_bytes, const PolicyOptions& options = {});

  std::string_view name() const override { return "bfc"; }
  uint64_t capacity_bytes() const override { return capacity_bytes_; }
  uint64_t rounded_bytes(uint64_t size_bytes) const override;
  std::optional<PolicyAllocation> allocate(uint64_t size_bytes) override;
  uint64_t free(uint64_t offset) override;
  uint64_t largest_free_block_bytes() const override;
  uint64_t total_free_bytes() const override { return total_free_bytes_; }
  void walk(const std::function<void(const ChunkInfo&)>& fn) const override;
  void check_consistency() const override;

  /// The split threshold in use (PolicyOptions::max_internal_fragmentation_bytes, resolved).
  uint64_t max_internal_fragmentation_bytes() const { return max_internal_fragmentation_bytes_; }
  /// The default threshold for a capacity: min(128 MiB, capacity_bytes / 128).
  static uint64_t default_max_internal_fragmentation_bytes(uint64_t capacity_bytes);

  /// Bin index for a chunk of `size_bytes` (a multiple of 256): floor(log2(size / 256)), capped.
  static int bin_for_size(uint64_t size_bytes);

  /// Per-bin totals (kNumBins entries, bin 0 first), for the out-of-memory report.
  std::vector<BinStats> bin_stats() const override;
  uint64_t placement_alignment(uint64_t) const override { return kMinAllocationBytes; }
  void rebuild(std::span<const ChunkInfo> in_use) override;

 private:
  struct Chunk;
  using ChunkId = ChunkPool<Chunk>::Id;
  static constexpr ChunkId kNoChunk = ChunkPool<Chunk>::kNoId;
  static constexpr int kClassWords = kNumSmallClasses / 64;
  static_assert(kClassWords == 64, "class_words_ is one 64-bit word");

  // A 32-byte record, aligned so that it never straddles two cache lines.
  struct alignas(32) Chunk : ChunkExtent {
    ChunkId prev = kNoChunk;  // address neighbours
    ChunkId next = kNoChunk;
    uint32_t heap_pos = 0;  // a free small chunk's index in its class heap
    // Whether the address neighbours exist and are free. free() reads these instead of the
    // neighbours' records, which at 100k live buffers are cache misses and are nearly always in
    // use; the neighbours' flags are then set with plain stores, which do not wait for the miss.
    bool prev_free = false;
    bool next_free = false;
  };
  static_assert(sizeof(Chunk) == 32);
  struct HeapEntry {
    uint64_t offset;  // the chunk's offset, so that sifting reads no chunk records
    ChunkId id;
  };
  struct LargeKey {
    uint64_t size_bytes;
    uint64_t offset;
    ChunkId id;
    bool operator<(const LargeKey& o) const {
      return size_bytes != o.size_bytes ? size_bytes < o.size_bytes : offset < o.offset;
    }
  };

  /// The exact class of a small chunk of `size_bytes` (256 .. 1 MiB): size / 256 - 1.
  static int small_class(uint64_t size_bytes) {
    return static_cast<int>(size_bytes / kMinAllocationBytes) - 1;
  }
  ChunkId new_chunk(uint64_t offset, uint64_t size_bytes) {
    return chunks_.add(Chunk{{.offset = offset, .size_and_flag = size_bytes}});
  }
  void insert_free(ChunkId id);
  void remove_free(ChunkId id);
  /// The first non-empty class >= `cls`, or -1 (the two bit scans).
  int first_class_at_least(int cls) const;
  void heap_push(int cls, ChunkId id);
  /// Removes the entry at `pos` of class `cls`'s heap.
  void heap_remove(int cls, uint32_t pos);
  /// Moves `e` up or down from `pos` to its place in class `cls`'s heap, updating heap positions.
  void heap_place(int cls, uint32_t pos, HeapEntry e);
  /// Entries of class `cls`'s heap: 0 (no free chunk of that size) or more.
  uint32_t heap_size(int cls) const {
    if (class_tops_[cls].id == kNoChunk) return 0;
    if (((class_has_rest_[cls / 64] >> (cls % 64)) & 1) == 0) return 1;
    return 1 + static_cast<uint32_t>(class_rest_[cls].size());
  }
  /// Entry `pos` (< heap_size(cls)) of class `cls`'s heap.
  HeapEntry& heap_at(int cls, uint32_t pos) {
    return pos == 0 ? class_tops_[cls] : class_rest_[cls][pos - 1];
  }
  const HeapEntry& heap_at(int cls, uint32_t pos) const {
    return pos == 0 ? class_tops_[cls] : class_rest_[cls][pos - 1];
  }
  /// Makes `next` (out of the free index) disappear into its address predecessor `id`.
  void absorb_next(ChunkId id, ChunkId next);
  /// Forgets every chunk (the start of the constructor and rebuild()).
  void reset();

  uint64_t capacity_bytes_;
  uint64_t max_internal_fragmentation_bytes_;
  ChunkPool<Chunk> chunks_{"BFC"};
  uint64_t class_words_ = 0;
  std::array<uint64_t, kClassWords> class_bits_{};
  std::vector<HeapEntry> class_tops_;  // each class heap's top; id kNoChunk when the class is empty
  std::vector<std::vector<HeapEntry>> class_rest_;      // each class heap's entries 1, 2, ...
  std::array<uint64_t, kClassWords> class_has_rest_{};  // bit c set <=> class_rest_[c] not empty
  using LargeSet = std::set<LargeKey>;
  /// Files a free large chunk, reusing spare_large_'s node when there is one, with end() as the
  /// hint (right, in O(1), for the largest free chunk, which is the one most often split).
  void large_insert(const LargeKey& key);
  /// Takes `it` out of the set, keeping its node in spare_large_ for the next large_insert.
  void large_erase(LargeSet::const_iterator it);

  LargeSet large_;  // free chunks above kMaxSmallChunkBytes
  // A node taken out of large_ and not yet put back: splitting or merging a large chunk takes
  // one out and puts one back, so with this spare it costs no malloc or free.
  LargeSet::node_type spare_large_;
  OffsetIndex in_use_;  // offset -> chunk, chunks in use only
  uint64_t total_free_bytes_ = 0;
  ChunkId head_ = kNoChunk;  // the chunk at offset 0
};

}  // namespace vtpu
