#include "vtpu/memory/heap_planner.h"

#include <algorithm>
#include <array>
#include <bit>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <sstream>
#include <tuple>
#include <utility>

#include "vtpu/common/error.h"

namespace vtpu {

namespace {

std::string interval_name(const std::vector<BufferInterval>& intervals, size_t i) {
  return "interval " + std::to_string(i) + " ('" + intervals[i].label + "')";
}

// end - start as an unsigned count, exact for any start <= end.
uint64_t duration(const BufferInterval& b) {
  return static_cast<uint64_t>(b.end) - static_cast<uint64_t>(b.start);
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

// How a placed buffer's (offset, placed bytes) is stored in the index. Two layouts, one
// algorithm: Compact packs both in one 64-bit word in units of the alignment (offset in the high
// half, so the words sort by offset), usable when the sum of all placed sizes is below 2^32 units
// (no best-fit offset or end can pass that sum: a buffer goes into a gap below placed ones or on
// top of the ones live with it); Wide keeps two 64-bit byte counts.
struct CompactEntry {
  using Entry = uint64_t;
  uint64_t unit;  // the alignment in bytes
  Entry make(uint64_t offset, uint64_t bytes) const {
    return (offset / unit) << 32 | (bytes / unit);
  }
  uint64_t offset(Entry e) const { return (e >> 32) * unit; }
  uint64_t end(Entry e) const { return ((e >> 32) + (e & 0xFFFFFFFFu)) * unit; }
  static uint64_t sort_key(Entry e) { return e >> 32; }
};
struct WideEntry {
  using Entry = std::pair<uint64_t, uint64_t>;  // (offset, placed bytes)
  Entry make(uint64_t offset, uint64_t bytes) const { return {offset, bytes}; }
  static uint64_t offset(const Entry& e) { return e.first; }
  static uint64_t end(const Entry& e) { return e.first + e.second; }
  static uint64_t sort_key(const Entry& e) { return e.first; }
};

// The placed buffers, indexed for the one query best fit needs: which placed buffers are live at
// some time in [s, e], and where are they? XLA's GlobalDecreasingSizeBestFitHeap asks its
// BufferIntervalTree (a search tree keyed by start whose nodes carry their subtree's latest end)
// for ChunksOverlappingInTime. Here every interval is known before any is placed, so the index is
// laid out once and filled as buffers are placed: with the intervals sorted by (start, index)
// into positions, a buffer j overlaps a query [s, e] (s the start of the buffer being placed, so
// some position q has start == s) exactly when either
//   (a) j is live at s: pos(j) <= q <= last(j), last(j) the last position starting at or before
//       end(j). The position range [pos(j), last(j)] has O(log n) canonical nodes in a segment
//       tree over positions; each node has a fixed slice of one array (CSR), sized for every
//       interval that has it as a canonical node, and a placed buffer's entry is appended to the
//       slices of its nodes. The placed buffers live at s are then the filled parts of the slices
//       on the path from leaf q to the root: contiguous entries, no test per interval; or
//   (b) j starts in (s, e]: positions (q, r], found in a bitset of the placed positions, their
//       entries stored by position.
// A query costs the k placed buffers found plus (r - q) / 64 words of the bitset; building costs
// O(n log n) time and memory (one entry per canonical node of each interval).
template <typename Layout>
class PlacedIntervalIndex {
 public:
  using Entry = typename Layout::Entry;

  PlacedIntervalIndex(const std::vector<BufferInterval>& intervals, Layout layout)
      : layout_(layout) {
    const size_t n = intervals.size();
    std::vector<size_t> by_start(n);
    std::iota(by_start.begin(), by_start.end(), size_t{0});
    std::sort(by_start.begin(), by_start.end(), [&](size_t a, size_t b) {
      return std::tie(intervals[a].start, a) < std::tie(intervals[b].start, b);
    });
    position_.resize(n);
    starts_.resize(n);
    for (size_t p = 0; p < n; ++p) {
      position_[by_start[p]] = static_cast<uint32_t>(p);
      starts_[p] = intervals[by_start[p]].start;
    }
    last_.resize(n);
    for (size_t j = 0; j < n; ++j)
      last_[j] = static_cast<uint32_t>(last_position(intervals[j].end));
    leaves_ = 1;
    while (leaves_ < n) leaves_ *= 2;
    first_.assign(2 * leaves_ + 1, 0);
    for (size_t j = 0; j < n; ++j) for_each_node(j, [&](size_t node) { ++first_[node + 1]; });
    for (size_t node = 0; node < 2 * leaves_; ++node) first_[node + 1] += first_[node];
    listed_.resize(first_.back());
    by_position_.resize(n);
    placed_bits_.assign((n + 63) / 64, 0);
    fill_.assign(first_.begin(), first_.end() - 1);
  }

  const Layout& layout() const { return layout_; }

  void clear() {
    std::fill(placed_bits_.begin(), placed_bits_.end(), 0);
    std::copy(first_.begin(), first_.end() - 1, fill_.begin());
  }

  void insert(size_t i, Entry e) {
    for_each_node(i, [&](size_t node) { listed_[fill_[node]++] = e; });
    const uint32_t p = position_[i];
    by_position_[p] = e;
    placed_bits_[p / 64] |= uint64_t{1} << (p % 64);
  }

  // Writes to out[0, k) the entry of every placed interval live at some time in [start, end] of
  // `interval` and returns k. `out` only grows (so no per-query clear or fill).
  size_t collect_overlapping(const BufferInterval& interval, std::vector<Entry>& out) const {
    const size_t q = last_position(interval.start);  // starts_[q] == interval.start
    const size_t r = last_position(interval.end);
    size_t k = 0;
    for (size_t node = q + leaves_; node >= 1; node /= 2) k += fill_[node] - first_[node];
    if (out.size() < k + 64) out.resize(std::max(k + 64, 2 * out.size()));
    Entry* to = out.data();
    for (size_t node = q + leaves_; node >= 1; node /= 2) {  // (a): live at the start
      to = std::copy(listed_.data() + first_[node], listed_.data() + fill_[node], to);
    }
    // (b): starting in (q, r]; room for a whole word's 64 entries is made before each word.
    for_each_placed_word(q + 1, r, [&](size_t base, uint64_t word) {
      size_t at = static_cast<size_t>(to - out.data());
      if (out.size() < at + 64) {
        out.resize(2 * out.size());
        to = out.data() + at;
      }
      for (; word != 0; word &= word - 1) *to++ = by_position_[base + std::countr_zero(word)];
    });
    return static_cast<size_t>(to - out.data());
  }

 private:
  // Calls fn(node) for each canonical node of interval j's position range [pos(j), last(j)].
  template <typename Fn>
  void for_each_node(size_t j, Fn&& fn) const {
    size_t lo = position_[j] + leaves_;
    size_t hi = last_[j] + 1 + leaves_;
    while (lo < hi) {
      if (lo & 1) fn(lo++);
      if (hi & 1) fn(--hi);
      lo /= 2;
      hi /= 2;
    }
  }

  // Calls fn(base, word) for the placed bits of positions [lo, hi], 64 at a time: bit b of
  // `word` is position base + b.
  template <typename Fn>
  void for_each_placed_word(size_t lo, size_t hi, Fn&& fn) const {
    if (lo > hi) return;
    for (size_t w = lo / 64; w <= hi / 64; ++w) {
      uint64_t word = placed_bits_[w];
      if (w == lo / 64) word &= ~uint64_t{0} << (lo % 64);
      if (w == hi / 64 && hi % 64 != 63) word &= (uint64_t{1} << (hi % 64 + 1)) - 1;
      if (word != 0) fn(w * 64, word);
    }
  }

  // The last position whose start is <= t (t is at least the first start in every call).
  size_t last_position(int64_t t) const {
    return static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), t) -
                               starts_.begin()) -
           1;
  }

