// Data-parallel MLP training on N virtual cores: the foundation's end-to-end example.
//
// Model: 64 -> hidden -> 10, ReLU, softmax cross-entropy, SGD or Adam, f32. The training rows are
// device_put once to every core (replicated, P()), and one shard_map (sharding/shard_map.h) runs
// all steps. Each step's global batch (epoch-wise shuffles drawn from the seed) is split across
// the cores: core c takes rows [c*B/N, (c+1)*B/N) into its HBM and runs forward and backward with
// Eigen mapped over its HBM buffers. The gradients of all parameters, plus the local loss sum,
// are packed into one bucket and summed over the mesh axis 'data' in one psum, as PyTorch DDP
// buckets gradients; every core then applies the same optimizer update to its replica. Because
// the psum gives bit-identical sums on every core, the replicas never drift apart. Every buffer
// is charged the padded bytes of its tensors under the TPU tiled layout (a packed bucket what
// its tensors would cost one by one), or their logical bytes with RuntimeOptions::pad_arrays off.
//
// train_mlp is the tensor size 1 case of the one MLP training loop, train_mlp_tensor_parallel
// (train/mlp_tp_trainer.h) on the layout data N x tensor 1: with one tensor shard the shard is
// the whole model and the Megatron all-reduce of the logits is not run. This file holds what the
// MLP trainers share (train_fsdp too): configuration, initial parameters, batch order, the
// per-core batch and activation buffers, the loss, the optimizer update and the evaluation; their
// Eigen layers are train/mlp_eigen_layers.h.
//
// The loss is mean cross-entropy over the global batch, so for a given seed and global batch the
// losses match a single-core run up to f32 summation order.
//
// Optimizer: plain SGD (default) or Adam (train/adam.h), applied to every replica after the
// all-reduce; Adam's two moments are replicated like the parameters.
//
// Reduction order and gradient accumulation. The all-reduce folds the cores' buckets in rank
// order, ((g_0 + g_1) + g_2) + ..., where g_c is core c's gradient over its B/N rows (one GEMM
// per weight over those rows). With micro_batches = K a core splits its rows into K micro-batches
// and accumulates their gradients in the same way, ((g_0 + g_1) + g_2) + ..., before the
// all-reduce (PyTorch's gradient accumulation). So 1 core with K = N micro-batches performs
// exactly the f32 additions of N cores with 1 each, in the same order, and the two runs give
// bit-identical losses and parameters: that single-core run is the reference the N-core runs are
// checked against. One core with one micro-batch sums all B rows inside one GEMM instead; those
// losses differ from the N-core ones by f32 rounding, which training amplifies (docs/TRAINING.md,
// "Reduction order").
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "vtpu/collectives/communicator.h"
#include "vtpu/memory/memory_stats.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/sharding/sharded_array.h"
#include "vtpu/train/adam.h"
#include "vtpu/train/digits_dataset.h"
#include "vtpu/train/replica_check.h"

