// Tests for memory/bfc_policy.h: bins, the split rules, coalescing and best fit on hand-worked
// layouts, then randomized operations checked against an independent model after every step.
#include "vtpu/memory/bfc_policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tests/memory/bfc_reference_model.h"
#include "vtpu/common/error.h"
#include "vtpu/common/units.h"

namespace vtpu {
namespace {

// TensorFlow's fixed 128 MiB split threshold: on the small ranges of these hand-worked cases only
// the 2x rule then decides whether a chunk is split.
PolicyOptions tensorflow_threshold() {
  PolicyOptions o;
  o.max_internal_fragmentation_bytes = uint64_t{128} << 20;
  return o;
}

using testing::BfcReferenceModel;
using testing::expect_same_chunks;

std::vector<ChunkInfo> walk_all(const AllocatorPolicy& p) {
  std::vector<ChunkInfo> out;
  p.walk([&](const ChunkInfo& c) { out.push_back(c); });
  return out;
}

// Allocates and asserts the result, so that hand-worked layouts read top to bottom.
PolicyAllocation must_allocate(BfcPolicy& p, uint64_t size_bytes) {
  std::optional<PolicyAllocation> a = p.allocate(size_bytes);
  EXPECT_TRUE(a.has_value()) << "allocate(" << size_bytes << ") failed";
  p.check_consistency();
  return a.value_or(PolicyAllocation{~uint64_t{0}, 0});
}

TEST(BfcPolicyTest, ConstructionRoundsCapacityDownTo256) {
  BfcPolicy p(1000);
  EXPECT_EQ(p.name(), "bfc");
  EXPECT_EQ(p.capacity_bytes(), 768u);
  EXPECT_EQ(p.total_free_bytes(), 768u);
  EXPECT_EQ(p.largest_free_block_bytes(), 768u);
  expect_same_chunks(walk_all(p), {{0, 768, false}});
  p.check_consistency();
}

TEST(BfcPolicyTest, CapacityBelow256Throws) {
  EXPECT_THROW(BfcPolicy(0), InvalidArgumentError);
  try {
    BfcPolicy p(255);
    FAIL() << "accepted 255 bytes";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("255"), std::string::npos) << e.what();
  }
  EXPECT_EQ(BfcPolicy(256).capacity_bytes(), 256u);
}

TEST(BfcPolicyTest, FactoryMakesBfcAndRejectsUnknownNames) {
  auto p = make_allocator_policy("bfc", 4096);
  EXPECT_EQ(p->name(), "bfc");
  EXPECT_EQ(p->capacity_bytes(), 4096u);
  try {
    make_allocator_policy("no-such-policy", 4096);
    FAIL() << "unknown policy accepted";
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'no-such-policy'"), std::string::npos) << what;
    EXPECT_NE(what.find("bfc"), std::string::npos) << what;
  }
}

TEST(BfcPolicyTest, RoundedBytes) {
  BfcPolicy p(kMiB);
  EXPECT_EQ(p.rounded_bytes(1), 256u);
  EXPECT_EQ(p.rounded_bytes(255), 256u);
  EXPECT_EQ(p.rounded_bytes(256), 256u);
  EXPECT_EQ(p.rounded_bytes(257), 512u);
  EXPECT_EQ(p.rounded_bytes(1000), 1024u);
  EXPECT_EQ(p.rounded_bytes(kMiB), kMiB);
  // Larger than the whole range: a value that can never fit (and does not overflow).
  EXPECT_GT(p.rounded_bytes(kMiB + 1), kMiB);
  EXPECT_EQ(p.rounded_bytes(kMiB + 1), kMiB + 256);  // larger than capacity: still rounded
  // Saturates at the largest multiple of 256 instead of overflowing.
  EXPECT_EQ(p.rounded_bytes(std::numeric_limits<uint64_t>::max()),
            std::numeric_limits<uint64_t>::max() - 255);
  EXPECT_EQ(p.rounded_bytes(std::numeric_limits<uint64_t>::max() - 300),
            std::numeric_limits<uint64_t>::max() - 255);
  EXPECT_THROW(p.rounded_bytes(0), InvalidArgumentError);
}

TEST(BfcPolicyTest, BinForSizeBoundaries) {
  // Bin b holds [256 * 2^b, 256 * 2^(b+1)); bin 20 holds everything from 256 MiB up.
  EXPECT_EQ(BfcPolicy::bin_for_size(256), 0);
  EXPECT_EQ(BfcPolicy::bin_for_size(511), 0);
  EXPECT_EQ(BfcPolicy::bin_for_size(512), 1);
  EXPECT_EQ(BfcPolicy::bin_for_size(768), 1);
  EXPECT_EQ(BfcPolicy::bin_for_size(1023), 1);
  EXPECT_EQ(BfcPolicy::bin_for_size(1024), 2);
  EXPECT_EQ(BfcPolicy::bin_for_size(2047), 2);
  EXPECT_EQ(BfcPolicy::bin_for_size(2048), 3);
  EXPECT_EQ(BfcPolicy::bin_for_size(kMiB - 256), 11);
  EXPECT_EQ(BfcPolicy::bin_for_size(kMiB), 12);
  EXPECT_EQ(BfcPolicy::bin_for_size(128 * kMiB), 19);
  EXPECT_EQ(BfcPolicy::bin_for_size(256 * kMiB - 256), 19);
  EXPECT_EQ(BfcPolicy::bin_for_size(256 * kMiB), 20);
  EXPECT_EQ(BfcPolicy::bin_for_size(512 * kMiB), 20);
  EXPECT_EQ(BfcPolicy::bin_for_size(uint64_t{1} << 40), 20);
  EXPECT_EQ(BfcPolicy::bin_for_size(std::numeric_limits<uint64_t>::max()), 20);
  EXPECT_EQ(BfcPolicy::kNumBins, 21);
  EXPECT_EQ(BfcPolicy::kMinAllocationBytes, 256u);
}

TEST(BfcPolicyTest, BinStatsMinimumSizes) {
  BfcPolicy p(4096);
  const auto stats = p.bin_stats();
  EXPECT_EQ(stats[0].min_chunk_bytes, 256u);
  EXPECT_EQ(stats[1].min_chunk_bytes, 512u);
  EXPECT_EQ(stats[4].min_chunk_bytes, 4096u);
  EXPECT_EQ(stats[20].min_chunk_bytes, 256 * kMiB);
  // The whole 4 KiB range is one free chunk in bin 4.
  for (int b = 0; b < BfcPolicy::kNumBins; ++b) {
    SCOPED_TRACE("bin " + std::to_string(b));
    EXPECT_EQ(stats[b].num_free_chunks, b == 4 ? 1u : 0u);
    EXPECT_EQ(stats[b].free_bytes, b == 4 ? 4096u : 0u);
    EXPECT_EQ(stats[b].largest_free_chunk_bytes, b == 4 ? 4096u : 0u);
  }
}

TEST(BfcPolicyTest, SplitsWhenChunkIsAtLeastTwiceTheRequest) {
  BfcPolicy p(4096, tensorflow_threshold());
  // 4096 >= 2 * 1024: split into [0, 1024) in use and [1024, 4096) free.
  PolicyAllocation a = must_allocate(p, 1000);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.chunk_bytes, 1024u);
  expect_same_chunks(walk_all(p), {{0, 1024, true}, {1024, 3072, false}});
  EXPECT_EQ(p.total_free_bytes(), 3072u);
  EXPECT_EQ(p.largest_free_block_bytes(), 3072u);
  // 3072 < 2 * 2048 and the 1024 remainder is far below 128 MiB: no split, the whole chunk goes.
  PolicyAllocation b = must_allocate(p, 2000);
  EXPECT_EQ(b.offset, 1024u);
  EXPECT_EQ(b.chunk_bytes, 3072u);
  expect_same_chunks(walk_all(p), {{0, 1024, true}, {1024, 3072, true}});
  EXPECT_EQ(p.total_free_bytes(), 0u);
  EXPECT_EQ(p.largest_free_block_bytes(), 0u);
  EXPECT_FALSE(p.allocate(1).has_value());
  // Freeing returns the chunk bytes, not the request.
  EXPECT_EQ(p.free(1024), 3072u);
  EXPECT_EQ(p.free(0), 1024u);
  expect_same_chunks(walk_all(p), {{0, 4096, false}});
}

