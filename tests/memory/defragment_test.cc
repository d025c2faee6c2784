// Tests for HbmArena::defragment, auto-defragmentation on out-of-memory, pins, the occupancy map
// and the extended out-of-memory report. Contents are checked with checksums taken before and
// after every compaction.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/allocator_policy.h"
#include "vtpu/memory/hbm_arena.h"
#include "vtpu/memory/heap_planner.h"

namespace vtpu {
namespace {

ArenaOptions options(uint64_t capacity_bytes, bool backing, std::string policy = "bfc") {
  ArenaOptions o;
  o.capacity_bytes = capacity_bytes;
  o.backing = backing;
  o.policy = std::move(policy);
  return o;
}

// Fills a buffer with bytes derived from `seed` and returns their FNV-1a checksum.
uint64_t fill(HbmArena& arena, BufferId id, uint64_t seed) {
  std::byte* p = arena.data(id);
  const uint64_t n = arena.size_bytes(id);
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(p + i, &v, std::min<uint64_t>(8, n - i));
  }
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 1099511628211ull;
  return h;
}

uint64_t checksum(const HbmArena& arena, BufferId id) {
  const std::byte* p = arena.data(id);
  const uint64_t n = arena.size_bytes(id);
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 1099511628211ull;
  return h;
}

// The issue's example: 250, 50, 250, 50, 250, 50, 250, 50 MiB in a 1200 MiB arena; the four
// 250 MiB blocks are freed; 300 MiB must fit after auto-defragmentation and the 50 MiB buffers
// must keep their bytes.
TEST(DefragmentTest, IssueExampleAutoDefragmentKeepsContents) {
  ArenaOptions o = options(1200 * kMiB, /*backing=*/true);
  HbmArena arena(o);
  std::vector<BufferId> big, small;
  std::vector<uint64_t> sums;
  for (int i = 0; i < 4; ++i) {
    big.push_back(arena.allocate(250 * kMiB, "big" + std::to_string(i)));
    small.push_back(arena.allocate(50 * kMiB, "small" + std::to_string(i)));
    sums.push_back(fill(arena, small.back(), 1000 + i));
  }
  for (BufferId id : big) arena.free(id);
  ASSERT_EQ(arena.memory_stats().largest_free_block_bytes, 250 * kMiB);

  const BufferId grads = arena.allocate(300 * kMiB, "grads");
  arena.check_consistency();
  // Sliding compaction: the 50 MiB buffers end at 0, 50, 100 and 150 MiB; the one free chunk
  // [200 MiB, 1200 MiB) is the best fit, so grads lands at 200 MiB.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(arena.offset(small[i]), i * 50 * kMiB);
    EXPECT_EQ(checksum(arena, small[i]), sums[i]) << "small" << i << " lost bytes";
  }
  EXPECT_EQ(arena.offset(grads), 200 * kMiB);
  const MemoryStats s = arena.memory_stats();
  EXPECT_EQ(s.num_defragmentations, 1u);
  EXPECT_EQ(s.defrag_buffers_moved, 4u);
  EXPECT_EQ(s.defrag_bytes_moved, 200 * kMiB);
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_EQ(s.bytes_in_use, 500 * kMiB);
  EXPECT_EQ(s.largest_free_block_bytes, 700 * kMiB);
}

