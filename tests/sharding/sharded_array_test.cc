#include "vtpu/sharding/sharded_array.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "tests/sharding/naive_block.h"
#include "vtpu/common/error.h"
#include "vtpu/common/units.h"
#include "vtpu/memory/hbm_arena.h"
#include "vtpu/runtime/runtime.h"

namespace vtpu {
namespace {

using Shape = std::vector<int64_t>;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::unique_ptr<Runtime> make_runtime(int num_cores, uint64_t hbm_bytes = 64 * kMiB,
                                      bool backing = true) {
  RuntimeOptions o;
  o.num_cores = num_cores;
  o.hbm_bytes_per_core = hbm_bytes;
  o.hbm_backing = backing;
  return std::make_unique<Runtime>(o);
}

NamedSharding sharding(Mesh mesh, const char* spec) {
  return NamedSharding(std::move(mesh), PartitionSpec::parse(spec));
}

/// x[i][j] = 10 i + j for a (rows, cols) array.
std::vector<float> ten_i_plus_j(int64_t rows, int64_t cols) {
  std::vector<float> x;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) x.push_back(static_cast<float>(10 * i + j));
  }
  return x;
}

using vtpu::testing::naive_block;

std::vector<float> as_vector(std::span<const float> s) { return {s.begin(), s.end()}; }