TEST(BfcPolicyTest, SplitBoundaryAtExactlyTwice) {
  {
    BfcPolicy p(2048, tensorflow_threshold());
    PolicyAllocation a = must_allocate(p, 1024);  // 2048 == 2 * 1024: split
    EXPECT_EQ(a.chunk_bytes, 1024u);
    expect_same_chunks(walk_all(p), {{0, 1024, true}, {1024, 1024, false}});
  }
  {
    BfcPolicy p(2048, tensorflow_threshold());
    PolicyAllocation a = must_allocate(p, 1025);  // rounds to 1280; 2048 < 2560: no split
    EXPECT_EQ(a.chunk_bytes, 2048u);
    expect_same_chunks(walk_all(p), {{0, 2048, true}});
  }
  {
    BfcPolicy p(2048, tensorflow_threshold());
    PolicyAllocation a = must_allocate(p, 2048);  // exact fit: nothing to split
    EXPECT_EQ(a.chunk_bytes, 2048u);
    expect_same_chunks(walk_all(p), {{0, 2048, true}});
  }
}

TEST(BfcPolicyTest, SplitsWhenRemainderReachesMaxInternalFragmentation) {
  // 4096 < 2 * 2560, so only the remainder rule can split; the remainder is 1536.
  for (uint64_t threshold : {uint64_t{1024}, uint64_t{1536}, uint64_t{1792}, uint64_t{0}}) {
    SCOPED_TRACE("threshold " + std::to_string(threshold));
    PolicyOptions options;
    options.max_internal_fragmentation_bytes = threshold;
    BfcPolicy p(4096, options);
    PolicyAllocation a = must_allocate(p, 2560);
    EXPECT_EQ(a.offset, 0u);
    if (threshold <= 1536) {
      EXPECT_EQ(a.chunk_bytes, 2560u);
      expect_same_chunks(walk_all(p), {{0, 2560, true}, {2560, 1536, false}});
    } else {
      EXPECT_EQ(a.chunk_bytes, 4096u);
      expect_same_chunks(walk_all(p), {{0, 4096, true}});
    }
  }
}

