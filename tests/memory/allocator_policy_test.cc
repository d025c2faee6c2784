// Tests for memory/allocator_policy.h: the registry of policies and the helpers every policy
// shares (granule rounding, capacity checks, rebuild input checks).
#include "vtpu/memory/allocator_policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tests/expect_error.h"
#include "tests/memory/policy_test_util.h"
#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/hbm_arena.h"

namespace vtpu {
namespace {

using testing::expect_invalid_argument;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST(AllocatorPolicyTest, RegistryKnowsEveryPolicy) {
  EXPECT_EQ(known_allocator_policies(),
            (std::vector<std::string>{"bfc", "tlsf", "first_fit", "buddy"}));
  for (const std::string& name : known_allocator_policies()) {
    SCOPED_TRACE(name);
    auto p = make_allocator_policy(name, 5000);
    EXPECT_EQ(p->name(), name);
    EXPECT_EQ(p->capacity_bytes(), 4864u);  // every policy rounds down to 256 B
    EXPECT_EQ(p->total_free_bytes(), 4864u);
    EXPECT_TRUE(p->can_relocate());
    p->check_consistency();
    expect_invalid_argument([&] { make_allocator_policy(name, 200); }, "capacity 200 bytes");
  }
}

TEST(AllocatorPolicyTest, UnknownNameListsTheKnownOnes) {
  expect_invalid_argument([] { make_allocator_policy("no-such-policy", 4096); },
                          "unknown allocator policy 'no-such-policy' (expected one of: bfc, tlsf, "
                          "first_fit, buddy)");
}

TEST(AllocatorPolicyTest, RoundUpToGranule) {
  EXPECT_EQ(round_up_to_granule(1, 256), 256u);
  EXPECT_EQ(round_up_to_granule(256, 256), 256u);
  EXPECT_EQ(round_up_to_granule(257, 256), 512u);
  EXPECT_EQ(round_up_to_granule(kMax - 255, 256), kMax - 255);
  EXPECT_EQ(round_up_to_granule(kMax - 254, 256), kMax - 255);  // saturates, never wraps to 0
  EXPECT_EQ(round_up_to_granule(kMax, 64), kMax - 63);
  expect_invalid_argument([] { round_up_to_granule(0, 256); }, "allocation of 0 bytes");
}

TEST(AllocatorPolicyTest, CapacityInGranules) {
  EXPECT_EQ(capacity_in_granules("X", 1000, 256), 768u);
  EXPECT_EQ(capacity_in_granules("X", kMax, 256), kMax - 255);
  expect_invalid_argument([] { capacity_in_granules("X", 255, 256); },
                          "X capacity 255 bytes is below the 256-byte minimum chunk");
}

TEST(AllocatorPolicyTest, RebuildRejectsAChunkNamingItAndTheRule) {
  auto p = make_allocator_policy("first_fit", 4096);
  // The first bad chunk is named by its index, offset and size.
  expect_invalid_argument(
      [&] {
        p->rebuild(std::vector<ChunkInfo>{{0, 256, true}, {256, 256, true}, {256, 0, true}});
      },
      "first_fit rebuild: chunk 2 at offset 256 of 0 bytes has a size the policy cannot hand out "
      "(expected a positive multiple of 256)");
  expect_invalid_argument(
      [&] {
        p->rebuild(std::vector<ChunkInfo>{{0, 256, true}, {0, 256, true}});
      },
      "chunk 1 at offset 0 of 256 bytes is out of address order or overlaps "
      "the previous chunk, which ends at 256");
  p->rebuild(std::vector<ChunkInfo>{{0, 256, true}, {256, 3840, true}});  // touching is fine
  testing::expect_same_chunks(testing::walk_all(*p), {{0, 256, true}, {256, 3840, true}});
}

// Every policy behind an HbmArena, chosen by ArenaOptions::policy: the registry, the arena's
// consistency check and the out-of-memory path work with each. The sequence is a = 1000 B,
// b = 3000 B, free a, c = 200 B; offsets and chunk bytes worked by hand from each policy's rule.
TEST(AllocatorPolicyTest, EveryPolicyRunsInsideAnHbmArena) {
  struct Case {
    std::string policy;
    uint64_t b_offset, a_chunk_bytes, b_chunk_bytes, c_chunk_bytes;
  };
  const Case cases[] = {
      {"bfc", 1024, 1024, 3072, 256},        // best fit; the 1 KiB hole splits for c
      {"tlsf", 1024, 1024, 3072, 256},       // c comes from list (0, 4), the 1 KiB hole
      {"first_fit", 1024, 1024, 3072, 256},  // c takes the lowest hole
      {"buddy", 4096, 1024, 4096, 256},      // b needs a 4 KiB block: the free one at 4096
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.policy);
    HbmArena arena(ArenaOptions{
        .capacity_bytes = kMiB, .policy = k.policy, .policy_options = {}, .backing = false});
    EXPECT_EQ(arena.policy_name(), k.policy);
    const BufferId a = arena.allocate(1000, "a");
    const BufferId b = arena.allocate(3000, "b");
    EXPECT_EQ(arena.offset(a), 0u);
    EXPECT_EQ(arena.offset(b), k.b_offset);
    EXPECT_EQ(arena.memory_stats().bytes_in_use, k.a_chunk_bytes + k.b_chunk_bytes);
    arena.free(a);
    const BufferId c = arena.allocate(200, "c");
    EXPECT_EQ(arena.offset(c), 0u);
    EXPECT_EQ(arena.memory_stats().bytes_in_use, k.b_chunk_bytes + k.c_chunk_bytes);
    arena.check_consistency();
    try {
      arena.allocate(kMiB, "too big");
      ADD_FAILURE() << "1 MiB fitted next to live buffers";
    } catch (const OutOfMemoryError& e) {
      EXPECT_EQ(e.report().policy, k.policy);
      EXPECT_EQ(e.report().total_free_bytes, kMiB - k.b_chunk_bytes - k.c_chunk_bytes);
    }
    arena.free(b);
    arena.free(c);
    arena.check_consistency();
    EXPECT_EQ(arena.memory_stats().largest_free_block_bytes, kMiB);
  }
}

// The tests every policy must pass, one instance per policy.
class PolicyTest : public ::testing::TestWithParam<std::string> {};

// Capacities below one granule are InvalidArgumentError naming the capacity; capacities up to
// 2^64 - 1 work, and requests of 1 byte up to 2^64 - 1 either fit (inside the range, chunk >=
// request) or return nullopt, never throw and never break consistency.
TEST_P(PolicyTest, ExtremeCapacitiesAndSizes) {
  constexpr uint64_t kMax = ~uint64_t{0};
  const std::string& p = GetParam();
  for (uint64_t cap : {uint64_t{0}, uint64_t{1}, uint64_t{255}}) {
    testing::expect_error(ErrorCode::kInvalidArgument, [&] { make_allocator_policy(p, cap); },
                          {"capacity " + std::to_string(cap)});
  }
  for (uint64_t cap : {uint64_t{256}, uint64_t{257}, uint64_t{1} << 63, kMax - 255, kMax}) {
    SCOPED_TRACE(cap);
    auto pol = make_allocator_policy(p, cap);
    EXPECT_EQ(pol->capacity_bytes(), cap / 256 * 256);
    EXPECT_EQ(pol->total_free_bytes(), pol->capacity_bytes());
    for (uint64_t size :
         {uint64_t{1}, uint64_t{255}, uint64_t{256}, uint64_t{257}, (uint64_t{1} << 63) - 1,
          uint64_t{1} << 63, (uint64_t{1} << 63) + 1, kMax - 256, kMax - 255, kMax}) {
      std::optional<PolicyAllocation> a;
      ASSERT_NO_THROW(a = pol->allocate(size)) << size;
      pol->check_consistency();
      if (a) {
        EXPECT_GE(a->chunk_bytes, size);
        EXPECT_LE(a->chunk_bytes, pol->capacity_bytes() - a->offset);
        EXPECT_EQ(pol->free(a->offset), a->chunk_bytes);
        pol->check_consistency();
      }
    }
    EXPECT_THROW(pol->allocate(0), InvalidArgumentError);
    EXPECT_EQ(pol->total_free_bytes(), pol->capacity_bytes());
  }
}

// A stray free is InvalidArgumentError naming the offset and changes nothing, whatever the offset.
// Regression: BFC passed UINT64_MAX to its offset index, where it is the empty-slot marker, so
// free(UINT64_MAX) freed the live chunk with id 0 and left a dangling index entry.
TEST_P(PolicyTest, StrayFreesThrowAndChangeNothing) {
  constexpr uint64_t kMax = ~uint64_t{0};
  auto pol = make_allocator_policy(GetParam(), 1 << 20);
  const std::optional<PolicyAllocation> a = pol->allocate(4096);
  ASSERT_TRUE(a);
  for (uint64_t offset :
       {kMax, kMax - 255, uint64_t{1} << 20, uint64_t{1} << 63, a->offset + 256, a->offset + 1}) {
    testing::expect_error(ErrorCode::kInvalidArgument, [&] { pol->free(offset); },
                          {"offset " + std::to_string(offset)});
    pol->check_consistency();
    EXPECT_EQ(pol->total_free_bytes(), (uint64_t{1} << 20) - a->chunk_bytes) << offset;
  }
  EXPECT_EQ(pol->free(a->offset), a->chunk_bytes);
  testing::expect_error(ErrorCode::kInvalidArgument, [&] { pol->free(a->offset); },
                        {"offset " + std::to_string(a->offset)});  // double free
  pol->check_consistency();
  EXPECT_EQ(pol->total_free_bytes(), uint64_t{1} << 20);
}

// Bad rebuild layouts throw InvalidArgumentError and leave the policy as it was.
TEST_P(PolicyTest, RebuildRejectsBadLayoutsAtomically) {
  constexpr uint64_t kMax = ~uint64_t{0};
  const std::vector<std::vector<ChunkInfo>> bad = {
      {{0, 0, true}},
      {{256, 256, true}, {0, 256, true}},
      {{0, 512, true}, {256, 256, true}},
      {{kMax - 255, 512, true}},
      {{(1 << 20) - 256, 512, true}},
      {{0, kMax, true}},
      {{0, 300, true}},
      {{1, 256, true}},
      {{1 << 20, 256, true}},
      {{0, uint64_t{1} << 21, true}},
  };
  auto pol = make_allocator_policy(GetParam(), 1 << 20);
  const std::optional<PolicyAllocation> a = pol->allocate(4096);
  ASSERT_TRUE(a);
  for (size_t i = 0; i < bad.size(); ++i) {
    EXPECT_THROW(pol->rebuild(bad[i]), InvalidArgumentError) << "layout " << i;
    pol->check_consistency();
    EXPECT_EQ(pol->total_free_bytes(), (uint64_t{1} << 20) - a->chunk_bytes);
  }
  EXPECT_EQ(pol->free(a->offset), a->chunk_bytes);
}

INSTANTIATE_TEST_SUITE_P(Policies, PolicyTest,
                         ::testing::Values("bfc", "tlsf", "first_fit", "buddy"),
                         [](const auto& info) { return info.param; });

// Randomized, policy x seed: 2000 allocate/free/stray-free operations per seed, each answer
// checked against an independent model after every step. BFC and first fit and buddy are
// predicted exactly (BfcReferenceModel, FreeSpaceModel); TLSF is checked for its rule.
class PolicyRandomTest : public ::testing::TestWithParam<std::tuple<std::string, uint32_t>> {};

TEST_P(PolicyRandomTest, MatchesTheModel) {
  const auto& [policy, seed] = GetParam();
  using testing::FreeChunks;
  using testing::FreeSpaceModel;
  if (policy == "bfc") {
    ASSERT_NO_FATAL_FAILURE(testing::run_bfc_random_test(seed));
  } else if (policy == "tlsf") {
    testing::run_random_test("tlsf", FreeChunks::kCoalesced, seed, testing::expect_tlsf_choice);
  } else if (policy == "first_fit") {
    testing::run_random_test("first_fit", FreeChunks::kCoalesced, seed,
                             testing::exactly(&FreeSpaceModel::predict_first_fit));
  } else {
    ASSERT_EQ(policy, "buddy");
    testing::run_random_test("buddy", FreeChunks::kBuddy, seed,
                             testing::exactly(&FreeSpaceModel::predict_buddy));
  }
}

INSTANTIATE_TEST_SUITE_P(PoliciesAndSeeds, PolicyRandomTest,
                         ::testing::Combine(::testing::Values("bfc", "tlsf", "first_fit", "buddy"),
                                            ::testing::Range<uint32_t>(0, 50)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_seed" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace vtpu
