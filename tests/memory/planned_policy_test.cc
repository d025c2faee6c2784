// Tests for memory/planned_policy.h: the factory's plan requirement, replay of planned offsets in
// allocation order with wrap-around, errors for requests off the plan, the walk and statistics,
// and replays through an HbmArena.
#include "vtpu/memory/planned_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/memory/bfc_reference_model.h"  // expect_same_chunks
#include "tests/memory/plan_replay.h"
#include "tests/sharding/expect_invalid.h"
#include "vtpu/common/error.h"
#include "vtpu/memory/hbm_arena.h"

namespace vtpu {
namespace {

using testing::expect_invalid;
using testing::expect_same_chunks;
using ::testing::HasSubstr;

// x 1000 B live [0,2], y 300 B live [1,3], z 2000 B live [3,4]; 256-byte alignment.
// Size order: z [0,2048); x is dead when z lives: [0,1024); y lives with both: [2048,2560).
// Heap 2560 = peak (z + y at time 3). Allocation order x, y, z.
std::shared_ptr<const HeapPlan> xyz_plan() {
  auto plan = std::make_shared<const HeapPlan>(
      plan_heap({{1000, 0, 2, "x"}, {300, 1, 3, "y"}, {2000, 3, 4, "z"}}));
  EXPECT_EQ(plan->offsets(), (std::vector<uint64_t>{0, 2048, 0}));
  EXPECT_EQ(plan->heap_bytes(), 2560u);
  EXPECT_EQ(plan->peak_live_bytes(), 2560u);
  return plan;
}

PolicyOptions with_plan(std::shared_ptr<const HeapPlan> plan) {
  PolicyOptions o;
  o.heap_plan = std::move(plan);
  return o;
}

std::vector<ChunkInfo> walk_all(const AllocatorPolicy& p) {
  std::vector<ChunkInfo> out;
  p.walk([&](const ChunkInfo& c) { out.push_back(c); });
  return out;
}

PolicyAllocation must_allocate(PlannedPolicy& p, uint64_t size_bytes) {
  std::optional<PolicyAllocation> a = p.allocate(size_bytes);
  EXPECT_TRUE(a.has_value()) << "allocate(" << size_bytes << ") failed";
  p.check_consistency();
  return a.value_or(PolicyAllocation{~uint64_t{0}, 0});
}

TEST(PlannedPolicyTest, FactoryRequiresAPlan) {
  expect_invalid([] { make_allocator_policy("planned", 4096); },
                 {"'planned'", "PolicyOptions::heap_plan"});
  auto p = make_allocator_policy("planned", 4096, with_plan(xyz_plan()));
  EXPECT_EQ(p->name(), "planned");
  EXPECT_EQ(p->capacity_bytes(), 4096u);
  // It needs a plan, so it is not among the names a user can pick without one.
  const auto& known = known_allocator_policies();
  EXPECT_EQ(std::find(known.begin(), known.end(), "planned"), known.end());
}

TEST(PlannedPolicyTest, RejectsPlansThatDoNotFitOrAreEmpty) {
  expect_invalid([] { PlannedPolicy(2559, with_plan(xyz_plan())); }, {"2560 bytes", "2559 bytes"});
  EXPECT_NO_THROW(PlannedPolicy(2560, with_plan(xyz_plan())));
  expect_invalid([] { PlannedPolicy(4096, with_plan(std::make_shared<HeapPlan>(plan_heap({})))); },
                 {"no buffers"});
}

TEST(PlannedPolicyTest, HandsOutPlannedOffsetsInAllocationOrderAndWraps) {
  PlannedPolicy p(4096, with_plan(xyz_plan()));
  EXPECT_EQ(p.allocation_index(), 0u);
  PolicyAllocation x = must_allocate(p, 1000);
  EXPECT_EQ(x.offset, 0u);
  EXPECT_EQ(x.chunk_bytes, 1024u);
  PolicyAllocation y = must_allocate(p, 300);
  EXPECT_EQ(y.offset, 2048u);
  EXPECT_EQ(y.chunk_bytes, 512u);
  expect_same_chunks(
      walk_all(p), {{0, 1024, true}, {1024, 1024, false}, {2048, 512, true}, {2560, 1536, false}});
  EXPECT_EQ(p.total_free_bytes(), 4096u - 1536u);
  EXPECT_EQ(p.largest_free_block_bytes(), 1536u);
  EXPECT_EQ(p.free(0), 1024u);
  p.check_consistency();
  PolicyAllocation z = must_allocate(p, 2000);
  EXPECT_EQ(z.offset, 0u);
  EXPECT_EQ(z.chunk_bytes, 2048u);
  expect_same_chunks(walk_all(p), {{0, 2048, true}, {2048, 512, true}, {2560, 1536, false}});
  // The last buffer wraps the cursor: the next allocate starts the next step.
  EXPECT_EQ(p.allocation_index(), 0u);
  EXPECT_EQ(p.num_replays(), 1u);
  EXPECT_EQ(p.free(2048), 512u);
  EXPECT_EQ(p.free(0), 2048u);
  p.check_consistency();
  expect_same_chunks(walk_all(p), {{0, 4096, false}});
  EXPECT_EQ(must_allocate(p, 1000).offset, 0u);
  EXPECT_EQ(p.allocation_index(), 1u);
}

TEST(PlannedPolicyTest, LargerThanPlannedThrowsNamingIndexLabelAndBytes) {
  PlannedPolicy p(4096, with_plan(xyz_plan()));
  must_allocate(p, 1000);
  try {
    p.allocate(301);
    ADD_FAILURE() << "a request above the plan was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("planned allocation 1"));
    EXPECT_THAT(e.what(), HasSubstr("'y'"));
    EXPECT_THAT(e.what(), HasSubstr("requests 301 bytes"));
    EXPECT_THAT(e.what(), HasSubstr("plan has 300 bytes"));
  }
  EXPECT_EQ(p.allocation_index(), 1u);  // unchanged
  expect_invalid([&] { p.allocate(0); }, {"requests 0 bytes"});
  // A smaller request uses part of its planned slot.
  PolicyAllocation y = must_allocate(p, 1);
  EXPECT_EQ(y.offset, 2048u);
  EXPECT_EQ(y.chunk_bytes, 512u);
}

TEST(PlannedPolicyTest, OccupiedRangeGivesNothingAndKeepsTheCursor) {
  PlannedPolicy p(4096, with_plan(xyz_plan()));
  must_allocate(p, 1000);  // x at [0, 1024)
  must_allocate(p, 300);   // y at [2048, 2560)
  // z's range [0, 2048) still holds x: the program did not free x in time.
  EXPECT_FALSE(p.allocate(2000).has_value());
  EXPECT_EQ(p.allocation_index(), 2u);
  p.check_consistency();
  p.free(0);
  EXPECT_EQ(must_allocate(p, 2000).offset, 0u);
}

TEST(PlannedPolicyTest, OverlapIsFoundWhateverChunkStartsInsideTheRange) {
  // a [0,256) and b [256,512) live at time 0; c [0,512) at time 1. With b still in use, c's range
  // holds a chunk that starts inside it.
  auto plan = std::make_shared<const HeapPlan>(
      std::vector<BufferInterval>{{256, 0, 0, "a"}, {256, 0, 0, "b"}, {512, 1, 1, "c"}},
      std::vector<uint64_t>{0, 256, 0});
  PlannedPolicy p(1024, with_plan(plan));
  must_allocate(p, 256);
  must_allocate(p, 256);
  p.free(0);
  EXPECT_FALSE(p.allocate(512).has_value());
  p.free(256);
  EXPECT_EQ(must_allocate(p, 512).chunk_bytes, 512u);
}

TEST(PlannedPolicyTest, BadFreesThrow) {
  PlannedPolicy p(4096, with_plan(xyz_plan()));
  must_allocate(p, 1000);
  expect_invalid([&] { p.free(1024); }, {"offset 1024", "not the start of a chunk in use"});
  p.free(0);
  expect_invalid([&] { p.free(0); }, {"offset 0"});
  p.check_consistency();
}

TEST(PlannedPolicyTest, CannotRelocate) {
  PlannedPolicy p(4096, with_plan(xyz_plan()));
  EXPECT_FALSE(p.can_relocate());
  EXPECT_EQ(p.placement_alignment(512), 256u);
  EXPECT_THROW(p.rebuild({}), FailedPreconditionError);
  EXPECT_EQ(p.rounded_bytes(1), 256u);
  EXPECT_EQ(p.rounded_bytes(257), 512u);
  EXPECT_EQ(p.rounded_bytes(~uint64_t{0}), ~uint64_t{0} / 256 * 256);
  EXPECT_THROW(p.rounded_bytes(0), InvalidArgumentError);
  EXPECT_TRUE(p.bin_stats().empty());
}

ArenaOptions planned_arena(std::shared_ptr<const HeapPlan> plan, uint64_t capacity_bytes,
                           bool backing) {
  return ArenaOptions{.capacity_bytes = capacity_bytes,
                      .policy = "planned",
                      .policy_options = with_plan(std::move(plan)),
                      .backing = backing};
}

TEST(PlannedPolicyTest, ReplaysThroughAnHbmArenaForSeveralSteps) {
  auto plan = xyz_plan();
  HbmArena arena(planned_arena(plan, plan->heap_bytes(), /*backing=*/true));
  EXPECT_EQ(arena.policy_name(), "planned");
  testing::replay_plan(arena, *plan, 5);
}

TEST(PlannedPolicyTest, ArenaReportsALateFreeAsOutOfMemory) {
  auto plan = xyz_plan();
  HbmArena arena(planned_arena(plan, 4096, /*backing=*/false));
  arena.allocate(1000, "x");
  const BufferId y = arena.allocate(300, "y");
  try {
    arena.allocate(2000, "z");
    ADD_FAILURE() << "z was placed over the live x";
  } catch (const OutOfMemoryError& e) {
    ASSERT_FALSE(e.report().largest_live_buffers.empty());
    EXPECT_EQ(e.report().largest_live_buffers.front().label, "x");
    EXPECT_EQ(e.report().policy, "planned");
  }
  arena.check_consistency();
  arena.free(y);
  EXPECT_EQ(arena.memory_stats().num_ooms, 1u);
}

TEST(PlannedPolicyTest, RandomPlansReplayThroughAnArena) {
  std::mt19937_64 gen(3);
  for (int trial = 0; trial < 30; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    std::vector<BufferInterval> iv;
    const size_t n = 1 + gen() % 25;
    for (size_t i = 0; i < n; ++i) {
      const int64_t a = static_cast<int64_t>(gen() % 30), b = static_cast<int64_t>(gen() % 30);
      iv.push_back({1 + gen() % 20000, std::min(a, b), std::max(a, b), "b" + std::to_string(i)});
    }
    auto plan = std::make_shared<const HeapPlan>(plan_heap(std::move(iv)));
    HbmArena arena(planned_arena(plan, plan->heap_bytes() + 4096, /*backing=*/trial % 2 == 0));
    testing::replay_plan(arena, *plan, 3);
  }
}

// A failed allocation left the cursor on its planned buffer,
// so under `vtpu stress` (which skips a failed allocation for good) every later request was
// matched to the previous buffer, silently at the wrong offset or, for a larger request, with an
// InvalidArgumentError that aborted the whole run. With planned_skip_failed the cursor moves on.
TEST(PlannedPolicyTest, SkipFailedKeepsTheCursorInStep) {
  // a 1024 B [0,0], b 1024 B [1,1], c 2048 B [2,2]: all three share offset 0.
  auto plan = std::make_shared<const HeapPlan>(
      plan_heap({{1024, 0, 0, "a"}, {1024, 1, 1, "b"}, {2048, 2, 2, "c"}}));
  ASSERT_EQ(plan->offsets(), (std::vector<uint64_t>{0, 0, 0}));
  PolicyOptions o = with_plan(plan);
  o.planned_skip_failed = true;
  PlannedPolicy p(4096, o);
  ASSERT_TRUE(p.allocate(1024).has_value());   // a
  EXPECT_FALSE(p.allocate(1024).has_value());  // b: a is freed late, so b's range is busy
  EXPECT_EQ(p.allocation_index(), 2u);         // b is given up: c is next
  p.free(0);
  const auto c = p.allocate(2048);  // c, larger than b: no "requests more than planned"
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->offset, 0u);
  EXPECT_EQ(c->chunk_bytes, 2048u);
  p.check_consistency();
  // Without the option the cursor stays on b, and c's 2048 B are more than b's plan.
  PlannedPolicy q(4096, with_plan(plan));
  ASSERT_TRUE(q.allocate(1024).has_value());
  EXPECT_FALSE(q.allocate(1024).has_value());
  EXPECT_EQ(q.allocation_index(), 1u);
  q.free(0);
  EXPECT_THROW(q.allocate(2048), InvalidArgumentError);
}

}  // namespace
}  // namespace vtpu
