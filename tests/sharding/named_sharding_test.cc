#include "vtpu/sharding/named_sharding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "tests/sharding/expect_invalid.h"
#include "vtpu/common/error.h"

namespace vtpu {

// Readable failure messages for ranges.
void PrintTo(const IndexRange& r, std::ostream* os) {
  *os << "[" << r.start << ", " << r.stop << ")";
}

namespace {

using Shape = std::vector<int64_t>;
using Ranges = std::vector<IndexRange>;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

PartitionSpec P(const char* text) { return PartitionSpec::parse(text); }

using vtpu::testing::expect_invalid;

class NamedShardingTest : public ::testing::Test {
 protected:
  const Mesh mesh42_{{4, 2}, {"x", "y"}};
};

TEST_F(NamedShardingTest, ShardShapesOnA4x2Mesh) {
  const Shape shape = {8, 4};
  EXPECT_EQ(NamedSharding(mesh42_, P("P('x', 'y')")).shard_shape(shape), (Shape{2, 2}));
  EXPECT_EQ(NamedSharding(mesh42_, P("P('x')")).shard_shape(shape), (Shape{2, 4}));
  EXPECT_EQ(NamedSharding(mesh42_, P("P(None, 'y')")).shard_shape(shape), (Shape{8, 2}));
  EXPECT_EQ(NamedSharding(mesh42_, P("P(('x', 'y'))")).shard_shape(shape), (Shape{1, 4}));
  EXPECT_EQ(NamedSharding(mesh42_, P("P()")).shard_shape(shape), (Shape{8, 4}));
  // The same through C++ construction.
  EXPECT_EQ(NamedSharding(mesh42_, PartitionSpec({{"x"}, {"y"}})).shard_shape(shape),
            (Shape{2, 2}));
  EXPECT_EQ(NamedSharding(mesh42_, PartitionSpec({{"x", "y"}})).shard_shape(shape), (Shape{1, 4}));
  // A braced list converts to a PartitionSpec directly.
  EXPECT_EQ(NamedSharding(mesh42_, {{}, {"y"}}).shard_shape(shape), (Shape{8, 2}));
  EXPECT_EQ(NamedSharding(mesh42_, {{"x", "y"}}).shard_shape(shape), (Shape{1, 4}));
  // Tuple order swaps which axis is major, not the shard count.
  EXPECT_EQ(NamedSharding(mesh42_, P("P(('y', 'x'))")).shard_shape(shape), (Shape{1, 4}));
}

TEST_F(NamedShardingTest, NumShards) {
  const NamedSharding s(mesh42_, P("P(('x', 'y'), None)"));
  EXPECT_EQ(s.num_shards(0), 8);
  EXPECT_EQ(s.num_shards(1), 1);
  EXPECT_EQ(s.num_shards(7), 1);  // past the spec: not split
  EXPECT_EQ(NamedSharding(mesh42_, P("None, 'y'")).num_shards(1), 2);
  expect_invalid([&] { s.num_shards(-1); }, {"dimension -1"});
}

TEST_F(NamedShardingTest, ReplicaIdsOfP_x) {
  // (8, 2) array, P('x'): y is unnamed, so the replica id is the y coordinate.
  const NamedSharding s(mesh42_, P("P('x')"));
  std::vector<int64_t> ids;
  for (int d = 0; d < 8; ++d) ids.push_back(s.replica_id(d));
  EXPECT_THAT(ids, ElementsAre(0, 1, 0, 1, 0, 1, 0, 1));
  EXPECT_EQ(s.num_replicas(), 2);
  EXPECT_FALSE(s.is_fully_replicated());
  // Replicas hold the same block: devices 2 and 3 both hold rows [2, 4).
  EXPECT_EQ(s.index_ranges(2, {8, 2}), (Ranges{{2, 4}, {0, 2}}));
  EXPECT_EQ(s.index_ranges(3, {8, 2}), (Ranges{{2, 4}, {0, 2}}));
}

TEST_F(NamedShardingTest, ReplicaIdsOfOtherSpecs) {
  // P(None, 'y'): x is unnamed, replica id = x coordinate = d / 2.
  const NamedSharding y(mesh42_, P("None, 'y'"));
  std::vector<int64_t> ids;
  for (int d = 0; d < 8; ++d) ids.push_back(y.replica_id(d));
  EXPECT_THAT(ids, ElementsAre(0, 0, 1, 1, 2, 2, 3, 3));
  EXPECT_EQ(y.num_replicas(), 4);

  // P(): both axes unnamed, replica id = row-major over (x, y) = the device's position.
  const NamedSharding all(mesh42_, PartitionSpec{});
  for (int d = 0; d < 8; ++d) EXPECT_EQ(all.replica_id(d), d);
  EXPECT_EQ(all.num_replicas(), 8);
  EXPECT_TRUE(all.is_fully_replicated());

  // Every axis named: one replica.
  const NamedSharding xy(mesh42_, P("x, y"));
  for (int d = 0; d < 8; ++d) EXPECT_EQ(xy.replica_id(d), 0);
  EXPECT_EQ(xy.num_replicas(), 1);

  // Naming only a size-1 axis still replicates everything.
  const NamedSharding one(Mesh({1, 4}, {"a", "b"}), P("a"));
  EXPECT_TRUE(one.is_fully_replicated());
  EXPECT_EQ(one.replica_id(3), 3);
}

TEST_F(NamedShardingTest, IndexMapEven1d) {
  const NamedSharding s(Mesh({4}, {"x"}), P("x"));
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(s.index_ranges(d, {8}), (Ranges{{2 * d, 2 * d + 2}}));
    EXPECT_EQ(s.shard_index(d, 0), d);
  }
  EXPECT_TRUE(s.is_even({8}));
  EXPECT_FALSE(s.is_even({5}));
}

TEST_F(NamedShardingTest, IndexMapUneven1d) {
  const NamedSharding s(Mesh({4}, {"x"}), P("x"));
  // dim 5 over 4 shards: sizes 2, 2, 1, 0.
  EXPECT_EQ(s.shard_shape({5}), (Shape{2}));
  EXPECT_EQ(s.index_ranges(0, {5}), (Ranges{{0, 2}}));
  EXPECT_EQ(s.index_ranges(1, {5}), (Ranges{{2, 4}}));
  EXPECT_EQ(s.index_ranges(2, {5}), (Ranges{{4, 5}}));
  EXPECT_EQ(s.index_ranges(3, {5}), (Ranges{{5, 5}}));
  // dim 6 over 4 shards: sizes 2, 2, 2, 0.
  EXPECT_EQ(s.index_ranges(2, {6}), (Ranges{{4, 6}}));
  EXPECT_EQ(s.index_ranges(3, {6}), (Ranges{{6, 6}}));
  EXPECT_EQ(s.local_shape(3, {6}), (Shape{0}));
  // dim 1 over 4 shards: sizes 1, 0, 0, 0; dim 0: all empty.
  EXPECT_EQ(s.local_shape(0, {1}), (Shape{1}));
  EXPECT_EQ(s.local_shape(1, {1}), (Shape{0}));
  EXPECT_EQ(s.index_ranges(3, {1}), (Ranges{{1, 1}}));
  EXPECT_EQ(s.shard_shape({0}), (Shape{0}));
  EXPECT_EQ(s.index_ranges(2, {0}), (Ranges{{0, 0}}));
}

TEST_F(NamedShardingTest, IndexMapEven2d) {
  const NamedSharding s(mesh42_, P("x, y"));
  // (8, 4): device d = 2 * cx + cy holds rows [2cx, 2cx+2) and columns [2cy, 2cy+2).
  for (int d = 0; d < 8; ++d) {
    const int64_t cx = d / 2, cy = d % 2;
    EXPECT_EQ(s.index_ranges(d, {8, 4}), (Ranges{{2 * cx, 2 * cx + 2}, {2 * cy, 2 * cy + 2}}));
  }
  // Tuple entry: ('x', 'y') numbers the 8 shards row-major, so shard index = device position.
  const NamedSharding t(mesh42_, P("('x', 'y')"));
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(t.shard_index(d, 0), d);
    EXPECT_EQ(t.index_ranges(d, {8, 4}), (Ranges{{d, d + 1}, {0, 4}}));
  }
}