TEST(BfcPolicyTest, DefaultMaxInternalFragmentationScalesWithCapacity) {
  // min(128 MiB, capacity / 128): TensorFlow's value from 16 GiB up.
  EXPECT_EQ(BfcPolicy(16 * kGiB).max_internal_fragmentation_bytes(), 128 * kMiB);
  EXPECT_EQ(BfcPolicy(64 * kGiB).max_internal_fragmentation_bytes(), 128 * kMiB);
  EXPECT_EQ(BfcPolicy(1200 * kMiB).max_internal_fragmentation_bytes(), 1200 * kMiB / 128);
  EXPECT_EQ(BfcPolicy(kMiB).max_internal_fragmentation_bytes(), 8 * kKiB);
  PolicyOptions explicit_tf;
  explicit_tf.max_internal_fragmentation_bytes = 128 * kMiB;
  EXPECT_EQ(BfcPolicy(kGiB, explicit_tf).max_internal_fragmentation_bytes(), 128 * kMiB);
}

TEST(BfcPolicyTest, TensorFlowThresholdOf128MiB) {
  PolicyOptions tf;
  tf.max_internal_fragmentation_bytes = 128 * kMiB;
  {
    BfcPolicy p(kGiB, tf);  // remainder 324 MiB >= 128 MiB: split although 1 GiB < 2 * 700 MiB
    PolicyAllocation a = must_allocate(p, 700 * kMiB);
    EXPECT_EQ(a.chunk_bytes, 700 * kMiB);
    EXPECT_EQ(p.largest_free_block_bytes(), 324 * kMiB);
  }
  {
    BfcPolicy p(kGiB, tf);  // remainder exactly 128 MiB: split
    PolicyAllocation a = must_allocate(p, 896 * kMiB);
    EXPECT_EQ(a.chunk_bytes, 896 * kMiB);
    EXPECT_EQ(p.largest_free_block_bytes(), 128 * kMiB);
  }
  {
    BfcPolicy p(kGiB, tf);  // remainder 128 MiB - 256 B: not split, all of 1 GiB handed out
    PolicyAllocation a = must_allocate(p, 896 * kMiB + 256);
    EXPECT_EQ(a.chunk_bytes, kGiB);
    EXPECT_EQ(p.largest_free_block_bytes(), 0u);
    EXPECT_EQ(p.total_free_bytes(), 0u);
  }
}

