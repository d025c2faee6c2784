// Tests for memory/first_fit_policy.h: lowest-address choice, splitting and coalescing on
// hand-worked layouts, errors, rebuild, then randomized operations whose every result the
// independent FreeSpaceModel predicts exactly.
#include "vtpu/memory/first_fit_policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tests/memory/free_space_model.h"
#include "tests/memory/policy_test_util.h"
#include "vtpu/common/error.h"
#include "vtpu/common/units.h"

namespace vtpu {
namespace {

using testing::expect_bad_rebuild;
using testing::expect_same_chunks;
using testing::FreeChunks;
using testing::FreeSpaceModel;
using testing::must_allocate;
using testing::walk_all;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST(FirstFitPolicyTest, ConstructionRoundsCapacityDownTo256) {
  FirstFitPolicy p(1000);
  EXPECT_EQ(p.name(), "first_fit");
  EXPECT_EQ(p.capacity_bytes(), 768u);
  EXPECT_EQ(p.total_free_bytes(), 768u);
  EXPECT_EQ(p.largest_free_block_bytes(), 768u);
  EXPECT_TRUE(p.bin_stats().empty());  // no size classes
  EXPECT_EQ(p.placement_alignment(4096), 256u);
  expect_same_chunks(walk_all(p), {{0, 768, false}});
  p.check_consistency();
}

TEST(FirstFitPolicyTest, CapacityBelow256Throws) {
  testing::expect_invalid_argument([] { FirstFitPolicy p(0); }, "capacity 0 bytes");
  testing::expect_invalid_argument([] { FirstFitPolicy p(255); }, "capacity 255 bytes");
  EXPECT_EQ(FirstFitPolicy(256).capacity_bytes(), 256u);
}

TEST(FirstFitPolicyTest, RoundedBytes) {
  FirstFitPolicy p(kMiB);
  EXPECT_EQ(p.rounded_bytes(1), 256u);
  EXPECT_EQ(p.rounded_bytes(256), 256u);
  EXPECT_EQ(p.rounded_bytes(257), 512u);
  EXPECT_EQ(p.rounded_bytes(kMiB + 1), kMiB + 256);  // larger than the range: still rounded
  EXPECT_EQ(p.rounded_bytes(kMax), kMax - 255);      // saturates instead of wrapping to 0
  EXPECT_EQ(p.rounded_bytes(kMax - 300), kMax - 255);
  EXPECT_THROW(p.rounded_bytes(0), InvalidArgumentError);
}

TEST(FirstFitPolicyTest, SplitsTheFirstChunkAndFreesMerge) {
  FirstFitPolicy p(4096);
  PolicyAllocation a = must_allocate(p, 1000);  // 1024 at 0; [1024, 4096) stays free
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.chunk_bytes, 1024u);
  expect_same_chunks(walk_all(p), {{0, 1024, true}, {1024, 3072, false}});
  PolicyAllocation b = must_allocate(p, 2000);  // 2048 at 1024: always split, unlike BFC
  EXPECT_EQ(b.offset, 1024u);
  EXPECT_EQ(b.chunk_bytes, 2048u);
  expect_same_chunks(walk_all(p), {{0, 1024, true}, {1024, 2048, true}, {3072, 1024, false}});
  EXPECT_EQ(p.total_free_bytes(), 1024u);
  EXPECT_EQ(p.largest_free_block_bytes(), 1024u);
  EXPECT_EQ(p.free(1024), 2048u);  // merges with the free tail
  expect_same_chunks(walk_all(p), {{0, 1024, true}, {1024, 3072, false}});
  EXPECT_EQ(p.free(0), 1024u);
  expect_same_chunks(walk_all(p), {{0, 4096, false}});
  p.check_consistency();
}

TEST(FirstFitPolicyTest, FreeCoalescesWithNeither_Next_Previous_AndBoth) {
  FirstFitPolicy p(4096);
  for (uint64_t i = 0; i < 16; ++i) EXPECT_EQ(must_allocate(p, 256).offset, 256 * i);
  EXPECT_FALSE(p.allocate(1).has_value());
  EXPECT_EQ(p.free(256), 256u);  // neither neighbour free
  EXPECT_EQ(p.free(768), 256u);
  EXPECT_EQ(p.largest_free_block_bytes(), 256u);
  EXPECT_EQ(p.free(512), 256u);  // both: [256, 1024)
  p.check_consistency();
  EXPECT_EQ(p.largest_free_block_bytes(), 768u);
  EXPECT_EQ(p.free(0), 256u);     // next only: [0, 1024)
  EXPECT_EQ(p.free(1024), 256u);  // previous only: [0, 1280)
  p.check_consistency();
  EXPECT_EQ(p.free(3840), 256u);  // the last chunk
  std::vector<ChunkInfo> expected = {{0, 1280, false}};
  for (uint64_t off = 1280; off < 3840; off += 256) expected.push_back({off, 256, true});
  expected.push_back({3840, 256, false});
  expect_same_chunks(walk_all(p), expected);
  EXPECT_EQ(p.total_free_bytes(), 1536u);
  for (uint64_t off = 1280; off < 3840; off += 256) p.free(off);
  expect_same_chunks(walk_all(p), {{0, 4096, false}});
}

// Holes of 1024 (at 0), 512 (1280), 768 (2048) and 512 (3072) between chunks in use; the same
// layout as BFC's best-fit tests, where the choices differ.
FirstFitPolicy holes_layout() {
  FirstFitPolicy p(8192);
  const uint64_t sizes[] = {1024, 256, 512, 256, 768, 256, 512, 256, 4352};
  uint64_t expected_offset = 0;
  for (uint64_t s : sizes) {
    EXPECT_EQ(must_allocate(p, s).offset, expected_offset);
    expected_offset += s;
  }
  for (uint64_t hole : {0, 1280, 2048, 3072}) p.free(hole);
  p.check_consistency();
  return p;
}

TEST(FirstFitPolicyTest, TakesTheLowestAddressedHoleThatFits) {
  FirstFitPolicy p = holes_layout();
  EXPECT_EQ(p.total_free_bytes(), 2816u);
  EXPECT_EQ(p.largest_free_block_bytes(), 1024u);
  // 512 B: the 1024-byte hole at 0 comes first (best fit would take the exact hole at 1280).
  PolicyAllocation a = must_allocate(p, 500);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.chunk_bytes, 512u);
  // 768 B: the 512-byte holes at 512, 1280 are too small; the 768-byte hole at 2048 fits.
  EXPECT_EQ(must_allocate(p, 600).offset, 2048u);
  // 256 B: the hole at 512 again, leaving [768, 1024).
  EXPECT_EQ(must_allocate(p, 1).offset, 512u);
  EXPECT_EQ(must_allocate(p, 512).offset, 1280u);
  expect_same_chunks(walk_all(p), {{0, 512, true},
                                   {512, 256, true},
                                   {768, 256, false},
                                   {1024, 256, true},
                                   {1280, 512, true},
                                   {1792, 256, true},
                                   {2048, 768, true},
                                   {2816, 256, true},
                                   {3072, 512, false},
                                   {3584, 256, true},
                                   {3840, 4352, true}});
  // 768 bytes free, but in two holes: 513 B (512 rounded up to 768) fits nowhere.
  EXPECT_EQ(p.total_free_bytes(), 768u);
  EXPECT_EQ(p.largest_free_block_bytes(), 512u);
  EXPECT_FALSE(p.allocate(513).has_value());
  p.check_consistency();
}

