// The data replicas' check (train/replica_check.h): shards that agree bitwise pass, and any
// difference (one ulp, -0.0 against 0.0, another size) is found, placed in its named parameter
// and reported as a failure. Regression: the trainers printed
// "replicas identical after training: NO" and exited 0; the commands now fail on what this check
// returns.
#include "vtpu/train/replica_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "vtpu/common/error.h"

namespace vtpu {
namespace {

std::vector<std::span<const float>> spans(const std::vector<std::vector<float>>& shards) {
  return std::vector<std::span<const float>>(shards.begin(), shards.end());
}

// Two tensor shards (data groups {0, 2} and {1, 3}): the shards differ across the groups, as
// Megatron's shards do, and agree within each.
TEST(ReplicaCheckTest, IdenticalReplicasPass) {
  const std::vector<std::vector<float>> shards = {{1, 2, 3}, {4, 5, 6}, {1, 2, 3}, {4, 5, 6}};
  EXPECT_FALSE(compare_replicas(spans(shards), {{0, 2}, {1, 3}}).has_value());
  // NaNs with the same bits are the same replica (a bitwise check, not ==).
  const std::vector<std::vector<float>> nans = {{NAN, 1}, {NAN, 1}};
  EXPECT_FALSE(compare_replicas(spans(nans), {{0, 1}}).has_value());
}

// Core 3 is one ulp off at element 5 of its shard, the second element of "fc1.b" (elements 4..7):
// found against core 2, its data group's first core, and named.
TEST(ReplicaCheckTest, OneUlpIsFoundAndNamed) {
  std::vector<std::vector<float>> shards(4, std::vector<float>(10, 0.5f));
  shards[3][5] = std::nextafter(0.5f, 1.0f);  // 0.5 + 2^-24 = 0.500000059604644775390625
  const std::vector<ParamSegment> segments = {{"fc1.w", 0, 4}, {"fc1.b", 4, 4}, {"fc2.b", 8, 2}};
  const auto m = compare_replicas(spans(shards), {{0, 1}, {2, 3}}, segments);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->core, 3);
  EXPECT_EQ(m->reference_core, 2);
  EXPECT_EQ(m->parameter, "fc1.b");
  EXPECT_EQ(m->element, 1);
  EXPECT_EQ(m->describe(),
            "core 3's parameters differ from core 2's: fc1.b element 1 is 0.50000006 on core 3, "
            "0.5 on core 2");
  const nlohmann::json j = replica_mismatch_json(m);
  EXPECT_EQ(j["core"], 3);
  EXPECT_EQ(j["reference_core"], 2);
  EXPECT_EQ(j["parameter"], "fc1.b");
  EXPECT_EQ(j["element"], 1);
  EXPECT_EQ(j["message"], m->describe());
  EXPECT_TRUE(replica_mismatch_json(std::nullopt).is_null());
  // Without segments the element is the shard's.
  const auto bare = compare_replicas(spans(shards), {{2, 3}});
  ASSERT_TRUE(bare.has_value());
  EXPECT_EQ(bare->parameter, "");
  EXPECT_EQ(bare->element, 5);
}

// The first difference in group order, then core order: core 1 (group {0, 1}) before core 3.
TEST(ReplicaCheckTest, FirstMismatchInGroupOrder) {
  std::vector<std::vector<float>> shards(4, std::vector<float>{0.0f, 0.0f});
  shards[1][1] = -0.0f;  // == 0.0f, but other bits: a replica that drifted
  shards[3][0] = 7.0f;
  const auto m = compare_replicas(spans(shards), {{0, 1}, {2, 3}});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->core, 1);
  EXPECT_EQ(m->reference_core, 0);
  EXPECT_EQ(m->element, 1);
  EXPECT_EQ(
      m->describe(),
      "core 1's parameters differ from core 0's: shard element 1 is -0 on core 1, 0 on core 0");
}

TEST(ReplicaCheckTest, ShardsOfAnotherSizeDiffer) {
  const std::vector<std::vector<float>> shards = {{1, 2, 3}, {1, 2}};
  const auto m = compare_replicas(spans(shards), {{0, 1}});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->describe(),
            "core 1's parameters differ from core 0's: core 1 has 2 elements, core 0 has 3");
}

TEST(ReplicaCheckTest, AGroupNamingAMissingCoreIsRefused) {
  const std::vector<std::vector<float>> shards = {{1}, {1}};
  EXPECT_THROW(compare_replicas(spans(shards), {{0, 2}}), InvalidArgumentError);
  EXPECT_THROW(compare_replicas(spans(shards), {{-1, 0}}), InvalidArgumentError);
}

// What the commands do with the verdict: an error on stderr and false (exit 1); nothing for
// replicas that agree.
TEST(ReplicaCheckTest, ReportFailsTheRunWithTheMismatch) {
  ReplicaMismatch m;
  m.core = 5;
  m.reference_core = 4;
  m.parameter = "fc2.w";
  m.element = 3;
  m.value = 1.0f;
  m.reference_value = 2.0f;
  m.shard_elements = m.reference_elements = 10;
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(report_replicas(m));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "vtpu: error: data replicas differ after training: core 5's parameters differ from "
            "core 4's: fc2.w element 3 is 1 on core 5, 2 on core 4\n");
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(report_replicas(std::nullopt));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace vtpu
