// Tests for memory/buddy_policy.h: power-of-two rounding, roots of a capacity that is not a power
// of two, splitting and merging on hand-worked layouts, errors, rebuild, then randomized
// operations whose every result the independent FreeSpaceModel predicts exactly.
#include "vtpu/memory/buddy_policy.h"

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
constexpr uint64_t kTwoTo63 = uint64_t{1} << 63;

TEST(BuddyPolicyTest, ConstructionCoversTheCapacityWithAlignedPowersOfTwo) {
  BuddyPolicy p(1000);  // 768 = 512 + 256
  EXPECT_EQ(p.name(), "buddy");
  EXPECT_EQ(p.capacity_bytes(), 768u);
  expect_same_chunks(walk_all(p), {{0, 512, false}, {512, 256, false}});
  EXPECT_EQ(p.largest_free_block_bytes(), 512u);
  EXPECT_EQ(p.total_free_bytes(), 768u);
  BuddyPolicy q(7 * kKiB + 256);  // 4096 + 2048 + 1024 + 256
  expect_same_chunks(
      walk_all(q),
      {{0, 4096, false}, {4096, 2048, false}, {6144, 1024, false}, {7168, 256, false}});
  q.check_consistency();
  BuddyPolicy r(4096);
  expect_same_chunks(walk_all(r), {{0, 4096, false}});
  EXPECT_EQ(r.placement_alignment(1024), 1024u);  // a block sits at a multiple of its size
  EXPECT_EQ(r.placement_alignment(256), 256u);
}

TEST(BuddyPolicyTest, CapacityBelow256Throws) {
  testing::expect_invalid_argument([] { BuddyPolicy p(0); }, "capacity 0 bytes");
  testing::expect_invalid_argument([] { BuddyPolicy p(255); }, "capacity 255 bytes");
  EXPECT_EQ(BuddyPolicy(256).capacity_bytes(), 256u);
}

