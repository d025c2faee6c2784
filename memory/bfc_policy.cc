#include "vtpu/memory/bfc_policy.h"

#include <algorithm>
#include <bit>
#include <string>

#include "vtpu/common/error.h"

namespace vtpu {

BfcPolicy::BfcPolicy(uint64_t capacity_bytes, const PolicyOptions& options)
    : capacity_bytes_(capacity_in_granules("BFC", capacity_bytes, kMinAllocationBytes)),
      max_internal_fragmentation_bytes_(options.max_internal_fragmentation_bytes.value_or(
          default_max_internal_fragmentation_bytes(capacity_bytes_))),
      class_tops_(kNumSmallClasses, HeapEntry{0, kNoChunk}),
      class_rest_(kNumSmallClasses) {
  head_ = new_chunk(0, capacity_bytes_);
  insert_free(head_);
}

uint64_t BfcPolicy::default_max_internal_fragmentation_bytes(uint64_t capacity_bytes) {
  return std::min(uint64_t{128} << 20, capacity_bytes / 128);
}

int BfcPolicy::bin_for_size(uint64_t size_bytes) {
  const uint64_t units = size_bytes / kMinAllocationBytes;
  const int b = units == 0 ? 0 : std::bit_width(units) - 1;
  return b < kNumBins - 1 ? b : kNumBins - 1;
}

uint64_t BfcPolicy::rounded_bytes(uint64_t size_bytes) const {
  return round_up_to_granule(size_bytes, kMinAllocationBytes);
}

void BfcPolicy::reset() {
  chunks_.clear();
  class_words_ = 0;
  class_bits_.fill(0);
  std::fill(class_tops_.begin(), class_tops_.end(), HeapEntry{0, kNoChunk});
  for (auto& rest : class_rest_) rest.clear();
  class_has_rest_.fill(0);
  large_.clear();
  in_use_.clear();
  total_free_bytes_ = 0;
  head_ = kNoChunk;
}

int BfcPolicy::first_class_at_least(int cls) const {
  int w = cls / 64;
  const uint64_t bits = class_bits_[w] & (~uint64_t{0} << (cls % 64));
  if (bits != 0) return w * 64 + std::countr_zero(bits);
  const uint64_t words = w + 1 < kClassWords ? class_words_ & (~uint64_t{0} << (w + 1)) : 0;
  if (words == 0) return -1;
  w = std::countr_zero(words);
  return w * 64 + std::countr_zero(class_bits_[w]);
}

void BfcPolicy::heap_place(int cls, uint32_t pos, HeapEntry e) {
  // Up while the parent is larger, else down while a child is smaller (only one can happen).
  while (pos > 0 && heap_at(cls, (pos - 1) / 2).offset > e.offset) {
    const uint32_t parent = (pos - 1) / 2;
    const HeapEntry moved = heap_at(cls, parent);
    heap_at(cls, pos) = moved;
    chunks_[moved.id].heap_pos = pos;
    pos = parent;
  }
  const uint32_t n = heap_size(cls);
  for (;;) {
    uint32_t child = 2 * pos + 1;
    if (child >= n) break;
    if (child + 1 < n && heap_at(cls, child + 1).offset < heap_at(cls, child).offset) ++child;
    const HeapEntry moved = heap_at(cls, child);
    if (moved.offset >= e.offset) break;
    heap_at(cls, pos) = moved;
    chunks_[moved.id].heap_pos = pos;
    pos = child;
  }
  heap_at(cls, pos) = e;
  chunks_[e.id].heap_pos = pos;
}

void BfcPolicy::heap_push(int cls, ChunkId id) {
  const HeapEntry e{chunks_[id].offset, id};
  if (class_tops_[cls].id == kNoChunk) {  // the common case: the class was empty
    class_tops_[cls] = e;
    chunks_[id].heap_pos = 0;
    class_bits_[cls / 64] |= uint64_t{1} << (cls % 64);
    class_words_ |= uint64_t{1} << (cls / 64);
    return;
  }
  class_rest_[cls].push_back(e);
  class_has_rest_[cls / 64] |= uint64_t{1} << (cls % 64);
  heap_place(cls, heap_size(cls) - 1, e);
}

void BfcPolicy::heap_remove(int cls, uint32_t pos) {
  if (((class_has_rest_[cls / 64] >> (cls % 64)) & 1) == 0) {  // the only entry: pos is 0
    class_tops_[cls].id = kNoChunk;
    class_bits_[cls / 64] &= ~(uint64_t{1} << (cls % 64));
    if (class_bits_[cls / 64] == 0) class_words_ &= ~(uint64_t{1} << (cls / 64));
    return;
  }
  std::vector<HeapEntry>& rest = class_rest_[cls];
  const HeapEntry last = rest.back();
  rest.pop_back();
  if (rest.empty()) class_has_rest_[cls / 64] &= ~(uint64_t{1} << (cls % 64));
  if (pos < heap_size(cls)) heap_place(cls, pos, last);
}

void BfcPolicy::large_insert(const LargeKey& key) {
  if (spare_large_.empty()) {
    large_.insert(large_.end(), key);
    return;
  }
  spare_large_.value() = key;
  large_.insert(large_.end(), std::move(spare_large_));
}

void BfcPolicy::large_erase(LargeSet::const_iterator it) {
  if (spare_large_.empty()) {
    spare_large_ = large_.extract(it);
  } else {
    large_.erase(it);
  }
}

void BfcPolicy::insert_free(ChunkId id) {
  const Chunk& c = chunks_[id];
  const uint64_t size = c.size_bytes();
  if (size <= kMaxSmallChunkBytes) {
    heap_push(small_class(size), id);
  } else {
    large_insert(LargeKey{size, c.offset, id});
  }
  total_free_bytes_ += size;
}

void BfcPolicy::remove_free(ChunkId id) {
  const Chunk& c = chunks_[id];
  const uint64_t size = c.size_bytes();
  if (size <= kMaxSmallChunkBytes) {
    heap_remove(small_class(size), c.heap_pos);
  } else {
    large_erase(large_.find(LargeKey{size, c.offset, id}));
  }
  total_free_bytes_ -= size;
}

std::optional<PolicyAllocation> BfcPolicy::allocate(uint64_t size_bytes) {
  if (size_bytes > capacity_bytes_) return std::nullopt;  // also keeps rounding below 2^64
  const uint64_t rounded = rounded_bytes(size_bytes);
  if (rounded > total_free_bytes_) return std::nullopt;
  // The best fit: the smallest small chunk that fits, else the smallest large one.
  ChunkId id;
  const int cls = rounded <= kMaxSmallChunkBytes ? first_class_at_least(small_class(rounded)) : -1;
  if (cls >= 0) {
    id = class_tops_[cls].id;
    heap_remove(cls, 0);
  } else {
    auto it = large_.lower_bound(LargeKey{rounded, 0, 0});
    if (it == large_.end()) return std::nullopt;
    id = it->id;
    large_erase(it);
  }
  const uint64_t size = chunks_[id].size_bytes();
  total_free_bytes_ -= size;
  const uint64_t remainder = size - rounded;
  // remainder >= rounded is size >= 2 * rounded without the overflow of 2 * rounded above 2^63.
  if (remainder > 0 && (remainder >= rounded || remainder >= max_internal_fragmentation_bytes_)) {
    const ChunkId rest = new_chunk(chunks_[id].offset + rounded, remainder);  // may reallocate
    Chunk& cur = chunks_[id];
    Chunk& r = chunks_[rest];
    r.prev = id;
    r.next = cur.next;
    if (cur.next != kNoChunk) chunks_[cur.next].prev = rest;  // its prev_free stays true
    cur.next = rest;
    cur.next_free = true;
    cur.set_size_bytes(rounded);
    insert_free(rest);
  } else if (chunks_[id].next != kNoChunk) {
    chunks_[chunks_[id].next].prev_free = false;
  }
  Chunk& cur = chunks_[id];
  if (cur.prev != kNoChunk) chunks_[cur.prev].next_free = false;
  cur.set_in_use(true);
  in_use_.insert(cur.offset, id);
  return PolicyAllocation{cur.offset, cur.size_bytes()};
}

void BfcPolicy::absorb_next(ChunkId id, ChunkId next) {
  Chunk& c = chunks_[id];
  const Chunk& n = chunks_[next];
  c.set_size_bytes(c.size_bytes() + n.size_bytes());
  c.next = n.next;
  if (n.next != kNoChunk) chunks_[n.next].prev = id;
  chunks_.remove(next);
}

uint64_t BfcPolicy::free(uint64_t offset) {
  const std::optional<ChunkId> found = in_use_.erase(offset);
  if (!found) {
    throw InvalidArgumentError("BFC free of offset " + std::to_string(offset) +
                               ", which is not the start of a chunk in use (double free or a "
                               "stray offset)");
  }
  ChunkId id = *found;
  const uint64_t freed = chunks_[id].size_bytes();
  chunks_[id].set_in_use(false);
  // Merge with the next neighbour: it disappears into this chunk. The one after it is in use
  // (coalesced) and its prev_free stays true.
  if (chunks_[id].next_free) {
    const ChunkId next = chunks_[id].next;
    remove_free(next);
    absorb_next(id, next);
  }
  // Merge into the previous neighbour: this chunk disappears into it. Otherwise tell the
  // previous neighbour that its next is free now.
  if (chunks_[id].prev_free) {
    const ChunkId prev = chunks_[id].prev;
    remove_free(prev);
    absorb_next(prev, id);
    id = prev;
  } else if (chunks_[id].prev != kNoChunk) {
    chunks_[chunks_[id].prev].next_free = true;
  }
  Chunk& merged = chunks_[id];
  merged.next_free = false;  // its next neighbour, if any, is in use
  if (merged.next != kNoChunk) chunks_[merged.next].prev_free = true;
  insert_free(id);
  return freed;
}

uint64_t BfcPolicy::largest_free_block_bytes() const {
  if (!large_.empty()) return large_.rbegin()->size_bytes;
  if (class_words_ == 0) return 0;
  const int w = std::bit_width(class_words_) - 1;
  const int cls = w * 64 + std::bit_width(class_bits_[w]) - 1;
  return (cls + 1) * kMinAllocationBytes;
}

void BfcPolicy::walk(const std::function<void(const ChunkInfo&)>& fn) const {
  for (ChunkId id = head_; id != kNoChunk; id = chunks_[id].next) {
    const Chunk& c = chunks_[id];
    fn(ChunkInfo{c.offset, c.size_bytes(), c.in_use()});
  }
}

std::vector<BinStats> BfcPolicy::bin_stats() const {
  std::vector<BinStats> out(kNumBins);
  for (int b = 0; b < kNumBins; ++b) {
    out[b].min_chunk_bytes = kMinAllocationBytes << b;
    out[b].max_chunk_bytes =
        b + 1 < kNumBins ? (kMinAllocationBytes << (b + 1)) - kMinAllocationBytes : UINT64_MAX;
  }
  auto add = [&](uint64_t size, uint64_t count) {
    BinStats& s = out[bin_for_size(size)];
    s.num_free_chunks += count;
    s.free_bytes += size * count;
    s.largest_free_chunk_bytes = std::max(s.largest_free_chunk_bytes, size);
  };
  for (int cls = 0; cls < kNumSmallClasses; ++cls) {
    if (heap_size(cls) != 0) add((cls + uint64_t{1}) * kMinAllocationBytes, heap_size(cls));
  }
  for (const LargeKey& k : large_) add(k.size_bytes, 1);
  return out;
}

void BfcPolicy::rebuild(std::span<const ChunkInfo> in_use) {
  check_rebuild_input(*this, "BFC", in_use, "a positive multiple of 256",
                      [](uint64_t size) { return size > 0 && size % kMinAllocationBytes == 0; });
  reset();
  ChunkId prev = kNoChunk;
  auto append = [&](uint64_t offset, uint64_t size, bool used) {
    const ChunkId id = new_chunk(offset, size);
    chunks_[id].prev = prev;
    if (prev == kNoChunk) {
      head_ = id;
    } else {
      chunks_[prev].next = id;
      chunks_[prev].next_free = !used;
      chunks_[id].prev_free = !chunks_[prev].in_use();
    }
    prev = id;
    if (used) {
      chunks_[id].set_in_use(true);
      in_use_.insert(offset, id);
    } else {
      insert_free(id);
    }
  };
  for_each_tile(capacity_bytes_, in_use, append);
}

void BfcPolicy::check_consistency() const {
  auto fail = [](const std::string& what) { throw InternalError("BFC inconsistency: " + what); };
  auto where = [this](ChunkId id) {  // built only on failure
    return "chunk at offset " + std::to_string(chunks_[id].offset) + " size " +
           std::to_string(chunks_[id].size_bytes());
  };
  // Address order: the chunks tile [0, capacity), linked both ways, no two free ones adjacent;
  // every free chunk sits where its size says (its class heap or the large set).
  std::vector<char> reached(chunks_.id_limit(), 0);
  uint64_t expected_offset = 0, free_bytes = 0, num_free = 0, num_in_use = 0;
  ChunkId prev = kNoChunk;
  bool prev_free = false;
  for (ChunkId id = head_; id != kNoChunk; id = chunks_[id].next) {
    if (id >= chunks_.id_limit() || reached[id]) fail("the chunk list has a cycle or a bad id");
    reached[id] = 1;
    const Chunk& c = chunks_[id];
    const uint64_t size = c.size_bytes();
    if (c.offset != expected_offset)
      fail(where(id) + " does not start where the previous one ends (" +
           std::to_string(expected_offset) + ")");
    if (size == 0 || size % kMinAllocationBytes != 0)
      fail(where(id) + " has a size that is not a positive multiple of 256");
    if (c.prev != prev) fail(where(id) + " has a wrong prev link");
    if (c.prev_free != prev_free ||
        c.next_free != (c.next != kNoChunk && !chunks_[c.next].in_use()))
      fail(where(id) + " has a prev_free or next_free flag that disagrees with its neighbour");
    if (!c.in_use()) {
      if (prev_free) fail(where(id) + " is free next to a free neighbour (not coalesced)");
      if (size <= kMaxSmallChunkBytes) {
        const int cls = small_class(size);
        if (c.heap_pos >= heap_size(cls) || heap_at(cls, c.heap_pos).id != id ||
            heap_at(cls, c.heap_pos).offset != c.offset)
          fail(where(id) + " is free but not at its position in its class heap");
      } else if (!large_.contains(LargeKey{size, c.offset, id})) {
        fail(where(id) + " is free but not in the large set");
      }
      free_bytes += size;
      ++num_free;
    } else if (in_use_.find(c.offset) != id) {
      fail(where(id) + " is in use but not indexed");
    } else {
      ++num_in_use;
    }
    prev_free = !c.in_use();
    expected_offset += size;
    prev = id;
  }
  if (expected_offset != capacity_bytes_)
    fail("chunks cover " + std::to_string(expected_offset) + " bytes, capacity is " +
         std::to_string(capacity_bytes_));
  // The index: class heaps hold only free chunks of their size, in heap order, and the bitmaps
  // mark exactly the non-empty classes; the large set holds only free large chunks.
  uint64_t indexed = 0;
  for (int cls = 0; cls < kNumSmallClasses; ++cls) {
    const uint32_t n = heap_size(cls);
    auto name = [cls] { return "class " + std::to_string(cls); };  // built only on failure
    if (((class_bits_[cls / 64] >> (cls % 64)) & 1) != (n == 0 ? 0u : 1u))
      fail(name() + " disagrees with its bitmap bit");
    if (((class_has_rest_[cls / 64] >> (cls % 64)) & 1) != (class_rest_[cls].empty() ? 0u : 1u) ||
        (n == 0 && !class_rest_[cls].empty()))
      fail(name() + " has entries beyond its top that its bitmaps disagree with");
    for (uint32_t i = 0; i < n; ++i) {
      const ChunkId id = heap_at(cls, i).id;
      if (id >= chunks_.id_limit() || !reached[id])
        fail(name() + " holds a chunk not in the range");
      const Chunk& c = chunks_[id];
      if (c.in_use() || small_class(c.size_bytes()) != cls || c.heap_pos != i)
        fail(name() + " holds " + where(id) + ", in use, of another size or at a stale position");
      if (heap_at(cls, i).offset != c.offset ||
          (i > 0 && heap_at(cls, (i - 1) / 2).offset > c.offset))
        fail(name() + " breaks the heap order or holds a stale offset at " + where(id));
    }
    indexed += n;
  }
  for (int w = 0; w < kClassWords; ++w) {
    if (((class_words_ >> w) & 1) != (class_bits_[w] != 0 ? 1u : 0u))
      fail("class word bit " + std::to_string(w) + " disagrees with its class bitmap");
  }
  for (const LargeKey& k : large_) {
    if (k.id >= chunks_.id_limit() || !reached[k.id] || chunks_[k.id].in_use() ||
        k.size_bytes <= kMaxSmallChunkBytes || chunks_[k.id].size_bytes() != k.size_bytes ||
        chunks_[k.id].offset != k.offset)
      fail("the large set holds a stale entry for offset " + std::to_string(k.offset));
  }
  indexed += large_.size();
  if (indexed != num_free)
    fail("free-chunk index holds " + std::to_string(indexed) + " chunks, walk found " +
         std::to_string(num_free) + " free chunks");
  if (num_in_use != in_use_.size()) fail("in-use index size disagrees with the walk");
  in_use_.check_consistency();
  if (free_bytes != total_free_bytes_)
    fail("free-byte counter " + std::to_string(total_free_bytes_) + " != walked " +
         std::to_string(free_bytes));
}

}  // namespace vtpu
