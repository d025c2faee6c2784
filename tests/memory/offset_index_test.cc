// Tests for memory/offset_index.h: hand-checked basics, then random inserts and erases (with
// growth, and with keys overflowing full buckets) against std::unordered_map.
#include "vtpu/memory/offset_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

namespace vtpu {
namespace {

TEST(OffsetIndexTest, InsertFindErase) {
  OffsetIndex index;
  EXPECT_EQ(index.size(), 0u);
  EXPECT_TRUE(index.insert(256, 7));
  EXPECT_FALSE(index.insert(256, 8));  // present: unchanged
  EXPECT_EQ(index.find(256), 7u);
  EXPECT_EQ(index.find(512), std::nullopt);
  EXPECT_TRUE(index.insert(0, 3));
  EXPECT_EQ(index.size(), 2u);
  EXPECT_EQ(index.erase(256), 7u);
  EXPECT_EQ(index.erase(256), std::nullopt);  // a second erase finds nothing
  EXPECT_EQ(index.find(0), 3u);
  EXPECT_EQ(index.size(), 1u);
  index.clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.find(0), std::nullopt);
}

// Random operations against std::unordered_map. Keys are multiples of 256 (as chunk offsets are)
// drawn from a small range, so that buckets fill and overflow into their neighbours (also around
// the end of the table) and erase has to take keys off the overflow counts, and the table grows
// from 4 buckets to thousands.
void random_ops(uint64_t key_range, int ops, uint32_t seed) {
  std::mt19937_64 rng(seed);
  OffsetIndex index;
  std::unordered_map<uint64_t, uint32_t> model;
  for (int i = 0; i < ops; ++i) {
    const uint64_t key = (rng() % key_range) * 256;
    const auto id = static_cast<uint32_t>(rng());
    if (rng() % 3 != 0) {
      const bool added = model.emplace(key, id).second;
      ASSERT_EQ(index.insert(key, id), added) << "op " << i;
    } else {
      auto it = model.find(key);
      const std::optional<uint32_t> erased = index.erase(key);
      if (it == model.end()) {
        ASSERT_EQ(erased, std::nullopt) << "op " << i;
      } else {
        ASSERT_EQ(erased, it->second) << "op " << i;
        model.erase(it);
      }
    }
    ASSERT_EQ(index.size(), model.size());
    if (i % 97 == 0) {  // every key of the range answers as the model does
      ASSERT_NO_THROW(index.check_consistency()) << "op " << i;
      for (uint64_t k = 0; k < key_range; ++k) {
        auto it = model.find(k * 256);
        const std::optional<uint32_t> found = index.find(k * 256);
        ASSERT_EQ(found.has_value(), it != model.end()) << "key " << k * 256;
        if (found) {
          ASSERT_EQ(*found, it->second);
        }
      }
    }
  }
}

TEST(OffsetIndexTest, RandomAgainstUnorderedMapDense) { random_ops(64, 20000, 1); }
TEST(OffsetIndexTest, RandomAgainstUnorderedMapGrowing) { random_ops(5000, 40000, 2); }

TEST(OffsetIndexTest, LargeOffsets) {
  OffsetIndex index;
  const uint64_t big = ~uint64_t{0} - 255;  // the largest multiple of 256
  EXPECT_TRUE(index.insert(big, 1));
  EXPECT_TRUE(index.insert(uint64_t{16} << 30, 2));
  EXPECT_EQ(index.find(big), 1u);
  EXPECT_EQ(index.erase(uint64_t{16} << 30), 2u);
  EXPECT_EQ(index.find(big), 1u);
}

// UINT64_MAX marks an empty slot, so it is never a key: looking it up finds nothing (it used to
// "find" an empty slot and return its stale id) and inserting it is an error.
TEST(OffsetIndexTest, EmptyMarkerIsNeverAKey) {
  OffsetIndex index;
  const uint64_t marker = ~uint64_t{0};
  EXPECT_TRUE(index.insert(0, 7));
  EXPECT_FALSE(index.find(marker).has_value());
  EXPECT_FALSE(index.erase(marker).has_value());
  EXPECT_EQ(index.size(), 1u);
  EXPECT_THROW(index.insert(marker, 1), InvalidArgumentError);
  EXPECT_EQ(index.find(0), 7u);
}

}  // namespace
}  // namespace vtpu