TEST(FirstFitPolicyTest, AllocateZeroOrTooLarge) {
  FirstFitPolicy p(4096);
  EXPECT_THROW(p.allocate(0), InvalidArgumentError);
  EXPECT_FALSE(p.allocate(4097).has_value());
  EXPECT_FALSE(p.allocate(kMax).has_value());
  expect_same_chunks(walk_all(p), {{0, 4096, false}});
  EXPECT_EQ(must_allocate(p, 4096).chunk_bytes, 4096u);
}

TEST(FirstFitPolicyTest, SizesNearTwoToThe64) {
  FirstFitPolicy p(kMax);  // 2^64 - 256 bytes of offsets, no memory
  const uint64_t capacity = kMax - 255;
  EXPECT_EQ(p.capacity_bytes(), capacity);
  EXPECT_FALSE(p.allocate(capacity + 1).has_value());
  EXPECT_FALSE(p.allocate(kMax).has_value());
  const uint64_t half = uint64_t{1} << 63;
  EXPECT_EQ(must_allocate(p, half).offset, 0u);
  EXPECT_FALSE(p.allocate(half).has_value());  // half - 256 bytes left
  PolicyAllocation b = must_allocate(p, half - 300);
  EXPECT_EQ(b.offset, half);
  EXPECT_EQ(b.chunk_bytes, half - 256);
  EXPECT_EQ(p.total_free_bytes(), 0u);
  EXPECT_EQ(p.free(0), half);
  EXPECT_EQ(p.free(half), half - 256);
  expect_same_chunks(walk_all(p), {{0, capacity, false}});
  EXPECT_EQ(must_allocate(p, capacity).chunk_bytes, capacity);
}

TEST(FirstFitPolicyTest, DoubleFreeAndStrayOffsetsThrow) {
  FirstFitPolicy p(8192);
  testing::expect_double_and_stray_frees_rejected(p);
}

TEST(FirstFitPolicyTest, RebuildInstallsALayout) {
  FirstFitPolicy p(8192);
  must_allocate(p, 3000);
  p.rebuild(std::vector<ChunkInfo>{{256, 512, true}, {1024, 256, true}, {4096, 4096, true}});
  p.check_consistency();
  expect_same_chunks(walk_all(p), {{0, 256, false},
                                   {256, 512, true},
                                   {768, 256, false},
                                   {1024, 256, true},
                                   {1280, 2816, false},
                                   {4096, 4096, true}});
  EXPECT_EQ(p.total_free_bytes(), 256u + 256 + 2816);
  EXPECT_EQ(p.largest_free_block_bytes(), 2816u);
  EXPECT_EQ(p.free(256), 512u);  // the installed chunks free and merge like any other
  expect_same_chunks(
      walk_all(p), {{0, 1024, false}, {1024, 256, true}, {1280, 2816, false}, {4096, 4096, true}});
  EXPECT_EQ(must_allocate(p, 2816).offset, 1280u);  // [0, 1024) is too small
  p.rebuild({});
  expect_same_chunks(walk_all(p), {{0, 8192, false}});
  p.check_consistency();
}

TEST(FirstFitPolicyTest, RebuildRejectsBadInputAndChangesNothing) {
  FirstFitPolicy p(8192);
  must_allocate(p, 1000);
  must_allocate(p, 256);
  p.free(0);  // a hole, so that "unchanged" is not the trivial layout
  expect_bad_rebuild(p, {{0, 0, true}}, "chunk 0 at offset 0 of 0 bytes has a size the policy");
  expect_bad_rebuild(p, {{256, 256, true}, {512, 300, true}}, "chunk 1 at offset 512 of 300");
  expect_bad_rebuild(p, {{100, 256, true}}, "is not placed at a multiple of 256 bytes");
  testing::expect_order_and_range_enforced_by_rebuild(p);
}

}  // namespace
}  // namespace vtpu
