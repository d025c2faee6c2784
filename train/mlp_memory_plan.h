// The per-step HBM buffers of the MLP example (train/mlp_trainer.h) as live intervals for the
// heap planner (memory/heap_planner.h): what one core of a data-parallel training step needs,
// and when, so that a static plan can be made and replayed with the `planned` policy.
//
// Times are the trainer's statements in one step, in the order it runs them. The trainer writes
// several values in place over an earlier one (softmax into the logits, dA1 over a1, ...), and
// writes the gradients straight into slices of the all-reduce bucket, so each value below lives
// in the buffer named in its row and that buffer stays live until the last value in it is read:
//
//     time  statement (mlp_trainer.cc)                buffer written      last use of
//      0    gather this core's batch rows             x, y
//      1    z1 = x W1 + b1                            z1
//      2    a1 = relu(z1)                             a1
//      3    logits = a1 W2 + b2                       logits
//      4    probs = softmax(logits), loss sum         logits (in place)
//      5    dlogits = (probs - y) / B                 logits (in place)   y
//      6    dW2 = a1^T dlogits                        bucket
//      7    db2 = colsum(dlogits)                     bucket
//      8    dA1 = dlogits W2^T (dh)                   a1 (in place)       logits
//      9    dZ1 = dA1 * (z1 > 0)                      z1 (in place)       a1
//     10    dW1 = x^T dZ1                             bucket              x
//     11    db1 = colsum(dZ1)                         bucket              z1
//     12    loss into the bucket; all-reduce(bucket)  bucket
//     13    params -= lr * bucket (SGD)               params (in place)   bucket
//
// So the intervals are x [0,10], y [0,5], z1 [1,11], a1 [2,9], logits [3,8] and the gradient
// bucket [6,13]. SGD updates the parameters in place and needs no optimizer temporaries (Eigen
// evaluates `params -= lr * grads` element by element). Not per-step, so not in the list: the
// parameter replica (allocated once, updated in place) and the replicated training set.
#pragma once

#include <cstdint>
#include <vector>

#include "vtpu/memory/heap_planner.h"
#include "vtpu/train/mlp_trainer.h"

namespace vtpu {

/// The trainer's statements in one step (see the table above), the times of the intervals.
/// Plain data, thread-compatible.
struct MlpStepTime {
  static constexpr int64_t kGatherBatch = 0;
  static constexpr int64_t kHiddenPreActivation = 1;
  static constexpr int64_t kRelu = 2;
  static constexpr int64_t kLogits = 3;
  static constexpr int64_t kSoftmax = 4;
  static constexpr int64_t kLogitsGradient = 5;
  static constexpr int64_t kW2Gradient = 6;
  static constexpr int64_t kB2Gradient = 7;
  static constexpr int64_t kHiddenGradient = 8;
  static constexpr int64_t kReluGradient = 9;
  static constexpr int64_t kW1Gradient = 10;
  static constexpr int64_t kB1Gradient = 11;
  static constexpr int64_t kAllReduce = 12;
  static constexpr int64_t kSgd = 13;
};

/// The per-step buffers one core needs for one training step of train_mlp with `config` on
/// `num_cores` cores, in the order the step first writes them (x, y, z1, a1, logits, gradient
/// bucket), labelled as the trainer labels them ("mlp/x", ..., "mlp/grads+loss"). Each is the
/// bytes the trainer's arena is charged for it: for b = global_batch / num_cores rows and h
/// hidden units, the f32 arrays x (b, 64), y (b, 10), z1 and a1 (b, h), logits (b, 10), and the
/// bucket of the tensors (64, h), (h), (h, 10), (10) and the scalar loss sum, each padded under
/// the TPU tiled layout (memory/tiled_layout.h: x of 64 rows is 64 x 128 x 4 bytes), or at its
/// logical size when `pad_arrays` is false (RuntimeOptions::pad_arrays).
/// Every core gets the same list (the batch splits evenly). Throws InvalidArgumentError for a
/// config that MlpConfig::validate(num_cores) rejects, or sizes past 2^64 bytes. Thread-safe.
std::vector<BufferInterval> mlp_step_buffer_intervals(const MlpConfig& config, int num_cores,
                                                      bool pad_arrays = true);

}  // namespace vtpu
