#include "memory/heap_planner.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <sstream>
#include <tuple>
#include <utility>

#include "common/error.h"

namespace vtpu {

namespace {

std::string interval_name(const std::vector<BufferInterval>& intervals, size_t i) {
  return "interval " + std::to_string(i) + " ('" + intervals[i].label + "')";
}

// end - start as an unsigned count, exact for any start <= end.
uint64_t duration(const BufferInterval& b) {
  return static_cast<uint64_t>(b.end) - static_cast<uint64_t>(b.start);
}

bool live_together(const BufferInterval& a, const BufferInterval& b) {
  return a.start <= b.end && b.start <= a.end;
}

// Validates the options and every interval; returns each interval's placed (aligned) bytes.
std::vector<uint64_t> placed_sizes(const std::vector<BufferInterval>& intervals,
                                   const HeapPlannerOptions& options) {
  const uint64_t align = options.alignment_bytes;
  if (align == 0) throw InvalidArgumentError("heap plan alignment is 0 bytes (expected >= 1)");
  std::vector<uint64_t> sizes(intervals.size());
  for (size_t i = 0; i < intervals.size(); ++i) {
    const BufferInterval& b = intervals[i];
    if (b.bytes == 0) {
      throw InvalidArgumentError(interval_name(intervals, i) +
                                 " has 0 bytes (expected >= 1: an arena never allocates 0 bytes, "
                                 "so a plan holds only real buffers)");
    }
    if (b.start > b.end) {
      throw InvalidArgumentError(interval_name(intervals, i) + " starts at " +
                                 std::to_string(b.start) + " after it ends at " +
                                 std::to_string(b.end) + " (expected start <= end, inclusive)");
    }
    const uint64_t units = b.bytes / align + (b.bytes % align != 0);
    if (__builtin_mul_overflow(units, align, &sizes[i])) {
      throw InvalidArgumentError(interval_name(intervals, i) + " has " + std::to_string(b.bytes) +
                                 " bytes, which overflow 2^64 when rounded up to " +
                                 std::to_string(align) + " bytes");
    }
  }
  return sizes;
}

// Places the intervals one at a time in `order`, each into the smallest gap between the placed
// buffers it is live together with (lowest offset on a tie), else above them all.
std::vector<uint64_t> place_best_fit(const std::vector<BufferInterval>& intervals,
                                     const std::vector<uint64_t>& sizes,
                                     const std::vector<size_t>& order) {
  std::vector<uint64_t> offsets(intervals.size(), 0);
  std::vector<size_t> placed;
  placed.reserve(order.size());
  std::vector<std::pair<uint64_t, uint64_t>> busy;  // (offset, placed bytes), reused
  for (size_t i : order) {
    busy.clear();
    for (size_t j : placed) {
      if (live_together(intervals[i], intervals[j])) busy.emplace_back(offsets[j], sizes[j]);
    }
    std::sort(busy.begin(), busy.end());
    const uint64_t need = sizes[i];
    uint64_t cursor = 0;  // end of the busy space seen so far
    uint64_t best_gap = ~uint64_t{0};
    std::optional<uint64_t> best;
    for (const auto& [offset, size] : busy) {
      if (offset > cursor) {
        const uint64_t gap = offset - cursor;
        if (gap >= need && gap < best_gap) {
          best = cursor;
          best_gap = gap;
        }
      }
      cursor = std::max(cursor, offset + size);  // placed ranges never pass 2^64 (checked below)
    }
    if (!best) {
      uint64_t top_end = 0;
      if (__builtin_add_overflow(cursor, need, &top_end)) {
        throw InvalidArgumentError("the heap plan passes 2^64 bytes when placing " +
                                   interval_name(intervals, i) + " at offset " +
                                   std::to_string(cursor));
      }
      best = cursor;
    }
    offsets[i] = *best;
    placed.push_back(i);
  }
  return offsets;
}

uint64_t heap_end(const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& sizes) {
  uint64_t end = 0;
  for (size_t i = 0; i < offsets.size(); ++i) end = std::max(end, offsets[i] + sizes[i]);
  return end;
}

}  // namespace

std::string_view heap_plan_order_name(HeapPlanOrder order) {
  switch (order) {
    case HeapPlanOrder::kDecreasingSize:
      return "size";
    case HeapPlanOrder::kDecreasingDuration:
      return "duration";
  }
  return "unknown";
}

HeapPlan::HeapPlan(std::vector<BufferInterval> intervals, std::vector<uint64_t> offsets,
                   const HeapPlannerOptions& options, HeapPlanOrder order)
    : intervals_(std::move(intervals)),
      offsets_(std::move(offsets)),
      alignment_bytes_(options.alignment_bytes),
      order_(order) {
  const std::vector<uint64_t> sizes = placed_sizes(intervals_, options);
  const size_t n = intervals_.size();
  if (offsets_.size() != n) {
    throw InvalidArgumentError("heap plan has " + std::to_string(offsets_.size()) +
                               " offsets for " + std::to_string(n) +
                               " intervals (expected one offset per interval)");
  }
  for (size_t i = 0; i < n; ++i) {
    uint64_t end = 0;
    if (offsets_[i] % alignment_bytes_ != 0 ||
        __builtin_add_overflow(offsets_[i], sizes[i], &end)) {
      throw InvalidArgumentError(interval_name(intervals_, i) + " at offset " +
                                 std::to_string(offsets_[i]) + " is not a multiple of " +
                                 std::to_string(alignment_bytes_) +
                                 " bytes or its placed range passes 2^64");
    }
  }
  heap_bytes_ = heap_end(offsets_, sizes);

  allocation_order_.resize(n);
  std::iota(allocation_order_.begin(), allocation_order_.end(), size_t{0});
  std::sort(allocation_order_.begin(), allocation_order_.end(), [&](size_t a, size_t b) {
    return std::tie(intervals_[a].start, a) < std::tie(intervals_[b].start, b);
  });

  // One sweep in allocation order: retire the buffers that ended before this start, check the
  // new buffer against its live neighbours in space, and track the live bytes.
  auto ends_later = [&](size_t a, size_t b) { return intervals_[a].end > intervals_[b].end; };
  std::priority_queue<size_t, std::vector<size_t>, decltype(ends_later)> by_end(ends_later);
  std::map<uint64_t, size_t> live_by_offset;
  uint64_t live_bytes = 0;
  for (size_t i : allocation_order_) {
    while (!by_end.empty() && intervals_[by_end.top()].end < intervals_[i].start) {
      live_by_offset.erase(offsets_[by_end.top()]);
      live_bytes -= sizes[by_end.top()];
      by_end.pop();
    }
    auto next = live_by_offset.lower_bound(offsets_[i]);
    std::optional<size_t> clash;
    if (next != live_by_offset.end() && next->first < offsets_[i] + sizes[i]) clash = next->second;
    if (next != live_by_offset.begin()) {
      const size_t prev = std::prev(next)->second;
      if (offsets_[prev] + sizes[prev] > offsets_[i]) clash = prev;
    }
    if (clash) {
      const size_t j = *clash;
      throw InvalidArgumentError(
          interval_name(intervals_, i) + " at [" + std::to_string(offsets_[i]) + ", " +
          std::to_string(offsets_[i] + sizes[i]) + ") overlaps " + interval_name(intervals_, j) +
          " at [" + std::to_string(offsets_[j]) + ", " + std::to_string(offsets_[j] + sizes[j]) +
          ") while both are live (times [" + std::to_string(intervals_[i].start) + ", " +
          std::to_string(intervals_[i].end) + "] and [" + std::to_string(intervals_[j].start) +
          ", " + std::to_string(intervals_[j].end) + "])");
    }
    live_by_offset.emplace(offsets_[i], i);
    by_end.push(i);
    // Disjoint live ranges inside [0, heap_bytes_) cannot sum past 2^64.
    live_bytes += sizes[i];
    peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes);
  }
}

