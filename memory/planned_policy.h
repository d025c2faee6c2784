// The `planned` allocator policy: offsets from a static heap plan (memory/heap_planner.h), as
// XLA's buffer assignment fixes every temporary's offset at compile time and the TPU runtime only
// replays them.
//
// The plan lists buffers in allocation order (by start time). The k-th allocate() of a step
// hands out the plan's k-th buffer at its planned offset, whatever other buffers are doing; after
// the last buffer the cursor wraps to the first, so a training step replays many times:
//
//     plan order:   x   y   z1  a1  logits  grads | x   y   z1 ...   (step 0 | step 1 ...)
//     cursor:       0   1   2   3   4       5     | 0   1   2
//
// free(offset) may come at any time. The policy checks only what it can see: the request is not
// larger than the planned buffer, and the planned range is free. It does not check that frees
// happen in the plan's order; a program that frees late makes the next allocate() of that range
// fail.
//
// Cost: allocate, free and largest_free_block_bytes O(log n) for n buffers in use (the free gaps'
// sizes are kept in a multiset); walk and check_consistency O(n).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>

#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/heap_planner.h"

namespace vtpu {

/// Planned policy. Thread-compatible: the owning HbmArena serialises calls.
class PlannedPolicy final : public AllocatorPolicy {
 public:
  static constexpr std::string_view kName = "planned";

  /// Manages [0, capacity_bytes) with the offsets of `options.heap_plan`. Throws
  /// InvalidArgumentError when the plan is missing ("planned" is the one policy that needs one,
  /// so it is not in known_allocator_policies()), holds no buffers, or needs a heap larger than
  /// capacity_bytes (naming both numbers).
  PlannedPolicy(uint64_t capacity_bytes, const PolicyOptions& options);

  std::string_view name() const override { return kName; }
  uint64_t capacity_bytes() const override { return capacity_bytes_; }
  /// The request rounded up to the plan's alignment (saturating near 2^64). Throws
  /// InvalidArgumentError for 0.
  uint64_t rounded_bytes(uint64_t size_bytes) const override;

  /// Hands out the next planned buffer (allocation_index()) at its planned offset, with
  /// chunk_bytes its placed bytes, and advances the cursor (wrapping after the last buffer). A
  /// request smaller than planned is fine (it uses part of its slot). Throws InvalidArgumentError
  /// naming the allocation index, label, requested and planned bytes when `size_bytes` is 0 or
  /// larger than planned; the cursor then stays. Returns std::nullopt when an in-use chunk still
  /// overlaps the planned range (the program freed a buffer later than its plan said): the arena
  /// then reports out-of-memory with the live buffers. The cursor stays, so the caller may free
  /// and retry the same request, unless PolicyOptions::planned_skip_failed, which moves it on.
  std::optional<PolicyAllocation> allocate(uint64_t size_bytes) override;
  uint64_t free(uint64_t offset) override;

  /// The largest free gap between in-use chunks (O(log n)). allocate() hands out only the next
  /// planned buffer, so this is a fragmentation statistic, not a promise.
  uint64_t largest_free_block_bytes() const override;
  uint64_t total_free_bytes() const override { return capacity_bytes_ - in_use_bytes_; }
  /// In-use chunks and the free gaps between them, in address order, tiling [0, capacity).
  void walk(const std::function<void(const ChunkInfo&)>& fn) const override;
  /// In-use chunks are disjoint, inside the range, each at the offset and placed size of a plan
  /// buffer; the byte counter agrees. Throws InternalError naming the first violation.
  void check_consistency() const override;

  /// Offsets are fixed by the plan: defragmentation must not move them.
  bool can_relocate() const override { return false; }
  /// The plan's alignment.
  uint64_t placement_alignment(uint64_t) const override { return plan_->alignment_bytes(); }
  /// Throws FailedPreconditionError: planned offsets cannot move.
  void rebuild(std::span<const ChunkInfo> in_use) override;

  /// Position in the plan's allocation order of the buffer the next allocate() hands out.
  size_t allocation_index() const { return cursor_; }
  /// How many times the cursor has wrapped (completed replays of the plan).
  uint64_t num_replays() const { return num_replays_; }
  const HeapPlan& plan() const { return *plan_; }

 private:
  struct InUse {
    uint64_t chunk_bytes;
    size_t interval;  // index into plan_->intervals()
  };

  void advance();  // the cursor to the next planned buffer, wrapping after the last

  uint64_t capacity_bytes_;
  std::shared_ptr<const HeapPlan> plan_;
  bool skip_failed_ = false;
  // The free gap around [offset, end): from the end of the in-use chunk below (or 0) to the start
  // of the one above (or the capacity).
  std::pair<uint64_t, uint64_t> gap_around(uint64_t offset, uint64_t end) const;
  void add_gap(uint64_t begin, uint64_t end);
  void remove_gap(uint64_t begin, uint64_t end);

  std::map<uint64_t, InUse> in_use_;  // offset -> chunk, chunks in use only
  std::multiset<uint64_t> gaps_;      // sizes of the free gaps between chunks in use (> 0 only)
  uint64_t in_use_bytes_ = 0;
  size_t cursor_ = 0;  // into plan_->allocation_order()
  uint64_t num_replays_ = 0;
};

}  // namespace vtpu
