// The digits MLP of train/mlp_trainer.h trained with ZeRO-3 / FSDP semantics on N virtual
// cores: parameters, gradients and optimizer state are sharded over all N cores, and each layer's
// parameters exist in full only while that layer computes.
//
// Sources: Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models" (SC 2020), stage 3 (P_os+g+p); PyTorch FullyShardedDataParallel (FSDP1's FlatParameter,
// FULL_SHARD, BackwardPrefetch.BACKWARD_PRE; Zhao et al., "PyTorch FSDP", VLDB 2023).
//
// Model. Each layer is one FSDP unit with one FlatParameter, the layer's parameters flattened
// and concatenated in registration order:
//
//     layer 0: [W1 (64 x H), b1 (H)]       numel 65H
//     layer 1: [W2 (H x 10), b2 (10)]      numel 10H + 10
//
// (together exactly the flat vector [W1, b1, W2, b2] of train_mlp). As FSDP's FlatParameter
// does, the flat vector is right-padded with zeros to padded_numel = ceil(numel / N) * N so that
// it splits into N equal shards of shard_numel = padded_numel / N; core (rank) r holds elements
// [r * shard_numel, (r + 1) * shard_numel) of the padded vector. Only the last shards contain
// padding, and a core's shard may be all padding (65H < N is allowed). Padding elements are 0 in
// the parameters and in every gradient, so SGD and Adam keep them 0 (Adam's moments there stay 0
// too) and they never reach the model.
//
// The run is one shard_map over a 1-D mesh of the N cores, axis "fsdp" (rank r = core r); every
// collective below runs over that axis.
//
// One step on every core (b = global_batch / N rows of the global batch, as train_mlp):
//
//     forward, layer l = 0, 1:   all_gather(param shard l) -> gathered l  (temporary, padded_numel)
//                                compute; free gathered l
//     backward, layer l = 1, 0:  all_gather(param shard l) -> gathered l  (again, as FSDP's
//                                pre-backward hook re-unshards a resharded module)
//                                compute this layer's full gradient into a temporary of
//                                padded_numel (padding zeroed); free gathered l
//                                reduce_scatter(sum) -> grad shard l; free the temporary
//     optimizer:                 on the shards only: SGD, param_shard -= lr * grad_shard; or
//                                Adam on the (param, grad, m, v) shards (train/adam.h)
//     loss:                      all_reduce(sum) of the local loss sum (one float)
//
// Gradients are scaled by 1/global_batch before the reduce-scatter (as in train_mlp), so each
// core's shard holds its slice of the gradient of the global mean loss. Communication per core
// and step is ZeRO-3's 3 x params: two all-gathers and one reduce-scatter of the padded flat
// parameters (data parallel all-reduces 2 x params). Layer 0's backward does not read W1 (the
// input needs no gradient), but FSDP's pre-backward hook unshards the whole module anyway, and so
// does this trainer (and frees it as soon as it arrives, before the gradient temporary).
//
// Prefetch (FSDP's forward_prefetch and BackwardPrefetch.BACKWARD_PRE): the all-gathers are
// started with all_gather_start on the core's communication worker before they are needed: layer
// 0's while the core gathers its batch rows, layer 1's while layer 0 computes; in backward, layer
// 0's gather starts with layer 1's, and each reduce-scatter (reduce_scatter_start) runs while the
// next layer computes. Prefetching holds more temporaries at once (a higher peak), as in FSDP.
//
// Optimizer state (ZeRO's P_os): with SGD there is none (ZeRO's K = 0). With Adam each core holds
// its shard of the two moments, m and v, each exactly like the FlatParameter shard (shard_numel
// elements per unit, the padding included and 0), as FSDP's sharded optimizer state is shaped
// like the sharded FlatParameter; Adam is elementwise, so updating the shard is updating those
// elements of the whole vector (the same adam_update as train_mlp's).
//
// Reduction order: the reduce-scatter folds the cores' partial gradients in rank order, as
// train_mlp's all-reduce does, so the losses and parameters are bit-identical to train_mlp on the
// same cores and to train_mlp on 1 core with micro_batches = N (train/mlp_trainer.h).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "vtpu/collectives/communicator.h"
#include "vtpu/memory/memory_profile.h"
#include "vtpu/memory/memory_stats.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/train/digits_dataset.h"
#include "vtpu/train/mlp_trainer.h"