TEST_F(NamedShardingTest, IndexMapUneven2dOn2dMesh) {
  // Mesh (x=2, y=3); array (5, 7) with P('x', 'y'). Rows: c = 3 -> [0,3), [3,5). Columns:
  // c = 3 -> [0,3), [3,6), [6,7). Device d = 3 * cx + cy.
  const NamedSharding s(Mesh({2, 3}, {"x", "y"}), P("x, y"));
  const Shape shape = {5, 7};
  EXPECT_EQ(s.shard_shape(shape), (Shape{3, 3}));
  EXPECT_EQ(s.index_ranges(0, shape), (Ranges{{0, 3}, {0, 3}}));
  EXPECT_EQ(s.index_ranges(1, shape), (Ranges{{0, 3}, {3, 6}}));
  EXPECT_EQ(s.index_ranges(2, shape), (Ranges{{0, 3}, {6, 7}}));
  EXPECT_EQ(s.index_ranges(3, shape), (Ranges{{3, 5}, {0, 3}}));
  EXPECT_EQ(s.index_ranges(4, shape), (Ranges{{3, 5}, {3, 6}}));
  EXPECT_EQ(s.index_ranges(5, shape), (Ranges{{3, 5}, {6, 7}}));
  EXPECT_EQ(s.local_shape(5, shape), (Shape{2, 1}));
  EXPECT_FALSE(s.is_even(shape));
}