TEST(DefragmentTest, PinnedBuffersStayInPlace) {
  HbmArena arena(options(1200 * kMiB, /*backing=*/false));
  std::vector<BufferId> big, small;
  for (int i = 0; i < 4; ++i) {
    big.push_back(arena.allocate(250 * kMiB));
    small.push_back(arena.allocate(50 * kMiB));
  }
  for (BufferId id : big) arena.free(id);
  arena.pin(small[1]);  // at 550 MiB
  EXPECT_TRUE(arena.is_pinned(small[1]));
  const DefragmentResult r = arena.defragment();
  arena.check_consistency();
  EXPECT_TRUE(r.supported);
  EXPECT_EQ(r.pinned_buffers, 1u);
  EXPECT_EQ(r.buffers_moved, 3u);
  EXPECT_EQ(r.bytes_moved, 150 * kMiB);
  EXPECT_EQ(r.largest_free_before, 250 * kMiB);
  // small0 -> 0, small1 stays at 550, small2 -> 50, small3 -> 100. Free: [150, 550) and
  // [600, 1200).
  EXPECT_EQ(arena.offset(small[0]), 0u);
  EXPECT_EQ(arena.offset(small[1]), 550 * kMiB);
  EXPECT_EQ(arena.offset(small[2]), 50 * kMiB);
  EXPECT_EQ(arena.offset(small[3]), 100 * kMiB);
  EXPECT_EQ(r.largest_free_after, 600 * kMiB);
  EXPECT_EQ(arena.memory_stats().total_free_bytes, 1000 * kMiB);
}

TEST(DefragmentTest, PinsThatBlockCompactionGiveAnOomThatSaysSo) {
  HbmArena arena(options(1000 * kMiB, /*backing=*/false));
  std::vector<BufferId> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(arena.allocate(100 * kMiB));
  for (int i = 0; i < 10; i += 2) arena.free(ids[i]);  // five 100 MiB holes
  for (int i = 1; i < 10; i += 2) arena.pin(ids[i]);
  try {
    arena.allocate(200 * kMiB, "act");
    FAIL() << "200 MiB fit between pinned 100 MiB buffers";
  } catch (const OutOfMemoryError& e) {
    EXPECT_TRUE(e.report().defragmented);
    EXPECT_EQ(e.report().pinned_buffers, 5u);
    EXPECT_NE(std::string(e.what()).find("defragmentation could not remove (5 pinned buffers)"),
              std::string::npos)
        << e.what();
  }
  const MemoryStats s = arena.memory_stats();
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.num_fragmentation_ooms, 1u);
  EXPECT_EQ(s.num_defragmentations, 1u);
  EXPECT_EQ(s.defrag_buffers_moved, 0u);
  // Unpin one: now compaction can open a 200 MiB gap (the buffer at 100 MiB slides to 0).
  arena.unpin(ids[1]);
  const BufferId act = arena.allocate(200 * kMiB, "act");
  EXPECT_EQ(arena.offset(ids[1]), 0u);
  EXPECT_EQ(arena.offset(act), 100 * kMiB);
  arena.check_consistency();
}

TEST(DefragmentTest, AutoDefragmentOffGivesTheFragmentationOom) {
  ArenaOptions o = options(1000 * kMiB, /*backing=*/false);
  o.auto_defragment = false;
  HbmArena arena(o);
  std::vector<BufferId> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(arena.allocate(100 * kMiB));
  for (int i = 0; i < 10; i += 2) arena.free(ids[i]);
  EXPECT_THROW(arena.allocate(200 * kMiB), OutOfMemoryError);
  EXPECT_EQ(arena.memory_stats().num_defragmentations, 0u);
  EXPECT_EQ(arena.memory_stats().num_fragmentation_ooms, 1u);
  // An explicit defragment() still works.
  EXPECT_EQ(arena.defragment().buffers_moved, 5u);
  EXPECT_EQ(arena.memory_stats().largest_free_block_bytes, 500 * kMiB);
}

TEST(DefragmentTest, TrueOomDoesNotDefragment) {
  HbmArena arena(options(1000 * kMiB, /*backing=*/false));
  arena.allocate(900 * kMiB);
  EXPECT_THROW(arena.allocate(200 * kMiB), OutOfMemoryError);
  EXPECT_EQ(arena.memory_stats().num_defragmentations, 0u);
  EXPECT_EQ(arena.memory_stats().num_fragmentation_ooms, 0u);
}