namespace vtpu {

/// The largest global batch of the MLP trainers (`--batch` stops there; buffer sizes stay far
/// from int64 overflow for any hidden size).
inline constexpr int64_t kMaxMlpGlobalBatch = int64_t{1} << 30;

/// The settings of an MLP training run (train_mlp and the trainers built on it). Plain data,
/// thread-compatible.
struct MlpConfig {
  int64_t steps = 500;        // optimizer steps
  int64_t global_batch = 64;  // rows per step over all cores; must be a multiple of the cores
  int64_t hidden = 64;        // hidden units
  float learning_rate = 0.2f;
  uint64_t seed = 0;       // parameter init and batch order
  int64_t log_every = 25;  // print the loss every this many steps (0: never)
  /// How forward and backward compute: "eigen" (default: Eigen mapped over the HBM buffers) or
  /// "pallas" (the pipelined kernels of runtime/pallas_kernels.h: fused dense + ReLU and dense +
  /// bias forward, row softmax, and the three backward matmuls stream blocks through VMEM with the
  /// DMA engine; elementwise steps and bias gradients stay in Eigen).
  std::string kernels = "eigen";
  /// "sgd" (default): params -= learning_rate * grads, no optimizer state. "adam": adam_update
  /// (train/adam.h) with learning_rate and `adam`, two f32 moments per parameter. The default
  /// learning_rate suits SGD; mlp_default_learning_rate gives the CLI's default per optimizer.
  std::string optimizer = "sgd";
  AdamOptions adam;  // betas and eps when optimizer is "adam"
  /// Gradient accumulation: each core computes its global_batch / N rows as this many equal
  /// micro-batches (activations sized for one) and sums their gradients in micro-batch order
  /// before the all-reduce (see the model above). Must divide global_batch / N.
  int64_t micro_batches = 1;
  /// Called once, on core 0, after the last step while every core's training buffers (dataset,
  /// parameters, gradient bucket, activations) are still live: the moment to save a device
  /// memory profile. The other cores wait for it (two all-reduces of one float act as barriers,
  /// so a failure aborts them instead of hanging).
  std::function<void(Runtime&)> at_peak;
  /// Throws InvalidArgumentError naming the bad field; `num_cores` checks the batch split.
  void validate(int num_cores) const;
};

/// The learning rate `vtpu train mlp|fsdp` use when --lr is not given: 0.2 for "sgd",
/// torch.optim.Adam's 1e-3 for "adam". Throws InvalidArgumentError for another optimizer.
float mlp_default_learning_rate(const std::string& optimizer);

/// What a run produced. Times in seconds unless the name says otherwise.
/// Plain data, thread-compatible.
struct MlpResult {
  int num_cores = 0;
  int num_processes = 1;             // processes hosting the cores (runtime/process_group.h)
  std::vector<double> losses;        // per step, mean cross-entropy of the global batch
  std::vector<double> step_seconds;  // per step wall time on this process's first core (core
                                     // 0 in process 0): batch rows, forward, backward,
                                     // all-reduce, optimizer
  double median_step_ms = 0.0;
  double test_accuracy = 0.0;  // on the held-out split
  double train_accuracy = 0.0;
  int64_t num_parameters = 0;
  /// Where the cores' final parameters first differ (train/replica_check.h); nullopt when
  /// every core's are bit-identical.
  std::optional<ReplicaMismatch> replica_mismatch;
  /// Every core's final parameters are bit-identical (no replica_mismatch).
  bool replicas_identical() const { return !replica_mismatch; }
  // Per core of every process, in core order (the processes exchange theirs).
  std::vector<MemoryStats> hbm;             // per core, after training
  std::vector<MemoryStats> vmem;            // per core, after training (used by --kernels pallas)
  std::vector<CollectiveStats> all_reduce;  // per core
  std::vector<float> parameters;            // final parameters (core 0), flat [W1, b1, W2, b2]
};
/// The step time as "median_step_seconds" (seconds, as in every trainer's --json).
void to_json(nlohmann::json& j, const MlpResult& r);

/// Per-core lists as the MLP trainers' JSON reports write them: element c is stats[c] with
/// "core": c and "process" (the process hosting it, of `num_processes` that host stats.size()
/// cores evenly) added; for collectives, "num_collectives", "bytes" and "seconds". Thread-safe.
nlohmann::json per_core_json(const std::vector<MemoryStats>& stats, int num_processes = 1);
nlohmann::json per_core_json(const std::vector<CollectiveStats>& stats, int num_processes = 1);

/// Trains on `split.train` on every core of `runtime` (data parallel), evaluates on `split.test`:
/// train_mlp_tensor_parallel on DataTensorLayout::grid(cores, 1) (train/mlp_tp_trainer.h).
/// Calls `on_log(step, loss)` on core 0 every config.log_every steps when given. Throws
/// InvalidArgumentError for a bad config, OutOfMemoryError (ResourceExhausted, with the arena's
/// report) when the model does not fit, FailedPreconditionError when the loss diverges.
MlpResult train_mlp(Runtime& runtime, const DigitsSplit& split, const MlpConfig& config,
                    const std::function<void(int64_t step, double loss)>& on_log = {});

/// Parameters of the 64 -> hidden -> 10 MLP: 64 * hidden + hidden + hidden * 10 + 10 (elements).
int64_t mlp_num_parameters(int64_t hidden);

/// The initial flat parameters [W1 (64 x hidden), b1 (hidden), W2 (hidden x 10), b2 (10)]:
/// Glorot/Xavier-uniform weights, zero biases, from mt19937_64(seed).
std::vector<float> mlp_init_parameters(int64_t hidden, uint64_t seed);

/// The global batches: epoch-wise Fisher-Yates shuffles of the training rows, drawn from the seed
/// and independent of the core count. Thread-compatible.
class BatchSampler {
 public:
  BatchSampler(int64_t num_rows, uint64_t seed);
  /// The next row index.
  int64_t next();

