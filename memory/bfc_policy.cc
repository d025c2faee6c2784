#include "memory/bfc_policy.h"

#include <algorithm>
#include <bit>
#include <sstream>
#include <string>

#include "common/error.h"

namespace vtpu {

BfcPolicy::BfcPolicy(uint64_t capacity_bytes, const PolicyOptions& options)
    : capacity_bytes_(capacity_in_granules("BFC", capacity_bytes, kMinAllocationBytes)),
      max_internal_fragmentation_bytes_(options.max_internal_fragmentation_bytes.value_or(
          default_max_internal_fragmentation_bytes(capacity_bytes_))) {
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

BfcPolicy::ChunkId BfcPolicy::new_chunk(uint64_t offset, uint64_t size_bytes) {
  ChunkId id;
  if (!unused_ids_.empty()) {
    id = unused_ids_.back();
    unused_ids_.pop_back();
  } else {
    id = static_cast<ChunkId>(chunks_.size());
    chunks_.emplace_back();
  }
  chunks_[id] = Chunk{offset, size_bytes, kNoChunk, kNoChunk, false};
  return id;
}

void BfcPolicy::delete_chunk(ChunkId id) { unused_ids_.push_back(id); }

void BfcPolicy::insert_free(ChunkId id) {
  const Chunk& c = chunks_[id];
  bins_[bin_for_size(c.size_bytes)].insert(BinKey{c.size_bytes, c.offset, id});
  total_free_bytes_ += c.size_bytes;
}

void BfcPolicy::remove_free(ChunkId id) {
  const Chunk& c = chunks_[id];
  bins_[bin_for_size(c.size_bytes)].erase(BinKey{c.size_bytes, c.offset, id});
  total_free_bytes_ -= c.size_bytes;
}

std::optional<PolicyAllocation> BfcPolicy::allocate(uint64_t size_bytes) {
  if (size_bytes > capacity_bytes_) return std::nullopt;  // also keeps rounding below 2^64
  const uint64_t rounded = rounded_bytes(size_bytes);
  if (rounded > total_free_bytes_) return std::nullopt;
  for (int b = bin_for_size(rounded); b < kNumBins; ++b) {
    auto it = bins_[b].lower_bound(BinKey{rounded, 0, 0});
    if (it == bins_[b].end()) continue;
    const ChunkId id = it->id;
    bins_[b].erase(it);  // remove_free(id) without a second search
    total_free_bytes_ -= chunks_[id].size_bytes;
    Chunk& c = chunks_[id];
    const uint64_t remainder = c.size_bytes - rounded;
    // remainder >= rounded is c.size_bytes >= 2 * rounded without the overflow of 2 * rounded
    // for requests above 2^63.
    if (remainder >= rounded || remainder >= max_internal_fragmentation_bytes_) {
      if (remainder > 0) {
        const ChunkId rest = new_chunk(c.offset + rounded, remainder);  // may reallocate chunks_
        Chunk& cur = chunks_[id];
        Chunk& r = chunks_[rest];
        r.prev = id;
        r.next = cur.next;
        if (cur.next != kNoChunk) chunks_[cur.next].prev = rest;
        cur.next = rest;
        cur.size_bytes = rounded;
        insert_free(rest);
      }
    }
    Chunk& cur = chunks_[id];
    cur.in_use = true;
    in_use_.insert(cur.offset, id);
    return PolicyAllocation{cur.offset, cur.size_bytes};
  }
  return std::nullopt;
}

uint64_t BfcPolicy::free(uint64_t offset) {
  // OffsetIndex reserves UINT64_MAX as its empty marker, so an offset outside the range must not
  // reach it (erase(UINT64_MAX) would "find" an empty slot and free an unrelated chunk).
  const std::optional<ChunkId> found =
      offset < capacity_bytes_ ? in_use_.erase(offset) : std::nullopt;
  if (!found) {
    throw InvalidArgumentError("BFC free of offset " + std::to_string(offset) +
                               ", which is not the start of a chunk in use (double free or a "
                               "stray offset)");
  }
  ChunkId id = *found;
  const uint64_t freed = chunks_[id].size_bytes;
  chunks_[id].in_use = false;
  // Merge with the next neighbour: it disappears into this chunk.
  const ChunkId next = chunks_[id].next;
  if (next != kNoChunk && !chunks_[next].in_use) {
    remove_free(next);
    chunks_[id].size_bytes += chunks_[next].size_bytes;
    chunks_[id].next = chunks_[next].next;
    if (chunks_[next].next != kNoChunk) chunks_[chunks_[next].next].prev = id;
    delete_chunk(next);
  }
  // Merge into the previous neighbour: this chunk disappears into it.
  const ChunkId prev = chunks_[id].prev;
  if (prev != kNoChunk && !chunks_[prev].in_use) {
    remove_free(prev);
    chunks_[prev].size_bytes += chunks_[id].size_bytes;
    chunks_[prev].next = chunks_[id].next;
    if (chunks_[id].next != kNoChunk) chunks_[chunks_[id].next].prev = prev;
    delete_chunk(id);
    id = prev;
  }
  insert_free(id);
  return freed;
}

uint64_t BfcPolicy::largest_free_block_bytes() const {
  for (int b = kNumBins - 1; b >= 0; --b) {
    if (!bins_[b].empty()) return bins_[b].rbegin()->size_bytes;
  }
  return 0;
}

void BfcPolicy::walk(const std::function<void(const ChunkInfo&)>& fn) const {
  for (ChunkId id = head_; id != kNoChunk; id = chunks_[id].next) {
    const Chunk& c = chunks_[id];
    fn(ChunkInfo{c.offset, c.size_bytes, c.in_use});
  }
}

std::vector<BinStats> BfcPolicy::bin_stats() const {
  std::vector<BinStats> out(kNumBins);
  for (int b = 0; b < kNumBins; ++b) {
    out[b].min_chunk_bytes = kMinAllocationBytes << b;
    out[b].max_chunk_bytes =
        b + 1 < kNumBins ? (kMinAllocationBytes << (b + 1)) - kMinAllocationBytes : UINT64_MAX;
    out[b].num_free_chunks = bins_[b].size();
    for (const BinKey& k : bins_[b]) out[b].free_bytes += k.size_bytes;
    out[b].largest_free_chunk_bytes = bins_[b].empty() ? 0 : bins_[b].rbegin()->size_bytes;
  }
  return out;
}

void BfcPolicy::rebuild(std::span<const ChunkInfo> in_use) {
  check_rebuild_input(*this, "BFC", in_use, "a positive multiple of 256",
                      [](uint64_t size) { return size > 0 && size % kMinAllocationBytes == 0; });
  chunks_.clear();
  unused_ids_.clear();
  for (auto& bin : bins_) bin.clear();
  in_use_.clear();
  total_free_bytes_ = 0;
  head_ = kNoChunk;
  ChunkId prev = kNoChunk;
  auto append = [&](uint64_t offset, uint64_t size, bool used) {
    const ChunkId id = new_chunk(offset, size);
    chunks_[id].prev = prev;
    if (prev == kNoChunk) {
      head_ = id;
    } else {
      chunks_[prev].next = id;
    }
    prev = id;
    if (used) {
      chunks_[id].in_use = true;
      in_use_.insert(offset, id);
    } else {
      insert_free(id);
    }
  };
  for_each_tile(capacity_bytes_, in_use, append);
}

void BfcPolicy::check_consistency() const {
  auto fail = [](const std::string& what) { throw InternalError("BFC inconsistency: " + what); };
  uint64_t expected_offset = 0, free_bytes = 0, num_free = 0, num_in_use = 0;
  ChunkId prev = kNoChunk;
  bool prev_free = false;
  for (ChunkId id = head_; id != kNoChunk; id = chunks_[id].next) {
    const Chunk& c = chunks_[id];
    auto where = [&c] {  // built only on failure: this loop runs after every test operation
      std::ostringstream os;
      os << "chunk at offset " << c.offset << " size " << c.size_bytes;
      return os;
    };
    if (c.offset != expected_offset)
      fail(where().str() + " does not start where the previous one ends (" +
           std::to_string(expected_offset) + ")");
    if (c.size_bytes == 0 || c.size_bytes % kMinAllocationBytes != 0)
      fail(where().str() + " has a size that is not a positive multiple of 256");
    if (c.prev != prev) fail(where().str() + " has a wrong prev link");
    if (!c.in_use) {
      if (prev_free) fail(where().str() + " is free next to a free neighbour (not coalesced)");
      if (!bins_[bin_for_size(c.size_bytes)].contains(BinKey{c.size_bytes, c.offset, id}))
        fail(where().str() + " is free but not in its bin");
      free_bytes += c.size_bytes;
      ++num_free;
    } else {
      const std::optional<ChunkId> indexed = in_use_.find(c.offset);
      if (indexed != id) fail(where().str() + " is in use but not indexed");
      ++num_in_use;
    }
    prev_free = !c.in_use;
    expected_offset += c.size_bytes;
    prev = id;
  }
  if (expected_offset != capacity_bytes_)
    fail("chunks cover " + std::to_string(expected_offset) + " bytes, capacity is " +
         std::to_string(capacity_bytes_));
  uint64_t binned = 0;
  for (int b = 0; b < kNumBins; ++b) {
    for (const BinKey& k : bins_[b]) {
      if (bin_for_size(k.size_bytes) != b)
        fail("a chunk of " + std::to_string(k.size_bytes) + " bytes sits in bin " +
             std::to_string(b));
      if (chunks_[k.id].in_use) fail("an in-use chunk sits in a bin");
    }
    binned += bins_[b].size();
  }
  if (binned != num_free)
    fail("bins hold " + std::to_string(binned) + " chunks, walk found " + std::to_string(num_free) +
         " free chunks");
  if (num_in_use != in_use_.size()) fail("in-use index size disagrees with the walk");
  if (free_bytes != total_free_bytes_)
    fail("free-byte counter " + std::to_string(total_free_bytes_) + " != walked " +
         std::to_string(free_bytes));
}

}  // namespace vtpu
