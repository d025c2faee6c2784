// The README's example: an 8-core runtime, a sharded array, and shard_map with named-axis
// collectives, as JAX writes it:
//
//   mesh = jax.make_mesh((4, 2), ('x', 'y'))
//   x = jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh, P('x', 'y')))
//   jax.debug.visualize_array_sharding(x)
//   f = jax.shard_map(lambda b: jax.lax.psum(b, 'x'), mesh=mesh,
//                     in_specs=P('x', 'y'), out_specs=P(None, 'y'))
//   y = f(x)                                   # (2, 4): every block summed over the 4 x-rows
#include <vtpu/sharding/shard_map.h>
#include <vtpu/sharding/visualize.h>

#include <cstdio>
#include <vector>

using namespace vtpu;  // NOLINT: an example reads as the JAX it mirrors

int main() {
  RuntimeOptions options;  // or RuntimeOptions::load_json_file("vtpu.json")
  options.num_cores = 8;
  Runtime runtime(options);  // 8 threads, each with a lazily committed 16 GiB arena

  DeviceMesh mesh = make_mesh(runtime, {4, 2}, {"x", "y"});
  std::vector<float> host(8 * 4, 1.0f);
  ShardedArray x = ShardedArray::device_put(runtime, host, {8, 4}, {mesh, P("x", "y")});
  std::printf("%s", visualize_array_sharding(x).c_str());  // which core holds which block

  // fn runs once on every core, on its own thread, with that core's (2, 2) block.
  auto f = shard_map(mesh, {P("x", "y")}, {P(None, "y")}, [](ShardMapContext& ctx, auto in) {
    return outputs(ctx.psum(in[0], "x"));  // a new array; the input is unchanged
  });
  std::vector<ShardedArray> out = f(x);
  const ShardedArray& y = out[0];
  std::vector<float> back = y.gather();  // (2, 4), every element 4

  // Blocks are charged their TPU tiled-layout bytes: a (2, 2) f32 block takes one 8x128 tile.
  MemoryStats stats = runtime.core(0).hbm().memory_stats();
  std::printf("%s: y[0] = %g; core 0 holds %llu logical, %llu padded bytes\n",
              y.to_string().c_str(), back[0],
              static_cast<unsigned long long>(stats.logical_bytes_in_use),
              static_cast<unsigned long long>(stats.padded_bytes_in_use));
  return back == std::vector<float>(8, 4.0f) ? 0 : 1;
}
