// A flat hash map from the offset of an in-use chunk to a 32-bit chunk id, for allocator policies
// that free by offset.
//
// Open addressing with linear probing in one power-of-two array of 16-byte slots, kept at most
// half full, and backward-shift deletion (Knuth, TAOCP vol. 3, 6.4, Algorithm R), so there are no
// tombstones and a probe sequence never grows with churn. The hash is Fibonacci hashing (Knuth's
// multiplicative method with 2^64 / golden ratio), whose top bits mix every bit of the offset, so
// offsets that are all multiples of 256 still spread evenly.
//
// Why not std::unordered_map: it allocates one node per entry and chains them from a bucket
// array, so a lookup costs a bucket load, a node load and a modulo by a prime, plus a malloc on
// every insert and a free on every erase. At 100k live chunks those loads miss the cache; here a
// lookup is usually one load.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace vtpu {

/// Offset -> id map. Thread-compatible. Offsets must not be UINT64_MAX (the empty marker).
class OffsetIndex {
 public:
  OffsetIndex() { reset(kMinSlots); }

  size_t size() const { return size_; }

  /// Adds `offset` -> `id`. Returns false (and changes nothing) if `offset` is already present.
  bool insert(uint64_t offset, uint32_t id) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    for (size_t i = home(offset);; i = (i + 1) & mask_) {
      if (slots_[i].offset == offset) return false;
      if (slots_[i].offset == kEmpty) {
        slots_[i] = Slot{offset, id};
        ++size_;
        return true;
      }
    }
  }

  /// The id stored for `offset`, if any.
  std::optional<uint32_t> find(uint64_t offset) const {
    for (size_t i = home(offset);; i = (i + 1) & mask_) {
      if (slots_[i].offset == offset) return slots_[i].id;
      if (slots_[i].offset == kEmpty) return std::nullopt;
    }
  }

  /// Removes `offset` and returns its id, or std::nullopt when it is absent.
  std::optional<uint32_t> erase(uint64_t offset) {
    size_t i = home(offset);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].offset == offset) break;
      if (slots_[i].offset == kEmpty) return std::nullopt;
    }
    const uint32_t id = slots_[i].id;
    // Backward shift: move later entries of the cluster into the hole when the hole lies on the
    // cyclic path from their home slot to where they sit.
    for (size_t j = (i + 1) & mask_; slots_[j].offset != kEmpty; j = (j + 1) & mask_) {
      const size_t h = home(slots_[j].offset);
      const bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
      if (movable) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].offset = kEmpty;
    --size_;
    return id;
  }

  /// Removes every entry and gives back the memory beyond the minimum table.
  void clear() { reset(kMinSlots); }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static constexpr size_t kMinSlots = 16;
  static constexpr uint64_t kFibonacci = 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio

  struct Slot {
    uint64_t offset = kEmpty;
    uint32_t id = 0;
  };

  size_t home(uint64_t offset) const {
    return static_cast<size_t>((offset * kFibonacci) >> shift_);
  }

  void reset(size_t num_slots) {
    slots_.assign(num_slots, Slot{});
    mask_ = num_slots - 1;
    shift_ = 64 - std::countr_zero(num_slots);
    size_ = 0;
  }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reset(old.size() * 2);
    for (const Slot& s : old)
      if (s.offset != kEmpty) insert(s.offset, s.id);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

}  // namespace vtpu
