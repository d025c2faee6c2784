#include "vtpu/sharding/mesh.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/sharding/expect_invalid.h"
#include "vtpu/common/error.h"

namespace vtpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

/// Expects `fn` to throw InvalidArgumentError whose message contains every one of `parts`.
using vtpu::testing::expect_invalid;

TEST(MeshTest, DefaultIdsAreRowMajor) {
  const Mesh mesh({4, 2}, {"x", "y"});
  EXPECT_EQ(mesh.size(), 8);
  EXPECT_EQ(mesh.num_axes(), 2);
  EXPECT_THAT(mesh.shape(), ElementsAre(4, 2));
  EXPECT_THAT(mesh.axis_names(), ElementsAre("x", "y"));
  EXPECT_THAT(mesh.devices(), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_EQ(mesh.axis_size("x"), 4);
  EXPECT_EQ(mesh.axis_size("y"), 2);
  EXPECT_EQ(mesh.axis_index("x"), 0);
  EXPECT_EQ(mesh.axis_index("y"), 1);
  EXPECT_TRUE(mesh.has_axis("y"));
  EXPECT_FALSE(mesh.has_axis("z"));
  // Device 5 sits at row 2, column 1 of the 4x2 grid.
  EXPECT_THAT(mesh.coords_of(5), ElementsAre(2, 1));
  EXPECT_THAT(mesh.coords_of(0), ElementsAre(0, 0));
  EXPECT_THAT(mesh.coords_of(7), ElementsAre(3, 1));
  EXPECT_EQ(mesh.device_at({2, 1}), 5);
  EXPECT_EQ(mesh.device_at({3, 0}), 6);
  EXPECT_EQ(mesh.to_string(), "Mesh(x=4, y=2)");
}

TEST(MeshTest, CoordsAndDeviceAtAreInverseOnThreeAxes) {
  const Mesh mesh({2, 3, 2}, {"a", "b", "c"});
  for (int d = 0; d < 12; ++d) {
    const std::vector<int64_t> c = mesh.coords_of(d);
    // Row-major: d = (a * 3 + b) * 2 + c.
    EXPECT_EQ((c[0] * 3 + c[1]) * 2 + c[2], d);
    EXPECT_EQ(mesh.device_at(c), d);
  }
}

TEST(MeshTest, NonDefaultDeviceOrder) {
  const Mesh mesh({2, 2}, {"x", "y"}, {3, 1, 2, 0});
  EXPECT_EQ(mesh.device_at({0, 0}), 3);
  EXPECT_EQ(mesh.device_at({0, 1}), 1);
  EXPECT_EQ(mesh.device_at({1, 0}), 2);
  EXPECT_EQ(mesh.device_at({1, 1}), 0);
  EXPECT_THAT(mesh.coords_of(3), ElementsAre(0, 0));
  EXPECT_THAT(mesh.coords_of(0), ElementsAre(1, 1));
  EXPECT_EQ(mesh.flat_index_of(2), 2);
  EXPECT_TRUE(mesh.contains_device(3));
  EXPECT_FALSE(mesh.contains_device(4));
  EXPECT_EQ(mesh.to_string(), "Mesh(x=2, y=2; devices=[3, 1, 2, 0])");
}

TEST(MeshTest, SparseIdsAreAllowed) {
  const Mesh mesh({3}, {"x"}, {10, 20, 7});
  EXPECT_THAT(mesh.coords_of(7), ElementsAre(2));
  EXPECT_EQ(mesh.device_at({1}), 20);
}

TEST(MeshTest, ScalarMeshHasOneDevice) {
  const Mesh mesh({}, {}, {4});
  EXPECT_EQ(mesh.size(), 1);
  EXPECT_TRUE(mesh.coords_of(4).empty());
  EXPECT_EQ(mesh.device_at({}), 4);
  EXPECT_EQ(mesh.to_string(), "Mesh(; devices=[4])");
}

TEST(MeshTest, Equality) {
  EXPECT_EQ(Mesh({2, 2}, {"x", "y"}), Mesh({2, 2}, {"x", "y"}, {0, 1, 2, 3}));
  EXPECT_FALSE(Mesh({2, 2}, {"x", "y"}) == Mesh({2, 2}, {"x", "y"}, {3, 1, 2, 0}));
  EXPECT_FALSE(Mesh({2, 2}, {"x", "y"}) == Mesh({2, 2}, {"y", "x"}));
  EXPECT_FALSE(Mesh({4}, {"x"}) == Mesh({2, 2}, {"x", "y"}));
}

TEST(MeshTest, UnknownAxisListsTheMeshAxes) {
  const Mesh mesh({4, 2}, {"x", "y"});
  expect_invalid([&] { mesh.axis_index("z"); }, {"unknown mesh axis 'z'", "'x', 'y'"});
  expect_invalid([&] { mesh.axis_size("model"); }, {"'model'", "'x', 'y'"});
}

TEST(MeshTest, BadMeshesAreRejected) {
  expect_invalid([] { Mesh({4, 2}, {"x"}); }, {"2 axes", "1 axis names"});
  expect_invalid([] { Mesh({4, 0}, {"x", "y"}); }, {"'y'", "size 0", ">= 1"});
  expect_invalid([] { Mesh({-1}, {"x"}); }, {"size -1"});
  expect_invalid([] { Mesh({2, 2}, {"x", ""}); }, {"empty name"});
  expect_invalid([] { Mesh({2, 2}, {"x", "x"}); }, {"'x'", "used twice"});
  // Names no PartitionSpec could name, and '(', ')', '+', ',' and spaces, which made strategy
  // names ambiguous ("dp(a))+tp(b)"): axis names are identifiers.
  const std::string rule =
      "is not an identifier (expected [A-Za-z_][A-Za-z0-9_]*: ASCII letters, digits and '_', not "
      "starting with a digit";
  for (const char* bad :
       {"'", "a\"b", "a)", "dp(x)", "a+b", " a", "a b", "a,b", "1x", "a-b", "\xc3\xa9", "a\tb"}) {
    SCOPED_TRACE(bad);
    expect_invalid(
        [&] {
          Mesh({2, 2}, {"x", bad});
        },
        {("mesh axis 1 name <" + std::string(bad) + "> " + rule).c_str()});
  }
  // Identifiers: letters, digits after the first character, and '_' anywhere.
  EXPECT_EQ(Mesh({2, 1, 1}, {"_", "Data_1", "x9"}).axis_names(),
            (std::vector<std::string>{"_", "Data_1", "x9"}));
  EXPECT_EQ(check_mesh_axis_name(3, "model"), "");
  EXPECT_EQ(check_mesh_axis_name(3, "a b"),
            "axis 3 name <a b> " + rule +
                ", as strategy names and PartitionSpecs are built from axis names)");
  expect_invalid([] { Mesh({2, 2}, {"x", "y"}, {0, 1, 2}); }, {"needs 4 devices", "3 device ids"});
  expect_invalid(
      [] {
        Mesh({2, 2}, {"x", "y"}, {0, 1, 2, 3, 4});
      },
      {"needs 4 devices", "5 device ids"});
  expect_invalid([] { Mesh({2}, {"x"}, {0, -3}); }, {"-3", "negative"});
  expect_invalid([] { Mesh({3}, {"x"}, {1, 2, 1}); }, {"device id 1", "twice"});
  // A product that overflows int64 is reported, not wrapped around.
  expect_invalid(
      [] {
        Mesh({int64_t{1} << 40, int64_t{1} << 40}, {"x", "y"}, {0, 1});
      },
      {"more than 2^63 devices", "2 device ids"});
  expect_invalid([] { Mesh({int64_t{1} << 32, int64_t{1} << 32}, {"x", "y"}); }, {"2^30"});
}

TEST(MeshTest, BadLookupsAreRejected) {
  const Mesh mesh({4, 2}, {"x", "y"});
  expect_invalid([&] { mesh.coords_of(8); }, {"device 8", "Mesh(x=4, y=2)"});
  expect_invalid([&] { mesh.device_at({1}); }, {"1 coordinates", "2 axes"});
  expect_invalid([&] { mesh.device_at({4, 0}); }, {"coordinate 4", "'x'", "0..3"});
  expect_invalid([&] { mesh.device_at({0, -1}); }, {"coordinate -1", "'y'", "0..1"});
}

// Worked by hand on the 2x4 grid (data=2 rows, model=4 columns; device = 4 * d + m):
//     model: 0 1 2 3
//   data 0 [ 0 1 2 3 ]
//   data 1 [ 4 5 6 7 ]
TEST(MeshTest, ReplicaGroupsFlattenTheListedAxesRowMajor) {
  const Mesh mesh({2, 4}, {"data", "model"});
  using Groups = std::vector<std::vector<int>>;
  EXPECT_EQ(mesh.replica_groups(std::vector<std::string>{"model"}),
            (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(mesh.replica_groups(std::vector<std::string>{"data"}),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // P(('data', 'model')): rank = 4 * d + m; P(('model', 'data')): rank = 2 * m + d.
  EXPECT_EQ(mesh.replica_groups(std::vector<std::string>{"data", "model"}),
            (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(mesh.replica_groups(std::vector<std::string>{"model", "data"}),
            (Groups{{0, 4, 1, 5, 2, 6, 3, 7}}));
  EXPECT_EQ(mesh.replica_groups(std::vector<std::string>{}),
            (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  // Non-default ids: the groups hold the ids at those coordinates.
  const Mesh odd({2, 2}, {"x", "y"}, {3, 1, 2, 0});
  EXPECT_EQ(odd.replica_groups(std::vector<std::string>{"y"}), (Groups{{3, 1}, {2, 0}}));
  expect_invalid(
      [&] {
        mesh.replica_groups(std::vector<std::string>{"data", "data"});
      },
      {"'data'", "2 times"});
  expect_invalid([&] { mesh.replica_groups(std::vector<int>{2}); }, {"position 2", "0..1"});
  expect_invalid([&] { mesh.replica_groups(std::vector<std::string>{"z"}); }, {"'z'"});
}

}  // namespace
}  // namespace vtpu