  Layout layout_;
  std::vector<uint32_t> position_;  // interval index -> position
  std::vector<uint32_t> last_;      // interval index -> last(j)
  std::vector<int64_t> starts_;     // start at each position, ascending
  size_t leaves_ = 1;               // a power of two >= n
  std::vector<size_t> first_;       // CSR: node's slice is listed_[first_[node], first_[node + 1])
  std::vector<size_t> fill_;        // node's placed entries are listed_[first_[node], fill_[node])
  std::vector<Entry> listed_;
  std::vector<Entry> by_position_;     // entry of the interval at each placed position
  std::vector<uint64_t> placed_bits_;  // bit p: the interval at position p is placed
};

// Sorts `busy` by offset: an LSD radix sort, 11 bits a pass over only the bits the offsets use
// (above the zero bits they share, the alignment's), so O(k) a pass where std::sort took
// O(k log k) comparisons (with a steady state of ~1000 live buffers, k is in the thousands for
// every placement). Short lists use std::sort. Entries with equal offsets may come out in any
// order: place_best_fit's scan finds the same gaps whatever their order (after the first of them
// the cursor is already past their offset), so the plan is the one a full sort of the pairs gives.
template <typename Layout, typename Entry>
void sort_by_offset(Entry* busy, size_t k, std::vector<Entry>& scratch) {
  constexpr size_t kRadixFrom = 64;  // below this, std::sort
  constexpr int kDigitBits = 11;     // 2048 counters a pass: 8 KiB, in L1
  auto by_key = [](const Entry& a, const Entry& b) {
    return Layout::sort_key(a) < Layout::sort_key(b);
  };
  if (k < kRadixFrom) {
    std::sort(busy, busy + k, by_key);
    return;
  }
  uint64_t any = 0, top = 0;
  for (size_t j = 0; j < k; ++j) {
    any |= Layout::sort_key(busy[j]);
    top = std::max(top, Layout::sort_key(busy[j]));
  }
  if (top == 0) return;  // all at offset 0
  const int low = std::countr_zero(any);
  const int high = std::bit_width(top);
  const int passes = (high - low + kDigitBits - 1) / kDigitBits;  // 1..6
  constexpr uint64_t kMask = (uint64_t{1} << kDigitBits) - 1;
  constexpr size_t kDigits = size_t{1} << kDigitBits;
  // Every pass's counts in one read of the list, then one scatter per pass.
  std::array<std::array<uint32_t, kDigits>, 6> count{};
  for (size_t j = 0; j < k; ++j) {
    const uint64_t key = Layout::sort_key(busy[j]) >> low;
    for (int d = 0; d < passes; ++d) ++count[d][(key >> (d * kDigitBits)) & kMask];
  }
  if (scratch.size() < k) scratch.resize(std::max(k, 2 * scratch.size()));
  Entry* src = busy;
  Entry* dst = scratch.data();
  for (int d = 0; d < passes; ++d) {
    uint32_t sum = 0;
    for (uint32_t& c : count[d]) sum += std::exchange(c, sum);  // counts -> first index
    const int shift = low + d * kDigitBits;
    for (size_t j = 0; j < k; ++j) {
      dst[count[d][(Layout::sort_key(src[j]) >> shift) & kMask]++] = src[j];
    }
    std::swap(src, dst);
  }
  if (src != busy) std::copy(src, src + k, busy);
}