template <typename Error, typename Fn>
void expect_error(Fn fn, std::initializer_list<const char*> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const Error& e) {
    for (const char* p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

TEST(ShardedArrayTest, FiveRowsOverFourCores) {
  auto rt = make_runtime(4);
  const std::vector<float> x = ten_i_plus_j(5, 10);
  const ShardedArray a = ShardedArray::device_put(*rt, x, {5, 10}, sharding(Mesh({4}, {"x"}), "x"));
  EXPECT_EQ(a.global_shape(), (Shape{5, 10}));
  EXPECT_EQ(a.num_elements(), 50);
  std::vector<int64_t> rows;
  for (int d = 0; d < 4; ++d) rows.push_back(a.local_shape(d)[0]);
  EXPECT_THAT(rows, ElementsAre(2, 2, 1, 0));
  for (int d = 0; d < 4; ++d) EXPECT_EQ(a.local_shape(d)[1], 10);
  // Device 2 holds row 4: 40..49. Device 3 holds nothing: a valid 0-byte buffer on core 3.
  std::vector<float> row4(10);
  std::iota(row4.begin(), row4.end(), 40.0f);
  EXPECT_THAT(as_vector(a.local_data(2)), ElementsAreArray(row4));
  EXPECT_EQ(a.buffer(2).size_bytes(), 10 * sizeof(float));
  EXPECT_EQ(a.buffer(3).size_bytes(), 0u);
  EXPECT_TRUE(a.buffer(3).valid());
  EXPECT_EQ(a.buffer(3).core_id(), 3);
  EXPECT_TRUE(a.local_data(3).empty());
  EXPECT_EQ(a.local_data(0)[15], 15.0f);  // row 1, column 5
  EXPECT_EQ(a.local_data(1)[0], 20.0f);   // row 2
  const std::vector<float> back = a.gather();
  EXPECT_EQ(back, x);
  EXPECT_EQ(a.to_string(), "ShardedArray(f32[5,10], NamedSharding(mesh=Mesh(x=4), spec=P('x')))");
}

TEST(ShardedArrayTest, SixRowsOverFourCores) {
  auto rt = make_runtime(4);
  std::vector<float> x(6 * 256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const ShardedArray a =
      ShardedArray::device_put(*rt, x, {6, 256}, sharding(Mesh({4}, {"x"}), "x"));
  std::vector<int64_t> rows;
  for (int d = 0; d < 4; ++d) rows.push_back(a.local_shape(d)[0]);
  EXPECT_THAT(rows, ElementsAre(2, 2, 2, 0));
  EXPECT_EQ(a.buffer(3).size_bytes(), 0u);
  EXPECT_EQ(a.local_data(2)[0], x[4 * 256]);
  EXPECT_EQ(a.gather(), x);
}

TEST(ShardedArrayTest, BuffersLiveOnTheirCoresAndAreFreed) {
  auto rt = make_runtime(4);
  {
    const ShardedArray a =
        ShardedArray::device_put(*rt, ten_i_plus_j(8, 3), {8, 3}, sharding(Mesh({4}, {"x"}), "x"));
    for (int d = 0; d < 4; ++d) {
      EXPECT_EQ(a.buffer(d).core_id(), d);
      EXPECT_EQ(rt->core(d).hbm().memory_stats().num_live_buffers, 1u);
    }
  }
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(rt->core(d).hbm().memory_stats().num_live_buffers, 0u);
    rt->core(d).hbm().check_consistency();
  }
}

TEST(ShardedArrayTest, TwoDimensionalShardingOfAnUnevenArray) {
  // Mesh (x=2, y=3) over 6 cores; (5, 7) with P('x', 'y'): blocks of 3/2 rows by 3/3/1 columns.
  auto rt = make_runtime(6);
  const std::vector<float> x = ten_i_plus_j(5, 7);
  const ShardedArray a =
      ShardedArray::device_put(*rt, x, {5, 7}, sharding(Mesh({2, 3}, {"x", "y"}), "x, y"));
  EXPECT_EQ(a.local_shape(2), (Shape{3, 1}));
  EXPECT_THAT(as_vector(a.local_data(2)), ElementsAre(6, 16, 26));
  EXPECT_EQ(a.local_shape(4), (Shape{2, 3}));
  EXPECT_THAT(as_vector(a.local_data(4)), ElementsAre(33, 34, 35, 43, 44, 45));
  EXPECT_EQ(a.local_shape(5), (Shape{2, 1}));
  EXPECT_THAT(as_vector(a.local_data(5)), ElementsAre(36, 46));
  EXPECT_EQ(a.gather(), x);
}

TEST(ShardedArrayTest, NonDefaultDeviceOrder) {
  auto rt = make_runtime(4);
  const std::vector<float> x = ten_i_plus_j(4, 6);
  const ShardedArray a = ShardedArray::device_put(
      *rt, x, {4, 6}, sharding(Mesh({2, 2}, {"x", "y"}, {3, 1, 2, 0}), "x, y"));
  // Device 3 is at mesh (0, 0): rows 0-1, columns 0-2.
  EXPECT_EQ(a.buffer(3).core_id(), 3);
  EXPECT_THAT(as_vector(a.local_data(3)), ElementsAre(0, 1, 2, 10, 11, 12));
  // Device 0 is at mesh (1, 1): rows 2-3, columns 3-5.
  EXPECT_EQ(a.buffer(0).core_id(), 0);
  EXPECT_THAT(as_vector(a.local_data(0)), ElementsAre(23, 24, 25, 33, 34, 35));
  EXPECT_THAT(as_vector(a.local_data(1)), ElementsAre(3, 4, 5, 13, 14, 15));
  EXPECT_EQ(a.gather(), x);
}

TEST(ShardedArrayTest, MeshOnASubsetOfCores) {
  auto rt = make_runtime(4);
  const std::vector<float> x = ten_i_plus_j(3, 2);
  const ShardedArray a =
      ShardedArray::device_put(*rt, x, {3, 2}, sharding(Mesh({2}, {"x"}, {3, 1}), "x"));
  EXPECT_THAT(as_vector(a.local_data(3)), ElementsAre(0, 1, 10, 11));
  EXPECT_THAT(as_vector(a.local_data(1)), ElementsAre(20, 21));
  EXPECT_EQ(rt->core(0).hbm().memory_stats().num_live_buffers, 0u);
  EXPECT_EQ(a.gather(), x);
  expect_error<InvalidArgumentError>([&] { a.local_data(0); }, {"device 0 is not in"});
}

TEST(ShardedArrayTest, ReplicasEachHoldACopy) {
  auto rt = make_runtime(4);
  const std::vector<float> x = ten_i_plus_j(2, 4);
  // P(None, 'y') on (x=2, y=2): devices 0 and 2 hold columns 0-1, devices 1 and 3 columns 2-3.
  const ShardedArray a =
      ShardedArray::device_put(*rt, x, {2, 4}, sharding(Mesh({2, 2}, {"x", "y"}), "None, y"));
  EXPECT_THAT(as_vector(a.local_data(0)), ElementsAre(0, 1, 10, 11));
  EXPECT_THAT(as_vector(a.local_data(2)), ElementsAre(0, 1, 10, 11));
  EXPECT_THAT(as_vector(a.local_data(3)), ElementsAre(2, 3, 12, 13));
  EXPECT_NE(a.local_data(0).data(), a.local_data(2).data());
  EXPECT_EQ(a.gather(), x);
  // Fully replicated: every core holds the whole array.
  const ShardedArray r =
      ShardedArray::device_put(*rt, x, {2, 4}, NamedSharding(Mesh({4}, {"x"}), PartitionSpec{}));
  for (int d = 0; d < 4; ++d) EXPECT_EQ(as_vector(r.local_data(d)), x);
  EXPECT_EQ(r.gather(), x);
}

TEST(ShardedArrayTest, GatherReadsReplicaZero) {
  auto rt = make_runtime(4);
  const std::vector<float> x = ten_i_plus_j(4, 1);
  ShardedArray a =
      ShardedArray::device_put(*rt, x, {4, 1}, sharding(Mesh({2, 2}, {"x", "y"}), "x"));
  // Devices 1 and 3 are replica 1 (y = 1): writing there does not change the gather.
  a.local_data(1)[0] = -1.0f;
  EXPECT_EQ(a.gather(), x);
  // Device 2 is replica 0 of rows 2-3.
  a.local_data(2)[1] = 99.0f;
  EXPECT_THAT(a.gather(), ElementsAre(0, 10, 20, 99));
}

TEST(ShardedArrayTest, ScalarsAndEmptyArrays) {
  auto rt = make_runtime(4);
  const std::vector<float> one = {3.5f};
  const ShardedArray s =
      ShardedArray::device_put(*rt, one, {}, NamedSharding(Mesh({4}, {"x"}), PartitionSpec{}));
  EXPECT_EQ(s.num_elements(), 1);
  EXPECT_THAT(as_vector(s.local_data(2)), ElementsAre(3.5f));
  EXPECT_THAT(s.gather(), ElementsAre(3.5f));

  const ShardedArray e = ShardedArray::device_put(*rt, {}, {0, 3}, sharding(Mesh({4}, {"x"}), "x"));
  EXPECT_EQ(e.num_elements(), 0);
  for (int d = 0; d < 4; ++d) EXPECT_EQ(e.buffer(d).size_bytes(), 0u);
  EXPECT_TRUE(e.gather().empty());
}

TEST(ShardedArrayTest, RandomRoundTripsMatchANaiveReference) {
  auto rt = make_runtime(8);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> value(-100.0f, 100.0f);
  const std::vector<std::pair<Shape, std::vector<std::string>>> meshes = {
      {{8}, {"x"}}, {{4, 2}, {"x", "y"}}, {{2, 4}, {"x", "y"}}, {{2, 2, 2}, {"a", "b", "c"}}};
  for (int iter = 0; iter < 60; ++iter) {
    const auto& [mesh_shape, names] = meshes[rng() % meshes.size()];
    std::vector<int> ids(8);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const size_t rank = 1 + rng() % 3;
    Shape shape(rank);
    for (int64_t& d : shape) d = static_cast<int64_t>(rng() % 12);
    std::vector<PartitionSpec::Entry> entries(rank);
    std::vector<std::string> order = names;
    std::shuffle(order.begin(), order.end(), rng);
    for (const std::string& a : order) {
      const size_t slot = rng() % (rank + 1);
      if (slot < rank) entries[slot].push_back(a);
    }
    const NamedSharding s(Mesh(mesh_shape, names, ids), PartitionSpec(entries));
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> host(static_cast<size_t>(n));
    for (float& v : host) v = value(rng);
    SCOPED_TRACE(s.to_string() + " shape rank " + std::to_string(rank));

    const ShardedArray a = ShardedArray::device_put(*rt, host, shape, s);
    for (int dev : ids) {
      const std::vector<float> want = naive_block(host, shape, s.index_ranges(dev, shape));
      ASSERT_EQ(as_vector(a.local_data(dev)), want);
      ASSERT_EQ(a.buffer(dev).size_bytes(), want.size() * sizeof(float));
      ASSERT_EQ(a.buffer(dev).core_id(), dev);
    }
    ASSERT_EQ(a.gather(), host);
  }
}

TEST(ShardedArrayTest, FromBuffersAdoptsBlocks) {
  auto rt = make_runtime(4);
  const NamedSharding s = sharding(Mesh({4}, {"x"}), "x");
  std::vector<DeviceBuffer> buffers;
  for (int d = 0; d < 4; ++d) {
    const int64_t rows = d < 2 ? 2 : (d == 2 ? 1 : 0);  // (5, 2) over 4: 2, 2, 1, 0 rows
    buffers.push_back(rt->allocate(d, static_cast<uint64_t>(rows * 2) * sizeof(float)));
    std::span<float> b = buffers.back().as<float>();
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(4 * d + static_cast<int>(i));
  }
  const ShardedArray a = ShardedArray::from_buffers({5, 2}, s, std::move(buffers));
  EXPECT_THAT(a.gather(), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
}

TEST(ShardedArrayTest, FromBuffersRejectsMismatches) {
  auto rt = make_runtime(4);
  const NamedSharding s = sharding(Mesh({2}, {"x"}), "x");
  auto two = [&](int core0, uint64_t bytes0) {
    std::vector<DeviceBuffer> b;
    b.push_back(rt->allocate(core0, bytes0));
    b.push_back(rt->allocate(1, 8));
    return b;
  };
  expect_error<InvalidArgumentError>(
      [&] {
        ShardedArray::from_buffers({2, 2}, s, std::vector<DeviceBuffer>(1));
      },
      {"got 1 buffers", "expected 2"});
  expect_error<InvalidArgumentError>(
      [&] {
        ShardedArray::from_buffers({2, 2}, s, two(2, 8));
      },
      {"buffer 0 is on core 2", "expected core 0"});
  expect_error<InvalidArgumentError>(
      [&] {
        ShardedArray::from_buffers({2, 2}, s, two(0, 12));
      },
      {"holds 12 bytes", "expected 8 bytes", "(1, 2)"});
}

TEST(ShardedArrayTest, WrongHostSize) {
  auto rt = make_runtime(4);
  const std::vector<float> x(49);
  expect_error<InvalidArgumentError>(
      [&] {
        ShardedArray::device_put(*rt, x, {5, 10}, sharding(Mesh({4}, {"x"}), "x"));
      },
      {"49 elements", "(5, 10)", "expected 50 elements"});
}

TEST(ShardedArrayTest, MeshDeviceIsNotACore) {
  auto rt = make_runtime(4);
  const std::vector<float> x(8);
  expect_error<InvalidArgumentError>(
      [&] { ShardedArray::device_put(*rt, x, {8}, sharding(Mesh({8}, {"x"}), "x")); },
      {"mesh device 4", "not a core", "0..3"});
}

TEST(ShardedArrayTest, SpecLongerThanRankAndUnknownAxis) {
  auto rt = make_runtime(4);
  const std::vector<float> x(8);
  const Mesh mesh({2, 2}, {"x", "y"});
  expect_error<InvalidArgumentError>(
      [&] { ShardedArray::device_put(*rt, x, {8}, sharding(mesh, "x, y")); }, {"rank 1"});
  expect_error<InvalidArgumentError>(
      [&] { ShardedArray::device_put(*rt, x, {8}, sharding(mesh, "z")); }, {"'z'"});
  expect_error<InvalidArgumentError>(
      [&] { ShardedArray::device_put(*rt, x, {8}, sharding(mesh, "(x, x)")); }, {"twice"});
}

TEST(ShardedArrayTest, StrictShardingRejectsUnevenArrays) {
  auto rt = make_runtime(4);
  const std::vector<float> x(50);
  const NamedSharding strict(Mesh({4}, {"x"}), PartitionSpec({{"x"}}), ShardingMode::kStrict);
  expect_error<InvalidArgumentError>(
      [&] {
        ShardedArray::device_put(*rt, x, {5, 10}, strict);
      },
      {"not divisible by 4"});
  const std::vector<float> y = ten_i_plus_j(4, 10);
  EXPECT_EQ(ShardedArray::device_put(*rt, y, {4, 10}, strict).gather(), y);
}

TEST(ShardedArrayTest, MetadataOnlyArenasCannotHoldData) {
  auto rt = make_runtime(2, 64 * kMiB, /*backing=*/false);
  const std::vector<float> x(4);
  expect_error<FailedPreconditionError>(
      [&] { ShardedArray::device_put(*rt, x, {4}, sharding(Mesh({2}, {"x"}), "x")); },
      {"core 0", "metadata-only"});
}

TEST(ShardedArrayTest, OutOfMemoryLeavesNothingAllocated) {
  // 1 MiB per core, and core 1 is already full: core 0's 256 KiB block (f32[8,8192], no tile
  // padding) is allocated first, then core 1's fails, and core 0's must be released again.
  auto rt = make_runtime(2, 1 * kMiB);
  const DeviceBuffer filler = rt->allocate(1, 800 * kKiB, "filler");
  const std::vector<float> x(16 * 8192);
  EXPECT_THROW(ShardedArray::device_put(*rt, x, {16, 8192}, sharding(Mesh({2}, {"x"}), "x")),
               OutOfMemoryError);
  EXPECT_EQ(rt->core(0).hbm().memory_stats().num_live_buffers, 0u);
  EXPECT_EQ(rt->core(1).hbm().memory_stats().num_live_buffers, 1u);  // the filler only
  EXPECT_GE(rt->core(0).hbm().memory_stats().num_allocs, 1u);        // core 0 did allocate
}

TEST(ShardedArrayTest, MoveKeepsTheBuffers) {
  auto rt = make_runtime(2);
  const std::vector<float> x = ten_i_plus_j(2, 2);
  ShardedArray a = ShardedArray::device_put(*rt, x, {2, 2}, sharding(Mesh({2}, {"x"}), "x"));
  ShardedArray b = std::move(a);
  EXPECT_EQ(b.gather(), x);
  EXPECT_EQ(rt->core(0).hbm().memory_stats().num_live_buffers, 1u);
}

TEST(ShardedArrayTest, OutlivesTheRuntime) {
  std::vector<float> x = ten_i_plus_j(2, 3);
  std::unique_ptr<ShardedArray> a;
  {
    auto rt = make_runtime(2);
    a = std::make_unique<ShardedArray>(
        ShardedArray::device_put(*rt, x, {2, 3}, sharding(Mesh({2}, {"x"}), "x")));
  }
  EXPECT_EQ(a->gather(), x);
}

TEST(ShardedArrayTest, PartialDevicePutKeepsTheValueOnAddendZeroAndGatherFolds) {
  auto rt = make_runtime(4);
  const Mesh mesh({2, 2}, {"x", "y"});
  const std::vector<float> x = {1, 2, 3, 4};
  const ShardedArray a =
      ShardedArray::device_put(*rt, x, {4}, sharding(mesh, "P('x', unreduced={'y'})"));
  EXPECT_THAT(as_vector(a.local_data(0)), ElementsAre(1, 2));  // (0, 0): addend 0
  EXPECT_THAT(as_vector(a.local_data(1)), ElementsAre(0, 0));  // (0, 1): identity of sum
  EXPECT_THAT(as_vector(a.local_data(2)), ElementsAre(3, 4));
  EXPECT_THAT(a.gather(), ElementsAreArray(x));
  // Max: the identity is -inf; gather folds with max.
  const ShardedArray m = ShardedArray::device_put(
      *rt, x, {4}, sharding(mesh, "P(unreduced={'x', 'y'}, reduce_op='max')"));
  EXPECT_EQ(m.local_data(3)[0], -std::numeric_limits<float>::infinity());
  EXPECT_THAT(m.gather(), ElementsAreArray(x));
  // Addends written by hand: the gather is their sum over y.
  ShardedArray h = ShardedArray::device_put(*rt, x, {4}, sharding(mesh, "P('x', unreduced={'y'})"));
  h.local_data(1)[0] = 10;  // (0, 1) adds 10 to element 0
  h.local_data(3)[1] = -4;  // (1, 1) adds -4 to element 3
  EXPECT_THAT(h.gather(), ElementsAre(11, 2, 3, 0));
}

// gather() folds partial max/min arrays with the collectives' combine(), which propagates NaN from
// either operand as XLA's max/min do. Its own earlier fold used std::max/std::min, which dropped a
// NaN held by any addend other than the first, so gather() disagreed with the all-reduce of the
// same partial array (NaN wherever it sat).
TEST(ShardedArrayTest, PartialMaxAndMinGatherPropagateNaNFromAnyAddend) {
  auto rt = make_runtime(2);
  const Mesh mesh({2}, {"x"});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const char* spec :
       {"P(unreduced={'x'}, reduce_op='max')", "P(unreduced={'x'}, reduce_op='min')"}) {
    const std::vector<float> x = {1, 2, 3};
    ShardedArray a = ShardedArray::device_put(*rt, x, {3}, sharding(mesh, spec));
    a.local_data(1)[1] = nan;  // addend 1 holds a NaN for element 1
    a.local_data(0)[2] = nan;  // addend 0 holds a NaN for element 2
    const std::vector<float> g = a.gather();
    EXPECT_EQ(g[0], 1.0f) << spec;
    EXPECT_TRUE(std::isnan(g[1])) << spec;
    EXPECT_TRUE(std::isnan(g[2])) << spec;
  }
}

// Regression: device_put and gather held raw pointers into HBM while a core's program allocated on
// the same arena, and an allocation that failed for fragmentation compacted the arena under them;
// gather() returned wrong data in about a third of these rounds before the copies pinned their
// buffers.
TEST(ShardedArrayTest, CopiesSurviveConcurrentCompaction) {
  RuntimeOptions o;
  o.num_cores = 1;
  o.hbm_bytes_per_core = 64 << 20;
  Runtime rt(o);
  Mesh mesh({1}, {"x"});
  NamedSharding sharding(mesh, PartitionSpec({{"x"}}));
  const int64_t n = 4 << 20;  // 16 MiB of f32, as (4096, 1024): no tile padding
  const Shape shape = {4096, 1024};
  std::vector<float> host(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<float>(i % 1000);
  // Frees `filler` (the hole below the array) and asks for 48 MiB: 48 MiB are free in total but
  // not in one piece, so the arena compacts and would move the array's block down, unless pinned.
  auto compact_soon = [&](DeviceBuffer& filler, std::atomic<bool>& go) {
    return rt.run_spmd_async([&](CoreContext& ctx) {
      while (!go) std::this_thread::yield();
      filler.reset();
      try {
        DeviceBuffer big = ctx.allocate(48 << 20, "big");
      } catch (const OutOfMemoryError&) {  // the block was pinned during a copy: cannot compact
      }
    });
  };
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE(round);
    {  // gather() while the arena compacts
      DeviceBuffer filler = rt.allocate(0, 8 << 20, "filler");
      ShardedArray a = ShardedArray::device_put(rt, host, shape, sharding);
      std::atomic<bool> go{false};
      auto done = compact_soon(filler, go);
      go = true;
      const std::vector<float> back = a.gather();
      done.get();
      ASSERT_TRUE(back == host);
      ASSERT_TRUE(a.gather() == host);
    }
    {  // device_put while the arena compacts
      DeviceBuffer filler = rt.allocate(0, 8 << 20, "filler");
      std::atomic<bool> go{false};
      auto done = compact_soon(filler, go);
      go = true;
      ShardedArray a = ShardedArray::device_put(rt, host, shape, sharding);
      done.get();
      ASSERT_TRUE(a.gather() == host);
    }
  }
}

}  // namespace
}  // namespace vtpu
