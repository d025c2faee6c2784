// Tests for memory/tlsf_policy.h: the two-level mapping against list bounds computed from the
// definition, good fit (not best fit), the exact-list fallback and LIFO lists on hand-worked
// layouts, splitting, coalescing, errors, rebuild, then randomized operations checked for TLSF's
// rule against the independent FreeSpaceModel.
#include "vtpu/memory/tlsf_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/memory/free_space_model.h"
#include "tests/memory/policy_test_util.h"
#include "vtpu/common/error.h"
#include "vtpu/common/units.h"

namespace vtpu {
namespace {

using testing::expect_bad_rebuild;
using testing::expect_same_chunks;
using testing::first_list_at_least;
using testing::FreeChunks;
using testing::FreeSpaceModel;
using testing::list_lower_bounds;
using testing::list_of_block;
using testing::must_allocate;
using testing::walk_all;
using ListIndex = TlsfPolicy::ListIndex;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kTwoTo63 = uint64_t{1} << 63;

size_t position(ListIndex i) { return static_cast<size_t>(i.fl) * 32 + i.sl; }

TEST(TlsfPolicyTest, MappingAtHandPickedBoundaries) {
  EXPECT_EQ(TlsfPolicy::mapping_insert(256), (ListIndex{0, 1}));
  EXPECT_EQ(TlsfPolicy::mapping_insert(7936), (ListIndex{0, 31}));
  EXPECT_EQ(TlsfPolicy::mapping_insert(8192), (ListIndex{1, 0}));
  EXPECT_EQ(TlsfPolicy::mapping_insert(8448), (ListIndex{1, 1}));
  EXPECT_EQ(TlsfPolicy::mapping_insert(16384), (ListIndex{2, 0}));
  EXPECT_EQ(TlsfPolicy::mapping_insert(16640), (ListIndex{2, 0}));  // slices of 512 from here
  EXPECT_EQ(TlsfPolicy::mapping_insert(16896), (ListIndex{2, 1}));
  EXPECT_EQ(TlsfPolicy::mapping_insert(kTwoTo63), (ListIndex{51, 0}));
  EXPECT_EQ(TlsfPolicy::mapping_insert(kMax - 255), (ListIndex{51, 31}));
  EXPECT_EQ(TlsfPolicy::mapping_search(256), (ListIndex{0, 1}));
  EXPECT_EQ(TlsfPolicy::mapping_search(8448), (ListIndex{1, 1}));
  EXPECT_EQ(TlsfPolicy::mapping_search(16384), (ListIndex{2, 0}));  // a list's own lower bound
  EXPECT_EQ(TlsfPolicy::mapping_search(16640), (ListIndex{2, 1}));  // rounded up past (2, 0)
  EXPECT_EQ(TlsfPolicy::mapping_search(kTwoTo63 + 256), (ListIndex{51, 1}));
  const uint64_t last_bound = kMax - (kTwoTo63 / 32) + 1;  // 2^64 - 2^58
  EXPECT_EQ(TlsfPolicy::mapping_search(last_bound), (ListIndex{51, 31}));
  EXPECT_EQ(TlsfPolicy::mapping_search(last_bound + 256), std::nullopt);  // boundary 2^64
  EXPECT_EQ(TlsfPolicy::mapping_search(kMax - 255), std::nullopt);
}

TEST(TlsfPolicyTest, MappingAgreesWithListBoundsEverywhere) {
  std::vector<uint64_t> sizes;
  for (uint64_t s = 256; s <= 4 * kMiB; s += 256) sizes.push_back(s);
  for (uint64_t bound : list_lower_bounds()) {
    for (uint64_t s : {bound - 256, bound, bound + 256}) {
      if (s >= 256 && s <= kMax - 255) sizes.push_back(s);
    }
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const int bits = std::uniform_int_distribution<int>(9, 64)(rng);
    const uint64_t hi = bits == 64 ? kMax : (uint64_t{1} << bits);
    sizes.push_back(std::uniform_int_distribution<uint64_t>(1, hi / 256)(rng) * 256);
  }
  for (uint64_t s : sizes) {
    if (s > kMax - 255) continue;
    SCOPED_TRACE("size " + std::to_string(s));
    const ListIndex insert = TlsfPolicy::mapping_insert(s);
    ASSERT_EQ(position(insert), list_of_block(s));
    const std::optional<ListIndex> search = TlsfPolicy::mapping_search(s);
    const size_t expected = first_list_at_least(s);
    if (expected == list_lower_bounds().size()) {
      ASSERT_FALSE(search.has_value());
    } else {
      ASSERT_TRUE(search.has_value());
      ASSERT_EQ(position(*search), expected);
    }
    // The size class bounds agree with the lists.
    ASSERT_GE(s, TlsfPolicy::class_min_bytes(insert.fl));
    ASSERT_LE(s, TlsfPolicy::class_max_bytes(insert.fl));
  }
}

TEST(TlsfPolicyTest, ClassBounds) {
  EXPECT_EQ(TlsfPolicy::class_min_bytes(0), 256u);
  EXPECT_EQ(TlsfPolicy::class_max_bytes(0), 8192u - 256);
  EXPECT_EQ(TlsfPolicy::class_min_bytes(1), 8192u);
  EXPECT_EQ(TlsfPolicy::class_max_bytes(1), 16384u - 256);
  EXPECT_EQ(TlsfPolicy::class_min_bytes(51), kTwoTo63);
  EXPECT_EQ(TlsfPolicy::class_max_bytes(51), kMax - 255);
  EXPECT_EQ(TlsfPolicy::kNumFirstLevel, 52);
  EXPECT_EQ(TlsfPolicy::kNumSecondLevel, 32);
}

TEST(TlsfPolicyTest, ConstructionAndCapacityErrors) {
  TlsfPolicy p(1000);
  EXPECT_EQ(p.name(), "tlsf");
  EXPECT_EQ(p.capacity_bytes(), 768u);
  EXPECT_EQ(p.placement_alignment(4096), 256u);
  expect_same_chunks(walk_all(p), {{0, 768, false}});
  p.check_consistency();
  testing::expect_invalid_argument([] { TlsfPolicy q(0); }, "capacity 0 bytes");
  testing::expect_invalid_argument([] { TlsfPolicy q(255); }, "capacity 255 bytes");
  EXPECT_EQ(TlsfPolicy(256).capacity_bytes(), 256u);
}

TEST(TlsfPolicyTest, RoundedBytes) {
  TlsfPolicy p(kMiB);
  EXPECT_EQ(p.rounded_bytes(1), 256u);
  EXPECT_EQ(p.rounded_bytes(257), 512u);
  EXPECT_EQ(p.rounded_bytes(kMiB + 1), kMiB + 256);
  EXPECT_EQ(p.rounded_bytes(kMax), kMax - 255);
  EXPECT_THROW(p.rounded_bytes(0), InvalidArgumentError);
  EXPECT_THROW(p.allocate(0), InvalidArgumentError);
}

TEST(TlsfPolicyTest, SplitsAndFreeCoalescesWithNeither_Next_Previous_AndBoth) {
  TlsfPolicy p(4096);
  PolicyAllocation a = must_allocate(p, 1000);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.chunk_bytes, 1024u);
  expect_same_chunks(walk_all(p), {{0, 1024, true}, {1024, 3072, false}});
  EXPECT_EQ(p.free(0), 1024u);
  expect_same_chunks(walk_all(p), {{0, 4096, false}});
  for (uint64_t i = 0; i < 16; ++i) EXPECT_EQ(must_allocate(p, 256).offset, 256 * i);
  EXPECT_FALSE(p.allocate(1).has_value());
  EXPECT_EQ(p.free(256), 256u);  // neither neighbour free
  EXPECT_EQ(p.free(768), 256u);
  EXPECT_EQ(p.free(512), 256u);  // both: [256, 1024)
  p.check_consistency();
  EXPECT_EQ(p.largest_free_block_bytes(), 768u);
  EXPECT_EQ(p.free(0), 256u);     // next only: [0, 1024)
  EXPECT_EQ(p.free(1024), 256u);  // previous only: [0, 1280)
  EXPECT_EQ(p.free(3840), 256u);  // the last block
  std::vector<ChunkInfo> expected = {{0, 1280, false}};
  for (uint64_t off = 1280; off < 3840; off += 256) expected.push_back({off, 256, true});
  expected.push_back({3840, 256, false});
  expect_same_chunks(walk_all(p), expected);
  EXPECT_EQ(p.largest_free_block_bytes(), 1280u);
  for (uint64_t off = 1280; off < 3840; off += 256) p.free(off);
  expect_same_chunks(walk_all(p), {{0, 4096, false}});
  p.check_consistency();
}

// 64 KiB with holes of 16640 B at 0 (list (2, 0): [16384, 16896)) and 17152 B at 16896 (list
// (2, 1): [16896, 17408)), separated and followed by chunks in use.
TlsfPolicy good_fit_layout() {
  TlsfPolicy p(64 * kKiB);
  const uint64_t sizes[] = {16640, 256, 17152, 256, 64 * kKiB - 34304};
  uint64_t expected_offset = 0;
  for (uint64_t s : sizes) {  // one free block at a time: each request takes the tail's start
    EXPECT_EQ(must_allocate(p, s).offset, expected_offset);
    expected_offset += s;
  }
  p.free(0);
  p.free(16896);
  p.check_consistency();
  return p;
}

TEST(TlsfPolicyTest, BinStatsPerFirstLevelClass) {
  TlsfPolicy fresh(64 * kKiB);
  std::vector<BinStats> stats = fresh.bin_stats();
  ASSERT_EQ(stats.size(), 5u);  // classes 0..4; 64 KiB is the smallest size of class 4
  EXPECT_EQ(stats[4].min_chunk_bytes, 64 * kKiB);
  EXPECT_EQ(stats[4].max_chunk_bytes, 128 * kKiB - 256);
  EXPECT_EQ(stats[4].num_free_chunks, 1u);
  EXPECT_EQ(stats[4].largest_free_chunk_bytes, 64 * kKiB);
  TlsfPolicy p = good_fit_layout();
  stats = p.bin_stats();
  ASSERT_EQ(stats.size(), 5u);
  for (int fl = 0; fl < 5; ++fl) {
    SCOPED_TRACE("class " + std::to_string(fl));
    EXPECT_EQ(stats[fl].min_chunk_bytes, fl == 0 ? 256u : uint64_t{4096} << fl);
    EXPECT_EQ(stats[fl].max_chunk_bytes, (uint64_t{8192} << fl) - 256);
    EXPECT_EQ(stats[fl].num_free_chunks, fl == 2 ? 2u : 0u);
    EXPECT_EQ(stats[fl].free_bytes, fl == 2 ? 16640u + 17152 : 0u);
    EXPECT_EQ(stats[fl].largest_free_chunk_bytes, fl == 2 ? 17152u : 0u);
  }
}

TEST(TlsfPolicyTest, GoodFitNotBestFit) {
  TlsfPolicy p = good_fit_layout();
  EXPECT_EQ(p.largest_free_block_bytes(), 17152u);
  // 16640 B searches from list (2, 1), skipping the exact 16640-byte hole in (2, 0) that best fit
  // would take; the 17152-byte hole is split and 512 B stay free.
  PolicyAllocation a = must_allocate(p, 16500);
  EXPECT_EQ(a.offset, 16896u);
  EXPECT_EQ(a.chunk_bytes, 16640u);
  expect_same_chunks(walk_all(p), {{0, 16640, false},
                                   {16640, 256, true},
                                   {16896, 16640, true},
                                   {33536, 512, false},
                                   {34048, 256, true},
                                   {34304, 64 * kKiB - 34304, true}});
  // 16384 B is the lower bound of (2, 0): every block there fits, so that list is searched.
  PolicyAllocation b = must_allocate(p, 16384);
  EXPECT_EQ(b.offset, 0u);
  EXPECT_EQ(b.chunk_bytes, 16384u);
  expect_same_chunks(walk_all(p), {{0, 16384, true},
                                   {16384, 256, false},
                                   {16640, 256, true},
                                   {16896, 16640, true},
                                   {33536, 512, false},
                                   {34048, 256, true},
                                   {34304, 64 * kKiB - 34304, true}});
}

// Regression test: allocate() returned nullopt while the request's own list held a block that fit
// (largest_free_block_bytes() >= the request), because mapping_search rounds past that list.
TEST(TlsfPolicyTest, ExactListFallbackServesTheRequestFromItsOwnList) {
  // Holes A, B, C, D in list (5, 0), which holds [131072, 135168); everything else in use:
  //   [0, 132096) A  [132352, 266496) B  [266752, 399872) C  [400128, 534272) D  tail 262144.
  // Each request takes the start of the one free block; the tail is a list's lower bound.
  const uint64_t a = 132096, b = 134144, c = 133120, d = 134144, tail = 262144;
  TlsfPolicy p(a + b + c + d + 4 * 256 + tail);
  std::vector<uint64_t> holes;
  for (uint64_t s : {a, b, c, d}) {
    holes.push_back(must_allocate(p, s).offset);
    must_allocate(p, 256);
  }
  EXPECT_EQ(must_allocate(p, tail).chunk_bytes, tail);
  EXPECT_EQ(holes, (std::vector<uint64_t>{0, 132352, 266752, 400128}));
  for (uint64_t offset : holes) p.free(offset);  // D goes in last: it heads the list
  EXPECT_EQ(p.largest_free_block_bytes(), 134144u);
  // 133120 B is searched from (5, 1) up, where nothing is free. The fallback scans (5, 0) and
  // takes the smallest block that fits: C, exactly, not D at the head nor A, which is too small.
  PolicyAllocation got = must_allocate(p, 133000);
  EXPECT_EQ(got.offset, holes[2]);
  EXPECT_EQ(got.chunk_bytes, 133120u);
  // B and D are both 134144 B: the lower offset wins (B), whatever the list order; 1 KiB is split.
  got = must_allocate(p, 133120);
  EXPECT_EQ(got.offset, holes[1]);
  EXPECT_EQ(got.chunk_bytes, 133120u);
  EXPECT_EQ(must_allocate(p, 133121).offset, holes[3]);  // rounds to 133376: only D fits
  // Only A (132096 B) and the remainders of B and D (1024 B, 768 B) are left: no block fits a
  // larger request, which still fails.
  EXPECT_EQ(p.largest_free_block_bytes(), a);
  EXPECT_FALSE(p.allocate(a + 1).has_value());
  EXPECT_EQ(must_allocate(p, a).offset, holes[0]);
  p.check_consistency();
}

TEST(TlsfPolicyTest, ListsAreLastInFirstOut) {
  TlsfPolicy p(8192);
  for (uint64_t s : {512, 256, 512, 256, 8192 - 1536}) must_allocate(p, s);
  p.free(0);
  p.free(768);  // both 512-byte holes sit in list (0, 2); 768 went in last
  EXPECT_EQ(must_allocate(p, 512).offset, 768u);
  EXPECT_EQ(must_allocate(p, 512).offset, 0u);
}

TEST(TlsfPolicyTest, SizesNearTwoToThe64) {
  TlsfPolicy p(kMax);  // 2^64 - 256 bytes: one block in the last list, (51, 31)
  const uint64_t capacity = kMax - 255;
  EXPECT_EQ(p.capacity_bytes(), capacity);
  EXPECT_EQ(p.bin_stats().size(), 52u);
  EXPECT_FALSE(p.allocate(kMax).has_value());
  EXPECT_FALSE(p.allocate(capacity + 1).has_value());
  // The whole range: mapping_search finds no list (the boundary above is 2^64), and the
  // exact-list fallback takes the block from the request's own list, (51, 31).
  PolicyAllocation whole = must_allocate(p, capacity);
  EXPECT_EQ(whole.offset, 0u);
  EXPECT_EQ(whole.chunk_bytes, capacity);
  EXPECT_EQ(p.free(0), capacity);
  EXPECT_EQ(must_allocate(p, kTwoTo63).offset, 0u);         // (51, 0) is a lower bound: searched
  PolicyAllocation b = must_allocate(p, kTwoTo63 / 2 + 1);  // searched from (50, 1)
  EXPECT_EQ(b.offset, kTwoTo63);
  EXPECT_EQ(b.chunk_bytes, kTwoTo63 / 2 + 256);
  EXPECT_EQ(p.total_free_bytes(), kTwoTo63 / 2 - 512);
  EXPECT_EQ(p.free(0), kTwoTo63);
  EXPECT_EQ(p.free(kTwoTo63), kTwoTo63 / 2 + 256);
  expect_same_chunks(walk_all(p), {{0, capacity, false}});
  p.check_consistency();
}

TEST(TlsfPolicyTest, DoubleFreeAndStrayOffsetsThrow) {
  TlsfPolicy p(8192);
  testing::expect_double_and_stray_frees_rejected(p);
}

TEST(TlsfPolicyTest, RebuildInstallsALayout) {
  TlsfPolicy p(64 * kKiB);
  must_allocate(p, 3000);
  p.rebuild(std::vector<ChunkInfo>{{256, 512, true}, {1024, 256, true}, {32768, 32768, true}});
  p.check_consistency();
  expect_same_chunks(walk_all(p), {{0, 256, false},
                                   {256, 512, true},
                                   {768, 256, false},
                                   {1024, 256, true},
                                   {1280, 31488, false},
                                   {32768, 32768, true}});
  EXPECT_EQ(p.total_free_bytes(), 256u + 256 + 31488);
  EXPECT_EQ(p.largest_free_block_bytes(), 31488u);
  EXPECT_EQ(p.free(256), 512u);
  expect_same_chunks(
      walk_all(p),
      {{0, 1024, false}, {1024, 256, true}, {1280, 31488, false}, {32768, 32768, true}});
  EXPECT_EQ(must_allocate(p, 1024).offset, 0u);  // list (0, 4) holds exactly [0, 1024)
  p.rebuild({});
  expect_same_chunks(walk_all(p), {{0, 64 * kKiB, false}});
  p.check_consistency();
}

TEST(TlsfPolicyTest, RebuildRejectsBadInputAndChangesNothing) {
  TlsfPolicy p(8192);
  must_allocate(p, 1000);
  must_allocate(p, 256);
  p.free(0);
  expect_bad_rebuild(p, {{0, 0, true}}, "chunk 0 at offset 0 of 0 bytes has a size the policy");
  expect_bad_rebuild(p, {{256, 256, true}, {512, 300, true}}, "chunk 1 at offset 512 of 300");
  expect_bad_rebuild(p, {{100, 256, true}}, "is not placed at a multiple of 256 bytes");
  testing::expect_order_and_range_enforced_by_rebuild(p);
}

}  // namespace
}  // namespace vtpu
