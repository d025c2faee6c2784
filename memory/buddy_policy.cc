#include "vtpu/memory/buddy_policy.h"

#include <algorithm>
#include <bit>
#include <string>

#include "vtpu/common/error.h"

namespace vtpu {

BuddyPolicy::BuddyPolicy(uint64_t capacity_bytes)
    : capacity_bytes_(capacity_in_granules("buddy", capacity_bytes, kMinBlockBytes)) {
  insert_free_range(0, capacity_bytes_);
}

uint64_t BuddyPolicy::rounded_bytes(uint64_t size_bytes) const {
  const uint64_t granules = round_up_to_granule(size_bytes, kMinBlockBytes);  // throws for 0
  return granules > kMaxBlockBytes ? ~uint64_t{0} : std::bit_ceil(granules);
}

int BuddyPolicy::order_of(uint64_t block_bytes) {
  return std::countr_zero(block_bytes) - kMinBlockBits;
}

bool BuddyPolicy::has_parent(uint64_t offset, int order) const {
  const uint64_t size = block_bytes(order);
  const uint64_t parent = offset & ~size;
  return size <= (capacity_bytes_ - parent) / 2;  // parent + 2 * size <= capacity, no wrap
}

void BuddyPolicy::insert_free(uint64_t offset, int order) {
  free_[order].insert(offset);
  nonempty_orders_ |= uint64_t{1} << order;
  blocks_[offset] = Block{order, false};
  total_free_bytes_ += block_bytes(order);
}

void BuddyPolicy::remove_free(uint64_t offset, int order) {
  free_[order].erase(offset);
  if (free_[order].empty()) nonempty_orders_ &= ~(uint64_t{1} << order);
  total_free_bytes_ -= block_bytes(order);
}

void BuddyPolicy::insert_free_range(uint64_t begin, uint64_t end) {
  while (begin < end) {
    // The largest block aligned at `begin` (any, at 0) that still ends by `end`.
    uint64_t size = std::bit_floor(end - begin);
    if (begin != 0) size = std::min(size, uint64_t{1} << std::countr_zero(begin));
    insert_free(begin, order_of(size));
    begin += size;
  }
}

std::optional<PolicyAllocation> BuddyPolicy::allocate(uint64_t size_bytes) {
  if (size_bytes > capacity_bytes_ || size_bytes > kMaxBlockBytes) return std::nullopt;
  const int order = order_of(rounded_bytes(size_bytes));  // a power of two <= 2^63
  const uint64_t orders = nonempty_orders_ & (~uint64_t{0} << order);
  if (orders == 0) return std::nullopt;
  int k = std::countr_zero(orders);
  const uint64_t offset = *free_[k].begin();  // lowest address of the smallest sufficient order
  remove_free(offset, k);
  while (k > order) {  // split: keep the lower half, free the upper half
    --k;
    insert_free(offset + block_bytes(k), k);
  }
  blocks_[offset] = Block{order, true};
  return PolicyAllocation{offset, block_bytes(order)};
}

uint64_t BuddyPolicy::free(uint64_t offset) {
  auto it = blocks_.find(offset);
  if (it == blocks_.end() || !it->second.in_use) {
    throw InvalidArgumentError("buddy free of offset " + std::to_string(offset) +
                               ", which is not the start of a block in use (double free or a "
                               "stray offset)");
  }
  int order = it->second.order;
  const uint64_t freed = block_bytes(order);
  blocks_.erase(it);
  while (has_parent(offset, order)) {
    const uint64_t buddy = offset ^ block_bytes(order);
    auto b = blocks_.find(buddy);
    if (b == blocks_.end() || b->second.in_use || b->second.order != order) break;
    remove_free(buddy, order);
    blocks_.erase(b);
    offset &= ~block_bytes(order);
    ++order;
  }
  insert_free(offset, order);
  return freed;
}

uint64_t BuddyPolicy::largest_free_block_bytes() const {
  return nonempty_orders_ == 0 ? 0 : block_bytes(std::bit_width(nonempty_orders_) - 1);
}

void BuddyPolicy::walk(const std::function<void(const ChunkInfo&)>& fn) const {
  for (const auto& [offset, b] : blocks_) fn(ChunkInfo{offset, block_bytes(b.order), b.in_use});
}

std::vector<BinStats> BuddyPolicy::bin_stats() const {
  std::vector<BinStats> out(order_of(std::bit_floor(capacity_bytes_)) + 1);
  for (int k = 0; k < static_cast<int>(out.size()); ++k) {
    const uint64_t size = block_bytes(k);
    out[k] = BinStats{.min_chunk_bytes = size,
                      .max_chunk_bytes = size,
                      .num_free_chunks = free_[k].size(),
                      .free_bytes = free_[k].size() * size,
                      .largest_free_chunk_bytes = free_[k].empty() ? 0 : size};
  }
  return out;
}

void BuddyPolicy::rebuild(std::span<const ChunkInfo> in_use) {
  check_rebuild_input(*this, "buddy", in_use, "a power of two >= 256", [](uint64_t size) {
    return size >= kMinBlockBytes && std::has_single_bit(size);
  });
  blocks_.clear();
  for (auto& list : free_) list.clear();
  nonempty_orders_ = 0;
  total_free_bytes_ = 0;
  for_each_tile(capacity_bytes_, in_use, [this](uint64_t offset, uint64_t size, bool used) {
    if (used) {
      blocks_[offset] = Block{order_of(size), true};
    } else {
      insert_free_range(offset, offset + size);
    }
  });
}

void BuddyPolicy::check_consistency() const {
  auto fail = [](const std::string& what) { throw InternalError("buddy inconsistency: " + what); };
  uint64_t expected_offset = 0, free_bytes = 0, num_free = 0;
  for (const auto& entry : blocks_) {
    const uint64_t offset = entry.first;
    const Block& b = entry.second;
    auto where = [&] {  // built only on failure
      return std::string(b.in_use ? "block in use" : "free block") + " at offset " +
             std::to_string(offset) + " of order " + std::to_string(b.order);
    };
    if (b.order < 0 || b.order >= kNumOrders) fail(where() + " has no such order");
    const uint64_t size = block_bytes(b.order);
    if (offset != expected_offset)
      fail(where() + " does not start where the previous one ends (" +
           std::to_string(expected_offset) + ")");
    if (offset % size != 0) fail(where() + " is not aligned to its size " + std::to_string(size));
    if (size > capacity_bytes_ - offset) fail(where() + " runs past the capacity");
    if (!b.in_use) {
      if (!free_[b.order].contains(offset)) fail(where() + " is not in its free list");
      if (has_parent(offset, b.order)) {
        auto buddy = blocks_.find(offset ^ size);
        if (buddy != blocks_.end() && !buddy->second.in_use && buddy->second.order == b.order)
          fail(where() + " and its buddy are both free and whole (not merged)");
      }
      free_bytes += size;
      ++num_free;
    }
    expected_offset += size;
  }
  if (expected_offset != capacity_bytes_)
    fail("blocks cover " + std::to_string(expected_offset) + " bytes, capacity is " +
         std::to_string(capacity_bytes_));
  uint64_t num_listed = 0;
  for (int k = 0; k < kNumOrders; ++k) {
    if (((nonempty_orders_ >> k) & 1) != (free_[k].empty() ? 0u : 1u))
      fail("order bit " + std::to_string(k) + " disagrees with free list " + std::to_string(k));
    for (uint64_t offset : free_[k]) {
      auto it = blocks_.find(offset);
      if (it == blocks_.end() || it->second.in_use || it->second.order != k)
        fail("free list " + std::to_string(k) + " holds offset " + std::to_string(offset) +
             ", which is not a free block of that order");
    }
    num_listed += free_[k].size();
  }
  if ((nonempty_orders_ >> kNumOrders) != 0) fail("order bits set beyond the last order");
  if (num_listed != num_free)
    fail("free lists hold " + std::to_string(num_listed) + " blocks, the walk found " +
         std::to_string(num_free));
  if (free_bytes != total_free_bytes_)
    fail("free-byte counter " + std::to_string(total_free_bytes_) + " != walked " +
         std::to_string(free_bytes));
}

}  // namespace vtpu