// Places the intervals one at a time in `order`, each into the smallest gap between the placed
// buffers it is live together with (lowest offset on a tie), else above them all, as XLA's
// GlobalDecreasingSizeBestFitHeap::FindChunkCandidate does. The placed buffers live together with
// the next one come from the PlacedIntervalIndex and only those k are sorted by offset: a
// placement costs O(k + range / 64) (a radix sort), not a scan of every placed buffer.
template <typename Layout>
std::vector<uint64_t> place_best_fit(const std::vector<BufferInterval>& intervals,
                                     const std::vector<uint64_t>& sizes,
                                     const std::vector<size_t>& order,
                                     PlacedIntervalIndex<Layout>& placed) {
  using Entry = typename Layout::Entry;
  const Layout& layout = placed.layout();
  std::vector<uint64_t> offsets(intervals.size(), 0);
  placed.clear();
  std::vector<Entry> busy, scratch;  // reused
  for (size_t i : order) {
    const size_t k = placed.collect_overlapping(intervals[i], busy);
    sort_by_offset<Layout>(busy.data(), k, scratch);
    const uint64_t need = sizes[i];
    uint64_t cursor = 0;  // end of the busy space seen so far
    uint64_t best_gap = ~uint64_t{0};
    uint64_t best_offset = 0;
    for (size_t j = 0; j < k; ++j) {  // no branch on the data: selects, not jumps
      const Entry& b = busy[j];
      const uint64_t offset = layout.offset(b);
      const uint64_t gap = offset > cursor ? offset - cursor : 0;
      const bool better = gap >= need && gap < best_gap;
      best_offset = better ? cursor : best_offset;
      best_gap = better ? gap : best_gap;
      cursor = std::max(cursor, layout.end(b));  // placed ranges never pass 2^64 (checked below)
    }
    std::optional<uint64_t> best;
    if (best_gap != ~uint64_t{0}) best = best_offset;
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
    placed.insert(i, layout.make(*best, need));
  }
  return offsets;
}

// Both orders' offsets, with the index in the layout that fits the sizes.
template <typename Layout>
std::pair<std::vector<uint64_t>, std::vector<uint64_t>> place_both_orders(
    const std::vector<BufferInterval>& intervals, const std::vector<uint64_t>& sizes,
    const std::vector<size_t>& by_size, const std::vector<size_t>& by_duration, Layout layout) {
  PlacedIntervalIndex<Layout> index(intervals, layout);
  std::vector<uint64_t> size_offsets = place_best_fit(intervals, sizes, by_size, index);
  std::vector<uint64_t> duration_offsets = place_best_fit(intervals, sizes, by_duration, index);
  return {std::move(size_offsets), std::move(duration_offsets)};
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
  if (n > UINT32_MAX) {
    throw InvalidArgumentError("heap plan of " + std::to_string(n) +
                               " intervals (expected at most 2^32 - 1)");
  }
  // Compact entries when no offset or end can reach 2^32 units of the alignment.
  const uint64_t align = options.alignment_bytes;
  uint64_t total_units = 0;
  bool compact = true;
  for (uint64_t size : sizes)
    compact = compact && !__builtin_add_overflow(total_units, size / align, &total_units);
  compact = compact && total_units < (uint64_t{1} << 32);
  auto [size_offsets, duration_offsets] =
      compact ? place_both_orders(intervals, sizes, by_size, by_duration, CompactEntry{align})
              : place_both_orders(intervals, sizes, by_size, by_duration, WideEntry{});
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