TEST_F(NamedShardingTest, TupleOrderMinorFirstOnUnevenDim) {
  // Mesh (x=2, y=3); (7,) with P(('y', 'x')): 6 shards of c = 2 (sizes 2, 2, 2, 1, 0, 0),
  // shard index = cy * 2 + cx.
  const NamedSharding s(Mesh({2, 3}, {"x", "y"}), P("('y', 'x')"));
  const int64_t want_index[6] = {0, 2, 4, 1, 3, 5};
  const Ranges want[6] = {{{0, 2}}, {{4, 6}}, {{7, 7}}, {{2, 4}}, {{6, 7}}, {{7, 7}}};
  for (int d = 0; d < 6; ++d) {
    SCOPED_TRACE(d);
    EXPECT_EQ(s.shard_index(d, 0), want_index[d]);
    EXPECT_EQ(s.index_ranges(d, {7}), want[d]);
  }
}

TEST_F(NamedShardingTest, NonDefaultDeviceOrder) {
  const Mesh mesh({2, 2}, {"x", "y"}, {3, 1, 2, 0});
  const NamedSharding s(mesh, P("x, y"));
  EXPECT_EQ(s.index_ranges(3, {4, 4}), (Ranges{{0, 2}, {0, 2}}));
  EXPECT_EQ(s.index_ranges(1, {4, 4}), (Ranges{{0, 2}, {2, 4}}));
  EXPECT_EQ(s.index_ranges(2, {4, 4}), (Ranges{{2, 4}, {0, 2}}));
  EXPECT_EQ(s.index_ranges(0, {4, 4}), (Ranges{{2, 4}, {2, 4}}));
  const NamedSharding rows(mesh, P("x"));
  EXPECT_EQ(rows.replica_id(3), 0);
  EXPECT_EQ(rows.replica_id(1), 1);
  EXPECT_EQ(rows.replica_id(2), 0);
  EXPECT_EQ(rows.replica_id(0), 1);
  expect_invalid([&] { s.index_ranges(4, {4, 4}); }, {"device 4", "devices=[3, 1, 2, 0]"});
}

TEST_F(NamedShardingTest, ScalarAndTrailingDimensions) {
  const NamedSharding replicated(mesh42_, PartitionSpec{});
  EXPECT_TRUE(replicated.index_ranges(5, {}).empty());
  EXPECT_TRUE(replicated.shard_shape({}).empty());
  expect_invalid([&] { replicated.index_ranges(8, {}); }, {"device 8"});
  // P('x') on a rank-3 array leaves dimensions 1 and 2 whole.
  const NamedSharding s(mesh42_, P("x"));
  EXPECT_EQ(s.index_ranges(7, {4, 3, 2}), (Ranges{{3, 4}, {0, 3}, {0, 2}}));
}

TEST_F(NamedShardingTest, StrictModeRejectsUnevenDims) {
  const NamedSharding s(Mesh({4}, {"x"}), P("x"), ShardingMode::kStrict);
  EXPECT_EQ(s.shard_shape({8, 3}), (Shape{2, 3}));
  expect_invalid(
      [&] {
        s.shard_shape({5, 3});
      },
      {"dimension 0", "(5, 3)", "4 shards", "not divisible by 4"});
  expect_invalid([&] { s.index_ranges(0, {6}); }, {"6", "not divisible by 4"});
  EXPECT_FALSE(s.is_even({6}));  // asking is not an error
  EXPECT_EQ(s.to_string(), "NamedSharding(mesh=Mesh(x=4), spec=P('x'), strict)");
}

TEST_F(NamedShardingTest, ToStringAndEquality) {
  const NamedSharding s(mesh42_, P("x, None"));
  EXPECT_EQ(s.to_string(), "NamedSharding(mesh=Mesh(x=4, y=2), spec=P('x', None))");
  EXPECT_EQ(s, NamedSharding(mesh42_, PartitionSpec({{"x"}, {}})));
  EXPECT_FALSE(s == NamedSharding(mesh42_, PartitionSpec({{"x"}, {}}), ShardingMode::kStrict));
}