TEST(DefragmentTest, UnsplitRemaindersShrinkToTheRoundedSize) {
  // TensorFlow's 128 MiB threshold: after three 250 MiB buffers one 450 MiB chunk is left; a
  // 400 MiB request takes all of it (450 < 2 * 400 and 50 < 128). Compaction gives the buffer back
  // its rounded 400 MiB without moving it.
  ArenaOptions o = options(1200 * kMiB, /*backing=*/false);
  o.policy_options.max_internal_fragmentation_bytes = 128 * kMiB;
  HbmArena arena(o);
  for (int i = 0; i < 3; ++i) arena.allocate(250 * kMiB);
  const BufferId last = arena.allocate(400 * kMiB);
  EXPECT_EQ(arena.memory_stats().bytes_in_use, 1200 * kMiB);
  arena.defragment();
  arena.check_consistency();
  EXPECT_EQ(arena.memory_stats().bytes_in_use, 1150 * kMiB);
  EXPECT_EQ(arena.memory_stats().largest_free_block_bytes, 50 * kMiB);
  EXPECT_EQ(arena.offset(last), 750 * kMiB);
  EXPECT_EQ(arena.memory_stats().defrag_buffers_moved, 0u);
}

TEST(DefragmentTest, PinErrorsAndRaii) {
  auto arena = std::make_shared<HbmArena>(options(1 * kMiB, /*backing=*/false));
  EXPECT_THROW(arena->pin(42), InvalidArgumentError);
  const BufferId a = arena->allocate(1000);
  EXPECT_THROW(arena->unpin(a), FailedPreconditionError);
  {
    BufferPin pin(arena, a);
    BufferPin again(arena, a);  // pins nest
    EXPECT_TRUE(arena->is_pinned(a));
    again.reset();
    EXPECT_TRUE(arena->is_pinned(a));
    BufferPin moved = std::move(pin);
    EXPECT_TRUE(arena->is_pinned(a));
  }
  EXPECT_FALSE(arena->is_pinned(a));
  arena->pin(a);
  arena->free(a);
  EXPECT_NO_THROW(arena->unpin(a));  // freed while pinned: unpin is a no-op
}

// Random allocations, frees, pins and explicit compactions on a backed arena, for every policy
// that can relocate; contents and consistency are checked after every compaction.
TEST(DefragmentTest, RandomWorkloadsKeepEveryByte) {
  for (const std::string& policy : known_allocator_policies()) {
    for (uint64_t seed = 1; seed <= 8; ++seed) {
      SCOPED_TRACE(policy + " seed " + std::to_string(seed));
      HbmArena arena(options(4 * kMiB, /*backing=*/true, policy));
      std::mt19937_64 rng(seed);
      std::map<BufferId, uint64_t> live;  // id -> checksum
      for (int step = 0; step < 400; ++step) {
        const int action = static_cast<int>(rng() % 10);
        if (action < 5) {
          const uint64_t bytes = 1 + rng() % (64 * 1024);
          try {
            const BufferId id = arena.allocate(bytes);
            live[id] = fill(arena, id, rng());
          } catch (const OutOfMemoryError&) {
          }
        } else if (action < 8 && !live.empty()) {
          auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
          if (arena.is_pinned(it->first)) arena.unpin(it->first);
          arena.free(it->first);
          live.erase(it);
        } else if (action == 8 && !live.empty()) {
          auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
          if (!arena.is_pinned(it->first)) arena.pin(it->first);
        } else {
          std::map<BufferId, uint64_t> pinned_at;
          for (const auto& [id, sum] : live) {
            if (arena.is_pinned(id)) pinned_at[id] = arena.offset(id);
          }
          arena.defragment();
          for (const auto& [id, offset] : pinned_at) ASSERT_EQ(arena.offset(id), offset);
        }
        arena.check_consistency();
        if (step % 50 == 0 || action == 9) {
          for (const auto& [id, sum] : live) ASSERT_EQ(checksum(arena, id), sum) << "id " << id;
        }
      }
      // With nothing pinned, one compaction leaves a single free block for bfc-like policies.
      for (const auto& [id, sum] : live) {
        if (arena.is_pinned(id)) arena.unpin(id);
      }
      arena.defragment();
      arena.check_consistency();
      for (const auto& [id, sum] : live) ASSERT_EQ(checksum(arena, id), sum);
      if (policy != "buddy") {
        const MemoryStats s = arena.memory_stats();
        EXPECT_EQ(s.largest_free_block_bytes, s.total_free_bytes);
      }
    }
  }
}

