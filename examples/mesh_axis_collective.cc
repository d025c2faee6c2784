// A psum over one mesh axis and a tiled all_gather over the other, inside shard_map: the JAX
//
//   mesh = jax.make_mesh((2, 4), ('data', 'model'))
//   x = jax.device_put(jnp.arange(32.).reshape(8, 4), NamedSharding(mesh, P('data', 'model')))
//   @partial(jax.shard_map, mesh=mesh, in_specs=P('data', 'model'), out_specs=P())
//   def f(block):                                              # block: (4, 1)
//     s = jax.lax.psum(block, 'data')                          # rows i and i + 4 summed
//     return jax.lax.all_gather(s, 'model', axis=1, tiled=True)  # (4, 4) on every core
//
// in C++. Every core ends with out[i][j] = x[i][j] + x[i + 4][j] = 8 i + 2 j + 16.
#include <vtpu/sharding/shard_map.h>

#include <cstdio>
#include <numeric>
#include <vector>

using namespace vtpu;  // NOLINT: an example reads as the JAX it mirrors

int main() {
  Runtime runtime(RuntimeOptions{.num_cores = 8, .hbm_bytes_per_core = 64 << 20});
  DeviceMesh mesh = make_mesh(runtime, {2, 4}, {"data", "model"});
  std::vector<float> host(32);
  std::iota(host.begin(), host.end(), 0.0f);
  ShardedArray x = ShardedArray::device_put(runtime, host, {8, 4}, {mesh, P("data", "model")});
  auto f = shard_map(mesh, {P("data", "model")}, {P()}, [](ShardMapContext& ctx, auto in) {
    LocalArray s = ctx.psum(in[0], "data");
    return outputs(ctx.all_gather(s, "model", /*axis=*/1, /*tiled=*/true));
  });
  std::vector<float> out = f(x)[0].gather();

  int wrong = 0;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) wrong += out[i * 4 + j] != 8.0f * i + 2.0f * j + 16.0f;
    std::printf("%4g %4g %4g %4g\n", out[i * 4], out[i * 4 + 1], out[i * 4 + 2], out[i * 4 + 3]);
  }
  return wrong == 0 ? 0 : 1;
}