namespace vtpu {

/// The settings of a train_fsdp run. Plain data, thread-compatible.
struct FsdpConfig {
  /// steps, global_batch (a multiple of the cores), hidden, learning_rate, optimizer, adam, seed
  /// and log_every as train_mlp; kernels must be "eigen", micro_batches 1, and at_peak is not used.
  MlpConfig mlp;
  /// true (default): start each all-gather early and run reduce-scatters while the next layer
  /// computes (async start/wait collectives). false: every collective runs synchronously right
  /// where its result is needed.
  bool prefetch = true;
  /// Throws InvalidArgumentError naming the bad field.
  void validate(int num_cores) const;
};

/// One FSDP unit's FlatParameter on N cores. Counts in elements (f32).
/// Plain data, thread-compatible.
struct FlatParamShape {
  std::string name;          // "layer0" = [W1, b1], "layer1" = [W2, b2]
  int64_t numel = 0;         // unpadded elements
  int64_t padded_numel = 0;  // ceil(numel / N) * N
  int64_t shard_numel = 0;   // padded_numel / N, held by every core
};

/// The two FlatParameters of the 64 -> hidden -> 10 MLP on `num_cores` cores (see the model
/// above). Throws InvalidArgumentError for hidden < 1 or num_cores < 1. Thread-safe.
std::vector<FlatParamShape> fsdp_flat_params(int64_t hidden, int num_cores);

/// The bytes the arena is charged for an FSDP buffer of `elements` f32 (a FlatParameter shard,
/// its gradient or moments, or a gathered or unsharded FlatParameter). Each is the 1-D vector
/// FSDP keeps, not the W and b it concatenates, so it is charged as f32[elements] under the TPU
/// default layout of a vector, {0:T(1024)} (memory/tiled_layout.h): rounded up to 1024
/// elements. Logical bytes when `pad_arrays` is false.
/// Throws InvalidArgumentError for elements < 0. Thread-safe.
uint64_t fsdp_vector_charged_bytes(int64_t elements, bool pad_arrays);

/// One core's HBM by what the bytes hold: chunk bytes (padding and allocator rounding included) of
/// the live buffers in an arena's chunk records, classified by label. Sizes in bytes. Plain data,
/// thread-compatible.
struct HbmBreakdown {
  uint64_t training_set = 0;     // the replicated training rows and one-hot labels
  uint64_t params = 0;           // parameters: the replica (data parallel), the tensor shard
                                 // (Megatron) or the shard (FSDP)
  uint64_t grads = 0;            // gradients: the all-reduce bucket (with the loss) or the shard
  uint64_t opt_state = 0;        // optimizer state: Adam's m and v (0 with plain SGD)
  uint64_t gathered = 0;         // FSDP: all-gathered parameters (temporaries)
  uint64_t unsharded_grads = 0;  // gradient temporaries: FSDP's full gradients before the
                                 // reduce-scatter; gradient accumulation's micro-batch bucket
  uint64_t activations = 0;      // batch rows (x, y) and activations (z1, a1, logits)
  uint64_t other = 0;            // anything else (FSDP: the loss scalar)
  uint64_t total() const {
    return training_set + params + grads + opt_state + gathered + unsharded_grads + activations +
           other;
  }
  /// Parameters + gradients + optimizer state: what lives across steps for the model.
  uint64_t persistent_state() const { return params + grads + opt_state; }
};
/// Classifies in-use chunks by label: "*/train_pixels", "*/train_labels" training set;
/// "mlp/params", "fsdp/params.*" params; "mlp/grads+loss", "fsdp/grads.*" grads;
/// "mlp/opt_state.*", "fsdp/opt_state.*" optimizer state; "fsdp/gathered.*";
/// "fsdp/unsharded_grad.*" and "mlp/micro_grads+loss" gradient temporaries; "*/x", "*/y", "*/z1",
/// "*/a1", "*/logits",
/// "*/probs" activations; everything else other. Thread-safe.
HbmBreakdown hbm_breakdown(const std::vector<MemoryChunkRecord>& chunks);
void to_json(nlohmann::json& j, const HbmBreakdown& b);

/// What a run produced. Times in seconds unless the name says otherwise.
/// Plain data, thread-compatible.
struct FsdpResult {
  int num_cores = 0;
  int num_processes = 1;  // processes hosting the cores (runtime/process_group.h)
  bool prefetch = true;
  std::string optimizer;             // "sgd" or "adam"
  std::vector<double> losses;        // per step, mean cross-entropy of the global batch
  std::vector<double> step_seconds;  // per step wall time on this process's first core
  double median_step_ms = 0.0;
  double test_accuracy = 0.0;
  double train_accuracy = 0.0;
  int64_t num_parameters = 0;
  std::vector<FlatParamShape> flat_params;  // one per layer
  /// Core 0's HBM at its highest bytes_in_use within the first step (every step allocates the
  /// same buffers in the same order, so every step peaks the same), from its chunk records.
  /// Recorded by the process that hosts core 0 (zeros in the others).
  HbmBreakdown peak;
  // Per core of every process, in core order (the processes exchange theirs).
  std::vector<MemoryStats> hbm;                  // per core, after training
  std::vector<CollectiveStats> all_gather;       // per core (4 per step)
  std::vector<CollectiveStats> reduce_scatter;   // per core (2 per step)
  std::vector<CollectiveStats> loss_all_reduce;  // per core (1 per step)
  std::vector<float> parameters;  // final parameters, unpadded, flat [W1, b1, W2, b2]
  /// After training, every padding element of every core's parameter shards (and, with Adam, of
  /// its m and v shards) is exactly 0.
  bool padding_is_zero = false;
};
/// The step time as "median_step_seconds" (seconds, as in every trainer's --json).
void to_json(nlohmann::json& j, const FsdpResult& r);

/// Trains on `split.train` on every core of `runtime`, evaluates on `split.test`. Calls
/// `on_log(step, loss)` on core 0 every config.mlp.log_every steps when given. Throws
/// InvalidArgumentError for a bad config, OutOfMemoryError (ResourceExhausted, with the arena's
/// report) when a buffer does not fit, FailedPreconditionError when the loss diverges.
FsdpResult train_fsdp(Runtime& runtime, const DigitsSplit& split, const FsdpConfig& config,
                      const std::function<void(int64_t step, double loss)>& on_log = {});

/// Max over steps of |a - b| / |b| (|a - b| where b is 0). Throws InvalidArgumentError when the
/// lengths differ. Thread-safe.
double max_relative_difference(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace vtpu
