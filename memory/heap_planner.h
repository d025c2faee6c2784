// A static heap planner: fixed offsets for buffers with known live ranges, after XLA's heap
// simulator (xla/service/heap_simulator/heap_simulator.h: GlobalDecreasingSizeBestFitHeap, and
// ChooseBestHeapAlgorithm over its spatial and temporal orders).
//
// Each buffer is a rectangle in (time, space): live from `start` to `end` inclusive, `bytes` tall
// (rounded up to the alignment). Buffers are placed one at a time in a global order; each goes
// into the smallest free gap left by the already-placed buffers whose live ranges overlap its own
// (best fit, lowest offset on a tie), or on top of them when no gap fits:
//
//     space ^
//           |        +----c----+              c is placed last: below it, a and b are live at
//           |  +--a--+  ...    +-----b-----+  times that overlap c's, so c goes above them
//           |  +-----+         +-----------+
//           +--------------------------------> time
//
// Two global orders are tried and the smaller heap kept, as ChooseBestHeapAlgorithm does (the
// first wins a tie):
//   size:     bytes descending, then duration descending, then index (XLA's spatial order);
//   duration: duration descending, then bytes descending, then index (XLA's temporal order).
// The lower bound on any plan is peak_live_bytes: the most aligned bytes live at one time.
//
// Cost: each placement asks an index for the placed buffers whose live ranges overlap its own
// (XLA's BufferIntervalTree::ChunksOverlappingInTime; here a static index laid out once and
// filled as buffers are placed: a segment tree over the buffers sorted by start, each node with a
// slice of one array that holds the placed buffers live across it, plus the placed buffers by
// start and a bitset of which are placed) and radix-sorts only those k by offset. Per order that
// is O(n log n) to build plus, per buffer, O(k + d / 64), with d the buffers that start during its
// life; the entries are copied from contiguous slices (8 bytes each when the sizes sum to less
// than 2^32 alignment units), so a steady state of ~1000 live buffers costs ~k = 1000 entries a
// placement (docs/STRESS.md). Scanning every placed buffer (the planner's first version) was
// O(n^2). The index takes O(n log n) memory: one 8- or 16-byte entry per canonical node of each
// buffer's range (~2 log2 of its length).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vtpu {

/// One buffer's size and live range. Times are abstract program steps, inclusive at both ends:
/// a buffer with end == t and one with start == t are live together at t.
struct BufferInterval {
  uint64_t bytes = 0;  // >= 1; rounded up to the plan's alignment when placed
  int64_t start = 0;   // first step at which the buffer is live
  int64_t end = 0;     // last step at which the buffer is live (>= start)
  std::string label;   // for messages and reports
};

struct HeapPlannerOptions {
  /// Every buffer's offset and placed size are multiples of this many bytes (>= 1). Default 256,
  /// the BFC and TPU HBM allocation granule.
  uint64_t alignment_bytes = 256;
};

/// The global order in which buffers were placed (see the model above).
enum class HeapPlanOrder {
  kDecreasingSize,      // "size": XLA's spatial order
  kDecreasingDuration,  // "duration": XLA's temporal order
};

/// "size" or "duration".
std::string_view heap_plan_order_name(HeapPlanOrder order);

/// A validated static plan: one offset per buffer, no two buffers that are live at the same time
/// overlap in space. Immutable, so thread-safe; policies share it by shared_ptr.
class HeapPlan {
 public:
  /// Builds a plan from given offsets (bytes, one per interval, in interval order) and validates
  /// it. Throws InvalidArgumentError for a bad interval (as plan_heap), a count mismatch, an
  /// offset that is not a multiple of the alignment, a placed range past 2^64, or two
  /// time-overlapping buffers that overlap in space (naming both).
  HeapPlan(std::vector<BufferInterval> intervals, std::vector<uint64_t> offsets,
           const HeapPlannerOptions& options = {},
           HeapPlanOrder order = HeapPlanOrder::kDecreasingSize);

  const std::vector<BufferInterval>& intervals() const { return intervals_; }
  /// Offset in bytes of interval i, in interval order.
  const std::vector<uint64_t>& offsets() const { return offsets_; }
  /// Bytes interval i (< size()) occupies: its bytes rounded up to the alignment.
  uint64_t placed_bytes(size_t i) const;
  size_t size() const { return intervals_.size(); }
  uint64_t alignment_bytes() const { return alignment_bytes_; }

  /// The heap the plan needs: max over buffers of offset + placed bytes (0 for no buffers).
  uint64_t heap_bytes() const { return heap_bytes_; }
  /// Lower bound on heap_bytes of any plan: the most placed bytes live at one time.
  uint64_t peak_live_bytes() const { return peak_live_bytes_; }
  /// The order that produced the offsets (for a plan built from given offsets, what the caller
  /// said).
  HeapPlanOrder order() const { return order_; }
  std::string_view order_name() const { return heap_plan_order_name(order_); }
  /// Interval indices in the order a program allocates them: by start, ties by index.
  const std::vector<size_t>& allocation_order() const { return allocation_order_; }

  /// heap_bytes of each order that plan_heap tried (0 when not planned by plan_heap).
  uint64_t size_order_heap_bytes() const { return size_order_heap_bytes_; }
  uint64_t duration_order_heap_bytes() const { return duration_order_heap_bytes_; }

  /// One line per buffer in allocation order: index, label, bytes, live range, offset.
  std::string to_string() const;

 private:
  friend HeapPlan plan_heap(std::vector<BufferInterval> intervals,
                            const HeapPlannerOptions& options);

  std::vector<BufferInterval> intervals_;
  std::vector<uint64_t> offsets_;
  uint64_t alignment_bytes_ = 256;
  uint64_t heap_bytes_ = 0;
  uint64_t peak_live_bytes_ = 0;
  HeapPlanOrder order_ = HeapPlanOrder::kDecreasingSize;
  std::vector<size_t> allocation_order_;
  uint64_t size_order_heap_bytes_ = 0;
  uint64_t duration_order_heap_bytes_ = 0;
};

/// Plans static offsets for `intervals` (see the model above): both global orders, the smaller
/// heap kept. Zero intervals give an empty plan with heap_bytes 0.
/// Throws InvalidArgumentError naming the interval (index and label) for bytes == 0 (an arena
/// never allocates 0 bytes, so a plan holds only real buffers), start > end, or bytes that
/// overflow when rounded to the alignment; for alignment_bytes == 0; and when the heap would pass
/// 2^64 bytes. Thread-safe (no shared state).
HeapPlan plan_heap(std::vector<BufferInterval> intervals, const HeapPlannerOptions& options = {});

}  // namespace vtpu
