#include "vtpu/memory/planned_policy.h"

#include <algorithm>
#include <string>

#include "vtpu/common/error.h"

namespace vtpu {

PlannedPolicy::PlannedPolicy(uint64_t capacity_bytes, const PolicyOptions& options)
    : capacity_bytes_(capacity_bytes),
      plan_(options.heap_plan),
      skip_failed_(options.planned_skip_failed) {
  if (!plan_) {
    throw InvalidArgumentError(
        "allocator policy 'planned' needs a heap plan: set PolicyOptions::heap_plan to a plan "
        "from plan_heap() (memory/heap_planner.h)");
  }
  if (plan_->size() == 0) {
    throw InvalidArgumentError("allocator policy 'planned' got a heap plan with no buffers");
  }
  if (plan_->heap_bytes() > capacity_bytes_) {
    throw InvalidArgumentError("heap plan needs " + std::to_string(plan_->heap_bytes()) +
                               " bytes but the arena holds " + std::to_string(capacity_bytes_) +
                               " bytes (expected heap_bytes <= capacity)");
  }
  add_gap(0, capacity_bytes_);
}

std::pair<uint64_t, uint64_t> PlannedPolicy::gap_around(uint64_t offset, uint64_t end) const {
  auto next = in_use_.lower_bound(end);
  const uint64_t hi = next == in_use_.end() ? capacity_bytes_ : next->first;
  uint64_t lo = 0;
  auto below = in_use_.lower_bound(offset);
  if (below != in_use_.begin()) {
    const auto& [prev_offset, prev] = *std::prev(below);
    lo = prev_offset + prev.chunk_bytes;
  }
  return {lo, hi};
}

void PlannedPolicy::add_gap(uint64_t begin, uint64_t end) {
  if (end > begin) gaps_.insert(end - begin);
}

void PlannedPolicy::remove_gap(uint64_t begin, uint64_t end) {
  if (end > begin) gaps_.erase(gaps_.find(end - begin));
}

uint64_t PlannedPolicy::rounded_bytes(uint64_t size_bytes) const {
  if (size_bytes == 0) throw InvalidArgumentError("allocation of 0 bytes (expected >= 1)");
  const uint64_t align = plan_->alignment_bytes();
  const uint64_t units = size_bytes / align + (size_bytes % align != 0);
  uint64_t out = 0;
  if (__builtin_mul_overflow(units, align, &out)) return ~uint64_t{0} / align * align;
  return out;
}

std::optional<PolicyAllocation> PlannedPolicy::allocate(uint64_t size_bytes) {
  const size_t i = plan_->allocation_order()[cursor_];
  const BufferInterval& planned = plan_->intervals()[i];
  if (size_bytes == 0 || size_bytes > planned.bytes) {
    throw InvalidArgumentError(
        "planned allocation " + std::to_string(cursor_) + " (plan interval " + std::to_string(i) +
        ", '" + planned.label + "') requests " + std::to_string(size_bytes) +
        " bytes but the plan has " + std::to_string(planned.bytes) + " bytes (expected 1.." +
        std::to_string(planned.bytes) +
        "; the program's allocations must follow the plan's allocation order)");
  }
  const uint64_t offset = plan_->offsets()[i];
  const uint64_t chunk = plan_->placed_bytes(i);
  // The in-use chunk that starts last before the planned end is the only one that can overlap.
  auto next = in_use_.lower_bound(offset + chunk);
  if (next != in_use_.begin()) {
    const auto& [prev_offset, prev] = *std::prev(next);
    if (prev_offset + prev.chunk_bytes > offset) {
      if (skip_failed_) advance();
      return std::nullopt;
    }
  }
  const auto [lo, hi] = gap_around(offset, offset + chunk);
  remove_gap(lo, hi);
  add_gap(lo, offset);
  add_gap(offset + chunk, hi);
  in_use_.emplace(offset, InUse{chunk, i});
  in_use_bytes_ += chunk;
  advance();
  return PolicyAllocation{offset, chunk};
}

void PlannedPolicy::advance() {
  if (++cursor_ == plan_->size()) {
    cursor_ = 0;
    ++num_replays_;
  }
}

uint64_t PlannedPolicy::free(uint64_t offset) {
  auto it = in_use_.find(offset);
  if (it == in_use_.end()) {
    throw InvalidArgumentError("planned free of offset " + std::to_string(offset) +
                               ", which is not the start of a chunk in use (double free or a "
                               "stray offset)");
  }
  const uint64_t chunk = it->second.chunk_bytes;
  in_use_bytes_ -= chunk;
  in_use_.erase(it);
  const auto [lo, hi] = gap_around(offset, offset + chunk);
  remove_gap(lo, offset);
  remove_gap(offset + chunk, hi);
  add_gap(lo, hi);
  return chunk;
}

uint64_t PlannedPolicy::largest_free_block_bytes() const {
  return gaps_.empty() ? 0 : *gaps_.rbegin();
}

void PlannedPolicy::walk(const std::function<void(const ChunkInfo&)>& fn) const {
  uint64_t cursor = 0;
  for (const auto& [offset, c] : in_use_) {
    if (offset > cursor) fn(ChunkInfo{cursor, offset - cursor, false});
    fn(ChunkInfo{offset, c.chunk_bytes, true});
    cursor = offset + c.chunk_bytes;
  }
  if (cursor < capacity_bytes_) fn(ChunkInfo{cursor, capacity_bytes_ - cursor, false});
}

void PlannedPolicy::check_consistency() const {
  auto fail = [](const std::string& what) {
    throw InternalError("planned policy inconsistency: " + what);
  };
  uint64_t end = 0, bytes = 0;
  for (const auto& [offset, c] : in_use_) {
    const std::string where = "chunk at offset " + std::to_string(offset) + " of " +
                              std::to_string(c.chunk_bytes) + " bytes";
    if (offset < end)
      fail(where + " overlaps the previous chunk, which ends at " + std::to_string(end));
    if (c.interval >= plan_->size() || plan_->offsets()[c.interval] != offset ||
        plan_->placed_bytes(c.interval) != c.chunk_bytes) {
      fail(where + " is not where the plan puts interval " + std::to_string(c.interval));
    }
    if (c.chunk_bytes > capacity_bytes_ || offset > capacity_bytes_ - c.chunk_bytes) {
      fail(where + " passes the capacity " + std::to_string(capacity_bytes_));
    }
    end = offset + c.chunk_bytes;
    bytes += c.chunk_bytes;
  }
  if (bytes != in_use_bytes_) {
    fail("in-use byte counter " + std::to_string(in_use_bytes_) + " != walked " +
         std::to_string(bytes));
  }
  if (cursor_ >= plan_->size()) fail("cursor " + std::to_string(cursor_) + " is past the plan");
  std::multiset<uint64_t> walked;
  walk([&](const ChunkInfo& c) {
    if (!c.in_use && c.size_bytes > 0) walked.insert(c.size_bytes);
  });
  if (walked != gaps_) {
    fail("the gap index holds " + std::to_string(gaps_.size()) + " gaps but the walk finds " +
         std::to_string(walked.size()) + " (or their sizes differ)");
  }
}

void PlannedPolicy::rebuild(std::span<const ChunkInfo>) {
  throw FailedPreconditionError(
      "the planned policy cannot rebuild: its offsets are fixed by the heap plan "
      "(can_relocate() is false)");
}

}  // namespace vtpu