// Sixteen 256-byte chunks in a 4 KiB range: [0, 256), [256, 512), ...
BfcPolicy sixteen_slots(std::vector<uint64_t>* offsets) {
  BfcPolicy p(4096);
  for (int i = 0; i < 16; ++i) offsets->push_back(must_allocate(p, 256).offset);
  return p;
}

TEST(BfcPolicyTest, SequentialAllocationsFillFromTheStart) {
  std::vector<uint64_t> offsets;
  BfcPolicy p = sixteen_slots(&offsets);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(offsets[i], 256u * i);
  EXPECT_EQ(p.total_free_bytes(), 0u);
  EXPECT_FALSE(p.allocate(1).has_value());
}

TEST(BfcPolicyTest, FreeCoalescesWithNeither_Next_Previous_AndBoth) {
  std::vector<uint64_t> offsets;
  BfcPolicy p = sixteen_slots(&offsets);
  // Neither neighbour free: two separate 256-byte holes.
  EXPECT_EQ(p.free(256), 256u);
  EXPECT_EQ(p.free(768), 256u);
  p.check_consistency();
  EXPECT_EQ(p.total_free_bytes(), 512u);
  EXPECT_EQ(p.largest_free_block_bytes(), 256u);
  // Both neighbours free: [256, 1024) becomes one chunk.
  EXPECT_EQ(p.free(512), 256u);
  p.check_consistency();
  EXPECT_EQ(p.largest_free_block_bytes(), 768u);
  std::vector<ChunkInfo> walked = walk_all(p);
  ASSERT_EQ(walked.size(), 14u);
  EXPECT_EQ(walked[0].offset, 0u);
  EXPECT_TRUE(walked[0].in_use);
  EXPECT_EQ(walked[1].offset, 256u);
  EXPECT_EQ(walked[1].size_bytes, 768u);
  EXPECT_FALSE(walked[1].in_use);
  EXPECT_EQ(walked[2].offset, 1024u);
  EXPECT_TRUE(walked[2].in_use);
  // Only the next neighbour free: [0, 256) absorbs [256, 1024).
  EXPECT_EQ(p.free(0), 256u);
  p.check_consistency();
  EXPECT_EQ(p.largest_free_block_bytes(), 1024u);
  // Only the previous neighbour free: [1024, 1280) merges into [0, 1024).
  EXPECT_EQ(p.free(1024), 256u);
  p.check_consistency();
  EXPECT_EQ(p.largest_free_block_bytes(), 1280u);
  EXPECT_EQ(p.total_free_bytes(), 1280u);
  // The last chunk: previous is in use, no next.
  EXPECT_EQ(p.free(3840), 256u);
  p.check_consistency();
  walked = walk_all(p);
  ASSERT_EQ(walked.size(), 12u);
  EXPECT_EQ(walked.front().offset, 0u);
  EXPECT_EQ(walked.front().size_bytes, 1280u);
  EXPECT_FALSE(walked.front().in_use);
  EXPECT_EQ(walked.back().offset, 3840u);
  EXPECT_EQ(walked.back().size_bytes, 256u);
  EXPECT_FALSE(walked.back().in_use);
  // Free everything else: one chunk again.
  for (uint64_t off = 1280; off < 3840; off += 256) p.free(off);
  p.check_consistency();
  expect_same_chunks(walk_all(p), {{0, 4096, false}});
  EXPECT_EQ(p.largest_free_block_bytes(), 4096u);
}

