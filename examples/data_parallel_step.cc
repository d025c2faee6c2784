// A data-parallel training step with shard_map: the batch is split over the mesh's `data` axis,
// the weights are replicated, each core computes the gradient of a least-squares loss on its rows,
// psum over `data` sums the gradients, and every replica takes the same SGD step. The mesh is
// (data=4, model=2); both model columns hold a full copy, and shard_map's replication check
// (check_vma) confirms the weights it returns under P() agree on all eight cores.
// The check: after each step the weights equal a host step on the whole batch.
#include <vtpu/sharding/shard_map.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace vtpu;  // NOLINT: an example reads as the JAX it mirrors

constexpr int kRows = 64, kFeatures = 8, kSteps = 5;
constexpr float kLearningRate = 0.05f;

// Sum over the rows of the gradient of 0.5 (w.x - y)^2 into grad; returns the loss sum.
float gradient(std::span<const float> x, std::span<const float> y, std::span<const float> w,
               std::span<float> grad) {
  float loss = 0.0f;
  for (size_t r = 0; r < y.size(); ++r) {
    float err = -y[r];
    for (int f = 0; f < kFeatures; ++f) err += w[f] * x[r * kFeatures + f];
    loss += 0.5f * err * err;
    for (int f = 0; f < kFeatures; ++f) grad[f] += err * x[r * kFeatures + f];
  }
  return loss;
}

int main() {
  Runtime runtime(RuntimeOptions{.num_cores = 8, .hbm_bytes_per_core = 64 << 20});
  DeviceMesh mesh = make_mesh(runtime, {4, 2}, {"data", "model"});
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kRows * kFeatures), y(kRows, 0.0f), host_w(kFeatures, 0.0f);
  for (int i = 0; i < kRows * kFeatures; ++i)
    x[i] = normal(rng), y[i / kFeatures] += (i % kFeatures + 1) * x[i];
  ShardedArray xs = ShardedArray::device_put(runtime, x, {kRows, kFeatures}, {mesh, P("data")});
  ShardedArray ys = ShardedArray::device_put(runtime, y, {kRows}, {mesh, P("data")});
  ShardedArray w = ShardedArray::device_put(runtime, host_w, {kFeatures}, {mesh, P()});

  auto step = shard_map(
      mesh, {P("data"), P("data"), P()}, {P(), P()},
      [](ShardMapContext& ctx, std::span<const LocalArray> in) {
        LocalArray g = LocalArray::zeros(ctx.core(), ElementType::kF32, {kFeatures + 1});
        std::span<float> gl = g.data<float>();  // gradient sum, then loss sum
        gl[kFeatures] = gradient(in[0].data<float>(), in[1].data<float>(), in[2].data<float>(), gl);
        g = ctx.psum(std::move(g), "data");  // over the whole batch, in place
        LocalArray w_new = LocalArray::empty(ctx.core(), ElementType::kF32, {kFeatures});
        for (int f = 0; f < kFeatures; ++f)
          w_new.data<float>()[f] =
              in[2].data<float>()[f] - kLearningRate * g.data<float>()[f] / kRows;
        LocalArray loss = LocalArray::from_host<float>(ctx.core(), g.data<float>().last(1), {});
        return outputs(std::move(w_new), std::move(loss));
      });

  for (int s = 0; s < kSteps; ++s) {
    std::vector<ShardedArray> out = step(xs, ys, w);
    w = std::move(out[0]);
    std::vector<float> g(kFeatures, 0.0f), dev_w = w.gather();
    for (int shard = 0; shard < 4; ++shard) {  // the same sums, in the psum's rank order
      std::vector<float> part(kFeatures, 0.0f);
      gradient(std::span(x).subspan(shard * 16 * kFeatures, 16 * kFeatures),
               std::span(y).subspan(shard * 16, 16), host_w, part);
      for (int f = 0; f < kFeatures; ++f) g[f] += part[f];
    }
    float diff = 0.0f;
    for (int f = 0; f < kFeatures; ++f) {
      host_w[f] -= kLearningRate * g[f] / kRows;
      diff = std::max(diff, std::abs(dev_w[f] - host_w[f]));
    }
    std::printf("step %d: mean loss %.4f, max |w - w(host)| = %g\n", s + 1,
                out[1].gather()[0] / kRows, diff);
    if (diff > 1e-5f) return 1;
  }
  return 0;
}
