// Sharded arrays and shard_map over the processes of an MPI job: each process holds its own
// cores' blocks, gather gives every process the whole array, and a shard_map whose collectives
// cross the processes returns what a one-process runtime of the same cores (in this process)
// returns, bit for bit. tests/sharding/multi_process_sharding_test.cc runs the same paths with
// the processes simulated by threads.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "vtpu/common/error.h"
#include "vtpu/distributed/distributed.h"
#include "tests/distributed/test_util.h"
#include "vtpu/sharding/shard_map.h"
#include "vtpu/sharding/sharded_array.h"

namespace vtpu {
namespace {

using distributed_test::default_link_options;

std::vector<float> arange(int n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

TEST(ShardedArrayMpiTest, DevicePutHoldsLocalBlocksAndGatherAssemblesTheArray) {
  auto rt = distributed::make_runtime(default_link_options(8));
  const std::vector<float> host = arange(8 * 6);
  const Mesh mesh({4, 2}, {"x", "y"});
  const ShardedArray a =
      ShardedArray::device_put(*rt, host, {8, 6}, NamedSharding(mesh, P("x", "y")));
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(a.is_addressable(d), rt->is_local(d)) << "device " << d;
    if (!rt->is_local(d)) {
      EXPECT_THROW(a.buffer(d), FailedPreconditionError) << "device " << d;
    }
  }
  EXPECT_EQ(a.gather(), host);
  // Partial over 'x' with sum: the addends of the other processes fold in.
  const NamedSharding partial(mesh, PartitionSpec({{}, {"y"}}, {"x"}));
  EXPECT_EQ(ShardedArray::device_put(*rt, host, {8, 6}, partial).gather(), host);
}

// psum over 'x', an all_gather over both axes and a ppermute between the mesh's two ends, each
// returned gathered.
std::vector<std::vector<float>> run_collectives(Runtime& rt) {
  const DeviceMesh mesh = make_mesh(rt, {4, 2}, {"x", "y"});
  const ShardedArray x =
      ShardedArray::device_put(rt, arange(8 * 6), {8, 6}, NamedSharding(mesh, P("x", "y")));
  const ShardMap f = shard_map(
      mesh, {P("x", "y")}, {P(None, "y"), P(), PartitionSpec({{"x", "y"}})},
      [](ShardMapContext& ctx, std::span<const LocalArray> in) {
        LocalArray sum = ctx.psum(in[0], "x");
        LocalArray all = ctx.all_gather(in[0], {"x", "y"}, 0, true);
        LocalArray ends = ctx.ppermute(in[0], {"x", "y"}, std::vector<PermutePair>{{0, 7}, {7, 0}});
        return outputs(std::move(sum), std::move(all), std::move(ends));
      });
  std::vector<std::vector<float>> out;
  for (const ShardedArray& a : f(x)) out.push_back(a.gather());
  return out;
}

TEST(ShardedArrayMpiTest, ShardMapAcrossProcessesMatchesOneProcessBitForBit) {
  auto dist = distributed::make_runtime(default_link_options(8));
  Runtime one(default_link_options(8));
  EXPECT_EQ(run_collectives(*dist), run_collectives(one));
}

TEST(ShardedArrayMpiTest, CheckVmaFailsInEveryProcessWhenADeviceOfTheLastDiffers) {
  auto rt = distributed::make_runtime(default_link_options(8));
  const DeviceMesh mesh = make_mesh(*rt, {8}, {"x"});
  const ShardMap f =
      shard_map(mesh, {}, {P()}, [](ShardMapContext& ctx, std::span<const LocalArray>) {
        const float v = ctx.device() == 7 ? 1.0f : 0.0f;
        return outputs(
            LocalArray::from_host<float>(ctx.core(), std::span<const float>(&v, 1), {1}));
      });
  try {
    f();
    ADD_FAILURE() << "expected check_vma to find device 7's block";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("devices 0 and 7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vtpu