// Layout used by the best-fit tests (8 KiB range, all offsets in bytes):
//   [0,1024) hole  [1024,1280) s1  [1280,1792) hole  [1792,2048) s3
//   [2048,2816) hole  [2816,3072) s5  [3072,3584) hole  [3584,3840) s7  [3840,8192) tail
// The holes are 1024, 512, 768 and 512 bytes; the separators and the tail stay in use.
BfcPolicy best_fit_layout() {
  BfcPolicy p(8192, tensorflow_threshold());
  const uint64_t sizes[] = {1024, 256, 512, 256, 768, 256, 512, 256, 4352};
  std::vector<uint64_t> offsets;
  for (uint64_t s : sizes) {
    PolicyAllocation a = must_allocate(p, s);
    EXPECT_EQ(a.chunk_bytes, s);  // every split happens (or the tail fits exactly)
    offsets.push_back(a.offset);
  }
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 1024, 1280, 1792, 2048, 2816, 3072, 3584, 3840}));
  for (uint64_t hole : {0, 1280, 2048, 3072}) p.free(hole);
  p.check_consistency();
  return p;
}

TEST(BfcPolicyTest, BestFitLayoutStats) {
  BfcPolicy p = best_fit_layout();
  EXPECT_EQ(p.total_free_bytes(), 2816u);
  EXPECT_EQ(p.largest_free_block_bytes(), 1024u);
  const auto stats = p.bin_stats();
  EXPECT_EQ(stats[0].num_free_chunks, 0u);
  EXPECT_EQ(stats[1].num_free_chunks, 3u);  // 512, 768, 512
  EXPECT_EQ(stats[1].free_bytes, 1792u);
  EXPECT_EQ(stats[1].largest_free_chunk_bytes, 768u);
  EXPECT_EQ(stats[2].num_free_chunks, 1u);  // 1024
  EXPECT_EQ(stats[2].free_bytes, 1024u);
  EXPECT_EQ(stats[2].largest_free_chunk_bytes, 1024u);
  for (int b = 3; b < BfcPolicy::kNumBins; ++b) EXPECT_EQ(stats[b].num_free_chunks, 0u);
}

TEST(BfcPolicyTest, BestFitChoosesSmallestFittingChunkThenLowestOffset) {
  BfcPolicy p = best_fit_layout();
  // 512 B: the two 512-byte holes fit exactly; the lower one (1280) wins over 3072, and both win
  // over the lower-addressed 1024-byte hole that first fit would take.
  PolicyAllocation a = must_allocate(p, 500);
  EXPECT_EQ(a.offset, 1280u);
  EXPECT_EQ(a.chunk_bytes, 512u);
  a = must_allocate(p, 512);
  EXPECT_EQ(a.offset, 3072u);
  EXPECT_EQ(a.chunk_bytes, 512u);
  // 768 B: no 512 left; the 768-byte hole is smaller than the 1024-byte one.
  a = must_allocate(p, 513);
  EXPECT_EQ(a.offset, 2048u);
  EXPECT_EQ(a.chunk_bytes, 768u);
  // 256 B: only the 1024-byte hole is left; 1024 >= 2 * 256, so it splits.
  a = must_allocate(p, 1);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.chunk_bytes, 256u);
  EXPECT_EQ(p.largest_free_block_bytes(), 768u);
  a = must_allocate(p, 700);
  EXPECT_EQ(a.offset, 256u);
  EXPECT_EQ(a.chunk_bytes, 768u);
  EXPECT_EQ(p.total_free_bytes(), 0u);
  EXPECT_FALSE(p.allocate(1).has_value());
}

TEST(BfcPolicyTest, BestFitSearchesHigherBinsWhenTheRequestBinHasNoFit) {
  BfcPolicy p = best_fit_layout();
  EXPECT_EQ(must_allocate(p, 768).offset, 2048u);  // the 768-byte hole, exact
  // 768 B is bin 1, which now holds only the two 512-byte holes: the search moves on to bin 2 and
  // takes the 1024-byte hole whole (1024 < 2 * 768, remainder 256 < 128 MiB).
  PolicyAllocation a = must_allocate(p, 600);
  EXPECT_EQ(a.offset, 0u);
  EXPECT_EQ(a.chunk_bytes, 1024u);
  // 1024 bytes are still free, but in two 512-byte holes: a 768-byte request fails.
  EXPECT_EQ(p.total_free_bytes(), 1024u);
  EXPECT_EQ(p.largest_free_block_bytes(), 512u);
  EXPECT_FALSE(p.allocate(513).has_value());
  p.check_consistency();
}

