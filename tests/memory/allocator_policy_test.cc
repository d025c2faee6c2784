// Tests for memory/allocator_policy.h: the registry of policies and the helpers every policy
// shares (granule rounding, capacity checks, rebuild input checks).
#include "memory/allocator_policy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/units.h"
#include "tests/memory/policy_test_util.h"

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
  testing::expect_chunks(testing::walk_all(*p), {{0, 256, true}, {256, 3840, true}});
}

}  // namespace
}  // namespace vtpu
