// Chunk records addressed by 32-bit ids, for allocator policies that link their chunks by id
// (BFC, TLSF).
//
// One std::vector of records; an id is an index into it. A removed id goes on a stack and is
// handed out again first (LIFO), so that the record a split creates right after a merge freed one
// is usually still in cache. 32-bit ids keep the links in a record at 4 bytes each, so that BFC's
// and TLSF's records fit 32 bytes, two to a cache line: at most 2^32 - 1 records live at once
// (the id 2^32 - 1 is the policies' "no chunk" link). That is 1 TiB of 256-byte chunks; add()
// throws ResourceExhaustedError past it rather than wrap.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vtpu/common/error.h"

namespace vtpu {

/// Where a chunk lies and whether it is in use: the first 16 bytes of BFC's and TLSF's records.
/// The in-use flag is the low bit of the size, which is a multiple of the 256-byte granule, so
/// offsets and sizes keep the full 64-bit range. Plain data, thread-compatible.
struct ChunkExtent {
  static constexpr uint64_t kInUseBit = 1;

  uint64_t offset = 0;         // bytes from the start of the range
  uint64_t size_and_flag = 0;  // size in bytes | kInUseBit when in use

  uint64_t size_bytes() const { return size_and_flag & ~kInUseBit; }
  bool in_use() const { return (size_and_flag & kInUseBit) != 0; }
  void set_size_bytes(uint64_t size) { size_and_flag = size | (size_and_flag & kInUseBit); }
  void set_in_use(bool in_use) { size_and_flag = size_bytes() | (in_use ? kInUseBit : 0); }
};

/// Records of type T by id. Thread-compatible.
template <typename T>
class ChunkPool {
 public:
  using Id = uint32_t;
  static constexpr Id kNoId = ~Id{0};

  /// `owner` names the policy in the error add() throws ("BFC").
  explicit ChunkPool(const char* owner) : owner_(owner) {}

  /// Stores `record` under a recycled or new id and returns the id. May reallocate: references
  /// into the pool are invalidated. Throws ResourceExhaustedError when 2^32 - 1 ids are in use.
  Id add(const T& record) {
    if (!unused_ids_.empty()) {
      const Id id = unused_ids_.back();
      unused_ids_.pop_back();
      records_[id] = record;
      return id;
    }
    if (records_.size() >= kNoId) {
      throw ResourceExhaustedError(std::string(owner_) + " keeps more than 2^32 - 1 chunks (" +
                                   "the limit of its 32-bit chunk ids)");
    }
    records_.push_back(record);
    return static_cast<Id>(records_.size() - 1);
  }
  /// Makes `id` free for reuse; its record stays readable until add() hands the id out again.
  void remove(Id id) { unused_ids_.push_back(id); }

  T& operator[](Id id) { return records_[id]; }
  const T& operator[](Id id) const { return records_[id]; }
  /// One more than the largest id ever handed out since clear() (live or removed).
  size_t id_limit() const { return records_.size(); }
  /// Ids in use.
  size_t size() const { return records_.size() - unused_ids_.size(); }
  /// Forgets every record.
  void clear() {
    records_.clear();
    unused_ids_.clear();
  }

 private:
  const char* owner_;
  std::vector<T> records_;      // indexed by Id
  std::vector<Id> unused_ids_;  // removed ids, reused last-in first-out
};

}  // namespace vtpu