uint64_t HeapPlan::placed_bytes(size_t i) const {
  const uint64_t b = intervals_.at(i).bytes;
  return (b / alignment_bytes_ + (b % alignment_bytes_ != 0)) * alignment_bytes_;
}

std::string HeapPlan::to_string() const {
  std::ostringstream os;
  os << "heap plan: " << intervals_.size() << " buffers, heap " << heap_bytes_
     << " bytes, peak live " << peak_live_bytes_ << " bytes, order " << order_name()
     << ", alignment " << alignment_bytes_ << " bytes";
  for (size_t i : allocation_order_) {
    const BufferInterval& b = intervals_[i];
    os << "\n  #" << i << " " << (b.label.empty() ? "(unlabelled)" : b.label) << ": " << b.bytes
       << " bytes, live [" << b.start << ", " << b.end << "], offset " << offsets_[i];
  }
  return os.str();
}

HeapPlan plan_heap(std::vector<BufferInterval> intervals, const HeapPlannerOptions& options) {
  const std::vector<uint64_t> sizes = placed_sizes(intervals, options);
  const size_t n = intervals.size();
  std::vector<size_t> by_size(n);
  std::iota(by_size.begin(), by_size.end(), size_t{0});
  std::vector<size_t> by_duration = by_size;
  // XLA's GetSpatialBufferIntervalCompare and GetTemporalBufferIntervalCompare.
  std::sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) {
    return std::make_tuple(intervals[b].bytes, duration(intervals[b]), a) <
           std::make_tuple(intervals[a].bytes, duration(intervals[a]), b);
  });
  std::sort(by_duration.begin(), by_duration.end(), [&](size_t a, size_t b) {
    return std::make_tuple(duration(intervals[b]), intervals[b].bytes, a) <
           std::make_tuple(duration(intervals[a]), intervals[a].bytes, b);
  });
  std::vector<uint64_t> size_offsets = place_best_fit(intervals, sizes, by_size);
  std::vector<uint64_t> duration_offsets = place_best_fit(intervals, sizes, by_duration);
  const uint64_t size_heap = heap_end(size_offsets, sizes);
  const uint64_t duration_heap = heap_end(duration_offsets, sizes);
  const bool duration_wins = duration_heap < size_heap;  // a tie goes to the first, as in XLA
  try {
    HeapPlan plan(
        std::move(intervals), duration_wins ? std::move(duration_offsets) : std::move(size_offsets),
        options,
        duration_wins ? HeapPlanOrder::kDecreasingDuration : HeapPlanOrder::kDecreasingSize);
    plan.size_order_heap_bytes_ = size_heap;
    plan.duration_order_heap_bytes_ = duration_heap;
    return plan;
  } catch (const InvalidArgumentError& e) {
    // The intervals were validated above, so this is a bug in the planner.
    throw InternalError("heap planner produced an invalid plan: " + e.message());
  }
}

}  // namespace vtpu