TEST(BuddyPolicyTest, RoundedBytesIsThePowerOfTwo) {
  BuddyPolicy p(kMiB);
  EXPECT_EQ(p.rounded_bytes(1), 256u);
  EXPECT_EQ(p.rounded_bytes(256), 256u);
  EXPECT_EQ(p.rounded_bytes(257), 512u);
  EXPECT_EQ(p.rounded_bytes(1000), 1024u);
  EXPECT_EQ(p.rounded_bytes(1025), 2048u);
  EXPECT_EQ(p.rounded_bytes(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(p.rounded_bytes(kTwoTo63 - 1), kTwoTo63);
  EXPECT_EQ(p.rounded_bytes(kTwoTo63), kTwoTo63);
  // No power of two above 2^63 fits in 64 bits: saturate to a value no range can hold.
  EXPECT_EQ(p.rounded_bytes(kTwoTo63 + 1), kMax);
  EXPECT_EQ(p.rounded_bytes(kMax), kMax);
  EXPECT_THROW(p.rounded_bytes(0), InvalidArgumentError);
}

TEST(BuddyPolicyTest, SplitsTheLowestBlockOfTheSmallestSufficientOrder) {
  BuddyPolicy p(4096);
  // 300 B -> 512: 4096 splits into 2048 + 1024 + 512 free upper halves and 512 in use at 0.
  PolicyAllocation a = must_allocate(p, 300);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.chunk_bytes, 512u);
  expect_same_chunks(walk_all(p),
                     {{0, 512, true}, {512, 512, false}, {1024, 1024, false}, {2048, 2048, false}});
  EXPECT_EQ(p.total_free_bytes(), 3584u);
  EXPECT_EQ(p.largest_free_block_bytes(), 2048u);
  const std::vector<BinStats> stats = p.bin_stats();
  ASSERT_EQ(stats.size(), 5u);  // orders 0..4: 256 B .. 4 KiB
  const uint64_t expected_free[] = {0, 1, 1, 1, 0};
  for (int k = 0; k < 5; ++k) {
    SCOPED_TRACE("order " + std::to_string(k));
    EXPECT_EQ(stats[k].min_chunk_bytes, 256u << k);
    EXPECT_EQ(stats[k].max_chunk_bytes, 256u << k);
    EXPECT_EQ(stats[k].num_free_chunks, expected_free[k]);
    EXPECT_EQ(stats[k].free_bytes, expected_free[k] * (256u << k));
    EXPECT_EQ(stats[k].largest_free_chunk_bytes, expected_free[k] ? 256u << k : 0u);
  }
  // 256 B: no order-0 block, so the 512 at 512 splits; its lower half is handed out.
  EXPECT_EQ(must_allocate(p, 256).offset, 512u);
  // 1024 B: the 1024 at 1024, whole.
  EXPECT_EQ(must_allocate(p, 600).offset, 1024u);
  // 1024 B again: order 2 is empty, so the 2048 at 2048 splits.
  PolicyAllocation d = must_allocate(p, 1000);
  EXPECT_EQ(d.offset, 2048u);
  EXPECT_EQ(d.chunk_bytes, 1024u);
  expect_same_chunks(walk_all(p), {{0, 512, true},
                                   {512, 256, true},
                                   {768, 256, false},
                                   {1024, 1024, true},
                                   {2048, 1024, true},
                                   {3072, 1024, false}});
  // 1280 bytes free but no 2048 block: 1025 B fails.
  EXPECT_EQ(p.total_free_bytes(), 1280u);
  EXPECT_EQ(p.largest_free_block_bytes(), 1024u);
  EXPECT_FALSE(p.allocate(1025).has_value());
  p.check_consistency();
}

TEST(BuddyPolicyTest, MergesOnlyWithAWholeFreeBuddy) {
  BuddyPolicy p(4096);
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(must_allocate(p, 256).offset, 256 * i);
  EXPECT_EQ(p.free(256), 256u);  // buddy 0 in use
  EXPECT_EQ(p.free(512), 256u);  // buddy 768 in use
  // [256, 512) and [512, 768) are adjacent and free but not buddies: they stay apart.
  expect_same_chunks(walk_all(p), {{0, 256, true},
                                   {256, 256, false},
                                   {512, 256, false},
                                   {768, 256, true},
                                   {1024, 1024, false},
                                   {2048, 2048, false}});
  p.check_consistency();
  // 0 merges with 256 into 512 at 0; that block's buddy [512, 1024) is split, so it stops there.
  EXPECT_EQ(p.free(0), 256u);
  expect_same_chunks(walk_all(p), {{0, 512, false},
                                   {512, 256, false},
                                   {768, 256, true},
                                   {1024, 1024, false},
                                   {2048, 2048, false}});
  // 768 merges four times: 512 at 512, 1 KiB at 0, 2 KiB at 0, 4 KiB at 0.
  EXPECT_EQ(p.free(768), 256u);
  expect_same_chunks(walk_all(p), {{0, 4096, false}});
  p.check_consistency();
}

TEST(BuddyPolicyTest, RootsNeverMerge) {
  BuddyPolicy p(1280);  // roots: 1 KiB at 0, 256 B at 1024
  // 1 B: the smallest sufficient order is 0, whose only block is the 256-byte root.
  EXPECT_EQ(must_allocate(p, 1).offset, 1024u);
  EXPECT_EQ(must_allocate(p, 1).offset, 0u);  // now the 1 KiB root splits
  expect_same_chunks(walk_all(p),
                     {{0, 256, true}, {256, 256, false}, {512, 512, false}, {1024, 256, true}});
  EXPECT_EQ(p.free(1024), 256u);  // a root: no parent inside the range
  EXPECT_EQ(p.free(0), 256u);
  expect_same_chunks(walk_all(p), {{0, 1024, false}, {1024, 256, false}});
  EXPECT_EQ(p.largest_free_block_bytes(), 1024u);
  EXPECT_FALSE(p.allocate(1025).has_value());  // 1280 free, but no 2 KiB block can exist
  p.check_consistency();
}

TEST(BuddyPolicyTest, SizesNearTwoToThe64) {
  BuddyPolicy p(kMax);  // 2^64 - 256: 56 roots, 2^63 at 0 down to 256 at 2^64 - 512
  EXPECT_EQ(p.capacity_bytes(), kMax - 255);
  std::vector<ChunkInfo> roots;
  uint64_t offset = 0;
  for (int bit = 63; bit >= 8; --bit) {
    roots.push_back({offset, uint64_t{1} << bit, false});
    offset += uint64_t{1} << bit;
  }
  expect_same_chunks(walk_all(p), roots);
  EXPECT_EQ(p.bin_stats().size(), 56u);
  for (const BinStats& s : p.bin_stats()) EXPECT_EQ(s.num_free_chunks, 1u);
  EXPECT_EQ(p.largest_free_block_bytes(), kTwoTo63);
  EXPECT_FALSE(p.allocate(kTwoTo63 + 1).has_value());
  EXPECT_FALSE(p.allocate(kMax).has_value());
  PolicyAllocation a = must_allocate(p, kTwoTo63 - 5);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.chunk_bytes, kTwoTo63);
  EXPECT_EQ(p.largest_free_block_bytes(), kTwoTo63 / 2);
  EXPECT_EQ(must_allocate(p, 1).offset, kMax - 511);  // the 256-byte root
  EXPECT_EQ(p.free(0), kTwoTo63);
  EXPECT_EQ(p.free(kMax - 511), 256u);
  expect_same_chunks(walk_all(p), roots);
  p.check_consistency();
}