TEST(OccupancyMapTest, HandWorkedMap) {
  // 100 cells of 256 B each.
  HbmArena arena(options(100 * 256, /*backing=*/false));
  const BufferId a = arena.allocate(256);  // cell 0 used
  arena.allocate(100);                     // cell 1: 100 used, 156 waste -> '+'
  arena.allocate(200);                     // cell 2: 200 used, 56 waste -> '#'
  const BufferId d = arena.allocate(512);  // cells 3-4 used
  arena.allocate(256);                     // cell 5 used
  arena.free(a);
  arena.free(d);
  EXPECT_EQ(arena.occupancy_map(), ".+#..#" + std::string(94, '.'));
}

TEST(OccupancyMapTest, OomReportCarriesBinsMapAndJson) {
  HbmArena arena(options(100 * 256, /*backing=*/false));
  std::vector<BufferId> ids;
  for (int i = 0; i < 100; ++i) ids.push_back(arena.allocate(256, "b" + std::to_string(i)));
  for (int i = 0; i < 100; i += 2) arena.pin(ids[i]);
  for (int i = 1; i < 100; i += 2) arena.free(ids[i]);
  try {
    arena.allocate(512, "two granules");
    FAIL();
  } catch (const OutOfMemoryError& e) {
    const OomReport& r = e.report();
    std::string expected;
    for (int i = 0; i < 50; ++i) expected += "#.";
    EXPECT_EQ(r.occupancy_map, expected);
    ASSERT_EQ(r.bins.size(), 21u);  // bfc
    EXPECT_EQ(r.bins[0].num_free_chunks, 50u);
    EXPECT_EQ(r.bins[0].free_bytes, 50u * 256);
    EXPECT_EQ(r.bins[0].max_chunk_bytes, 256u);
    EXPECT_EQ(r.bins[1].min_chunk_bytes, 512u);
    EXPECT_EQ(r.bins[1].max_chunk_bytes, 768u);
    EXPECT_TRUE(r.defragmented);
    EXPECT_EQ(r.pinned_buffers, 50u);
    EXPECT_DOUBLE_EQ(r.fragmentation, 1.0 - 256.0 / (50 * 256));
    const std::string what = e.what();
    EXPECT_NE(what.find("[" + expected + "]"), std::string::npos) << what;
    EXPECT_NE(what.find("free space by bin"), std::string::npos) << what;
    const nlohmann::json j = r;
    EXPECT_EQ(j.at("occupancy_map"), expected);
    EXPECT_EQ(j.at("bins").size(), 21u);
    EXPECT_EQ(j.at("bins")[0].at("num_free_chunks"), 50);
    EXPECT_EQ(j.at("pinned_buffers"), 50);
    EXPECT_EQ(j.at("defragmented"), true);
    EXPECT_EQ(j.at("expansion"), 1.0);
  }
}

}  // namespace
}  // namespace vtpu

namespace vtpu {
namespace {

TEST(DefragmentTest, PlannedPolicyIsNeverCompacted) {
  const std::vector<BufferInterval> intervals = {{1024, 0, 1, "a"}, {2048, 1, 2, "b"}};
  ArenaOptions o = options(64 * 1024, /*backing=*/false, "planned");
  o.policy_options.heap_plan = std::make_shared<const HeapPlan>(plan_heap(intervals));
  HbmArena arena(o);
  const BufferId a = arena.allocate(1024);
  const uint64_t offset = arena.offset(a);
  const DefragmentResult r = arena.defragment();
  EXPECT_FALSE(r.supported);
  EXPECT_EQ(r.buffers_moved, 0u);
  EXPECT_EQ(arena.offset(a), offset);
  EXPECT_EQ(arena.memory_stats().num_defragmentations, 0u);
}

}  // namespace
}  // namespace vtpu

