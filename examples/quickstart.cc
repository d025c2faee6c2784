// The README's example: an 8-core runtime, a sharded array, and an all-reduce in an SPMD program.
#include <algorithm>
#include <cstdio>
#include <vector>

#include <vtpu/collectives/communicator.h>
#include <vtpu/runtime/runtime.h>
#include <vtpu/sharding/sharded_array.h>

int main() {
  vtpu::RuntimeOptions options;  // or RuntimeOptions::load_json_file("vtpu.json")
  options.num_cores = 8;
  vtpu::Runtime runtime(options);  // 8 threads, each with a lazily committed 16 GiB arena

  // JAX-style sharding: an (8, 4) array over a (4, 2) mesh, split P('x', 'y').
  vtpu::Mesh mesh({4, 2}, {"x", "y"});
  vtpu::NamedSharding sharding(mesh, vtpu::PartitionSpec({{"x"}, {"y"}}));
  std::vector<float> host(8 * 4, 1.0f);
  auto array = vtpu::ShardedArray::device_put(runtime, host, {8, 4}, sharding);
  std::vector<int64_t> block = sharding.shard_shape({8, 4});  // {2, 2}: core 5 holds one block
  std::vector<float> back = array.gather();                   // the whole array again

  // An SPMD program: runs once on every core, each on its own thread.
  vtpu::Communicator comm(runtime, {0, 1, 2, 3, 4, 5, 6, 7});
  runtime.run_spmd([&](vtpu::CoreContext& ctx) {
    vtpu::DeviceBuffer buf = ctx.allocate(1024 * sizeof(float), "grads");  // this core's HBM
    auto x = buf.as<float>();
    std::fill(x.begin(), x.end(), float(ctx.core_id()));
    comm.all_reduce<float>(ctx, x);  // in place: x[i] == 0 + 1 + ... + 7 == 28 on every core
  });

  vtpu::MemoryStats stats = runtime.core(0).hbm().memory_stats();
  std::printf("block %lldx%lld, gathered %zu floats, core 0 peak HBM %llu bytes\n",
              static_cast<long long>(block[0]), static_cast<long long>(block[1]), back.size(),
              static_cast<unsigned long long>(stats.peak_bytes_in_use));
  return 0;
}