TEST_F(NamedShardingTest, UnknownAxis) {
  expect_invalid([&] { NamedSharding(mesh42_, P("x, z")); },
                 {"'z'", "entry 1", "Mesh(x=4, y=2)", "mesh axes: 'x', 'y'"});
  expect_invalid([&] { NamedSharding(mesh42_, P("(x, model)")); }, {"'model'"});
}

TEST_F(NamedShardingTest, RepeatedAxis) {
  expect_invalid([&] { NamedSharding(mesh42_, P("x, x")); },
                 {"P('x', 'x')", "'x' twice", "entries 0 and 1"});
  expect_invalid([&] { NamedSharding(mesh42_, P("(x, x)")); }, {"'x' twice", "entry 0"});
  expect_invalid([&] { NamedSharding(mesh42_, P("(x, y), None, y")); },
                 {"'y' twice", "entries 0 and 2"});
}

TEST_F(NamedShardingTest, SpecLongerThanRank) {
  const NamedSharding s(mesh42_, P("x, y"));
  expect_invalid([&] { s.shard_shape({8}); }, {"P('x', 'y')", "2 entries", "rank 1"});
  expect_invalid([&] { s.index_ranges(0, {}); }, {"rank 0"});
  expect_invalid([&] { s.local_shape(0, {4}); }, {"rank 1"});
  expect_invalid(
      [&] {
        NamedSharding(mesh42_, P("None, None, None")).shard_shape({2, 2});
      },
      {"3 entries", "rank 2"});
}

TEST_F(NamedShardingTest, NegativeDimension) {
  expect_invalid(
      [&] {
        NamedSharding(mesh42_, P("x")).shard_shape({8, -1});
      },
      {"dimension 1", "(8, -1)", "negative"});
}

// Reference model, written independently of NamedSharding: enumerate mesh coordinates with
// nested counters in row-major order, number shards by mixed radix over the named axes, and cut
// each dimension greedily into chunks of ceil(dim / n) (torch.chunk).
struct ReferenceBlock {
  Ranges ranges;
  int64_t replica_id;
};

std::vector<ReferenceBlock> reference_blocks(const Mesh& mesh, const PartitionSpec& spec,
                                             const Shape& shape) {
  const size_t naxes = mesh.shape().size();
  std::vector<ReferenceBlock> out;
  std::vector<int64_t> coord(naxes, 0);
  for (int64_t pos = 0; pos < mesh.size(); ++pos) {
    ReferenceBlock b;
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t n = 1, index = 0;
      for (const std::string& name : spec.entry(d)) {
        size_t a = 0;
        while (mesh.axis_names()[a] != name) ++a;
        index = index * mesh.shape()[a] + coord[a];
        n *= mesh.shape()[a];
      }
      const int64_t chunk = (shape[d] + n - 1) / n;
      int64_t start = 0, remaining = shape[d];
      for (int64_t i = 0; i < index; ++i) {
        const int64_t take = std::min(chunk, remaining);
        start += take;
        remaining -= take;
      }
      b.ranges.push_back({start, start + std::min(chunk, remaining)});
    }
    b.replica_id = 0;
    for (size_t a = 0; a < naxes; ++a) {
      bool named = false;
      for (const std::string& name : spec.axes()) named = named || name == mesh.axis_names()[a];
      if (!named) b.replica_id = b.replica_id * mesh.shape()[a] + coord[a];
    }
    out.push_back(b);
    for (size_t a = naxes; a-- > 0;) {  // advance the row-major counter
      if (++coord[a] < mesh.shape()[a]) break;
      coord[a] = 0;
    }
  }
  return out;
}