namespace vtpu {
namespace {

// ArenaOptions::defragment_before_growth, hand-worked on bfc: A, B, C, D of 4 KiB at 0, 4, 8 and
// 12 KiB; A and C freed leave two 4 KiB holes, and the footprint (high-water mark) is 16 KiB. An
// 8 KiB request fits no hole, so bfc would put it at 16 KiB (end 24 KiB), although live 8 KiB +
// 8 KiB = 16 KiB fit below the footprint once compacted: the arena compacts first (B -> 0,
// D -> 4 KiB, 8 KiB moved) and places it at 8 KiB. Contents survive.
TEST(DefragmentTest, BeforeGrowthCompactsInsteadOfRaisingTheFootprint) {
  for (const bool before_growth : {false, true}) {
    ArenaOptions o = options(1 * kMiB, /*backing=*/true);
    o.defragment_before_growth = before_growth;
    HbmArena arena(o);
    const BufferId a = arena.allocate(4 * kKiB), b = arena.allocate(4 * kKiB);
    const BufferId c = arena.allocate(4 * kKiB), d = arena.allocate(4 * kKiB);
    ASSERT_EQ(arena.offset(d), 12 * kKiB);
    const uint64_t sum_b = fill(arena, b, 1), sum_d = fill(arena, d, 2);
    arena.free(a);
    arena.free(c);
    const BufferId e = arena.allocate(8 * kKiB);
    const MemoryStats s = arena.memory_stats();
    if (!before_growth) {
      EXPECT_EQ(arena.offset(e), 16 * kKiB);
      EXPECT_EQ(s.num_defragmentations, 0u);
      continue;
    }
    EXPECT_EQ(arena.offset(b), 0u);
    EXPECT_EQ(arena.offset(d), 4 * kKiB);
    EXPECT_EQ(arena.offset(e), 8 * kKiB);
    EXPECT_EQ(s.num_defragmentations, 1u);
    EXPECT_EQ(s.defrag_buffers_moved, 2u);
    EXPECT_EQ(s.defrag_bytes_moved, 8 * kKiB);
    EXPECT_EQ(s.num_ooms, 0u);
    EXPECT_EQ(checksum(arena, b), sum_b);
    EXPECT_EQ(checksum(arena, d), sum_d);
    arena.check_consistency();
    // Raising the footprint with nothing freed since the compaction: nothing to gain, no
    // compaction.
    const BufferId f = arena.allocate(64 * kKiB);
    EXPECT_EQ(arena.offset(f), 16 * kKiB);
    EXPECT_EQ(arena.memory_stats().num_defragmentations, 1u);
    // A request that fits below the footprint (in a hole) never compacts.
    arena.free(b);
    const BufferId g = arena.allocate(4 * kKiB);
    EXPECT_EQ(arena.offset(g), 0u);
    EXPECT_EQ(arena.memory_stats().num_defragmentations, 1u);
    // A freed buffer at the top: the next growth compacts again. Live: g 4, d 4, e 8 KiB; f freed
    // leaves 16..80 KiB free, the footprint 80 KiB; a 96 KiB request would end at 112 KiB from
    // 16 KiB, and 16 + 96 = 112 KiB compacted: no gain, no compaction.
    arena.free(f);
    const BufferId h = arena.allocate(96 * kKiB);
    EXPECT_EQ(arena.offset(h), 16 * kKiB);
    EXPECT_EQ(arena.memory_stats().num_defragmentations, 1u);
    arena.check_consistency();
  }
}

// The trigger is part of auto-defragmentation: off with auto_defragment = false.
TEST(DefragmentTest, BeforeGrowthNeedsAutoDefragment) {
  ArenaOptions o = options(1 * kMiB, /*backing=*/false);
  o.auto_defragment = false;
  o.defragment_before_growth = true;
  HbmArena arena(o);
  const BufferId a = arena.allocate(4 * kKiB);
  arena.allocate(4 * kKiB);
  arena.free(a);
  EXPECT_EQ(arena.offset(arena.allocate(8 * kKiB)), 8 * kKiB);
  EXPECT_EQ(arena.memory_stats().num_defragmentations, 0u);
}

}  // namespace
}  // namespace vtpu