 private:
  std::mt19937_64 gen_;
  std::vector<int64_t> order_;
  size_t cursor_;
};

/// The training rows on every core of `runtime` (replicated, P() on a 1-D mesh 'data'): pixels
/// (rows x 64) labelled `<prefix>/train_pixels` and one-hot labels (rows x 10) labelled
/// `<prefix>/train_labels`. Throws like ShardedArray::device_put (OutOfMemoryError when they do
/// not fit). Shared by train_mlp and train_fsdp (train/fsdp_trainer.h).
/// Plain data, thread-compatible.
struct ReplicatedDigits {
  ShardedArray pixels;
  ShardedArray one_hot;
};
ReplicatedDigits replicate_digits(Runtime& runtime, const DigitsDataset& train,
                                  const std::string& label_prefix);
/// The same, replicated (P()) on every device of `mesh`, so that a shard_map over that mesh
/// with in spec P() takes the arrays as they are. Throws as above.
ReplicatedDigits replicate_digits(Runtime& runtime, const DigitsDataset& train,
                                  const std::string& label_prefix, const Mesh& mesh);

/// The sizes of MlpStepBuffers (below), in rows and hidden units. Plain data.
struct MlpStepShape {
  int64_t rows = 0;        // this core's rows of the global batch
  int64_t micro_rows = 0;  // rows per micro-batch (the activations' rows), divides rows
  int64_t hidden = 0;      // hidden units on this core (a tensor shard's, under Megatron)
  bool probs = false;      // also allocate <prefix>/probs
};

/// One core's batch rows and activations for the digits MLP step, allocated once in the core's
/// HBM for the whole run (as XLA's buffer assignment would), each an f32 array charged its padded
/// bytes (CoreContext::allocate_array), in this order and with these labels:
///   <prefix>/x       rows x 64             this core's rows of the global batch
///   <prefix>/y       rows x 10             their one-hot labels
///   <prefix>/z1      micro_rows x hidden   pre-activation (backward: dZ1)
///   <prefix>/a1      micro_rows x hidden   ReLU output (backward: dA1)
///   <prefix>/logits  micro_rows x 10       logits, then probabilities, then dZ2
///   <prefix>/probs   micro_rows x 10       only with `probs` (the pallas kernels keep them apart)
/// The trainers keep raw pointers into these buffers and into this core's replica of the training
/// set, so all of them are pinned while the object lives (defragmentation never moves them).
/// The batch order is a BatchSampler over the training rows from `seed`, the same on every core
/// and core count. Throws OutOfMemoryError when a buffer does not fit. Only the owning core may
/// call; not copyable.
class MlpStepBuffers {
 public:
  MlpStepBuffers(CoreContext& ctx, const ReplicatedDigits& data, const MlpStepShape& shape,
                 const std::string& label_prefix, uint64_t seed);
  /// The same over this core's replica of the training rows given as its two buffers (f32,
  /// rows x 64 pixels and rows x 10 one-hot labels), as shard_map hands them to its function.
  MlpStepBuffers(CoreContext& ctx, const DeviceBuffer& pixels, const DeviceBuffer& one_hot,
                 const MlpStepShape& shape, const std::string& label_prefix, uint64_t seed);
  MlpStepBuffers(const MlpStepBuffers&) = delete;
  MlpStepBuffers& operator=(const MlpStepBuffers&) = delete;

  /// Draws the next global batch of `global_batch` rows (every core draws all of them, so the
  /// samplers stay in step) and copies rows [first, first + shape.rows) of it into x and y.
  void load_batch(int64_t global_batch, int64_t first);

  const MlpStepShape& shape() const { return shape_; }
  DeviceBuffer x, y, z1, a1, logits, probs;  // probs is empty unless shape.probs
  float* x_data() const { return x.as<float>().data(); }
  float* y_data() const { return y.as<float>().data(); }

 private:
  MlpStepShape shape_;
  BatchSampler sampler_;
  const float* data_x_;  // this core's replica of the training pixels (num_rows x 64)
  const float* data_y_;  // and of the one-hot labels (num_rows x 10)
  std::vector<BufferPin> pins_;
};

/// One optimizer step of the MLP trainers on a flat shard, in place: SGD (params -= learning_rate
/// * grads) or, for config.optimizer "adam", adam_update (train/adam.h) with the moments m and v
/// (shaped like params; unused with SGD) at optimizer step `step` + 1. Every replica that calls
/// it with the same sums stays bit-identical. Thread-safe on distinct buffers.
void mlp_optimizer_update(std::span<float> params, std::span<const float> grads, std::span<float> m,
                          std::span<float> v, int64_t step, const MlpConfig& config);

/// Stable softmax cross-entropy over `rows` rows of 10 logits, in place: `logits` becomes the
/// probabilities, and the return value is the sum over rows of -log p[label] (the label is the
/// argmax of the one-hot row of `y`), in double. Thread-safe on distinct buffers.
double softmax_cross_entropy_rows(float* logits, const float* y, int64_t rows);

/// Fraction of rows whose argmax of the MLP's logits equals the label (host-side, Eigen).
double mlp_accuracy(const std::vector<float>& parameters, int64_t hidden, const DigitsDataset& ds);

}  // namespace vtpu