TEST(BfcPolicyTest, BestFitWithinOneBinPrefersSmallerOverLowerAddress) {
  // Holes of 1536 (offset 0) and 1280 (higher offset), both in bin 2: a 1024-byte request takes
  // the 1280-byte hole. Neither is >= 2 * 1024, so the chunk is handed out whole.
  BfcPolicy p(8192, tensorflow_threshold());
  for (uint64_t s : {1536, 256, 1280, 256}) must_allocate(p, s);
  must_allocate(p, 8192 - 1536 - 256 - 1280 - 256);  // tail, exact
  p.free(0);
  p.free(1792);
  PolicyAllocation a = must_allocate(p, 1024);
  EXPECT_EQ(a.offset, 1792u);
  EXPECT_EQ(a.chunk_bytes, 1280u);
}

// Chunks up to 1 MiB sit in exact size classes, larger ones in an ordered set: best fit must
// hold across that boundary, and bin_stats() must add both up into TensorFlow's bin 12.
TEST(BfcPolicyTest, BestFitAcrossTheSmallAndLargeChunkBoundary) {
  BfcPolicy p(8 * kMiB, tensorflow_threshold());
  EXPECT_EQ(BfcPolicy::kMaxSmallChunkBytes, kMiB);
  const uint64_t large = must_allocate(p, kMiB + 256).offset;  // 0
  must_allocate(p, 256);
  const uint64_t small = must_allocate(p, kMiB).offset;  // 1 MiB + 512
  must_allocate(p, 256);
  must_allocate(p, 8 * kMiB - 2 * kMiB - 768);  // the tail, exactly
  ASSERT_EQ(large, 0u);
  ASSERT_EQ(small, kMiB + 512);
  p.free(large);
  p.free(small);
  EXPECT_EQ(p.largest_free_block_bytes(), kMiB + 256);
  std::vector<BinStats> stats = p.bin_stats();
  EXPECT_EQ(stats[12].num_free_chunks, 2u);
  EXPECT_EQ(stats[12].free_bytes, 2 * kMiB + 256);
  EXPECT_EQ(stats[12].largest_free_chunk_bytes, kMiB + 256);
  // 1 MiB fits both; the exact 1 MiB chunk wins although the larger one lies lower.
  PolicyAllocation a = must_allocate(p, kMiB - 100);
  EXPECT_EQ(a.offset, small);
  EXPECT_EQ(a.chunk_bytes, kMiB);
  EXPECT_EQ(p.largest_free_block_bytes(), kMiB + 256);
  p.free(small);
  // One byte more than 1 MiB: only the large chunk fits; its 256-byte remainder is not split off.
  a = must_allocate(p, kMiB + 1);
  EXPECT_EQ(a.offset, large);
  EXPECT_EQ(a.chunk_bytes, kMiB + 256);
  EXPECT_EQ(p.largest_free_block_bytes(), kMiB);  // from the size classes alone
  EXPECT_FALSE(p.allocate(kMiB + 1).has_value());
  stats = p.bin_stats();
  EXPECT_EQ(stats[12].num_free_chunks, 1u);
  EXPECT_EQ(stats[12].largest_free_chunk_bytes, kMiB);
}

