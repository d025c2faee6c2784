// A data-parallel training step: every core holds the same weights, computes the gradient of a
// least-squares loss on its own shard of the batch, and the gradients are summed over the mesh's
// `data` axis (one all-reduce per data group), so every replica takes the same SGD step.
//
// The mesh is (data=4, model=2): two data groups of four cores. The model axis would split the
// weights in tensor parallelism; here both model columns hold a full copy, to keep the example on
// the data-parallel part. The check: after each step the weights on all eight cores equal those of
// a host computation on the whole batch.
#include <vtpu/collectives/communicator.h>
#include <vtpu/runtime/runtime.h>
#include <vtpu/sharding/mesh.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <span>
#include <vector>

namespace {

constexpr int kFeatures = 8;
constexpr int kRowsPerShard = 16;
constexpr int kSteps = 5;
constexpr float kLearningRate = 0.05f;

/// One shard of the batch: kRowsPerShard rows of features and their targets.
struct Shard {
  std::vector<float> x;  // row-major, kRowsPerShard x kFeatures
  std::vector<float> y;
};

/// Sum over the shard's rows of the gradient of 0.5 (w.x - y)^2; returns the shard's loss sum.
float shard_gradient(const Shard& s, std::span<const float> w, std::span<float> grad) {
  float loss = 0.0f;
  std::fill(grad.begin(), grad.end(), 0.0f);
  for (int r = 0; r < kRowsPerShard; ++r) {
    float err = -s.y[r];
    for (int f = 0; f < kFeatures; ++f) err += w[f] * s.x[r * kFeatures + f];
    loss += 0.5f * err * err;
    for (int f = 0; f < kFeatures; ++f) grad[f] += err * s.x[r * kFeatures + f];
  }
  return loss;
}

/// w -= lr * grad / rows: the mean gradient over the whole batch.
void sgd_step(std::span<float> w, std::span<const float> grad_sum, int rows) {
  for (int f = 0; f < kFeatures; ++f) w[f] -= kLearningRate * grad_sum[f] / float(rows);
}

}  // namespace

int main() {
  vtpu::RuntimeOptions options;
  options.num_cores = 8;
  options.hbm_bytes_per_core = uint64_t{64} << 20;
  vtpu::Runtime runtime(options);
  const vtpu::Mesh mesh({4, 2}, {"data", "model"});

  // One communicator per data group: the cores that differ only in their `data` coordinate.
  const std::vector<std::vector<int>> groups =
      mesh.replica_groups(std::vector<std::string>{"data"});
  std::vector<std::unique_ptr<vtpu::Communicator>> comms =
      vtpu::Communicator::for_groups(runtime, groups);
  const int data_size = static_cast<int>(mesh.axis_size("data"));

  // Seeded data: one shard per data coordinate, y = w_true . x + noise.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<Shard> shards(data_size);
  for (Shard& s : shards) {
    for (int r = 0; r < kRowsPerShard; ++r) {
      float y = 0.0f;
      for (int f = 0; f < kFeatures; ++f) {
        s.x.push_back(normal(rng));
        y += float(f + 1) * s.x.back();
      }
      s.y.push_back(y + 0.1f * normal(rng));
    }
  }

  std::vector<std::vector<float>> weights(options.num_cores, std::vector<float>(kFeatures, 0.0f));
  std::vector<float> host_w(kFeatures, 0.0f);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> losses(options.num_cores, 0.0f);
    runtime.run_spmd([&](vtpu::CoreContext& ctx) {
      const int core = ctx.core_id();
      const int data_index = static_cast<int>(mesh.coords_of(core)[0]);
      vtpu::Communicator& comm = *comms[mesh.coords_of(core)[1]];  // groups follow `model`
      vtpu::DeviceBuffer buf = ctx.allocate((kFeatures + 1) * sizeof(float), "grads+loss");
      std::span<float> g = buf.as<float>();
      g[kFeatures] = shard_gradient(shards[data_index], weights[core], g.first(kFeatures));
      comm.all_reduce<float>(ctx, g);  // sums gradients and loss over the data group
      sgd_step(weights[core], g.first(kFeatures), data_size * kRowsPerShard);
      losses[core] = g[kFeatures] / float(data_size * kRowsPerShard);
    });

    // The same step on the host, summing the shards' gradients in rank order as the ring does.
    std::vector<float> sum(kFeatures + 1, 0.0f), g(kFeatures);
    for (const Shard& s : shards) {
      const float loss = shard_gradient(s, host_w, g);
      for (int f = 0; f < kFeatures; ++f) sum[f] += g[f];
      sum[kFeatures] += loss;
    }
    sgd_step(host_w, std::span<const float>(sum).first(kFeatures), data_size * kRowsPerShard);

    float max_diff = 0.0f;
    for (const std::vector<float>& w : weights) {
      for (int f = 0; f < kFeatures; ++f) max_diff = std::max(max_diff, std::abs(w[f] - host_w[f]));
    }
    std::printf("step %d: mean loss %.4f, max |w(core) - w(host)| = %g\n", step + 1, losses[0],
                max_diff);
    if (max_diff > 1e-5f) {
      std::fprintf(stderr, "replicas differ from the host step by %g (expected <= 1e-5)\n",
                   max_diff);
      return 1;
    }
  }
  return 0;
}