TEST_F(NamedShardingTest, RandomShardingsMatchTheReferenceAndTileTheArray) {
  std::mt19937 rng(1234);
  const std::vector<std::pair<Shape, std::vector<std::string>>> meshes = {
      {{8}, {"x"}}, {{4, 2}, {"x", "y"}}, {{2, 3}, {"x", "y"}}, {{2, 2, 2}, {"a", "b", "c"}}};
  for (int iter = 0; iter < 300; ++iter) {
    const auto& [mesh_shape, names] = meshes[rng() % meshes.size()];
    int64_t mesh_size = 1;
    for (int64_t m : mesh_shape) mesh_size *= m;
    std::vector<int> ids(static_cast<size_t>(mesh_size));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const Mesh mesh(mesh_shape, names, ids);
    const size_t rank = 1 + rng() % 3;
    Shape shape(rank);
    for (int64_t& d : shape) d = static_cast<int64_t>(rng() % 10);
    // Each axis is unused or appended to a random dimension's tuple.
    std::vector<PartitionSpec::Entry> entries(rank);
    std::vector<std::string> order = names;
    std::shuffle(order.begin(), order.end(), rng);
    for (const std::string& a : order) {
      const size_t slot = rng() % (rank + 1);
      if (slot < rank) entries[slot].push_back(a);
    }
    while (!entries.empty() && entries.back().empty() && rng() % 2) entries.pop_back();
    const NamedSharding s(mesh, PartitionSpec(entries));
    SCOPED_TRACE(s.to_string());

    const std::vector<ReferenceBlock> ref = reference_blocks(mesh, s.spec(), shape);
    int64_t total = 1;
    for (int64_t d : shape) total *= d;
    std::vector<int> owners(static_cast<size_t>(total), 0);  // replica-0 blocks per element
    for (size_t pos = 0; pos < ids.size(); ++pos) {
      const int dev = mesh.devices()[pos];
      ASSERT_EQ(s.index_ranges(dev, shape), ref[pos].ranges);
      ASSERT_EQ(s.replica_id(dev), ref[pos].replica_id);
      if (ref[pos].replica_id != 0) continue;
      // Count, element by element, which replica-0 blocks hold it.
      for (int64_t flat = 0; flat < total; ++flat) {
        int64_t rest = flat;
        bool inside = true;
        for (size_t d = rank; d-- > 0;) {
          const int64_t i = rest % shape[d];
          rest /= shape[d];
          inside = inside && ref[pos].ranges[d].start <= i && i < ref[pos].ranges[d].stop;
        }
        owners[static_cast<size_t>(flat)] += inside ? 1 : 0;
      }
    }
    for (int c : owners) ASSERT_EQ(c, 1);
    int64_t replica0 = 0;
    for (const ReferenceBlock& b : ref) replica0 += b.replica_id == 0 ? 1 : 0;
    EXPECT_EQ(replica0 * s.num_replicas(), mesh.size());
  }
}

// Regression: a dimension near INT64_MAX overflowed shard_shape (a negative shard size).
TEST(NamedShardingRegressionTest, HugeDimensionsAreRejectedNotWrapped) {
  const NamedSharding s(Mesh({8}, {"x"}), PartitionSpec({{"x"}}));
  EXPECT_THROW(s.shard_shape({INT64_MAX}), InvalidArgumentError);
  EXPECT_EQ(s.shard_shape({int64_t{1} << 62}), (std::vector<int64_t>{int64_t{1} << 59}));
}

TEST_F(NamedShardingTest, PartialAxesAreNeitherShardsNorReplicas) {
  // Mesh 4x2; y unreduced: devices (i, 0) and (i, 1) hold addends 0 and 1 of the same block.
  const NamedSharding s(mesh42_, P("P('x', unreduced={'y'})"));
  EXPECT_TRUE(s.is_partial());
  EXPECT_FALSE(s.is_fully_replicated());
  EXPECT_EQ(s.num_partials(), 2);
  EXPECT_EQ(s.num_replicas(), 1);
  EXPECT_EQ(s.partial_index(0), 0);  // (0, 0)
  EXPECT_EQ(s.partial_index(1), 1);  // (0, 1)
  EXPECT_EQ(s.partial_index(6), 0);  // (3, 0)
  EXPECT_EQ(s.replica_id(1), 0);
  EXPECT_EQ(s.index_ranges(0, {8, 3}), s.index_ranges(1, {8, 3}));
  EXPECT_EQ(s.to_string(), "NamedSharding(mesh=Mesh(x=4, y=2), spec=P('x', unreduced={'y'}))");
  // Unreduced over x only: y is a replica axis again.
  const NamedSharding r(mesh42_, P("P(unreduced={'x'})"));
  EXPECT_EQ(r.num_partials(), 4);
  EXPECT_EQ(r.num_replicas(), 2);
  EXPECT_EQ(r.partial_index(5), 2);  // (2, 1)
  EXPECT_EQ(r.replica_id(5), 1);
}

TEST_F(NamedShardingTest, UnreducedAxisErrors) {
  expect_invalid([&] { NamedSharding(mesh42_, P("P(unreduced={'x', 'x'})")); },
                 {"'x'", "twice", "unreduced"});
  expect_invalid([&] { NamedSharding(mesh42_, P("P(('x', 'y'), unreduced={'y'})")); },
                 {"'y'", "entry 0 and unreduced"});
  expect_invalid([&] { NamedSharding(mesh42_, P("P(unreduced={'q'})")); },
                 {"'q'", "unreduced", "mesh axes: 'x', 'y'"});
  expect_invalid([] { P("P('x' unreduced={'y'})"); }, {"','"});
}

}  // namespace
}  // namespace vtpu