// Many free chunks of one size share a class (a heap by offset): whatever order they were freed
// in, allocations take them lowest offset first, as TensorFlow's (size, offset) order does.
TEST(BfcPolicyTest, ChunksOfOneSizeComeBackLowestOffsetFirst) {
  constexpr int kHoles = 32;
  BfcPolicy p(64 * kKiB, tensorflow_threshold());
  std::vector<uint64_t> holes;
  for (int i = 0; i < kHoles; ++i) {
    holes.push_back(must_allocate(p, 512).offset);
    must_allocate(p, 256);
  }
  must_allocate(p, 64 * kKiB - kHoles * 768);                        // the tail, exactly
  for (int i = 0; i < kHoles; ++i) p.free(holes[(i * 7) % kHoles]);  // a scrambled order
  p.check_consistency();
  EXPECT_EQ(p.bin_stats()[1].num_free_chunks, static_cast<uint64_t>(kHoles));
  for (int i = 0; i < kHoles / 2; ++i) EXPECT_EQ(must_allocate(p, 512).offset, holes[i]);
  // Free three taken ones again, out of order: they come back lowest first, before the rest.
  for (int i : {9, 2, 5}) p.free(holes[i]);
  for (int i : {2, 5, 9}) EXPECT_EQ(must_allocate(p, 500).offset, holes[i]);
  for (int i = kHoles / 2; i < kHoles; ++i) EXPECT_EQ(must_allocate(p, 512).offset, holes[i]);
  EXPECT_FALSE(p.allocate(1).has_value());
}

TEST(BfcPolicyTest, AllocateZeroOrTooLarge) {
  BfcPolicy p(4096);
  EXPECT_THROW(p.allocate(0), InvalidArgumentError);
  EXPECT_FALSE(p.allocate(4097).has_value());
  EXPECT_FALSE(p.allocate(std::numeric_limits<uint64_t>::max()).has_value());
  p.check_consistency();
  expect_same_chunks(walk_all(p), {{0, 4096, false}});
  PolicyAllocation a = must_allocate(p, 4096);
  EXPECT_EQ(a.chunk_bytes, 4096u);
}

// Expects free(offset) to throw InvalidArgumentError naming the offset and to change nothing.
void expect_bad_free(BfcPolicy& p, uint64_t offset) {
  SCOPED_TRACE("free(" + std::to_string(offset) + ")");
  const std::vector<ChunkInfo> before = walk_all(p);
  const uint64_t free_before = p.total_free_bytes();
  try {
    p.free(offset);
    ADD_FAILURE() << "free accepted";
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("offset " + std::to_string(offset)), std::string::npos) << what;
  }
  p.check_consistency();
  expect_same_chunks(walk_all(p), before);
  EXPECT_EQ(p.total_free_bytes(), free_before);
}

TEST(BfcPolicyTest, DoubleFreeAndStrayOffsetsThrow) {
  BfcPolicy p(8192);
  const uint64_t a = must_allocate(p, 1024).offset;  // [0, 1024)
  const uint64_t b = must_allocate(p, 1024).offset;  // [1024, 2048)
  ASSERT_EQ(b, 1024u);
  expect_bad_free(p, a + 256);   // inside a live chunk
  expect_bad_free(p, 2048);      // start of the free tail
  expect_bad_free(p, 5000);      // inside the free tail, not aligned
  expect_bad_free(p, 1u << 20);  // beyond the range
  EXPECT_EQ(p.free(a), 1024u);
  expect_bad_free(p, a);  // double free (now the start of a free chunk)
  EXPECT_EQ(p.free(b), 1024u);
  expect_bad_free(p, b);  // double free after coalescing: 1024 is inside the single free chunk
  expect_same_chunks(walk_all(p), {{0, 8192, false}});
}

// Regression: TensorFlow's split rule (split when the chunk is at least twice the request or the
// remainder reaches max_internal_fragmentation_bytes) computed `2 * rounded`, which overflowed for
// requests above 2^63, so a (2^64 - 512)-byte request in a (2^64 - 256)-byte arena was split.
TEST(BfcPolicyTest, SplitRuleDoesNotOverflowNear2To64) {
  BfcPolicy bfc(std::numeric_limits<uint64_t>::max());
  const uint64_t capacity = bfc.capacity_bytes();
  const std::optional<PolicyAllocation> a = bfc.allocate(capacity - 256);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->chunk_bytes, capacity);
  bfc.check_consistency();
  // The same rule where nothing overflows, for contrast.
  BfcPolicy small(1 << 20);
  const std::optional<PolicyAllocation> b = small.allocate((1 << 20) - 256);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->chunk_bytes, uint64_t{1} << 20);
}

}  // namespace
}  // namespace vtpu