TEST(BuddyPolicyTest, AllocateZeroOrTooLarge) {
  BuddyPolicy p(4096);
  EXPECT_THROW(p.allocate(0), InvalidArgumentError);
  EXPECT_FALSE(p.allocate(4097).has_value());
  EXPECT_FALSE(p.allocate(kMax).has_value());
  EXPECT_EQ(must_allocate(p, 4096).chunk_bytes, 4096u);
}

TEST(BuddyPolicyTest, DoubleFreeAndStrayOffsetsThrow) {
  BuddyPolicy p(8192);
  testing::expect_double_and_stray_frees_rejected(p);
}

TEST(BuddyPolicyTest, RebuildInstallsALayoutWithMaximalFreeBlocks) {
  BuddyPolicy p(4096);
  must_allocate(p, 3000);
  p.rebuild(std::vector<ChunkInfo>{{512, 512, true}, {2048, 1024, true}});
  p.check_consistency();
  expect_same_chunks(walk_all(p), {{0, 512, false},
                                   {512, 512, true},
                                   {1024, 1024, false},
                                   {2048, 1024, true},
                                   {3072, 1024, false}});
  EXPECT_EQ(p.free(512), 512u);  // merges with 0, then with 1024; 2048 is in use
  expect_same_chunks(walk_all(p), {{0, 2048, false}, {2048, 1024, true}, {3072, 1024, false}});
  p.check_consistency();

  // A long gap is cut into the maximal aligned blocks: [512, 7936) = 512 + 1 Ki + 2 Ki + 2 Ki
  // + 1 Ki + 512 + 256.
  BuddyPolicy q(8192);
  q.rebuild(std::vector<ChunkInfo>{{256, 256, true}, {7936, 256, true}});
  q.check_consistency();
  expect_same_chunks(walk_all(q), {{0, 256, false},
                                   {256, 256, true},
                                   {512, 512, false},
                                   {1024, 1024, false},
                                   {2048, 2048, false},
                                   {4096, 2048, false},
                                   {6144, 1024, false},
                                   {7168, 512, false},
                                   {7680, 256, false},
                                   {7936, 256, true}});
  q.rebuild({});
  expect_same_chunks(walk_all(q), {{0, 8192, false}});
}

TEST(BuddyPolicyTest, RebuildRejectsBadInputAndChangesNothing) {
  BuddyPolicy p(4096);
  must_allocate(p, 256);
  must_allocate(p, 1024);
  p.free(0);
  expect_bad_rebuild(p, {{0, 768, true}}, "(expected a power of two >= 256)");
  expect_bad_rebuild(p, {{0, 128, true}}, "of 128 bytes has a size the policy cannot hand out");
  expect_bad_rebuild(p, {{0, 0, true}}, "cannot hand out");
  expect_bad_rebuild(p, {{256, 512, true}}, "is not placed at a multiple of 512 bytes");
  expect_bad_rebuild(p, {{2048, 4096, true}}, "outside the range (expected within [0, 4096))");
  testing::expect_order_and_range_enforced_by_rebuild(p);
}

}  // namespace
}  // namespace vtpu
