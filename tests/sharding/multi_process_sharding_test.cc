// Sharded arrays and shard_map when one Runtime spans several processes (simulated by threads,
// tests/threaded_processes.h): each process holds its own cores' blocks only, device_put places
// them from the same host array, gather assembles the whole array in every process, and a
// shard_map's results match the one-process run's bit for bit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "tests/expect_error.h"
#include "tests/threaded_processes.h"
#include "vtpu/sharding/shard_map.h"
#include "vtpu/sharding/sharded_array.h"

namespace vtpu {
namespace {

using testing::expect_error;
using testing_util::ThreadedProcesses;
using Inputs = std::span<const LocalArray>;

RuntimeOptions options(int cores) {
  RuntimeOptions o;
  o.num_cores = cores;
  o.hbm_bytes_per_core = uint64_t{64} << 20;
  o.link_slot_bytes = 256;  // small slots: messages between processes take several
  o.collective_timeout = std::chrono::seconds(30);
  return o;
}

std::vector<float> arange(int n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

TEST(MultiProcessShardedArrayTest, DevicePutPlacesLocalBlocksAndGatherAssemblesEverywhere) {
  ThreadedProcesses procs(2);
  const std::vector<float> host = arange(8 * 6);
  std::vector<std::vector<float>> gathered(2);
  procs.run([&](int p) {
    Runtime rt(options(8), procs.group(p));
    const Mesh mesh({4, 2}, {"x", "y"});
    const ShardedArray a =
        ShardedArray::device_put(rt, host, {8, 6}, NamedSharding(mesh, P("x", "y")));
    EXPECT_FALSE(a.is_fully_addressable());
    for (int d = 0; d < 8; ++d) {
      EXPECT_EQ(a.is_addressable(d), d / 4 == p) << "device " << d;
      if (d / 4 == p) {
        EXPECT_EQ(a.local_data(d).size(), 6u);  // a 2 x 3 block
        EXPECT_EQ(a.local_data(d)[0], host[static_cast<size_t>((d / 2) * 2 * 6 + (d % 2) * 3)]);
      } else {
        expect_error(ErrorCode::kFailedPrecondition, [&] { a.buffer(d); },
                     {"device " + std::to_string(d), "process " + std::to_string(1 - p)});
      }
    }
    gathered[static_cast<size_t>(p)] = a.gather();
  });
  EXPECT_EQ(gathered[0], host);
  EXPECT_EQ(gathered[1], host);
}

TEST(MultiProcessShardedArrayTest, ReplicatedAndPartialArraysGatherAsInOneProcess) {
  ThreadedProcesses procs(2);
  const std::vector<float> host = arange(4 * 4);
  const Mesh mesh({2, 2}, {"x", "y"});
  // P(unreduced={'x'}) with max: device (0, y) holds the values, (1, y) the identity -inf.
  const NamedSharding partial(mesh, PartitionSpec({{}, {"y"}}, {"x"}, ReduceOp::kMax));
  std::vector<std::vector<float>> replicated(2), folded(2);
  procs.run([&](int p) {
    Runtime rt(options(4), procs.group(p));
    const ShardedArray r = ShardedArray::device_put(rt, host, {4, 4}, NamedSharding(mesh, P()));
    replicated[static_cast<size_t>(p)] = r.gather();
    const ShardedArray m = ShardedArray::device_put(rt, host, {4, 4}, partial);
    if (p == 1) {
      EXPECT_TRUE(std::isinf(m.local_data(2)[0]));  // an addend of process 1
    }
    folded[static_cast<size_t>(p)] = m.gather();
  });
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(replicated[static_cast<size_t>(p)], host);
    EXPECT_EQ(folded[static_cast<size_t>(p)], host);
  }
}

TEST(MultiProcessShardedArrayTest, FromBuffersWantsEmptyBuffersForOtherProcessesDevices) {
  ThreadedProcesses procs(2);
  procs.run([&](int p) {
    Runtime rt(options(2), procs.group(p));
    const NamedSharding s(Mesh({2}, {"x"}), P("x"));
    std::vector<DeviceBuffer> buffers(2);
    buffers[static_cast<size_t>(p)] = rt.allocate(p, sizeof(float), "test/block");
    buffers[static_cast<size_t>(p)].as<float>()[0] = static_cast<float>(10 + p);
    const ShardedArray a = ShardedArray::from_buffers(rt, {2}, s, std::move(buffers));
    EXPECT_THAT(a.gather(), ::testing::ElementsAre(10.0f, 11.0f));
    std::vector<DeviceBuffer> wrong(2);  // a block for the other process's device too
    wrong[static_cast<size_t>(p)] = rt.allocate(p, sizeof(float), "test/block");
    wrong[static_cast<size_t>(1 - p)] = rt.allocate(p, sizeof(float), "test/block");
    expect_error(ErrorCode::kInvalidArgument,
                 [&] { ShardedArray::from_buffers(rt, {2}, s, std::move(wrong)); },
                 {"buffer " + std::to_string(1 - p), "process " + std::to_string(1 - p)});
  });
}

// One shard_map over a (4, 2) mesh whose 'x' axis spans the processes: psum over 'x', an
// all_gather over ('x', 'y'), and a replicated output checked by value (check_vma).
std::vector<std::vector<float>> run_collectives(Runtime& rt) {
  const DeviceMesh mesh = make_mesh(rt, {4, 2}, {"x", "y"});
  const std::vector<float> host = arange(8 * 6);
  const ShardedArray x =
      ShardedArray::device_put(rt, host, {8, 6}, NamedSharding(mesh, P("x", "y")));
  const ShardMap f =
      shard_map(mesh, {P("x", "y")}, {P(None, "y"), P(), PartitionSpec({{"x", "y"}})},
                [](ShardMapContext& ctx, Inputs in) {
                  LocalArray sum = ctx.psum(in[0], "x");
                  LocalArray all = ctx.all_gather(in[0], {"x", "y"}, 0, true);
                  LocalArray idx = ctx.ppermute(ctx.psum(in[0], {"x", "y"}), {"x", "y"},
                                                std::vector<PermutePair>{{0, 7}, {7, 0}});
                  return outputs(std::move(sum), std::move(all), std::move(idx));
                });
  std::vector<ShardedArray> out = f(x);
  std::vector<std::vector<float>> host_out;
  for (const ShardedArray& a : out) host_out.push_back(a.gather());
  return host_out;
}

TEST(MultiProcessShardMapTest, CollectivesAcrossProcessesMatchOneProcessBitForBit) {
  Runtime one(options(8));
  const std::vector<std::vector<float>> want = run_collectives(one);
  for (int count : {2, 4}) {
    ThreadedProcesses procs(count);
    std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(count));
    procs.run([&](int p) {
      Runtime rt(options(8), procs.group(p));
      got[static_cast<size_t>(p)] = run_collectives(rt);
    });
    for (int p = 0; p < count; ++p) {
      EXPECT_EQ(got[static_cast<size_t>(p)], want) << count << " processes, process " << p;
    }
  }
}

TEST(MultiProcessShardMapTest, CheckVmaFindsADifferenceAcrossProcessesInEveryProcess) {
  ThreadedProcesses procs(2);
  std::vector<std::string> messages(2);
  procs.run([&](int p) {
    Runtime rt(options(4), procs.group(p));
    const DeviceMesh mesh = make_mesh(rt, {4}, {"x"});
    const ShardMap f = shard_map(mesh, {}, {P()}, [](ShardMapContext& ctx, Inputs) {
      const float v = ctx.device() == 3 ? 1.0f : 0.0f;  // device 3, in process 1, differs
      return outputs(LocalArray::from_host<float>(ctx.core(), std::span<const float>(&v, 1), {1}));
    });
    messages[static_cast<size_t>(p)] =
        expect_error(ErrorCode::kInvalidArgument, [&] { f(); }, {"devices 0 and 3", "check_vma"});
    // Without the check, every device gets device 0's block, copied from process 0.
    ShardMapOptions no_check;
    no_check.check_vma = false;
    const ShardMap g = shard_map(
        mesh, {}, {P()},
        [](ShardMapContext& ctx, Inputs) {
          const float v = static_cast<float>(ctx.device()) + 5.0f;
          return outputs(
              LocalArray::from_host<float>(ctx.core(), std::span<const float>(&v, 1), {1}));
        },
        no_check);
    const ShardedArray out = std::move(g()[0]);
    for (int d : rt.local_core_ids()) EXPECT_EQ(out.local_data(d)[0], 5.0f) << "device " << d;
  });
  EXPECT_EQ(messages[0], messages[1]);
}

TEST(MultiProcessShardMapTest, OutputShapesThatDifferAcrossProcessesFailInEveryProcess) {
  ThreadedProcesses procs(2);
  procs.run([&](int p) {
    Runtime rt(options(2), procs.group(p));
    const DeviceMesh mesh = make_mesh(rt, {2}, {"x"});
    const ShardMap f = shard_map(mesh, {}, {P("x")}, [](ShardMapContext& ctx, Inputs) {
      const std::vector<float> v(static_cast<size_t>(1 + ctx.device()), 0.0f);
      return outputs(LocalArray::from_host<float>(ctx.core(), v, {int64_t{1} + ctx.device()}));
    });
    expect_error(ErrorCode::kInvalidArgument, [&] { f(); }, {"f32[1]", "f32[2]", "device 1"});
  });
}

TEST(MultiProcessShardMapTest, InputInAnotherLayoutIsRelaidAcrossProcesses) {
  ThreadedProcesses procs(2);
  const std::vector<float> host = arange(4 * 2);
  procs.run([&](int p) {
    Runtime rt(options(4), procs.group(p));
    const DeviceMesh mesh = make_mesh(rt, {4}, {"x"});
    const ShardedArray x = ShardedArray::device_put(rt, host, {4, 2}, NamedSharding(mesh, P()));
    // In spec P('x'): each device gets row d, which it doubles.
    const ShardMap f = shard_map(mesh, {P("x")}, {P("x")}, [](ShardMapContext& ctx, Inputs in) {
      LocalArray y = LocalArray::empty(ctx.core(), ElementType::kF32, in[0].shape());
      for (size_t i = 0; i < 2; ++i) y.data<float>()[i] = 2 * in[0].data<float>()[i];
      return outputs(std::move(y));
    });
    EXPECT_THAT(f(x)[0].gather(), ::testing::ElementsAre(0, 2, 4, 6, 8, 10, 12, 14)) << p;
  });
}

}  // namespace
}  // namespace vtpu
