// visualize_array_sharding: exact pictures, each worked out by hand from JAX's sizing rule
// (sharding/visualize.h): width = clamp(int(fc * base_width * 2.5), 9, 80) with
// base_width = int(10 * aspect), height = int(fr * 10), the label centred with
// floor((width - len - 2) / 2) spaces on its left and floor((height - 2) / 2) lines above it.
#include "vtpu/sharding/visualize.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/sharding/expect_invalid.h"
#include "vtpu/common/units.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {
namespace {

using vtpu::testing::expect_invalid;

NamedSharding sharding(Mesh mesh, const char* spec) {
  return NamedSharding(std::move(mesh), PartitionSpec::parse(spec));
}

// f32[8] over four cores: base_width = int(10 / 8) = 1, so every box is int(0.25 * 1 * 2.5) = 0
// -> 9 wide; "core 0" (6) leaves 9 - 6 - 2 = 1: 0 spaces left, 1 right. One line high.
TEST(VisualizeTest, OneDimensionalOverFourCores) {
  EXPECT_EQ(visualize_array_sharding(sharding(Mesh({4}, {"x"}), "P('x')"), {8}),
            "┌───────┬───────┬───────┬───────┐\n"
            "│core 0 │core 1 │core 2 │core 3 │\n"
            "└───────┴───────┴───────┴───────┘\n");
}

// f32[8,8] with P('x','y') on (2,2): aspect 1, base_width 10; width int(0.5 * 10 * 2.5) = 12
// (2 spaces either side of "core 0"); height int(0.5 * 10) = 5: 1 line above, 2 below.
TEST(VisualizeTest, TwoDimensionalOverATwoByTwoMesh) {
  EXPECT_EQ(visualize_array_sharding(sharding(Mesh({2, 2}, {"x", "y"}), "P('x', 'y')"), {8, 8}),
            "┌──────────┬──────────┐\n"
            "│          │          │\n"
            "│  core 0  │  core 1  │\n"
            "│          │          │\n"
            "│          │          │\n"
            "├──────────┼──────────┤\n"
            "│          │          │\n"
            "│  core 2  │  core 3  │\n"
            "│          │          │\n"
            "│          │          │\n"
            "└──────────┴──────────┘\n");
}

// f32[4,8] replicated on four cores: aspect 2, base_width 20; width int(1 * 20 * 2.5) = 50,
// "core 0,1,2,3" (12) gets (50 - 12 - 2) / 2 = 18 spaces either side; height 10: 4 lines above
// and 4 below.
TEST(VisualizeTest, ReplicatedIsOneBox) {
  const std::string blank = "│" + std::string(48, ' ') + "│\n";
  std::string rule;
  for (int i = 0; i < 48; ++i) rule += "─";
  std::string want = "┌" + rule + "┐\n";
  for (int i = 0; i < 4; ++i) want += blank;
  want += "│" + std::string(18, ' ') + "core 0,1,2,3" + std::string(18, ' ') + "│\n";
  for (int i = 0; i < 4; ++i) want += blank;
  want += "└" + rule + "┘\n";
  EXPECT_EQ(visualize_array_sharding(sharding(Mesh({4}, {"x"}), "P()"), {4, 8}), want);
}

// f32[8,4] with P('x') on (2,2): rows split over x, replicated over y. Aspect 0.5, base_width 5;
// width int(1 * 5 * 2.5) = 12, "core 0,1" (8) gets 1 space either side; height 5.
TEST(VisualizeTest, PartiallyReplicatedListsEveryHolder) {
  EXPECT_EQ(visualize_array_sharding(sharding(Mesh({2, 2}, {"x", "y"}), "P('x')"), {8, 4}),
            "┌──────────┐\n"
            "│          │\n"
            "│ core 0,1 │\n"
            "│          │\n"
            "│          │\n"
            "├──────────┤\n"
            "│          │\n"
            "│ core 2,3 │\n"
            "│          │\n"
            "│          │\n"
            "└──────────┘\n");
}

// Labels are core ids: on a mesh over cores (3, 1), the first block is core 3's.
TEST(VisualizeTest, LabelsNameCoresInMeshOrderOfBlocks) {
  EXPECT_EQ(visualize_array_sharding(sharding(Mesh({2}, {"x"}, {3, 1}), "P('x')"), {4}),
            "┌───────┬───────┐\n"
            "│core 3 │core 1 │\n"
            "└───────┴───────┘\n");
}

TEST(VisualizeTest, ShardedArrayOverloadDrawsItsSharding) {
  RuntimeOptions o;
  o.num_cores = 4;
  o.hbm_bytes_per_core = 4 * kMiB;
  Runtime rt(o);
  const NamedSharding s = sharding(Mesh({2, 2}, {"x", "y"}), "P('x', 'y')");
  const ShardedArray a = ShardedArray::device_put(rt, std::vector<float>(64), {8, 8}, s);
  EXPECT_EQ(visualize_array_sharding(a), visualize_array_sharding(s, {8, 8}));
}

TEST(VisualizeTest, OnlyRanksOneAndTwoWithoutEmptyDimensions) {
  const NamedSharding s = sharding(Mesh({2}, {"x"}), "P()");
  expect_invalid([&] { visualize_array_sharding(s, {2, 2, 2}); }, {"(2, 2, 2)"});
  expect_invalid([&] { visualize_array_sharding(s, {}); }, {"()"});
  expect_invalid([&] { visualize_array_sharding(s, {4, 0}); }, {"(4, 0)"});
}

}  // namespace
}  // namespace vtpu
