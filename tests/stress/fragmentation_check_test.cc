// Tests for stress/fragmentation_check.h: with auto-defragmentation, bfc and first_fit never fail
// an allocation that total free bytes cover; without it, the same workloads do.
#include "vtpu/stress/fragmentation_check.h"

#include <gtest/gtest.h>

#include "vtpu/common/error.h"

namespace vtpu {
namespace {

FragmentationCheckOptions small_check(const std::string& policy, bool defrag) {
  FragmentationCheckOptions o;
  o.policy = policy;
  o.auto_defragment = defrag;
  o.workloads = 8;
  o.ops = 1000;
  o.occupancy = 0.95;
  return o;
}

TEST(FragmentationCheckTest, AutoDefragmentationRemovesEveryFalseOom) {
  for (const char* policy : {"bfc", "first_fit"}) {
    SCOPED_TRACE(policy);
    const FragmentationCheckResult off = run_fragmentation_check(small_check(policy, false));
    const FragmentationCheckResult on = run_fragmentation_check(small_check(policy, true));
    // The workloads run the arena close to 95% full, so without compaction some requests fail
    // for fragmentation; with it none do (a compacted bfc or first_fit arena has one free block).
    EXPECT_GT(off.false_ooms, 0u);
    EXPECT_EQ(off.defragmentations, 0u);
    EXPECT_EQ(on.false_ooms, 0u);
    EXPECT_EQ(on.workloads_with_false_oom, 0);
    EXPECT_GT(on.defragmentations, 0u);
    EXPECT_GT(on.bytes_moved, 0u);
    EXPECT_EQ(on.workloads, 8);
    EXPECT_GT(on.max_occupancy, 0.9);
    EXPECT_LE(on.max_occupancy, 0.95);
  }
}

TEST(FragmentationCheckTest, SameSeedsSameCounts) {
  const FragmentationCheckResult a = run_fragmentation_check(small_check("bfc", false));
  const FragmentationCheckResult b = run_fragmentation_check(small_check("bfc", false));
  EXPECT_EQ(a.allocations, b.allocations);
  EXPECT_EQ(a.false_ooms, b.false_ooms);
  EXPECT_EQ(a.true_ooms, b.true_ooms);
}

TEST(FragmentationCheckTest, BadOptions) {
  FragmentationCheckOptions o;
  o.occupancy = 1.5;
  EXPECT_THROW(run_fragmentation_check(o), InvalidArgumentError);
  o = FragmentationCheckOptions{};
  o.workloads = 0;
  EXPECT_THROW(run_fragmentation_check(o), InvalidArgumentError);
  o = FragmentationCheckOptions{};
  o.policy = "nope";
  EXPECT_THROW(run_fragmentation_check(o), InvalidArgumentError);
}

}  // namespace
}  // namespace vtpu
