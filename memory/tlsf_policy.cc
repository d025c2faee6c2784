#include "vtpu/memory/tlsf_policy.h"

#include <algorithm>
#include <bit>
#include <string>

#include "vtpu/common/error.h"

namespace vtpu {

TlsfPolicy::TlsfPolicy(uint64_t capacity_bytes)
    : capacity_bytes_(capacity_in_granules("TLSF", capacity_bytes, kGranuleBytes)) {
  reset();
  head_ = new_block(0, capacity_bytes_);
  insert_free(head_);
}

uint64_t TlsfPolicy::rounded_bytes(uint64_t size_bytes) const {
  return round_up_to_granule(size_bytes, kGranuleBytes);
}

TlsfPolicy::ListIndex TlsfPolicy::mapping_insert(uint64_t size_bytes) {
  if (size_bytes < kSmallBlockBytes) return {0, static_cast<int>(size_bytes / kGranuleBytes)};
  const int log2 = std::bit_width(size_bytes) - 1;
  const int sl = static_cast<int>((size_bytes >> (log2 - kSecondLevelBits)) ^ kNumSecondLevel);
  return {log2 - (kFirstLevelShift - 1), sl};
}

std::optional<TlsfPolicy::ListIndex> TlsfPolicy::mapping_search(uint64_t size_bytes) {
  if (size_bytes >= kSmallBlockBytes) {
    const int log2 = std::bit_width(size_bytes) - 1;
    const uint64_t round = (uint64_t{1} << (log2 - kSecondLevelBits)) - 1;
    if (size_bytes > ~uint64_t{0} - round) return std::nullopt;  // the boundary is 2^64
    size_bytes += round;
  }
  return mapping_insert(size_bytes);
}

uint64_t TlsfPolicy::class_min_bytes(int fl) {
  return fl == 0 ? kGranuleBytes : uint64_t{1} << (kFirstLevelShift - 1 + fl);
}

uint64_t TlsfPolicy::class_max_bytes(int fl) {
  if (fl == 0) return kSmallBlockBytes - kGranuleBytes;
  return (class_min_bytes(fl) - kGranuleBytes) + class_min_bytes(fl);  // 2 * min - 256, no wrap
}

void TlsfPolicy::reset() {
  blocks_.clear();
  fl_bitmap_ = 0;
  sl_bitmap_.fill(0);
  for (auto& lists : free_heads_) lists.fill(kNoBlock);
  in_use_.clear();
  total_free_bytes_ = 0;
  head_ = kNoBlock;
}

void TlsfPolicy::insert_free(BlockId id) {
  Block& b = blocks_[id];
  const auto [fl, sl] = mapping_insert(b.size_bytes());
  const BlockId head = free_heads_[fl][sl];
  b.prev_free = kNoBlock;
  b.next_free = head;
  if (head != kNoBlock) blocks_[head].prev_free = id;
  free_heads_[fl][sl] = id;
  sl_bitmap_[fl] |= uint32_t{1} << sl;
  fl_bitmap_ |= uint64_t{1} << fl;
  total_free_bytes_ += b.size_bytes();
}

void TlsfPolicy::remove_free(BlockId id) {
  const Block& b = blocks_[id];
  const auto [fl, sl] = mapping_insert(b.size_bytes());
  if (b.prev_free != kNoBlock) {
    blocks_[b.prev_free].next_free = b.next_free;
  } else {
    free_heads_[fl][sl] = b.next_free;
  }
  if (b.next_free != kNoBlock) blocks_[b.next_free].prev_free = b.prev_free;
  if (free_heads_[fl][sl] == kNoBlock) {
    sl_bitmap_[fl] &= ~(uint32_t{1} << sl);
    if (sl_bitmap_[fl] == 0) fl_bitmap_ &= ~(uint64_t{1} << fl);
  }
  total_free_bytes_ -= b.size_bytes();
}

TlsfPolicy::BlockId TlsfPolicy::find_suitable(ListIndex index) const {
  int fl = index.fl;
  uint32_t sl_map = sl_bitmap_[fl] & (~uint32_t{0} << index.sl);
  if (sl_map == 0) {
    // No list of this class at or above sl: the smallest non-empty class above fl.
    const uint64_t fl_map = fl + 1 < 64 ? fl_bitmap_ & (~uint64_t{0} << (fl + 1)) : 0;
    if (fl_map == 0) return kNoBlock;
    fl = std::countr_zero(fl_map);
    sl_map = sl_bitmap_[fl];
  }
  return free_heads_[fl][std::countr_zero(sl_map)];
}

std::optional<PolicyAllocation> TlsfPolicy::allocate(uint64_t size_bytes) {
  if (size_bytes > capacity_bytes_) return std::nullopt;  // also keeps rounding below 2^64
  const uint64_t rounded = rounded_bytes(size_bytes);
  const std::optional<ListIndex> index = mapping_search(rounded);
  BlockId id = index ? find_suitable(*index) : kNoBlock;
  if (id == kNoBlock) {
    id = find_in_own_list(rounded);
    if (id == kNoBlock) return std::nullopt;
  }
  remove_free(id);
  const uint64_t remainder = blocks_[id].size_bytes() - rounded;
  if (remainder > 0) {  // a multiple of 256, so at least the granularity
    const BlockId rest = new_block(blocks_[id].offset + rounded, remainder);  // may reallocate
    Block& cur = blocks_[id];
    Block& r = blocks_[rest];
    r.prev_phys = id;
    r.next_phys = cur.next_phys;
    if (cur.next_phys != kNoBlock) blocks_[cur.next_phys].prev_phys = rest;  // its flag stays 1
    cur.next_phys = rest;
    cur.set_size_bytes(rounded);
    insert_free(rest);
  } else if (blocks_[id].next_phys != kNoBlock) {
    blocks_[blocks_[id].next_phys].prev_phys_is_free = 0;
  }
  Block& cur = blocks_[id];
  if (cur.prev_phys != kNoBlock) blocks_[cur.prev_phys].next_phys_is_free = 0;
  cur.prev_phys_is_free = 0;  // both neighbours are in use: coalescing, or the split-off rest
  cur.next_phys_is_free = remainder > 0 ? 1 : 0;
  cur.set_in_use(true);
  in_use_.insert(cur.offset, id);
  return PolicyAllocation{cur.offset, rounded};  // TLSF always splits: the chunk is the request
}

TlsfPolicy::BlockId TlsfPolicy::find_in_own_list(uint64_t rounded_bytes) const {
  const auto [fl, sl] = mapping_insert(rounded_bytes);
  BlockId best = kNoBlock;
  for (BlockId id = free_heads_[fl][sl]; id != kNoBlock; id = blocks_[id].next_free) {
    const Block& b = blocks_[id];
    if (b.size_bytes() < rounded_bytes) continue;
    if (best == kNoBlock || b.size_bytes() < blocks_[best].size_bytes() ||
        (b.size_bytes() == blocks_[best].size_bytes() && b.offset < blocks_[best].offset)) {
      best = id;
    }
  }
  return best;
}

void TlsfPolicy::absorb_next(BlockId id, BlockId next) {
  Block& b = blocks_[id];
  const Block& n = blocks_[next];
  b.set_size_bytes(b.size_bytes() + n.size_bytes());
  b.next_phys = n.next_phys;
  if (n.next_phys != kNoBlock) blocks_[n.next_phys].prev_phys = id;
  blocks_.remove(next);
}

uint64_t TlsfPolicy::free(uint64_t offset) {
  const std::optional<BlockId> found = in_use_.erase(offset);
  if (!found) {
    throw InvalidArgumentError("TLSF free of offset " + std::to_string(offset) +
                               ", which is not the start of a block in use (double free or a "
                               "stray offset)");
  }
  BlockId id = *found;
  Block& b = blocks_[id];
  const uint64_t freed = b.size_bytes();
  const bool prev_is_free = b.prev_phys_is_free != 0;
  const bool next_is_free = b.next_phys_is_free != 0;
  b.set_in_use(false);
  if (next_is_free) {  // the block after it is in use (coalesced) and keeps its flag at 1
    const BlockId next = b.next_phys;
    remove_free(next);
    absorb_next(id, next);
  }
  const BlockId prev = blocks_[id].prev_phys;
  if (prev_is_free) {
    remove_free(prev);
    absorb_next(prev, id);
    id = prev;
  } else if (prev != kNoBlock) {
    blocks_[prev].next_phys_is_free = 1;
  }
  const BlockId next = blocks_[id].next_phys;
  if (next != kNoBlock) blocks_[next].prev_phys_is_free = 1;
  insert_free(id);
  return freed;
}

uint64_t TlsfPolicy::largest_free_block_bytes() const {
  if (fl_bitmap_ == 0) return 0;
  const int fl = std::bit_width(fl_bitmap_) - 1;
  const int sl = std::bit_width(sl_bitmap_[fl]) - 1;
  uint64_t largest = 0;  // the highest non-empty list holds it; its blocks are in no size order
  for (BlockId id = free_heads_[fl][sl]; id != kNoBlock; id = blocks_[id].next_free) {
    largest = std::max(largest, blocks_[id].size_bytes());
  }
  return largest;
}

void TlsfPolicy::walk(const std::function<void(const ChunkInfo&)>& fn) const {
  for (BlockId id = head_; id != kNoBlock; id = blocks_[id].next_phys) {
    const Block& b = blocks_[id];
    fn(ChunkInfo{b.offset, b.size_bytes(), b.in_use()});
  }
}

std::vector<BinStats> TlsfPolicy::bin_stats() const {
  std::vector<BinStats> out(mapping_insert(capacity_bytes_).fl + 1);
  for (int fl = 0; fl < static_cast<int>(out.size()); ++fl) {
    BinStats& s = out[fl];
    s.min_chunk_bytes = class_min_bytes(fl);
    s.max_chunk_bytes = class_max_bytes(fl);
    for (int sl = 0; sl < kNumSecondLevel; ++sl) {
      for (BlockId id = free_heads_[fl][sl]; id != kNoBlock; id = blocks_[id].next_free) {
        ++s.num_free_chunks;
        s.free_bytes += blocks_[id].size_bytes();
        s.largest_free_chunk_bytes = std::max(s.largest_free_chunk_bytes, blocks_[id].size_bytes());
      }
    }
  }
  return out;
}

void TlsfPolicy::rebuild(std::span<const ChunkInfo> in_use) {
  check_rebuild_input(*this, "TLSF", in_use, "a positive multiple of 256",
                      [](uint64_t size) { return size > 0 && size % kGranuleBytes == 0; });
  reset();
  BlockId prev = kNoBlock;
  auto append = [&](uint64_t offset, uint64_t size, bool used) {
    const BlockId id = new_block(offset, size);
    blocks_[id].prev_phys = prev;
    if (prev == kNoBlock) {
      head_ = id;
    } else {
      blocks_[prev].next_phys = id;
      if (blocks_[prev].in_use()) blocks_[prev].next_phys_is_free = used ? 0 : 1;
    }
    if (used) {
      blocks_[id].prev_phys_is_free = prev != kNoBlock && !blocks_[prev].in_use() ? 1 : 0;
      blocks_[id].next_phys_is_free = 0;  // until a free tile follows
    }
    prev = id;
    if (used) {
      blocks_[id].set_in_use(true);
      in_use_.insert(offset, id);
    } else {
      insert_free(id);
    }
  };
  for_each_tile(capacity_bytes_, in_use, append);
}

void TlsfPolicy::check_consistency() const {
  auto fail = [](const std::string& what) { throw InternalError("TLSF inconsistency: " + what); };
  auto where = [this](BlockId id) {  // built only on failure
    return "block " + std::to_string(id) + " at offset " + std::to_string(blocks_[id].offset) +
           " size " + std::to_string(blocks_[id].size_bytes());
  };
  // Physical order: the blocks tile [0, capacity), linked both ways, no two free ones adjacent.
  std::vector<char> reached(blocks_.id_limit(), 0);
  uint64_t expected_offset = 0, free_bytes = 0, num_free = 0, num_in_use = 0;
  BlockId prev = kNoBlock;
  bool prev_free = false;
  for (BlockId id = head_; id != kNoBlock; id = blocks_[id].next_phys) {
    if (id >= blocks_.id_limit() || reached[id]) fail("the physical list has a cycle or a bad id");
    reached[id] = 1;
    const Block& b = blocks_[id];
    if (b.offset != expected_offset)
      fail(where(id) + " does not start where the previous one ends (" +
           std::to_string(expected_offset) + ")");
    if (b.size_bytes() == 0 || b.size_bytes() % kGranuleBytes != 0)
      fail(where(id) + " has a size that is not a positive multiple of 256");
    if (b.size_bytes() > capacity_bytes_ - b.offset) fail(where(id) + " runs past the capacity");
    if (b.prev_phys != prev) fail(where(id) + " has a wrong prev_phys link");
    if (b.in_use()) {
      if (in_use_.find(b.offset) != id) fail(where(id) + " is in use but not indexed");
      const bool next_free = b.next_phys != kNoBlock && !blocks_[b.next_phys].in_use();
      if (b.prev_phys_is_free != (prev_free ? 1u : 0u) ||
          b.next_phys_is_free != (next_free ? 1u : 0u))
        fail(where(id) + " has a neighbour flag that disagrees with its neighbour");
      ++num_in_use;
    } else {
      if (prev_free) fail(where(id) + " is free next to a free neighbour (not coalesced)");
      free_bytes += b.size_bytes();
      ++num_free;
    }
    prev_free = !b.in_use();
    expected_offset += b.size_bytes();
    prev = id;
  }
  if (expected_offset != capacity_bytes_)
    fail("blocks cover " + std::to_string(expected_offset) + " bytes, capacity is " +
         std::to_string(capacity_bytes_));
  // Lists and bitmaps: each list holds exactly the free blocks that mapping_insert files there.
  std::vector<char> listed(blocks_.id_limit(), 0);
  uint64_t num_listed = 0;
  for (int fl = 0; fl < kNumFirstLevel; ++fl) {
    for (int sl = 0; sl < kNumSecondLevel; ++sl) {
      auto list = [fl, sl] {  // built only on failure
        return "list (" + std::to_string(fl) + ", " + std::to_string(sl) + ")";
      };
      const bool bit = (sl_bitmap_[fl] >> sl) & 1;
      if (bit != (free_heads_[fl][sl] != kNoBlock))
        fail(list() + " disagrees with its second-level bitmap bit");
      BlockId prev_free_id = kNoBlock;
      for (BlockId id = free_heads_[fl][sl]; id != kNoBlock; id = blocks_[id].next_free) {
        if (id >= blocks_.id_limit() || !reached[id])
          fail(list() + " holds a block not in the range");
        if (listed[id]) fail(list() + " holds " + where(id) + " twice (or in two lists)");
        listed[id] = 1;
        ++num_listed;
        if (blocks_[id].in_use()) fail(list() + " holds " + where(id) + ", which is in use");
        if (blocks_[id].prev_free != prev_free_id) fail(where(id) + " has a wrong prev_free link");
        if (mapping_insert(blocks_[id].size_bytes()) != ListIndex{fl, sl})
          fail(where(id) + " sits in " + list() + ", not the list of its size");
        prev_free_id = id;
      }
    }
    if (((fl_bitmap_ >> fl) & 1) != (sl_bitmap_[fl] != 0 ? 1u : 0u))
      fail("first-level bit " + std::to_string(fl) + " disagrees with its second-level bitmap");
  }
  if ((fl_bitmap_ >> kNumFirstLevel) != 0) fail("first-level bits set beyond the last class");
  if (num_listed != num_free)
    fail("lists hold " + std::to_string(num_listed) + " blocks, the walk found " +
         std::to_string(num_free) + " free blocks");
  if (num_in_use != in_use_.size()) fail("in-use index size disagrees with the walk");
  in_use_.check_consistency();
  if (free_bytes != total_free_bytes_)
    fail("free-byte counter " + std::to_string(total_free_bytes_) + " != walked " +
         std::to_string(free_bytes));
}

}  // namespace vtpu
