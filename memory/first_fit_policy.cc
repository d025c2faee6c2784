#include "vtpu/memory/first_fit_policy.h"

#include <iterator>
#include <string>
#include <vector>

#include "vtpu/common/error.h"

namespace vtpu {

FirstFitPolicy::FirstFitPolicy(uint64_t capacity_bytes)
    : capacity_bytes_(capacity_in_granules("first_fit", capacity_bytes, kGranuleBytes)) {
  insert_free(0, capacity_bytes_);
}

uint64_t FirstFitPolicy::rounded_bytes(uint64_t size_bytes) const {
  return round_up_to_granule(size_bytes, kGranuleBytes);
}

void FirstFitPolicy::insert_free(uint64_t offset, uint64_t size_bytes) {
  free_.emplace(offset, size_bytes);
  free_sizes_.insert(size_bytes);
  total_free_bytes_ += size_bytes;
}

void FirstFitPolicy::remove_free(std::map<uint64_t, uint64_t>::iterator it) {
  free_sizes_.erase(free_sizes_.find(it->second));
  total_free_bytes_ -= it->second;
  free_.erase(it);
}

std::optional<PolicyAllocation> FirstFitPolicy::allocate(uint64_t size_bytes) {
  if (size_bytes > capacity_bytes_) return std::nullopt;  // also keeps rounding below 2^64
  const uint64_t rounded = rounded_bytes(size_bytes);
  if (largest_free_block_bytes() < rounded) return std::nullopt;  // fits nowhere: skip the scan
  auto it = free_.begin();
  while (it->second < rounded) ++it;  // ends: the largest free chunk fits
  const uint64_t offset = it->first;
  const uint64_t remainder = it->second - rounded;
  remove_free(it);
  if (remainder > 0) insert_free(offset + rounded, remainder);
  in_use_.emplace(offset, rounded);
  return PolicyAllocation{offset, rounded};
}

uint64_t FirstFitPolicy::free(uint64_t offset) {
  auto used = in_use_.find(offset);
  if (used == in_use_.end()) {
    throw InvalidArgumentError("first_fit free of offset " + std::to_string(offset) +
                               ", which is not the start of a chunk in use (double free or a "
                               "stray offset)");
  }
  const uint64_t freed = used->second;
  in_use_.erase(used);
  uint64_t begin = offset;
  uint64_t size = freed;
  auto next = free_.lower_bound(offset);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      size += prev->second;
      remove_free(prev);
    }
  }
  if (next != free_.end() && next->first == offset + freed) {
    size += next->second;
    remove_free(next);
  }
  insert_free(begin, size);
  return freed;
}

uint64_t FirstFitPolicy::largest_free_block_bytes() const {
  return free_sizes_.empty() ? 0 : *free_sizes_.rbegin();
}

void FirstFitPolicy::walk(const std::function<void(const ChunkInfo&)>& fn) const {
  auto f = free_.begin();
  auto u = in_use_.begin();
  while (f != free_.end() || u != in_use_.end()) {  // merge of two address-ordered maps
    if (u == in_use_.end() || (f != free_.end() && f->first < u->first)) {
      fn(ChunkInfo{f->first, f->second, false});
      ++f;
    } else {
      fn(ChunkInfo{u->first, u->second, true});
      ++u;
    }
  }
}

void FirstFitPolicy::rebuild(std::span<const ChunkInfo> in_use) {
  check_rebuild_input(*this, "first_fit", in_use, "a positive multiple of 256",
                      [](uint64_t size) { return size > 0 && size % kGranuleBytes == 0; });
  free_.clear();
  in_use_.clear();
  free_sizes_.clear();
  total_free_bytes_ = 0;
  for_each_tile(capacity_bytes_, in_use, [this](uint64_t offset, uint64_t size, bool used) {
    if (used) {
      in_use_.emplace_hint(in_use_.end(), offset, size);
    } else {
      insert_free(offset, size);
    }
  });
}

void FirstFitPolicy::check_consistency() const {
  auto fail = [](const std::string& what) {
    throw InternalError("first_fit inconsistency: " + what);
  };
  uint64_t expected_offset = 0, free_bytes = 0;
  bool prev_free = false;
  std::vector<uint64_t> sizes;  // of the free chunks, in address order
  walk([&](const ChunkInfo& c) {
    auto where = [&c] {  // built only on failure
      return std::string(c.in_use ? "chunk in use" : "free chunk") + " at offset " +
             std::to_string(c.offset) + " size " + std::to_string(c.size_bytes);
    };
    if (c.offset != expected_offset)
      fail(where() + " does not start where the previous one ends (" +
           std::to_string(expected_offset) + ")");
    if (c.size_bytes == 0 || c.size_bytes % kGranuleBytes != 0)
      fail(where() + " has a size that is not a positive multiple of 256");
    if (c.size_bytes > capacity_bytes_ - c.offset) fail(where() + " runs past the capacity");
    if (!c.in_use) {
      if (prev_free) fail(where() + " is free next to a free neighbour (not coalesced)");
      free_bytes += c.size_bytes;
      sizes.push_back(c.size_bytes);
    }
    prev_free = !c.in_use;
    expected_offset += c.size_bytes;
  });
  if (expected_offset != capacity_bytes_)
    fail("chunks cover " + std::to_string(expected_offset) + " bytes, capacity is " +
         std::to_string(capacity_bytes_));
  if (free_bytes != total_free_bytes_)
    fail("free-byte counter " + std::to_string(total_free_bytes_) + " != walked " +
         std::to_string(free_bytes));
  if (std::multiset<uint64_t>(sizes.begin(), sizes.end()) != free_sizes_)
    fail("the multiset of free sizes (" + std::to_string(free_sizes_.size()) +
         " entries) disagrees with the " + std::to_string(sizes.size()) + " free chunks");
}

}  // namespace vtpu
