// Regression test from adversarial testing: ShardedArray's own copies (device_put, gather) hold
// raw pointers into HBM while a core's program may allocate on the same arena, and an allocation
// that fails for fragmentation compacts the arena (auto_defragment). Before the copies pinned
// their buffers, gather() returned wrong data in about a third of these rounds.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "runtime/runtime.h"
#include "sharding/sharded_array.h"

namespace vtpu {
namespace {

TEST(AdversarialShardingTest, CopiesSurviveConcurrentCompaction) {
  RuntimeOptions o;
  o.num_cores = 1;
  o.hbm_bytes_per_core = 64 << 20;
  Runtime rt(o);
  Mesh mesh({1}, {"x"});
  NamedSharding sharding(mesh, PartitionSpec({{"x"}}));
  const int64_t n = 4 << 20;  // 16 MiB of f32
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
      ShardedArray a = ShardedArray::device_put(rt, host, {n}, sharding);
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
      ShardedArray a = ShardedArray::device_put(rt, host, {n}, sharding);
      done.get();
      ASSERT_TRUE(a.gather() == host);
    }
  }
}

}  // namespace
}  // namespace vtpu
