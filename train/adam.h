// Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, Algorithm 1), with
// bias correction, elementwise over flat f32 vectors. The one Adam of the examples: the
// transformer trainer, `train mlp --optimizer adam` (every replica) and `train fsdp --optimizer
// adam` (every core's shard only, ZeRO's partitioned optimizer state) all call adam_update.
//
// Step t >= 1, for every element i (g = grads[i]):
//     m[i] = beta1 * m[i] + (1 - beta1) * g                 first moment (PyTorch's exp_avg)
//     v[i] = beta2 * v[i] + (1 - beta2) * g * g             second moment (exp_avg_sq)
//     params[i] -= lr * (m[i] / (1 - beta1^t)) / (sqrt(v[i] / (1 - beta2^t)) + eps)
// which is torch.optim.Adam with its defaults (betas (0.9, 0.999), eps 1e-8, no weight decay,
// no amsgrad). Each element depends only on its own parameter, gradient and moments, so the update
// of a shard is exactly the update of those elements of the whole vector. An element whose
// gradient is 0 at every step keeps m = v = 0 and moves by lr * 0 / (0 + eps) = 0: zero padding
// stays 0.
#pragma once

#include <cstdint>
#include <span>

namespace vtpu {

/// Adam's hyper-parameters besides the learning rate; the defaults are torch.optim.Adam's.
/// Plain data, thread-compatible.
struct AdamOptions {
  float beta1 = 0.9f;    // decay of the first moment, in (0, 1)
  float beta2 = 0.999f;  // decay of the second moment, in (0, 1)
  float eps = 1e-8f;     // added to the bias-corrected sqrt(v), > 0
  /// Throws InvalidArgumentError naming the bad value ("adam eps is 0.000000 (expected a finite
  /// value > 0)", "Adam betas are 1.000000, 0.999000 (expected each < 1)"). Thread-safe.
  void validate() const;
};

/// One Adam step t (>= 1, counted from 1) in place on `params`, `m` and `v` from `grads` (all the
/// same number of elements). Throws InvalidArgumentError when the sizes differ or t < 1. Does not
/// validate the options (callers validate their configs once). Thread-safe on distinct spans.
void adam_update(std::span<float> params, std::span<const float> grads, std::span<float> m,
                 std::span<float> v, int64_t t, float learning_rate, const AdamOptions& options);

}  // namespace vtpu
